"""V-Half: the V-shape schedule with half of 1F1B's activation memory (Qi, Wan, Amar, Lin, "Pipeline
Parallelism with Controllable Memory", NeurIPS 2024, arXiv 2405.15362, §3-4).

The paper builds a schedule by repeating one *building block* (the ops of one microbatch at fixed
offsets) every interval, and shows that the block's lifespan sets the peak activation memory. Its
V-shape blocks place stages r and 2p-1-r on device r (:func:`ppopt.placement.v_placement`) and split
each backward into I and W. V-Half is the block whose lifespan is about half of 1F1B's: the paper
states it reduces "the peak activation memory to 1/2 of 1F1B without sacrificing efficiency"
(abstract), "(p+2)//2" microbatches against 1F1B's p (the authors' summary table, in the paper's
companion Hugging Face space sail/pipeline-parallelism-with-controllable-memory).

The block (own code from the offsets of the authors' public V-Half pattern, sail-sg/
zero-bubble-pipeline-parallelism, ``stable_pattern_v_half``; F = I = W = 1 slot per chunk op, so
one microbatch is six slots of work per device, the repetition interval), with d = 3 for even p and
d = 0 for odd p (a pause at the turn of the backward that keeps repeated blocks apart):

- forward, first chunk: stage r (device r) at 2r, i.e. two slots between consecutive stages;
- forward, second chunk: stage 2p-1-r (device r) at 3p - r - 2, one slot between stages;
- input-grad I, second chunk: stage 2p-1-r at 3p + d + 2r - 1, two slots between stages;
- I, first chunk: stage r at 6p + d - r - 2, one slot between stages.

On every device the four offsets are distinct mod 6 for every p: since 3p ≡ 0 (p even) or 3 (p
odd) mod 6, two pairs differ by 2 and 3 slots, and the other four would need 3r ≡ 1, 2, 4 or 5
(mod 6), which no r meets. So the blocks repeat every 6 slots without collision and leave two free
slots per interval. Each W goes, first come first served after its I, into the next free slot of
its device (the authors' ``put_w``). The order of a device is its ops sorted by those times; the
table then packs them as early as dependencies allow (the paper's "squeezing"). The paper's
optional greedy reordering of warm-up and cool-down for throughput is not applied (it keeps the
peak, so the memory statement does not depend on it).

Measured (p = 1..12, m = 1..3p+2, validated): the peak live chunk activations is at most
2·((p+2)//2) (chunks are half a stage), exactly that once m >= p, i.e. the paper's (p+2)//2
microbatches; at p = 8, m = 32 it is 10 chunks (1F1B: 8 stage activations = 16 chunks) and the
bubble is 0.119 against 1F1B's 0.179 (tests/test_v_half.py).

Closed forms: none. The paper states the bubble only approximately (~p/2m at F = B = W) and the
memory as a microbatch count; the test asserts the memory statement exactly.
"""

from __future__ import annotations

from collections import deque

from ppopt.generators.common import repeat_block, require_positive
from ppopt.ir import Kind, Op, Schedule
from ppopt.placement import v_placement

INTERVAL = 6  # slots of work per microbatch per device: two chunks x (F, I, W)


def block(devices: int) -> dict[tuple[int, Kind], int]:
    """Offsets (slots) of one microbatch's F and I ops ``(stage, kind)`` in the V-Half building block."""
    p = devices
    pause = 3 if p % 2 == 0 else 0
    offset: dict[tuple[int, Kind], int] = {}
    for r in range(p):
        offset[r, Kind.F] = 2 * r
        offset[2 * p - 1 - r, Kind.F] = 3 * p - r - 2
        offset[2 * p - 1 - r, Kind.I] = 3 * p + pause + 2 * r - 1
        offset[r, Kind.I] = 6 * p + pause - r - 2
    return offset


def _with_weight_grads(timed: dict[int, Op]) -> list[Op]:
    """A device's F and I ops by time, each W in the first free slot after its I (first come first
    served). Only the gaps between timed ops are visited, so the work grows with the ops, not with
    the slots (a device of a long V spans about 6p slots)."""
    order: list[Op] = []
    pending: deque[Op] = deque()
    previous = -1
    for slot in sorted(timed):
        for _ in range(min(len(pending), slot - previous - 1)):  # the free slots before this op
            done = pending.popleft()
            order.append(Op(done.stage, Kind.W, done.microbatch))
        op = timed[slot]
        order.append(op)
        if op.kind is Kind.I:
            pending.append(op)
        previous = slot
    order.extend(Op(done.stage, Kind.W, done.microbatch) for done in pending)
    return order


def v_half(devices: int, microbatches: int) -> Schedule:
    """V-Half on ``devices`` x ``microbatches`` (see the module docs)."""
    require_positive(devices, microbatches)
    p, m = devices, microbatches
    placement = v_placement(p)
    timed = repeat_block(block(p), placement, m, INTERVAL)
    orders = tuple(tuple(_with_weight_grads(device)) for device in timed)
    return Schedule("v-half", p, m, placement, orders)
