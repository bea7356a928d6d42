"""The warm-up bound under a memory cap for devices that hold several stages (V, looped, zig-zag).

The warm-up bound of :mod:`ppopt.solve.bounds` covers devices holding one stage. On the V placement
(Qi et al., "Zero Bubble Pipeline Parallelism", arXiv 2401.10241, §6, ZB-V: device
r holds stages r and 2p-1-r) every device holds two, and the idle it proves is what decides the step: at p = 8, m = 16,
F = 2, B = 4 (a chunk op lasts p/S = 1/2 of that: 1 and 2 slots) and a cap of 8 activations (16
chunk activations, each p/S = 1/2 of a 1/p share), device 7 cannot start a backward before slot 30
(the forwards up to stage 8, then 7 forwards and 7 backwards of 2 slots back down), can run at most
16 forwards before then, and after its last op the backwards of stages 6..0 still take 14 slots:
at least 30 + (96 - 16) + 14 = 124 slots, which ZB-V with merged backward reaches.

**The bound.** Take heads and tails from :func:`ppopt.solve.heads.windows` (they hold in an optimal
schedule that keeps the microbatch order; see that module). For a device d:

- g_d = the least head of a gradient op (B, or I when split) on d: no gradient op starts before it;
- before g_d no activation on d is freed (freeing is the end of a B, or of a W after its I, both
  at or after g_d), so the forwards that start on d before g_d are all live at once just before g_d
  and their activations fit in d's room: sum over them of 1/K_s <= 1, with K_s = how many of stage
  s's activations fit beside the persistent state of d's stages (``cap_of_stage``: a larger K_s
  only relaxes this). At most m forwards per stage. Their total duration is at most R_d, the best
  value of that knapsack (exactly the K longest when every stage of d has the same K, the
  fractional optimum otherwise);
- every other op of d starts at or after g_d, so at least load_d - R_d of the device's work lies
  in [g_d, T - q_d], where q_d is the least tail of an op on d (every op o on d ends by T - tail(o)).

One device runs one op at a time, so T >= g_d + load_d - R_d + q_d. Without a cap, R_d is every
forward of d and the bound says the gradient ops fit after g_d. The bound is max over devices of
that and of r_d + load_d + q_d (r_d the least head on d). It holds for the
optimal schedule that keeps the heads and tails, hence it is <= the optimum and <= every schedule's
step. All times are in the unit of the windows (real, or ticks rounded down).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ppopt.ir import Kind, Op
from ppopt.solve.heads import Windows


def forward_room(durations: list[float], caps: list[float | None], microbatches: int) -> float:
    """The most forward time that fits before anything is freed: per stage of the device its forward
    duration and its cap K_s (None: unlimited); at most ``microbatches`` forwards per stage and
    sum of count/K_s <= 1 (see the module docstring)."""
    unlimited = sum(microbatches * d for d, k in zip(durations, caps) if k is None)
    capped = [(d, k) for d, k in zip(durations, caps) if k is not None]
    if not capped:
        return unlimited
    if len({k for _, k in capped}) == 1:  # one cap: the K longest forwards, exactly
        count = math.floor(capped[0][1] + 1e-9)
        longest = sorted((d for d, _ in capped), reverse=True)
        taken = 0.0
        for d in longest:
            n = min(microbatches, count)
            taken += n * d
            count -= n
        return unlimited + taken
    room, taken = 1.0, 0.0  # fractional knapsack, the most time per unit of room first
    for d, k in sorted(capped, key=lambda item: item[0] * item[1], reverse=True):
        share = min(float(microbatches), room * k)
        taken += share * d
        room -= share / k
        if room <= 0:
            break
    return unlimited + taken


def capped_warmup(w: Windows, microbatches: int, split: bool, cap_of_stage: Callable[[int], float | None]) -> float:
    """max over devices of g_d + load_d - R_d + q_d and r_d + load_d + q_d (see the module docstring)."""
    grad = Kind.I if split else Kind.B
    load: dict[int, float] = {}
    first: dict[int, float] = {}  # r_d
    last: dict[int, float] = {}  # q_d
    gradient: dict[int, float] = {}  # g_d
    for op, head in w.head.items():
        d = w.device[op.stage]
        load[d] = load.get(d, 0.0) + w.duration[op]
        first[d] = min(first.get(d, math.inf), head)
        last[d] = min(last.get(d, math.inf), w.tail[op])
        if op.kind is grad:
            gradient[d] = min(gradient.get(d, math.inf), head)
    on_device: dict[int, list[int]] = {}  # one pass: a scan of every stage per device took seconds at p = 3,000
    for s, on in w.device.items():
        on_device.setdefault(on, []).append(s)
    best = 0.0
    for d in load:
        held = on_device[d]
        room = forward_room([w.duration[Op(s, Kind.F, 0)] for s in held], [cap_of_stage(s) for s in held], microbatches)
        best = max(best, first[d] + load[d] + last[d], gradient[d] + max(0.0, load[d] - room) + last[d])
    return best
