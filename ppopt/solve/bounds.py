"""Analytic lower bounds on the step time of any schedule in a space.

Each bound holds for every schedule with the given placement (or for every placement when it is
None), so ``max`` of them complements the solver's own bound:

- **critical path**: one microbatch's chain F(0..S-1), backward (S-1..0) and, when backward is split,
  W(0) after I(0), with the message delay wherever consecutive stages sit on different devices.
- **device load**: device d must run all its ops; before its first op at least the forwards of the
  stages below its lowest stage must run, and after its last op (full backward) the backwards of
  the stages below must still run. bound = head + load + tail. Without a placement: total load / p.
- **memory lifetime** (a cap of K activations on a device holding one stage s): every microbatch's
  activation lives at least L_s (its F, the round trip through the stages above, its freeing op),
  at most K live at once, all inside [head, T - tail]: T >= head + tail + m * L_s / K (area). On a
  device holding several stages, whose room fits K_s activations of stage s alone (activation
  size a_s = room / K_s), the live bytes never exceed the room, and every activation lies inside
  [min head, T - min tail] of the device's stages: room * (T - min head - min tail) >= the area
  m * sum_s a_s * L_s, so T >= min head + min tail + m * sum_s L_s / K_s (a stage whose activation
  takes no memory adds nothing). On a looped or V placement a first stage's activation lives a
  whole round trip beside the later stage's on the same device, which no per-stage bound sees.
- **warm-up** (a device holding one stage s): until its first backward can start, at least
  W_s = F_s + the round trip through the stages above after its first F starts, the device can only
  run forwards, at most min(K, m) of them (K the cap, if any). So it idles at least
  W_s - min(K, m) * F_s, on top of head + load + tail.
- **round trip** and **one machine** (every stage on one device): the longest path over data
  dependencies, microbatch order and, under a cap of K on a one-stage device, F(i+K) after the end
  of microbatch i's backward there; and Jackson's preemptive one-machine bound per device with
  those heads and tails (proofs in :mod:`ppopt.solve.heads`).
- **capped warm-up** (every stage on one device, any number of stages per device, e.g. V): before a
  device's first gradient op can start, only forwards whose activations fit at once can run; the
  rest of its load lies between that and its least tail (proof in :mod:`ppopt.solve.capped_warmup`).
- **relaxation** (linear placement, full backward): CP-SAT's bound on a reduced problem that keeps a
  few devices exactly and the others as time lags, optionally with the meetings of forwards and
  backwards on the dropped devices, or the tail bound (device 0's memory chain, then the reduced
  problems of the last microbatches alone) (:mod:`ppopt.solve.relaxation`); it costs solver
  time, so the search computes it within its budget and :func:`lower_bounds` leaves it at 0.

All bounds take a duration function and a delay function, so the same code gives the bound in real
seconds and in (rounded-down) ticks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ppopt.ir import Kind
from ppopt.placement import stages_by_device
from ppopt.solve.capped_warmup import capped_warmup
from ppopt.solve.heads import MAX_OPS, Delay, Duration, one_machine, round_trip, windows


@dataclass(frozen=True)
class Shape:
    """The structure the bounds depend on: sizes, placement (None when the solver chooses it), kind of
    backward, and whether microbatches split evenly between a stage's replicas (False when the
    split between directions is free)."""

    stages: int
    microbatches: int
    devices: int
    placement: Sequence[Sequence[int]] | None
    split: bool
    even_replicas: bool = True


@dataclass(frozen=True)
class Bounds:
    """Lower bounds on the step time, in the unit of the durations they were computed from
    (seconds, slots or ticks); each is proven in the docstring of the function that computes it."""

    critical_path: float
    device_load: float
    memory: float
    warmup: float = 0.0
    round_trip: float = 0.0
    one_machine: float = 0.0
    relaxation: float = 0.0  # the reduced-problem or tail bound (ppopt.solve.relaxation), set by the search
    capped_warmup: float = 0.0  # multi-stage devices under a cap (ppopt.solve.capped_warmup)

    @property
    def best(self) -> float:
        """The largest (strongest) of the bounds, in their unit."""
        return max(self.critical_path, self.device_load, self.memory, self.warmup, self.round_trip, self.one_machine,
                   self.relaxation, self.capped_warmup)


def _hop(delay: Delay, placement: Sequence[Sequence[int]] | None, stage: int, other: int) -> float:
    """Smallest delay between stage and other over their replicas (0 when placement is free)."""
    if placement is None:
        return 0.0
    return min(delay(stage, a, b) for a in placement[stage] for b in placement[other])


def critical_path(shape: Shape, duration: Duration, delay: Delay) -> float:
    """One microbatch's own chain, in the durations' unit: its forwards through every stage, its
    gradient ops (B, or I when split) back through them, the least message delay of every hop both
    ways, and with a split backward the W of stage 0, which needs stage 0's I. Every op of the chain
    depends on the one before it, so no schedule ends sooner."""
    stages, placement, split = shape.stages, shape.placement, shape.split
    grad = Kind.I if split else Kind.B
    forward = sum(duration(s, Kind.F) for s in range(stages))
    backward = sum(duration(s, grad) for s in range(stages))
    hops = sum(_hop(delay, placement, s, s + 1) + _hop(delay, placement, s + 1, s) for s in range(stages - 1))
    return forward + backward + hops + (duration(0, Kind.W) if split else 0.0)


def _kinds(split: bool) -> tuple[Kind, ...]:
    return (Kind.F, Kind.I, Kind.W) if split else (Kind.F, Kind.B)


@dataclass(frozen=True)
class _Chain:
    """Per stage s, the least times around it on the pipeline, each list computed in one pass (at
    thousands of stages, a sum per stage took seconds):

    - ``head[s]``: before s can start anything, the forwards (and hops) of the stages below;
    - ``tail[s]``: after s's last op, the backwards (and hops) below it (0 when backward is split:
      W, with no successor, can be the last op);
    - ``round_trip[s]``: from the end of F(s) to the start of its gradient op, the stages above, both
      ways."""

    head: list[float]
    tail: list[float]
    round_trip: list[float]


def _chain(stages: int, duration: Duration, delay: Delay, placement, split: bool) -> _Chain:
    grad = Kind.I if split else Kind.B
    up = [_hop(delay, placement, t, t + 1) for t in range(stages - 1)]
    down = [_hop(delay, placement, t + 1, t) for t in range(stages - 1)]
    head, tail = [0.0] * stages, [0.0] * stages
    for s in range(1, stages):
        head[s] = head[s - 1] + (duration(s - 1, Kind.F) + up[s - 1])
        tail[s] = 0.0 if split else tail[s - 1] + (duration(s - 1, Kind.B) + down[s - 1])
    above, hops = [0.0] * stages, [0.0] * stages
    for s in range(stages - 2, -1, -1):
        above[s] = above[s + 1] + (duration(s + 1, Kind.F) + duration(s + 1, grad))
        hops[s] = hops[s + 1] + (up[s] + down[s])
    return _Chain(head, tail, [a + h for a, h in zip(above, hops)])


def _single_stage(shape: Shape) -> list[int]:
    """Stages of ``shape`` (with a placement) that sit alone on their one device."""
    placement = shape.placement
    assert placement is not None
    held = stages_by_device(placement, shape.devices)
    return [s for s in range(shape.stages) if len(placement[s]) == 1 and len(held[placement[s][0]]) == 1]


def device_load(shape: Shape, duration: Duration, delay: Delay) -> float:
    """Head + load + tail per device (see the module docstring); total/p without a placement.

    A replicated stage's microbatches are assumed split evenly between its replicas, so the
    placement is not used when the split between directions is free (``even_replicas`` False).
    """
    stages, microbatches, devices, split = shape.stages, shape.microbatches, shape.devices, shape.split
    placement = shape.placement if shape.even_replicas else None
    kinds = _kinds(split)
    per_microbatch = [sum(duration(s, k) for k in kinds) for s in range(stages)]
    total = microbatches * sum(per_microbatch)
    if placement is None:
        return total / devices
    best = total / devices
    chain = _chain(stages, duration, delay, placement, split)
    for stages_on_d in stages_by_device(placement, devices):
        if not stages_on_d:
            continue
        load = sum(microbatches * per_microbatch[s] / len(placement[s]) for s in stages_on_d)
        low = stages_on_d[0]
        best = max(best, chain.head[low] + load + chain.tail[low])
    return best


def memory_lifetime(shape: Shape, duration: Duration, delay: Delay, cap_of_stage: Callable[[int], float | None]) -> float:
    """The activation-area bound under a cap (see the module docstring), for every device whose
    stages have no replicas: one stage, or several sharing the device's room."""
    stages, microbatches, placement, split = shape.stages, shape.microbatches, shape.placement, shape.split
    if placement is None:
        return 0.0
    grad = Kind.I if split else Kind.B
    best = 0.0
    chain = _chain(stages, duration, delay, placement, split)

    def lifetime(s: int) -> float:
        return duration(s, Kind.F) + chain.round_trip[s] + duration(s, grad) + (duration(s, Kind.W) if split else 0.0)

    for s in _single_stage(shape):
        cap = cap_of_stage(s)
        k = math.floor(cap + 1e-9) if cap is not None else 0
        if k < 1:
            continue
        edges = chain.head[s] + chain.tail[s]
        best = max(best, edges + microbatches * lifetime(s) / k)
    for held in stages_by_device(placement, shape.devices):
        if len(held) < 2 or any(len(placement[s]) != 1 for s in held):
            continue
        caps = [cap_of_stage(s) for s in held]
        if any(cap is not None and cap <= 0 for cap in caps) or all(cap is None for cap in caps):
            continue
        area = sum(lifetime(s) / cap for s, cap in zip(held, caps) if cap is not None)  # per microbatch, in room-time
        edges = min(chain.head[s] for s in held) + min(chain.tail[s] for s in held)
        best = max(best, edges + microbatches * area)
    # the divisions' float error off (378.499999999632 for 378.5 at p = 8, m = 16, a V cap of 1):
    # ten significant digits, far finer than any duration
    return float(f"{best:.10g}")


