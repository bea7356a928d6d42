"""The formula layer: closed forms per schedule family, in the unit model.

Convention: F = 1 slot, B = ``backward`` slots (1 or 2), I = W = 1 slot when backward is split; the
bubble ratio is idle time over total time (idle cells / all cells of the table), the same definition
the table layer uses. Each family's closed forms live next to its generator, as a function
``<family>_formula(devices, microbatches, backward, **options) -> Formula``; this module dispatches.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from ppopt.generators import get


@dataclass(frozen=True)
class Formula:
    """Closed-form metrics of one schedule family at one (p, m).

    Attributes:
        bubble_ratio: idle / total device time.
        length: schedule length in slots.
        peak_activations: per device, peak live microbatch activations (counted per stage chunk).
        weight_copies: per device, how many copies of a 1/p share of the model it stores.
        source: where the closed forms come from.
    """

    bubble_ratio: float
    length: float
    peak_activations: tuple[float, ...]
    weight_copies: tuple[float, ...]
    source: str


def formula(name: str, devices: int, microbatches: int, backward: int = 1, **options: object) -> Formula:
    """Closed forms of schedule ``name``; options not taken by the family are ignored."""
    generator = get(name)
    module, func = generator.formula.split(":")
    taken = {k: v for k, v in options.items() if k in generator.options and v is not None}
    function = getattr(importlib.import_module(f"ppopt.generators.{module}"), func)
    return function(devices, microbatches, backward, **taken)
