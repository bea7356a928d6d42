"""Looped breadth-first pipeline (Lamy-Poirier, "Breadth-First Pipeline Parallelism", MLSys 2023,
arXiv 2211.05953, §3-4), in the form of PyTorch's ``ScheduleLoopedBFS``.

Placement: v = ``chunks`` model chunks per device, looped as in interleaved 1F1B: v·p stages, stage
c·p + r on device r (:func:`ppopt.placement.linear_placement`).

Order on device r (PyTorch 2.13's ``ScheduleLoopedBFS._calculate_single_rank_operations``; our own
code, same rule): the forwards of every microbatch on its first local stage r, then on stage r + p,
and so on up to stage (v-1)·p + r; then the full backwards, stages in reverse (last local stage
first), each stage's microbatches in reverse order (m-1 down to 0). That is GPipe run breadth-first
over the device's v chunks: all microbatches of one chunk before the next.

Closed forms (in chunk-op slots, F = 1, B = ``backward``): for m >= p no device ever waits inside
its forward or backward phase (the first stage on device 0 of a chunk needs the previous chunk's
microbatch i from device p-1, ready p slots after device 0 ran it, and device 0 runs m >= p other
forwards meanwhile; the same holds for the backward). Device r therefore starts forwards at slot r
and runs v·m of them back to back, device p-1 starts its backwards once its last forward is done,
and device 0 finishes last, (p-1)·b slots after the wave reaches it: length (1+b)(v·m + p - 1),
bubble (p-1)/(v·m + p-1), the paper's breadth-first bubble (the bubble of GPipe divided by the
number of loops for m >> p). Like GPipe every device keeps all v·m chunk activations. For m < p
the order waits between chunks and the forms do not hold (the registry's range).
"""

from __future__ import annotations

from ppopt.generators.common import require_positive
from ppopt.generators.interleaved import _check_chunks
from ppopt.ir import Kind, Op, Schedule
from ppopt.placement import linear_placement


def looped_bfs(devices: int, microbatches: int, chunks: int = 2) -> Schedule:
    """Looped BFS with ``chunks`` model chunks per device (see the module docs)."""
    require_positive(devices, microbatches)
    p, m, v = devices, microbatches, _check_chunks(chunks)
    orders = []
    for r in range(p):
        local = [c * p + r for c in range(v)]
        forwards = [Op(s, Kind.F, i) for s in local for i in range(m)]
        backwards = [Op(s, Kind.B, i) for s in reversed(local) for i in reversed(range(m))]
        orders.append(tuple(forwards + backwards))
    return Schedule("looped-bfs", p, m, linear_placement(v * p, p), tuple(orders), options={"chunks": v})


def looped_bfs_formula(devices: int, microbatches: int, backward: float = 1, chunks: int = 2):
    """Lamy-Poirier 2023: bubble (p-1)/(v·m+p-1), length (1+B)(v·m+p-1) chunk-op slots, peak v·m
    chunk activations per device, one copy of the weights (module docs; holds for m >= p)."""
    from ppopt.formula import Formula

    p, m, v = devices, microbatches, _check_chunks(chunks)
    return Formula(
        bubble_ratio=(p - 1) / (v * m + p - 1),
        length=(1 + backward) * (v * m + p - 1),
        peak_activations=(v * m,) * p,
        weight_copies=(1,) * p,
        source="Lamy-Poirier 2023 (Breadth-First Pipeline Parallelism), looped BFS",
    )