def warmup(shape: Shape, duration: Duration, delay: Delay, cap_of_stage: Callable[[int], float | None]) -> float:
    """The warm-up idle bound for devices holding exactly one stage (see the module docstring)."""
    stages, microbatches, placement, split = shape.stages, shape.microbatches, shape.placement, shape.split
    if placement is None:
        return 0.0
    kinds = _kinds(split)
    best = 0.0
    chain = _chain(stages, duration, delay, placement, split)
    for s in _single_stage(shape):
        cap = cap_of_stage(s)
        forwards = microbatches if cap is None else min(microbatches, max(1, math.floor(cap + 1e-9)))
        window = duration(s, Kind.F) + chain.round_trip[s]
        idle = max(0.0, window - forwards * duration(s, Kind.F))
        load = microbatches * sum(duration(s, k) for k in kinds)
        edges = chain.head[s] + chain.tail[s]
        best = max(best, edges + load + idle)
    return best


def graph_applies(shape: Shape) -> bool:
    """Whether :func:`lower_bounds` computes the graph bounds (round trip, one machine, capped
    warm-up) of ``shape``: a fixed placement and at most :data:`ppopt.solve.heads.MAX_OPS` ops."""
    kinds = 3 if shape.split else 2
    return shape.placement is not None and shape.stages * shape.microbatches * kinds <= MAX_OPS


def lower_bounds(
    shape: Shape, duration: Duration, delay: Delay, cap_of_stage: Callable[[int], float | None] = lambda s: None,
    graph_bounds: bool = True,
) -> Bounds:
    """All analytic bounds of one space (see :class:`Shape`); ``cap_of_stage(s)`` is the number of
    stage s's activations that fit on its device, or None. ``graph_bounds`` False leaves the graph
    bounds at 0: they cost seconds per hundred thousand ops (:func:`graph_applies`), the others
    microseconds per stage."""
    graph = None
    if graph_bounds and graph_applies(shape):
        assert shape.placement is not None
        graph = windows(shape.stages, shape.microbatches, shape.placement, shape.split, duration, delay, cap_of_stage)
    return Bounds(
        critical_path(shape, duration, delay),
        device_load(shape, duration, delay),
        memory_lifetime(shape, duration, delay, cap_of_stage),
        warmup(shape, duration, delay, cap_of_stage),
        round_trip(graph) if graph is not None else 0.0,
        one_machine(graph) if graph is not None else 0.0,
        capped_warmup=capped_warmup(graph, shape.microbatches, shape.split, cap_of_stage) if graph is not None else 0.0,
    )
