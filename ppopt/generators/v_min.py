"""V-Min: the V-shape schedule with the least activation memory (Qi, Wan, Amar, Lin, "Pipeline
Parallelism with Controllable Memory", NeurIPS 2024, arXiv 2405.15362, §3-4).

The paper builds a schedule by repeating one *building block* (the ops of one microbatch, with
fixed offsets) every interval, and shows that the block's lifespan sets the peak activation memory.
Its V-shape blocks place stages r and 2p-1-r on device r (:func:`ppopt.placement.v_placement`) and
split each backward into I and W. V-Min is the block of the shortest lifespan: every op as soon as
its predecessor in the block allows, which the paper states needs about 1/3 of 1F1B's activation
memory: "(p+4)//3" microbatches against 1F1B's p (the authors' summary table, in the paper's companion Hugging Face space
sail/pipeline-parallelism-with-controllable-memory), "1/3 with comparable
throughput" (abstract).

Our construction (own code from that rule; F = I = W = 1 slot per chunk op, so one microbatch is six
ops and six slots of work per device, the repetition interval):

- the block: F of stage 0 at offset 0, then F of stages 1..2p-1 and I of stages 2p-1..0, each at the
  first offset after its predecessor whose residue mod 6 is still free on its device; each W at
  the first free residue after its I. Distinct residues mean repeated blocks never collide.
- the order of device r: its ops of every microbatch j sorted by 6j + offset (the repeated blocks);
  the table then packs them as early as dependencies allow (the paper's "squeezing").

The authors' public pattern (``stable_pattern_v_min`` in the sail-sg repository's ``zbv_greedy.py``)
has the same offsets except when 3 divides p, where it places the I of the second chunk one chunk-op
slot later and the I of the first one earlier (device 0 at p = 3: F, F, I, I at 0, 5, 8, 13 against
ours 0, 5, 7, 14); ours keeps the rule, with the same peaks, and at p = 3 a table one unit slot
shorter (12.5 against 13.5 slots at m = 3).

Measured (p = 1..12, m = 1..3p+2, validated): the peak live chunk activations is at most
2·((p+4)//3) (chunks are half a stage), exactly that once m >= p, i.e. the paper's (p+4)//3
microbatches; at p = 8, m = 32 the length is 109.5 slots, a bubble of 1 - 96/109.5 = 0.123, against 1F1B's 0.179
(tests/test_v_min.py derives the length).

Closed forms: none. The paper states the bubble only approximately (~2p/3m at F = B = W) and the
memory per microbatch count of the first device; the test asserts the memory statement exactly.
"""

from __future__ import annotations

from ppopt.generators.common import repeat_block, require_positive
from ppopt.ir import Kind, Schedule
from ppopt.placement import v_placement

INTERVAL = 6  # slots of work per microbatch per device: two chunks x (F, I, W)


def block(devices: int) -> dict[tuple[int, Kind], int]:
    """Offsets (slots) of one microbatch's ops ``(stage, kind)`` in the V-Min building block."""
    p = devices
    stages = 2 * p
    device = [s if s < p else stages - 1 - s for s in range(stages)]
    used: list[set[int]] = [set() for _ in range(p)]
    offset: dict[tuple[int, Kind], int] = {}

    def put(stage: int, kind: Kind, earliest: int) -> int:
        slot = earliest
        while slot % INTERVAL in used[device[stage]]:
            slot += 1
        used[device[stage]].add(slot % INTERVAL)
        offset[stage, kind] = slot
        return slot

    slot = put(0, Kind.F, 0)
    for s in range(1, stages):
        slot = put(s, Kind.F, slot + 1)
    for s in reversed(range(stages)):
        slot = put(s, Kind.I, slot + 1)
    for s in range(stages):
        put(s, Kind.W, offset[s, Kind.I] + 1)
    return offset


def v_min(devices: int, microbatches: int) -> Schedule:
    """V-Min on ``devices`` x ``microbatches`` (see the module docs)."""
    require_positive(devices, microbatches)
    p, m = devices, microbatches
    placement = v_placement(p)
    timed = repeat_block(block(p), placement, m, INTERVAL)
    orders = tuple(tuple(ops[slot] for slot in sorted(ops)) for ops in timed)
    return Schedule("v-min", p, m, placement, orders)
