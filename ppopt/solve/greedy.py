"""A greedy list schedule under a memory cap: a second hint for the solver.

Handcrafted schedules assume zero or small message delays: with delays and a cap, 1F1B leaves
devices waiting for gradients while they still have room for more activations. This list
scheduler fills that room. Each device, whenever it is free, starts the first ready op by priority:

1. the backward op that sends a gradient (B, or I when split), lowest microbatch first;
2. a W op (split backward), lowest microbatch first, so its activation is freed;
3. a forward, lowest microbatch first (then lowest stage); a microbatch is admitted to a device
   (its forward on the device's first stage) only if all its activations on that device fit.

A variant admits a microbatch when its first activation and one later one fit, and spaces the
microbatches' entries; the solver takes the shortest of a few (:func:`best_greedy_schedule`).

It needs a fixed placement; with replicas (the bidirectional placement) it uses the first route
only. Times are the instance's (seconds or slots), delays are the instance's point-to-point times. The result is an order; the simulator and
the solver time it as any other schedule.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from ppopt.ir import Kind, Op, Schedule, dependencies
from ppopt.placement import stages_by_device
from ppopt.simulate import op_duration_s
from ppopt.solve.instance import Instance

GREEDY = "greedy"
"""Name of the greedy schedule: a hint of ppopt's own, never reported as a handcrafted schedule."""


def greedy_schedule(instance: Instance, placement: tuple[tuple[int, ...], ...], split: bool, name: str = GREEDY,
                    reserve: bool = True, spacing: float = 0.0) -> Schedule | None:
    """The greedy list schedule (see the module docstring), or None when the cap admits no progress.

    With replicas (the bidirectional placement) every microbatch takes the first route (replica 0),
    a schedule only a space with free directions holds; the persistent state of every stage a device
    holds, replicas included, still counts against its cap.

    ``reserve`` False, on devices holding several stages (looped, V): admission keeps room for one
    later activation only, instead of all of the new microbatch's, and a later stage's forward starts
    only when its activation fits. A microbatch holds its activations of the device's stages together
    only for part of its life, so this admits more microbatches; it can deadlock (None).
    ``spacing``: microbatch i enters no earlier than i · spacing (the instance's time unit)."""
    made = _list_schedule(instance, placement, split, name, reserve, spacing)
    return None if made is None else made[0]


def best_greedy_schedule(instance: Instance, placement: tuple[tuple[int, ...], ...], split: bool,
                         affordable: Callable[[], bool] = lambda: True) -> Schedule | None:
    """The shortest of the greedy schedules (by their own timing) of :data:`ENTRY_SPACINGS`: first the
    default one (all room reserved at admission, no spacing), then, while ``affordable()``, those
    keeping room for one later activation with microbatches entering spaced by the given multiples of
    the busiest device's work per microbatch. Unspaced, admitting whenever there is room fills a
    device with first-stage activations whose later stages then wait; spaced at about its work rate,
    microbatches flow. ``benchmarks/greedy_bench.py`` (unit costs F = 1, B = 2, one-slot messages,
    a cap of p): looped 32 x 256 1,811.5 -> 1,616.5 slots, V 32 x 256 1,724 -> 1,337, zig-zag
    16 x 80 564 -> 450.5; on one stage per device within a few slots of the default."""
    best = _list_schedule(instance, placement, split, GREEDY, True, 0.0)
    work = _busiest_work(instance, placement, split)
    for multiple in ENTRY_SPACINGS:
        if not affordable():
            break
        made = _list_schedule(instance, placement, split, GREEDY, False, multiple * work)
        if made is not None and (best is None or made[1] < best[1]):
            best = made
    return None if best is None else best[0]


ENTRY_SPACINGS = (0.0, 0.8, 1.0, 1.2)
"""Entry spacings :func:`best_greedy_schedule` tries, as multiples of the busiest device's work per
microbatch (0: none)."""


def _busiest_work(instance: Instance, placement: tuple[tuple[int, ...], ...], split: bool) -> float:
    """The most time one device (of the first route) spends on one microbatch: its ops' durations."""
    kinds = (Kind.F, Kind.I, Kind.W) if split else (Kind.F, Kind.B)
    work: dict[int, float] = {}
    for s, holders in enumerate(placement):
        work[holders[0]] = work.get(holders[0], 0.0) + sum(op_duration_s(Op(s, kind, 0), instance.costs) for kind in kinds)
    return max(work.values(), default=0.0)


