"""GPipe and 1F1B: stage r on device r, one stage per device.

- GPipe (Huang et al. 2019): every device runs all forwards, then all backwards.
- 1F1B / PipeDream-Flush (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training", ICML
  2021, Section 3; bubble (p - 1)/m of the ideal time, (p - 1)/(m + p - 1) of the
  total as ppopt counts it: Narayanan et al., SC 2021, Section 2.2.1): device r runs min(p - r - 1, m) warm-up forwards,
  then alternates one forward and one backward, then drains the remaining backwards.
"""

from __future__ import annotations

from itertools import chain, repeat

from ppopt.generators.common import require_positive
from ppopt.ir import Kind, Op, Schedule, ops_of
from ppopt.placement import linear_placement


def gpipe(devices: int, microbatches: int) -> Schedule:
    """GPipe: stage r on device r, every forward in microbatch order, then every backward."""
    require_positive(devices, microbatches)
    orders = tuple(
        tuple(Op(r, Kind.F, m) for m in range(microbatches)) + tuple(Op(r, Kind.B, m) for m in range(microbatches))
        for r in range(devices)
    )
    return Schedule("gpipe", devices, microbatches, linear_placement(devices, devices), orders)


def one_f_one_b_order(stage: int, warmup: int, microbatches: int, backward: Kind = Kind.B) -> tuple[Op, ...]:
    """One stage's 1F1B order: ``warmup`` forwards, then F/backward pairs, then the remaining backwards."""
    warmup = min(warmup, microbatches)
    steady = microbatches - warmup  # F/backward pairs
    kinds = [Kind.F] * warmup + [Kind.F, backward] * steady + [backward] * warmup
    pairs = chain.from_iterable(zip(range(warmup, microbatches), range(steady)))  # F of j + warmup, backward of j
    indices = [*range(warmup), *pairs, *range(steady, microbatches)]
    return tuple(ops_of(repeat(stage), kinds, indices))


def one_f_one_b(devices: int, microbatches: int) -> Schedule:
    """1F1B: stage r on device r, p - r - 1 warm-up forwards, then :func:`one_f_one_b_order`."""
    require_positive(devices, microbatches)
    orders = tuple(one_f_one_b_order(r, devices - r - 1, microbatches) for r in range(devices))
    return Schedule("1f1b", devices, microbatches, linear_placement(devices, devices), orders)


def _linear_formula(devices: int, microbatches: int, backward: int, peaks: tuple[int, ...], source: str):
    from ppopt.formula import Formula

    p, m = devices, microbatches
    return Formula(
        bubble_ratio=(p - 1) / (m + p - 1),
        length=(m + p - 1) * (1 + backward),
        peak_activations=peaks,
        weight_copies=(1,) * p,
        source=source,
    )


def gpipe_formula(devices: int, microbatches: int, backward: int = 1):
    """Bubble (p-1)/(m+p-1), length (m+p-1)(F+B); every device keeps all m activations (Huang et
    al. 2019, Section 2.3)."""
    return _linear_formula(devices, microbatches, backward, (microbatches,) * devices, "Huang et al. 2019 (GPipe)")


def one_f_one_b_formula(devices: int, microbatches: int, backward: int = 1):
    """Same bubble and length as GPipe; device r keeps at most min(m, p - r) activations (Narayanan
    et al., "Memory-Efficient Pipeline-Parallel DNN Training", ICML 2021, Section 3)."""
    peaks = tuple(min(microbatches, devices - r) for r in range(devices))
    return _linear_formula(devices, microbatches, backward, peaks, "Narayanan et al. 2021 (PipeDream-Flush)")
