"""A handcrafted schedule fitted to a memory cap: its orders, dispatched as the cap allows.

A handcrafted schedule over the memory limit keeps its value as a plan: Megatron's interleaved 1F1B
warms up with (v-1)·p + 2·(p-1) forwards on device 0 (Narayanan et al. 2021, §2.2.2), more than a
cap of p activations holds, yet its order of forwards and its order of backwards are good ones. The
fitted schedule keeps, on every device, the handcrafted order of its forwards and the handcrafted
order of its other ops (B, or I and W when split), and lets the device take the next op of either
sequence as its inputs arrive:

- a forward only when its activation fits beside the live ones (``Instance.room``);
- after a forward the next gradient op first, after a gradient op the next forward first (the
  alternation of 1F1B's steady state, Narayanan et al. 2019, "PipeDream", §3.2), else whichever of
  the two is ready, else the device waits for the next arrival.

A device thus warms up with as many forwards as fit before its first gradient op comes back and
alternates from then on: the handcrafted flow under the cap. Cutting the warm-up of the handcrafted
order itself instead keeps its strict alternation, and every backward then waits a whole round trip
(interleaved 1F1B cut to 31 warm-up forwards at p = 16, m = 64: 1,215.5 slots against 214.5).

Measured (unit costs F = 1, B = 2, p = 16, m = 64, looped placement with two chunks, a cap of 16
activations of a 1/p share where interleaved 1F1B peaks at 23.5): without messages the fitted
interleaved 1F1B takes 214.5 slots, its own uncapped length and the space's analytic bound, where
the greedy list schedule (:mod:`ppopt.solve.greedy`) takes 243.5; with one-slot messages 394.5
against 436.5.

The result is an order; the simulator and the solver time it as any other schedule. None when the
dispatch deadlocks (every device waits for room that only a blocked forward would free) or the
schedule has replicas (one stage on several devices).
"""

from __future__ import annotations

import heapq

from ppopt.ir import Kind, Op, Schedule, dependencies
from ppopt.placement import stages_by_device
from ppopt.simulate import op_duration_s
from ppopt.solve.instance import Instance


def fitted_schedule(schedule: Schedule, instance: Instance) -> Schedule | None:
    """``schedule`` dispatched under ``instance``'s memory limit (see the module docstring), or None;
    named ``fitted NAME``.

    Times are the instance's (seconds or slots), message delays its point-to-point times."""
    if schedule.replica_of or any(len(holders) != 1 for holders in schedule.placement):
        return None
    p = schedule.devices
    device = [holders[0] for holders in schedule.placement]
    stages = len(device)
    split = {(op.stage, op.microbatch) for order in schedule.orders for op in order if op.kind is Kind.I}
    size, _ = instance.memory_counts()
    early = instance.input_grad_releases()
    held = stages_by_device(schedule.placement, p)
    room = [instance.room(held[d]) for d in range(p)]
    forwards = [[op for op in order if op.kind is Kind.F] for order in schedule.orders]
    others = [[op for op in order if op.kind is not Kind.F] for order in schedule.orders]
    waiting = {op: len(dependencies(op, stages, split)) for order in schedule.orders for op in order}
    successors: dict[Op, list[Op]] = {}
    for op in waiting:
        for dep in dependencies(op, stages, split):
            successors.setdefault(dep, []).append(op)
    ready_at = dict.fromkeys(waiting, 0.0)
    live = [0.0] * p
    free_at = [0.0] * p
    next_forward, next_other = [0] * p, [0] * p
    after_forward = [False] * p
    started: set[Op] = set()
    place = {op: k for queue in others for k, op in enumerate(queue)}
    ready_w: list[list[tuple[int, Op]]] = [[] for _ in range(p)]  # per device, W ops whose I has ended, by place
    orders: list[list[Op]] = [[] for _ in range(p)]
    events: list[tuple[float, int, int, Op | None]] = [(0.0, d, d, None) for d in range(p)]  # (time, order, device, op ended)
    sequence = p

    def ready(op: Op, now: float) -> bool:
        return waiting[op] == 0 and ready_at[op] <= now

    def head(queue: list[Op], index: int, now: float) -> Op | None:
        """The queue's next op if its inputs have all arrived by ``now``."""
        return queue[index] if index < len(queue) and ready(queue[index], now) else None

    def early_w(d: int) -> Op | None:
        """The first of device d's later W ops whose I has ended (split backward), or None."""
        waiting_w = ready_w[d]
        while waiting_w and waiting_w[0][1] in started:
            heapq.heappop(waiting_w)
        return waiting_w[0][1] if waiting_w else None

    def try_start(d: int, now: float) -> None:
        nonlocal sequence
        if free_at[d] > now:
            return
        forward = head(forwards[d], next_forward[d], now)
        blocked = forward is not None and live[d] + size[forward.stage] > room[d]
        if blocked:
            forward = None
        other = head(others[d], next_other[d], now)
        if other is None and blocked and split:
            other = early_w(d)  # a W frees an activation and no op waits for it: it goes ahead
        op = (other or forward) if after_forward[d] else (forward or other)
        if op is None:
            return
        started.add(op)
        if op.kind is Kind.F:
            next_forward[d] += 1
            live[d] += size[op.stage]
        else:
            queue = others[d]
            while next_other[d] < len(queue) and queue[next_other[d]] in started:
                next_other[d] += 1
        after_forward[d] = op.kind is Kind.F
        free_at[d] = now + op_duration_s(op, instance.costs)
        orders[d].append(op)
        heapq.heappush(events, (free_at[d], sequence, d, op))
        sequence += 1

    while events:
        # every event of this instant first, then the devices choose: an input arriving at the same
        # time as a device frees must be seen by its choice
        now, woken = events[0][0], set()
        while events and events[0][0] == now:
            _, _, d, ended = heapq.heappop(events)
            woken.add(d)
            if ended is None:
                continue
            if ended.kind is Kind.B:
                live[d] -= size[ended.stage]
            elif ended.kind is Kind.I:
                live[d] -= early[ended.stage]
            elif ended.kind is Kind.W:
                live[d] -= size[ended.stage] - early[ended.stage]
            for nxt in successors.get(ended, ()):
                target = device[nxt.stage]
                ready_at[nxt] = max(ready_at[nxt], now + instance.comm(ended.stage, d, target))
                waiting[nxt] -= 1
                if waiting[nxt] == 0:
                    heapq.heappush(events, (ready_at[nxt], sequence, target, None))
                    sequence += 1
                    if nxt.kind is Kind.W:
                        heapq.heappush(ready_w[target], (place[nxt], nxt))
        for d in sorted(woken):
            try_start(d, now)
    if sum(map(len, orders)) != len(waiting):
        return None
    return Schedule(f"fitted {schedule.name}", p, schedule.microbatches, schedule.placement,
                    tuple(map(tuple, orders)), options=schedule.options)
