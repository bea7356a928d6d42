"""The unit model: op durations in slots, one meaning for every command and layer.

A *slot* is the unit every duration here is given in; at the default ``forward = 1`` it is the
time of one forward pass of a 1/p share of the model (p = devices). A full backward
B lasts ``backward`` slots, split into a weight-gradient part W of ``weight`` slots (default B/2) and
an input-gradient part I of ``backward - weight``. The default B = 2 (so I = W = F = 1) is the
convention of Qi et al., "Zero Bubble (Almost) Pipeline Parallelism" (ICLR 2024, §2), where B = I + W and
F, I, W take equal time. A point-to-point message between devices takes ``comm`` slots.

A schedule with S stages on p devices cuts the model into S chunks, so a chunk op lasts ``p/S`` of
the figures above (an interleaved schedule with v chunks per device runs chunk forwards of 1/v slot):
lengths of schedules with different chunk counts stay comparable. The table layer, the simulator's
unit costs and the solver's unit mode all read their durations from :class:`UnitCosts`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

from ppopt.errors import ConfigError
from ppopt.ir import Kind

MAX_SLOTS = 1e6
"""Largest duration or delay of the unit model, slots: a million forwards per op is far beyond any
real ratio, and it keeps every table's length and its tick count (printed as figures) readable."""

MIN_SLOTS = 1e-6
"""Smallest non-zero duration or delay, slots: the table layer takes durations as fractions with
denominators up to 10^6 (:mod:`ppopt.table`), so anything shorter would become 0."""


@dataclass(frozen=True)
class UnitCosts:
    """Op durations of a 1/p model share, in slots (see the module docstring).

    Attributes:
        forward: F, slots (:data:`MIN_SLOTS` to :data:`MAX_SLOTS`).
        backward: full backward B = I + W, slots (:data:`MIN_SLOTS` to :data:`MAX_SLOTS`).
        weight: W, slots, 0 or :data:`MIN_SLOTS` to ``backward``; None means ``backward / 2``.
        comm: point-to-point message delay between devices, slots (0 or :data:`MIN_SLOTS` to :data:`MAX_SLOTS`).
    """

    forward: float = 1.0
    backward: float = 2.0
    weight: float | None = None
    comm: float = 0.0

    def __post_init__(self) -> None:
        given = {"forward": self.forward, "backward": self.backward, "comm": self.comm}
        if self.weight is not None:  # None: backward / 2
            given["weight"] = self.weight
        for name, value in given.items():  # text ("1") failed in math.isfinite
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ConfigError(f"must be a number of slots, got {value!r}", field=name)
        for name in ("forward", "backward"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"must be a finite number > 0, got {value}", field=name)
        if not (math.isfinite(self.comm) and self.comm >= 0):
            raise ConfigError(f"must be a finite number >= 0, got {self.comm}", field="comm")
        for name in ("forward", "backward", "comm"):
            if getattr(self, name) > MAX_SLOTS:
                raise ConfigError(f"must be at most {MAX_SLOTS:,.0f} slots, got {getattr(self, name):g}", field=name)
        if self.weight is not None and not (math.isfinite(self.weight) and 0 <= self.weight <= self.backward):
            raise ConfigError(f"must lie between 0 and backward ({self.backward:g}), got {self.weight}", field="weight")
        for name in ("forward", "backward", "comm", "weight"):
            value = getattr(self, name)
            if value is not None and 0 < value < MIN_SLOTS:
                raise ConfigError(f"must be 0 or at least {MIN_SLOTS:g} slots (the tables' resolution), got {value:g}"
                                  if name in ("comm", "weight") else
                                  f"must be at least {MIN_SLOTS:g} slots (the tables' resolution), got {value:g}", field=name)
        for part, value in (("W = backward / 2", self.weight_slots), ("I = backward - weight", self.backward - self.weight_slots)):
            if 0 < value < MIN_SLOTS:
                raise ConfigError(f"gives {part} = {value:.10g} slots, under the tables' resolution of {MIN_SLOTS:g}: "
                                  "make it 0 or at least that", field="weight" if self.weight is not None else "backward")

    def exact(self) -> tuple[Fraction, Fraction, Fraction]:
        """F, B and W as the decimals the user gave (:func:`as_given`), W = B/2 exactly by default:
        for comparisons such as I = W that binary floats would get wrong (0.9/2 vs 0.45)."""
        backward = as_given(self.backward)
        return as_given(self.forward), backward, backward / 2 if self.weight is None else as_given(self.weight)

    @property
    def weight_slots(self) -> float:
        """W of a 1/p model share, slots."""
        return self.backward / 2 if self.weight is None else self.weight

    def durations(self, devices: int = 1, stages: int = 1) -> dict[Kind, float]:
        """Slots of each op kind for one stage of a schedule with ``stages`` stages on ``devices`` devices."""
        share = devices / stages
        w = self.weight_slots
        return {
            Kind.F: self.forward * share,
            Kind.B: self.backward * share,
            Kind.I: (self.backward - w) * share,
            Kind.W: w * share,
        }


def as_given(value: float) -> Fraction:
    """The decimal a float was written as: 0.1 is 1/10 (``Fraction(0.1)`` is a binary neighbour of it)."""
    return Fraction(repr(float(value)))