def _list_schedule(instance: Instance, placement: tuple[tuple[int, ...], ...], split: bool, name: str, reserve: bool,
                   spacing: float) -> tuple[Schedule, float] | None:
    """:func:`greedy_schedule` and its makespan (its own timing), or None.

    Ops are numbered ``(row · stages + stage) · m + microbatch``, row 0 the forwards, 1 the gradient
    ops (B, or I when split), 2 the W ops: every table below is a list indexed by (row, stage), so
    the event loop hashes no op (it ran at about 20 µs per op with :class:`~ppopt.ir.Op` keys)."""
    route = tuple((holders[0],) for holders in placement)
    replicated = route != placement
    stages, m, p = len(placement), instance.microbatches, instance.devices
    device = [route[s][0] for s in range(stages)]
    grad = Kind.I if split else Kind.B
    kinds = (Kind.F, grad, Kind.W) if split else (Kind.F, grad)
    free_row = len(kinds) - 1  # the row whose op frees the activation: W when split, else B
    held = stages_by_device(placement, p)
    on_route = stages_by_device(route, p)
    size, _ = instance.memory_counts()
    cap = [instance.room(held[d]) for d in range(p)]  # the limit's slack included
    live = [0.0] * p
    # memory a device reserves, when it admits a microbatch, for that microbatch's later stages on it
    # (looped and V placements): without it, new microbatches could fill the cap and starve the
    # in-flight ones, a deadlock
    reserved = [0.0] * p
    first_stage = [on_d[0] if on_d else -1 for on_d in on_route]
    route_size = [sum(size[s] for s in on_d) for on_d in on_route]
    # what an admission needs: the whole route's room (reserve), or its first activation and room for one later one
    admission = route_size if reserve else [size[on_d[0]] + max((size[s] for s in on_d[1:]), default=0.0) if on_d else 0.0
                                            for on_d in on_route]
    rows = len(kinds)
    duration = [op_duration_s(Op(s, kind, 0), instance.costs) for kind in kinds for s in range(stages)]
    row_stage = [(r, s) for r in range(rows) for s in range(stages)]

    # per (row, stage): its successors' (row · stages + stage, delay from here to their device) and
    # how many inputs it waits for, from ppopt.ir.dependencies of microbatch 0 (every microbatch's
    # are the same), inverted in required_ops' order (stage, then kind), so that ops ready at one
    # time are woken in that order
    row_of = {kind: r for r, kind in enumerate(kinds)}
    follow: list[list[tuple[int, float]]] = [[] for _ in row_stage]
    waits = [0] * len(row_stage)
    for s in range(stages):
        for r, kind in enumerate(kinds):
            for dep in dependencies(Op(s, kind, 0), stages, split):
                follow[row_of[dep.kind] * stages + dep.stage].append(
                    (r * stages + s, instance.comm(dep.stage, device[dep.stage], device[s])))
                waits[r * stages + s] += 1
    # the order key (rank, microbatch, stage) as one integer: gradient ops first (the highest stage
    # first), then W, then forwards, each lowest microbatch first
    rank_of = [2, 0, 1]
    key_base = [rank_of[r] * m * stages + (stages - 1 - s if r == 1 else s) for r, s in row_stage]
    remaining = [waits[rs] for rs in range(rows * stages) for _ in range(m)]
    ready_at = [0.0] * (rows * stages * m)  # latest arrival of an op's inputs so far
    # per device, the ops whose inputs are done: (ready time, key, op) until that time has come,
    # then (key, op) in one of two heaps: forwards that admit a microbatch, and the others (all
    # admissions wait for the same memory, so one check covers the whole first heap)
    pending: list[list[tuple[float, int, int]]] = [[] for _ in range(p)]
    admitting: list[list[tuple[int, int]]] = [[] for _ in range(p)]
    others: list[list[tuple[int, int]]] = [[] for _ in range(p)]
    admits = [r == 0 and s == first_stage[device[s]] for r, s in row_stage]
    orders: list[list[int]] = [[] for _ in range(p)]
    free_at = [0.0] * p
    events: list[tuple[float, int, int, int]] = []  # (time, sequence, device, completed op or -1: a wake-up)
    for i in range(m):  # F(0, i) waits for nothing but its entry time
        heapq.heappush(pending[device[0]], (i * spacing, key_base[0] + i * stages, i))
        if spacing and i:
            heapq.heappush(events, (i * spacing, -i, device[0], -1))
    sequence = 0
    push, pop = heapq.heappush, heapq.heappop

    def try_start(d: int, now: float) -> None:
        """Start device d's first ready op by priority, if d is free: O(log n) per op."""
        nonlocal sequence
        if free_at[d] > now:
            return
        waiting, admit, other = pending[d], admitting[d], others[d]
        while waiting and waiting[0][0] <= now:
            _, key, op = pop(waiting)
            push(admit if admits[op // m] else other, (key, op))
        room = live[d] + reserved[d] + admission[d] <= cap[d]
        heap = other  # the heap whose head goes first: an admission only when there is room
        if room and admit and (not heap or admit[0] < heap[0]):
            heap = admit
        if not heap:
            return
        rs = heap[0][1] // m
        r, s = row_stage[rs]
        if not reserve and heap is other and r == 0 and live[d] + size[s] > cap[d]:
            return  # a later stage's forward waits for room (gradient ops, ahead of it in the heap, are none)
        _, op = pop(heap)
        if reserve and heap is admit:
            reserved[d] += route_size[d] - size[s]
        elif reserve and r == 0:
            reserved[d] -= size[s]
        if r == 0:
            live[d] += size[s]
        free_at[d] = now + duration[rs]
        orders[d].append(op)
        push(events, (free_at[d], sequence, d, op))
        sequence += 1

    for d in range(p):
        push(events, (0.0, sequence, d, -1))
        sequence += 1
    while events:
        now, _, d, done = pop(events)
        if done >= 0:
            rs, i = divmod(done, m)
            r, s = row_stage[rs]
            if r == free_row:
                live[d] -= size[s]
            for nxt_rs, delay in follow[rs]:
                nxt = nxt_rs * m + i
                arrival = now + delay
                if arrival > ready_at[nxt]:
                    ready_at[nxt] = arrival
                remaining[nxt] -= 1
                if remaining[nxt] == 0:
                    target = device[nxt_rs % stages]
                    ready = ready_at[nxt]
                    push(pending[target], (ready, key_base[nxt_rs] + i * stages, nxt))
                    push(events, (ready, sequence, target, -1))
                    sequence += 1
        try_start(d, now)
    if sum(len(o) for o in orders) != rows * stages * m:
        return None
    ops = [Op(s, kinds[r], i) for r, s in row_stage for i in range(m)]
    return Schedule(name, p, m, placement, tuple(tuple(ops[k] for k in order) for order in orders),
                    replica_of=(0,) * m if replicated else ()), max(free_at)
