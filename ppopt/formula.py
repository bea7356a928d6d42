"""The formula layer: closed forms per schedule family, in the unit model.

Each family's closed forms live next to its generator, as a function
``<family>_formula(devices, microbatches, backward, **options) -> Formula``, stated in *chunk-op
slots*: one op of one stage chunk lasts F = 1, B = ``backward``, and I = W = 1 when backward is split.
:func:`formula` dispatches and returns the length in the unit model's slots (:mod:`ppopt.units`, the
table layer's units): it passes ``backward = B / F`` of the given :class:`~ppopt.units.UnitCosts` and
scales the length by ``F · p / S`` (S stages on p devices), exactly (fractions). The split families'
closed forms assume I = W = F (the default units, B = 2F split evenly); under other units their
length is not what the table measures. The bubble ratio is idle time over total time, the same
definition the table layer uses; it does not depend on the scale.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from fractions import Fraction

from ppopt.generators import get
from ppopt.units import UnitCosts


@dataclass(frozen=True)
class Formula:
    """Closed-form metrics of one schedule family at one (p, m).

    Attributes:
        bubble_ratio: idle / total device time.
        length: schedule length in slots (of the unit model, once returned by :func:`formula`).
        peak_activations: per device, peak live microbatch activations (counted per stage chunk).
        weight_copies: per device, how many copies of a 1/p share of the model it stores.
        source: where the closed forms come from.
    """

    bubble_ratio: float
    length: float
    peak_activations: tuple[float, ...]
    weight_copies: tuple[float, ...]
    source: str


def formula(name: str, devices: int, microbatches: int, units: UnitCosts = UnitCosts(), **options: object) -> Formula:  # noqa: B008
    """Closed forms of schedule ``name`` in ``units`` (module docstring); options not taken by the
    family are ignored."""
    generator = get(name)
    module, func = generator.formula.split(":")
    taken = {k: v for k, v in options.items() if k in generator.options and v is not None}
    function = getattr(importlib.import_module(f"ppopt.generators.{module}"), func)
    closed = function(devices, microbatches, units.backward / units.forward, **taken)
    chunks = generator.chunks(taken)  # S / p, an int once the family accepted the options
    assert isinstance(chunks, int)
    scale = Fraction(units.forward).limit_denominator(10**6) / chunks
    length = Fraction(closed.length).limit_denominator(10**6) * scale
    return replace(closed, length=length.numerator if length.denominator == 1 else float(length))
