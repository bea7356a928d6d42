"""Integer time for CP-SAT: durations and delays become ticks of a fixed resolution.

Every duration and delay is rounded **down** to whole ticks, so the ticked problem is a relaxation
of the real one: any real schedule, read in ticks, stays feasible, hence the solver's lower bound
(in ticks, times the resolution) is a valid lower bound of the real optimum. The schedule the
solver finds is then re-timed with the real durations by the simulator.

**What rounding can cost.** Let r = max over the positive values v of v / (floor(v/tick) · tick)
(every value is at most r times its ticked value). Take an optimal ticked schedule, T* ticks, and
multiply every start time by r: each dependency, message delay, device sequence and activation
lifetime still fits, because every real duration and delay is at most r times its ticked one. So
the real optimum lies in [T* · tick, r · T* · tick]: rounding costs at most r - 1 of the step
(:func:`rounding_cost`; infinite when some positive value rounds to 0 ticks).

**Resolution** (:func:`resolution`): when every value is a multiple of a common step (unit mode:
slots, halves of slots...) that step is used and the ticked problem is exact (r = 1). Otherwise the
tick is the coarsest one that keeps r - 1 within ``tolerance`` (0.5 %) with the longest op at most
``max_ticks`` ticks, chosen among the values' own fractions v/k: real durations often share
structure (a backward twice a forward, a message a thousandth of a forward), and a tick that divides
the values exactly or nearly keeps the model small and the rounding cheap. When no tick meets the
tolerance, the finest allowed one (longest op / ``max_ticks``) is used and its cost is reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

TOLERANCE = 0.005
MAX_TICKS = 100_000


def rounding_cost(values: Iterable[float], tick: float) -> float:
    """r - 1 (see the module docstring): how much longer than the ticked optimum the real optimum
    can be, relative; ``math.inf`` when a positive value rounds to zero ticks."""
    worst = 1.0
    for v in values:
        if v <= 0:
            continue
        ticks = to_ticks(v, tick)
        if ticks == 0:
            return math.inf
        worst = max(worst, v / (ticks * tick))
    return worst - 1.0


def _common_step(positive: list[float]) -> float | None:
    """The exact common step of the values (denominators up to 1000), or None."""
    exact = [Fraction(v).limit_denominator(1000) for v in positive]
    if not all(abs(float(f) - v) <= 1e-12 * max(1.0, v) for f, v in zip(exact, positive)):
        return None
    step = Fraction(0)
    for f in exact:
        step = Fraction(math.gcd(step.numerator * f.denominator, f.numerator * step.denominator), step.denominator * f.denominator)
    return float(step)


def resolution(values: Iterable[float], tolerance: float = TOLERANCE, max_ticks: int = MAX_TICKS) -> float:
    """Seconds (or slots) per tick for these durations/delays (see the module docstring)."""
    positive = sorted({v for v in values if v > 0})
    if not positive:
        return 1.0
    longest = positive[-1]
    step = _common_step(positive)
    if step is not None and longest / step <= max_ticks:
        return step
    finest = longest / max_ticks
    most_parts = math.ceil(1 / tolerance) + 1  # beyond that, v/k is no coarser than a generic fine tick
    candidates = sorted({v / k for v in positive for k in range(1, most_parts + 1) if v / k >= finest}, reverse=True)
    limit = 1 + tolerance
    for tick in candidates:
        if all(v <= limit * to_ticks(v, tick) * tick for v in positive):  # rounding_cost <= tolerance, stopping early
            return tick
    return finest


def to_ticks(value: float, tick: float) -> int:
    """``value`` in whole ticks, rounded down (with a tolerance for float noise)."""
    return int(math.floor(value / tick + 1e-9))
