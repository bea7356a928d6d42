"""A greedy list schedule under a memory cap: a second hint for the solver.

Handcrafted schedules assume zero or small message delays: with delays and a cap, 1F1B leaves
devices waiting for gradients while they still have room for more activations. This list
scheduler fills that room. Each device, whenever it is free, starts the first ready op by priority:

1. the backward op that sends a gradient (B, or I when split), lowest microbatch first;
2. a W op (split backward), lowest microbatch first, so its activation is freed;
3. a forward, lowest microbatch first (then lowest stage); a microbatch is admitted to a device
   (its forward on the device's first stage) only if all its activations on that device fit.

It needs a fixed placement; with replicas (the bidirectional placement) it uses the first route
only. Times are the instance's (seconds or slots), delays are the instance's point-to-point times. The result is an order; the simulator and
the solver time it as any other schedule.
"""

from __future__ import annotations

import heapq

from ppopt.ir import Kind, Op, Schedule, dependencies, freeing_kind, required_ops
from ppopt.placement import stages_by_device
from ppopt.simulate import op_duration_s
from ppopt.solve.instance import Instance

GREEDY = "greedy"
"""Name of the greedy schedule: a hint of ppopt's own, never reported as a handcrafted schedule."""


def greedy_schedule(instance: Instance, placement: tuple[tuple[int, ...], ...], split: bool, name: str = GREEDY) -> Schedule | None:
    """The greedy list schedule (see the module docstring), or None when the cap admits no progress.

    With replicas (the bidirectional placement) every microbatch takes the first route (replica 0),
    a schedule only a space with free directions holds; the persistent state of every stage a device
    holds, replicas included, still counts against its cap."""
    route = tuple((holders[0],) for holders in placement)
    replicated = route != placement
    stages, m, p = len(placement), instance.microbatches, instance.devices
    device = {s: route[s][0] for s in range(stages)}
    ops = required_ops(stages, m, split)
    grad = Kind.I if split else Kind.B
    free_kind = freeing_kind(split)
    bytes_mode = instance.memory_unit == "bytes"
    held = stages_by_device(placement, p)
    on_route = stages_by_device(route, p)
    cap = [float("inf")] * p
    if instance.memory_limit is not None:
        for d in range(p):
            persistent = sum(instance.costs[s].persistent_bytes for s in held[d]) if bytes_mode else 0.0
            cap[d] = instance.memory_limit - persistent
    live = [0.0] * p
    # memory a device reserves, when it admits a microbatch, for that microbatch's later stages on it
    # (looped and V placements): without it, new microbatches could fill the cap and starve the
    # in-flight ones, a deadlock
    reserved = [0.0] * p
    first_stage = {d: on_d[0] for d, on_d in enumerate(on_route) if on_d}
    route_size = {d: sum(instance.costs[s].activation_bytes for s in on_d) for d, on_d in enumerate(on_route) if on_d}
    deps = {op: dependencies(op, stages, split) for op in ops}
    end: dict[Op, float] = {}
    remaining = {op: len(deps[op]) for op in ops}
    # per device, the ops whose inputs are done: (ready time, priority, op) until that time has come,
    # then (priority, op) in one of two heaps: forwards that admit a microbatch, and the others (all
    # admissions wait for the same memory, so one check covers the whole first heap)
    pending: list[list[tuple[float, tuple, Op]]] = [[] for _ in range(p)]
    admitting: list[list[tuple[tuple, Op]]] = [[] for _ in range(p)]
    others: list[list[tuple[tuple, Op]]] = [[] for _ in range(p)]

    def priority(op: Op) -> tuple:
        rank = 0 if op.kind is grad else 1 if op.kind is Kind.W else 2
        return (rank, op.microbatch, -op.stage if rank == 0 else op.stage)

    def admits(op: Op) -> bool:
        return op.kind is Kind.F and op.stage == first_stage[device[op.stage]]

    for op in ops:
        if remaining[op] == 0:
            heapq.heappush(pending[device[op.stage]], (0.0, priority(op), op))
    successors: dict[Op, list[Op]] = {op: [] for op in ops}
    for op in ops:
        for dep in deps[op]:
            successors[dep].append(op)
    orders: list[list[Op]] = [[] for _ in range(p)]
    free_at = [0.0] * p
    events: list[tuple[float, int, int, Op | None]] = []  # (time, sequence, device, completed op or None: a wake-up)
    sequence = 0

    def push(time: float, d: int, op: Op | None) -> None:
        nonlocal sequence
        heapq.heappush(events, (time, sequence, d, op))
        sequence += 1

    def try_start(d: int, now: float) -> None:
        """Start device d's first ready op by priority, if d is free: O(log n) per op."""
        if free_at[d] > now:
            return
        while pending[d] and pending[d][0][0] <= now:
            _, key, op = heapq.heappop(pending[d])
            heapq.heappush(admitting[d] if admits(op) else others[d], (key, op))
        room = live[d] + reserved[d] + route_size[d] <= cap[d] * (1 + 1e-12)
        heap = others[d]  # the heap whose head goes first: an admission only when there is room
        if room and admitting[d] and (not heap or admitting[d][0] < heap[0]):
            heap = admitting[d]
        if not heap:
            return
        _, op = heapq.heappop(heap)
        size = instance.costs[op.stage].activation_bytes
        if heap is admitting[d]:
            reserved[d] += route_size[d] - size
        elif op.kind is Kind.F:
            reserved[d] -= size
        if op.kind is Kind.F:
            live[d] += size
        free_at[d] = now + op_duration_s(op, instance.costs)
        orders[d].append(op)
        push(free_at[d], d, op)

    for d in range(p):
        push(0.0, d, None)
    while events:
        now, _, d, done = heapq.heappop(events)
        if done is not None:
            end[done] = now
            if done.kind is free_kind:
                live[d] -= instance.costs[done.stage].activation_bytes
            for nxt in successors[done]:
                remaining[nxt] -= 1
                if remaining[nxt] == 0:
                    target = device[nxt.stage]
                    ready = max(end[dep] + instance.comm(dep.stage, device[dep.stage], target) for dep in deps[nxt])
                    heapq.heappush(pending[target], (ready, priority(nxt), nxt))
                    push(ready, target, None)
        try_start(d, now)
    if sum(len(o) for o in orders) != len(ops):
        return None
    return Schedule(name, p, m, placement, tuple(tuple(o) for o in orders), replica_of=(0,) * m if replicated else ())
