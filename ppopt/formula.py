"""The formula layer: closed forms per schedule family, in the unit model.

Each family's closed forms live next to its generator, as a function
``(devices, microbatches, backward, **options) -> Formula`` named in the family's registry entry
(:class:`ppopt.generators.ClosedForms`, with the range where they hold), stated in *chunk-op
slots*: one op of one stage chunk lasts F = 1, B = ``backward``, and I = W = 1 when backward is split.
:func:`formula` dispatches and returns the length in the unit model's slots (:mod:`ppopt.units`, the
table layer's units): it passes ``backward = B / F`` of the given :class:`~ppopt.units.UnitCosts` and
scales the length by ``F · p / S`` (S stages on p devices), exactly (fractions). The split families'
closed forms are stated for some durations only (Qi et al. 2024's at I = W = F); each family's
``units_outside`` says where the given units leave that range (:class:`ppopt.generators.ClosedForms`),
and DualPipe's forms also take W/F. The bubble ratio is idle time over total time, the same
definition the table layer uses; it does not depend on the scale.

Outside its range a family's closed forms are still computed (the JSON shows them) but carry the
reason in :attr:`Formula.outside`: reports print "n/a (reason)" and rankings leave them out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from ppopt.generators import get
from ppopt.units import UnitCosts, as_given


@dataclass(frozen=True)
class Formula:
    """Closed-form metrics of one schedule family at one (p, m).

    Attributes:
        bubble_ratio: idle / total device time.
        length: schedule length in slots (of the unit model, once returned by :func:`formula`).
        peak_activations: per device, peak live microbatch activations (counted per stage chunk).
        weight_copies: per device, how many copies of a 1/p share of the model it stores.
        source: where the closed forms come from.
        outside: None inside the forms' range; otherwise why (p, m) is outside it, e.g. "m < 2p - 1".
    """

    bubble_ratio: float
    length: float
    peak_activations: tuple[float, ...]
    weight_copies: tuple[float, ...]
    source: str
    outside: str | None = None

    @property
    def valid(self) -> bool:
        return self.outside is None


def formula(name: str, devices: int, microbatches: int, units: UnitCosts = UnitCosts(), **options: object) -> Formula | None:  # noqa: B008
    """Closed forms of schedule ``name`` in ``units`` (module docstring), or None for a family without
    any (its registry entry says why); options not taken by the family are ignored."""
    family = get(name)
    if family.closed_forms is None:
        return None
    taken = family.taken(options)
    forms = family.closed_forms
    weight = {"weight": units.weight_slots / units.forward} if forms.weight else {}
    closed = forms.function(devices, microbatches, units.backward / units.forward, **weight, **taken)
    chunks = family.chunks(taken)  # S / p, an int once the family accepted the options
    assert isinstance(chunks, int)
    scale = as_given(units.forward) / chunks  # 0.1 is 1/10, 1e-7 is 1/10**7
    length = Fraction(closed.length).limit_denominator(10**6) * scale
    outside = forms.outside(devices, microbatches, taken) or forms.units_outside(devices, microbatches, units)
    return replace(closed, length=length.numerator if length.denominator == 1 else float(length), outside=outside)
