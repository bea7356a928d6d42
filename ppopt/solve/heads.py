"""Heads, tails and one-machine bounds: the round trip under a cap, and per-device energetic bounds.

Two lower bounds on the step time of every schedule of a space with a fixed placement in which every
stage has one device (``linear``, ``looped``, ``v``, ``zigzag``). Both work on one precedence graph
over the ops, whose every edge holds in *some* optimal schedule:

- **data dependencies** F(s-1) -> F(s), F(s)/B(s+1) -> B(s) (I when split), I(s) -> W(s), with the
  least message delay when the two stages sit on different devices;
- **microbatch order** within each (stage, kind): valid for an optimal schedule by the relabelling
  argument of :mod:`ppopt.solve.model` (dominance rule);
- **the round trip under a cap** (stage s on a device with room for K of s's activations beside
  the persistent state of every stage there): with microbatches in order, at most K of s's are live
  (the other stages' live activations only take room), so F(s, i+K) cannot start before microbatch
  i's activation is freed, i.e. before its backward (W when split) on s has ended. That backward
  waits for the gradient to come back through every stage above, with the message delays: the
  longest path carries that round trip. On a device holding several stages each stage obeys its
  own K (a weaker statement than the device's cap, but one a longest path can carry).

**Heads and tails.** head(o) = longest path from time 0 to the start of o; tail(o) = longest path
from the end of o to the end of the step (durations and lags of the edges above). In every schedule
of the relaxed set, o starts at or after head(o) and the step lasts at least tail(o) after o ends.

**Round-trip bound** = max over ops of head(o) + duration(o) + tail(o). Proof: the longest path is
a chain of constraints each of which holds in an optimal schedule; summing them bounds its makespan.

**One-machine (energetic) bound with release and tail times.** A device runs its ops one at a
time, op o inside [head(o), T - tail(o)]. Dropping everything else and even allowing preemption
gives the classic problem 1|r_j, pmtn|max(C_j + q_j), solved exactly by Jackson's preemptive
schedule (always run the available op with the largest tail; Carlier, "The one-machine sequencing
problem", European Journal of Operational Research 11, 1982, section 2). Its value is a lower bound
on every non-preemptive schedule of the device, hence on the step. It includes every energetic
argument "the ops of a set J must fit between min head and max(T - tail)": the preemptive optimum
equals max over J of min_J head + sum_J duration + min_J tail.

Both bounds hold for an optimal schedule of the space, so they are ≤ the optimum and therefore ≤
every schedule's step. All times are in the unit of the duration and delay functions (real, or
ticks rounded down: then the bound in ticks times the tick is a valid bound of the real problem).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ppopt.graph import topological_order
from ppopt.ir import Kind, Op, dependencies, freeing_kind, required_ops

Duration = Callable[[int, Kind], float]  # (stage, kind) -> duration
Delay = Callable[[int, int, int], float]  # (stage sending, device a, device b) -> delay

MAX_OPS = 400_000
"""Largest op count for which the graph bounds are computed (linear in the op count, a few seconds)."""


@dataclass(frozen=True)
class Windows:
    """Heads and tails of every op (see the module docstring), in the duration unit."""

    head: dict[Op, float]
    tail: dict[Op, float]
    duration: dict[Op, float]
    device: dict[int, int]  # stage -> its one device


def windows(
    stages: int,
    microbatches: int,
    placement: Sequence[Sequence[int]],
    split: bool,
    duration: Duration,
    delay: Delay,
    cap_of_stage: Callable[[int], float | None],
) -> Windows | None:
    """Heads and tails over the relaxed precedence graph, or None when some stage has replicas."""
    if any(len(holders) != 1 for holders in placement):
        return None
    device = {s: placement[s][0] for s in range(stages)}
    ops = required_ops(stages, microbatches, split)
    dur = {op: duration(op.stage, op.kind) for op in ops}
    edges: dict[Op, list[tuple[Op, float]]] = {op: [] for op in ops}
    for op in ops:
        for dep in dependencies(op, stages, split):
            hop = delay(dep.stage, device[dep.stage], device[op.stage]) if device[dep.stage] != device[op.stage] else 0.0
            edges[dep].append((op, dur[dep] + hop))
    kinds = (Kind.F, Kind.I, Kind.W) if split else (Kind.F, Kind.B)
    for s in range(stages):
        for kind in kinds:
            for i in range(microbatches - 1):
                a = Op(s, kind, i)
                edges[a].append((Op(s, kind, i + 1), dur[a]))
    free = freeing_kind(split)
    for s in range(stages):
        cap = cap_of_stage(s)
        if cap is None:
            continue
        k = max(1, math.floor(cap + 1e-9))
        for i in range(microbatches - k):
            a = Op(s, free, i)
            edges[a].append((Op(s, Kind.F, i + k), dur[a]))
    order = topological_order({op: [b for b, _ in edges[op]] for op in ops})
    head = dict.fromkeys(ops, 0.0)
    for a in order:
        for b, lag in edges[a]:
            if head[a] + lag > head[b]:
                head[b] = head[a] + lag
    to_end = dict(dur)  # longest path from the start of op to the end of the step
    for a in reversed(order):
        for b, lag in edges[a]:
            if lag + to_end[b] > to_end[a]:
                to_end[a] = lag + to_end[b]
    tail = {op: to_end[op] - dur[op] for op in ops}
    return Windows(head, tail, dur, device)


def round_trip(w: Windows) -> float:
    """max head + duration + tail (see the module docstring)."""
    return max(w.head[op] + w.duration[op] + w.tail[op] for op in w.head)


def jackson(jobs: Sequence[tuple[float, float, float]]) -> float:
    """Optimal value of 1|r_j, pmtn|max(C_j + q_j) for jobs (release r, duration p, tail q):
    Jackson's preemptive schedule (largest tail first among released jobs)."""
    pending = sorted(jobs)
    ready: list[tuple[float, float]] = []  # (-tail, remaining)
    now, best, k = 0.0, 0.0, 0
    while k < len(pending) or ready:
        if not ready and now < pending[k][0]:
            now = pending[k][0]
        while k < len(pending) and pending[k][0] <= now:
            r, p, q = pending[k]
            heapq.heappush(ready, (-q, p))
            k += 1
        neg_q, left = heapq.heappop(ready)
        until = pending[k][0] if k < len(pending) else math.inf
        run = min(left, until - now)
        now += run
        if run < left:
            heapq.heappush(ready, (neg_q, left - run))
        else:
            best = max(best, now - neg_q)
    return best


def one_machine(w: Windows) -> float:
    """The best per-device Jackson bound (see the module docstring)."""
    per_device: dict[int, list[tuple[float, float, float]]] = {}
    for op, h in w.head.items():
        if w.duration[op] > 0:
            per_device.setdefault(w.device[op.stage], []).append((h, w.duration[op], w.tail[op]))
    return max((jackson(jobs) for jobs in per_device.values()), default=0.0)
