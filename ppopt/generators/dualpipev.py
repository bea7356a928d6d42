"""DualPipeV: DeepSeek's DualPipe folded into a V (two chunks per device, no weight replicas), as
PyTorch 2.13 builds it (``torch.distributed.pipelining.schedules.ScheduleDualPipeV``, "based on the
open sourced code from https://github.com/deepseek-ai/DualPipe"; DualPipe itself: DeepSeek-AI,
"DeepSeek-V3 Technical Report", 2024, §3.2.1).

Device r holds stages r and 2p-1-r (:func:`ppopt.placement.v_placement`); call them its first and
second chunk. Microbatches enter each chunk in order. The order of device r, in eight phases
(facts from PyTorch's construction; the code is our own):

1. 2(p-r-1) forwards of the first chunk;
2. r+1 times: a forward of the first chunk, then one of the second;
3. p-r-1 times: the second chunk's input backward I, its weight backward W, a forward of the second chunk;
4. m-2p+r+1 times: the first chunk's forward overlapped with the second chunk's full backward B (on
   the last device the first of these two runs apart), then the second chunk's forward overlapped
   with the first chunk's B;
5. p-r-1 times: the second chunk's B, then its forward overlapped with the first chunk's B;
6. r+1 times: a backward of the second chunk, then one of the first. They are full B until half-way
   (i = (r+1)//2), from where they are I (zero-bubble style, the W deferred): on odd devices from the
   second chunk's backward of that step, on even devices from the first chunk's;
7. p-r-1 times: the oldest deferred W, then a backward of the first chunk (I once switched, else B);
8. r+1 times: the oldest deferred W.

So the backward kind is per microbatch (B for most, I then W for the last ones) and most of the
steady state is overlapped F&B pairs (``Schedule.overlapped``). PyTorch requires m >= 2p (at least
as many microbatches as stages); so does this generator.

Closed forms: none. The DeepSeek-V3 report (Table 2) states the bubble of two-direction DualPipe,
(p/2 - 1)(F&B + B - 3W), with F&B the time of an overlapped pair, and none for the V variant; later
versions of the DualPipe repository's README (github.com/deepseek-ai/DualPipe) give DualPipeV's as
(PP/2 - 1)(F&B + B - 3W) over PP = 2p stages. ppopt's table counts an overlapped pair as its two ops,
so the form is not the table's length: at p = 4, m = 8 (chunk ops F = 1, B = 2, W = 1, F&B = 3) it
gives 3 x 2 = 6 idle chunk slots beside 48 busy, 27 unit slots, where the table takes 25.5.
"""

from __future__ import annotations

from ppopt.errors import ScheduleError
from ppopt.generators.common import require_positive
from ppopt.ir import Kind, Op, Schedule
from ppopt.placement import v_placement


def device_order(p: int, m: int, r: int) -> tuple[list[Op], list[tuple[Op, Op]]]:
    """Device ``r``'s ops in order and its overlapped (F, B) pairs (module docs). Two-direction DualPipe
    runs the same phases on each half of its devices (:mod:`ppopt.generators.dualpipe`)."""
    first, second = r, 2 * p - 1 - r
    forward = {first: 0, second: 0}  # next microbatch to run forward, per chunk
    backward = {first: 0, second: 0}  # next microbatch to run backward (B or I), per chunk
    deferred: list[Op] = []  # W ops owed, oldest first
    order: list[Op] = []
    pairs: list[tuple[Op, Op]] = []

    def f(stage: int) -> Op:
        op = Op(stage, Kind.F, forward[stage])
        forward[stage] += 1
        order.append(op)
        return op

    def b(stage: int, split: bool = False) -> Op:
        op = Op(stage, Kind.I if split else Kind.B, backward[stage])
        backward[stage] += 1
        order.append(op)
        if split:
            deferred.append(Op(stage, Kind.W, op.microbatch))
        return op

    def w() -> None:
        if deferred:
            order.append(deferred.pop(0))

    def overlap(f_stage: int, b_stage: int) -> None:
        pairs.append((f(f_stage), b(b_stage)))

    for _ in range(2 * (p - r - 1)):
        f(first)
    for _ in range(r + 1):
        f(first)
        f(second)
    for _ in range(p - r - 1):
        b(second, split=True)
        w()
        f(second)
    for i in range(m - 2 * p + r + 1):
        if i == 0 and r == p - 1:
            f(first)
            b(second)
        else:
            overlap(first, second)
        overlap(second, first)
    for _ in range(p - r - 1):
        b(second)
        overlap(second, first)
    split = False
    for i in range(r + 1):
        half = i == (r + 1) // 2
        split = split or (half and r % 2 == 1)
        b(second, split)
        split = split or (half and r % 2 == 0)
        b(first, split)
    for _ in range(p - r - 1):
        w()
        b(first, split)
    for _ in range(r + 1):
        w()
    return order, pairs


def split_pairs(devices: int, microbatches: int) -> int:
    """How many (stage, microbatch) pairs run I then W (the others run one B), from the phases above:
    per device, p-r-1 in phase 3, the second half of phase 6 (from step h = (r+1)//2: 2(r+1-h) on
    odd devices, 2(r+1-h) - 1 on even ones), and all p-r-1 of phase 7. Independent of m.

    Summed in closed form (r + 1 - h is ceil((r+1)/2), whose sum over r < p is floor((p+1)²/4); the
    even devices are ceil(p/2)): the families' op counts (:meth:`ppopt.generators.Family.ops`) are
    what refuses an oversized request at once, and a loop over p devices took minutes at p = 10⁹."""
    p = devices
    return p * (p - 1) + 2 * ((p + 1) ** 2 // 4) - (p + 1) // 2


def dualpipev(devices: int, microbatches: int) -> Schedule:
    """DualPipeV on ``devices`` x ``microbatches`` (module docs); needs m >= 2p."""
    require_positive(devices, microbatches)
    p, m = devices, microbatches
    if m < 2 * p:
        raise ScheduleError(f"dualpipev needs m >= 2p (at least as many microbatches as its {2 * p} stages), "
                            f"got m = {m} with p = {p}: the minimum is m = {2 * p}", field="microbatches")
    built = [device_order(p, m, r) for r in range(p)]
    return Schedule("dualpipev", p, m, v_placement(p), tuple(tuple(order) for order, _ in built),
                    overlapped=tuple(pair for _, pairs in built for pair in pairs))
