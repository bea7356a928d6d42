"""Integer time for CP-SAT: durations and delays become ticks of a fixed resolution.

Every duration and delay is rounded **down** to whole ticks, so the ticked problem is a relaxation
of the real one: any real schedule, read in ticks, stays feasible, hence the solver's lower bound
(in ticks, times the resolution) is a valid lower bound of the real optimum. The schedule the
solver finds is then re-timed with the real durations by the simulator.

Resolution: when every value is a multiple of a common step (unit mode: slots, halves of slots...)
that step is used and the ticked problem is exact. Otherwise the longest op is cut into
``ticks_per_op`` ticks (default 1,000), so rounding loses less than 0.1 % per op.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction


def resolution(values: Iterable[float], ticks_per_op: int = 1000) -> float:
    """Seconds (or slots) per tick for these durations/delays (see the module docstring)."""
    positive = [v for v in values if v > 0]
    if not positive:
        return 1.0
    exact = [Fraction(v).limit_denominator(1000) for v in positive]
    if all(abs(float(f) - v) <= 1e-12 * max(1.0, v) for f, v in zip(exact, positive)):
        step = Fraction(0)
        for f in exact:
            step = Fraction(math.gcd(step.numerator * f.denominator, f.numerator * step.denominator), step.denominator * f.denominator)
        if max(exact) / step <= 10 * ticks_per_op:
            return float(step)
    return max(positive) / ticks_per_op


def to_ticks(value: float, tick: float) -> int:
    """``value`` in whole ticks, rounded down (with a tolerance for float noise)."""
    return int(math.floor(value / tick + 1e-9))
