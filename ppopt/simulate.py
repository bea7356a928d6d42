"""The communication-aware simulator: a schedule + per-stage costs + a system -> timeline and metrics.

``simulate(schedule, costs, system)`` runs a deterministic discrete-event simulation of one training
step. It is the third of the three evaluation layers (formula, table, simulation; README.md,
"Each table is evaluated in three layers"): the table's execution graph with real durations and
explicit communication.

Compute
    Each device has one compute stream and runs its ops in the schedule's order. An op starts when
    the device is free and its input from another device has *arrived*. Durations come from
    ``costs.stages[op.stage]``: F ``forward_s``, B ``backward_s``, I ``input_grad_s``, W
    ``weight_grad_s``. Dependencies within a device need no waiting: a valid schedule orders them
    earlier on the device.

Point-to-point communication
    A data dependency that crosses devices (F(s) -> F(s+1) activation, B/I(s+1) -> B/I(s) activation
    gradient) is a message of ``costs.stages[sender's stage].send_bytes`` bytes, sent as soon as the
    producing op ends. Its duration is Hockney's ``bytes / bandwidth + latency``
    (:func:`ppopt.costs.transfer_time_s`). Two stages on the same device communicate for free.

    Links are **serialised, per direction, with no cross-pair congestion**: there is one directed
    link per ordered (source device, destination device) pair; messages on the same directed link
    take turns, first come first served in the order they become ready, each holding the link for
    its ``bytes / bandwidth`` (the latency of one overlaps the next one's transfer); the two directions of a
    pair and different pairs never slow each other down (no shared switches, NICs or topology).
    Ties: at the same ready time, point-to-point messages go before an all-reduce, messages among
    themselves in their sender's order (a link has one sender), all-reduces by stage. Link
    parameters of a pair: ``link_between(system, a, b)`` (intra- or inter-node), or the ``link=``
    argument for every pair; with neither, communication is free.

    ``overlap_comm_compute`` (from the system, or the keyword argument; default True without a
    system): when True, a send runs on its link independently of compute. When False the **sender
    blocks**: its compute stream stays occupied from the end of the producing op until the message
    has arrived (including any wait for the link), like a synchronous send; the receiver only waits
    for the data, as always. Blocked time is not compute: it counts as idle in ``idle_ratio``.

Overlapped forward and backward (PyTorch's ``OVERLAP_F_B``, ``Schedule.overlapped``)
    An F of one microbatch and a B of another run together on one device. The pair runs as its F
    then its B, the B shortened by ``overlap_f_b_share · min(c_F, c_B)`` (``SystemConfig``, default 0:
    no benefit), where c_F and c_B are the transfer times of the two ops' messages (0 for an op
    that sends none): one op's communication hidden behind the other's compute, as in DeepSeek-AI,
    "DeepSeek-V3 Technical Report", 2024, §3.2.1 (DualPipe). The pair never gets shorter than its
    longer op.

Replica gradient synchronisation (Chimera)
    A stage held by several devices all-reduces its weight gradients once per step, as soon as the
    last of its ops that complete a weight gradient (B, or W where that microbatch's backward is split) has ended on
    every replica. Gradient bytes: ``StageCost.gradient_bytes`` when set, else ``param_count × 2``
    (fp16/bf16 gradients). Duration: ring all-reduce over the replicas
    (:func:`ppopt.costs.allreduce_time_s`) at the slowest link of the ring. It occupies every link of
    the ring in both directions (queued FIFO with the point-to-point messages on those links) but,
    as a simplification, not the compute streams.

Optimizer step (``optimizer=True``; default False, no optimizer step)
    Each device then updates the weights of the stages it holds, after its last op and after the
    all-reduces of its stages. The update is memory-bound: its persistent bytes are read once and
    written once, an op of ``2 · persistent_bytes`` bytes and no FLOPs timed by the system's
    ``op_time_rule`` (:func:`ppopt.costs.op_time_s`; under the default roofline
    ``2 · persistent_bytes / (memory_bandwidth · memory_efficiency) + memory_latency``), as
    :mod:`ppopt.job` times it (needs ``system``). It runs on the compute stream and counts as busy time.

Step time and idle share
    The step runs from 0 to the end of the last op, all-reduce and optimizer step.
    ``idle_ratio`` = 1 − Σ busy / (devices · step time), busy = compute (and optimizer) time.

Memory accounting (per device)
    * Activations: a microbatch's ``activation_bytes`` of a stage are stored from the *start* of its F
      until the *end* of the op that frees them: B, or W where that microbatch's backward
      is split into I and W (W needs them), except ``input_grad_release_bytes`` (the last
      stage's loss softmax less the logits' gradient W keeps), freed at the end of I. A release at the same instant as an allocation counts first (the convention of
      :func:`ppopt.table.peak_live`, with which the result agrees whenever forward times are
      positive; it is computed here by one walk along each device's order, which is faster).
      Messages in flight, activation gradients and workspace are not counted.
    * Persistent: ``persistent_bytes`` (weights + gradients + optimizer state) of every stage the
      device holds; each replica of a replicated stage counts in full on its device.
    * ``peak_memory_bytes`` = persistent + peak activation bytes.

Checks
    The schedule must be valid: :func:`prepare` checks it with :func:`ppopt.validation.validated`,
    whose flat form (:mod:`ppopt.flat`, integer ids in plain lists) the simulator runs on. A caller
    that already holds that flat form (``ppopt.evaluate`` builds it once per schedule and shares it
    with the table layer) passes it instead of the schedule and nothing is checked twice.

How it runs
    :func:`prepare` adds the messages, links and all-reduces to the flat form (reusable across costs
    and systems: ``simulate`` accepts its result in place of the schedule). The run needs no event queue
    for most messages: a device runs one op at a time, each op has at most one input from another
    device, and a directed link carries the messages of one sender only, in the sender's order, which
    is their time order. Without all-reduces, the run simply visits the ops in the topological order
    validation found (``Flat.order``), which puts every op after its inputs and a link's messages in
    their sender's order. Otherwise each device advances as far as its inputs allow, placing its
    messages on their links as it goes, and a stalled device resumes when its input is placed. Only the links an
    all-reduce shares with messages need a global time order: their messages and all-reduces go
    through a heap keyed (ready time, priority, id), popped when no device can advance. New entries
    are never earlier than the last popped one, so the result is exact, the same on every run, and
    independent of the order devices are visited. There is no global state.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from ppopt.config import LinkConfig, SystemConfig, load_system
from ppopt.costs import Costs, StageCost, allreduce_time_s, link_between, op_time_s, transfer_time_s
from ppopt.errors import ConfigError, ScheduleError
from ppopt.flat import KIND_CODE, Flat, peak_per_device
from ppopt.ir import Kind, Op, Schedule
from ppopt.validation import ScheduleValidationError, execution_order, validated

__all__ = ["Event", "Prepared", "Simulation", "busy_s", "op_duration_s", "prepare", "simulate"]

GRADIENT_BYTES_PER_PARAM = 2
"""Bytes per parameter all-reduced between replicas when ``StageCost.gradient_bytes`` is unset."""

_B, _W = KIND_CODE[Kind.B], KIND_CODE[Kind.W]
_CODE = KIND_CODE


class Event(NamedTuple):
    """One interval of the timeline.

    ``kind`` is "compute" (``what`` = the op, ``where`` = its device), "transfer" (``what`` =
    (sending op, receiving op), ``where`` = (source device, destination device)), "allreduce"
    (``what`` = the stage, ``where`` = the replica devices) or "optimizer" (``what`` = None,
    ``where`` = the device). ``bytes``: message or gradient bytes, 0 for compute and optimizer.
    """

    kind: str
    what: object
    where: object
    start_s: float
    end_s: float
    bytes: float


# --------------------------------------------------------------------------------------------------
# Preparing a schedule: integer ids, devices, messages and links (independent of costs)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Prepared:
    """A schedule flattened for the simulator: its :class:`~ppopt.flat.Flat` form plus the messages,
    links and all-reduces, which do not depend on costs; build it with :func:`prepare`."""

    flat: Flat
    arrival: list[float]  # initial input arrival per op: 0.0, or -1.0 when it waits for a message
    link_pairs: list[tuple[int, int]]  # link id -> (source device, destination device)
    link_of: list[int]  # link of op i's message
    message_keys: list[tuple[int, int, int]]  # distinct (source, destination, sender stage)
    message_of: list[int]  # index into message_keys of op i's message, or -1
    syncs: list[tuple[int, tuple[int, ...], tuple[tuple[int, int], ...], tuple[int, ...]]]
    """(stage, replica devices, ring pairs, ids of the links the all-reduce occupies)."""
    sync_of: list[int]  # index into syncs when op i completes a replicated stage's weight gradient
    shared: list[bool]  # per link: an all-reduce uses it

    @property
    def schedule(self) -> Schedule:
        return self.flat.schedule

    @property
    def size(self) -> int:
        return self.flat.size


def prepare(schedule: Schedule | Flat) -> Prepared:
    """Check and flatten ``schedule`` for :func:`simulate` (reusable across costs and systems).

    Raises :class:`ScheduleValidationError` (the validator's message) if the schedule is invalid.
    A :class:`~ppopt.flat.Flat` (from :func:`ppopt.validation.validated`) is already checked.
    """
    flat = validated(schedule)
    n, stage_of = flat.size, flat.stage
    # A message per cross-device dependency; one link per directed device pair. Messages with the same
    # (source, destination, sender stage) take the same time, computed per run from the costs.
    link_ids: dict[tuple[int, int], int] = {}

    def link_id(a: int, b: int) -> int:
        return link_ids.setdefault((a, b), len(link_ids))

    columns = flat.columns
    arrival = np.where(columns.wait < 0, 0.0, -1.0).tolist()
    # Messages numbered by their distinct (source device, destination device, sender stage), in numpy.
    devices, stages = len(flat.orders), flat.schedule.stages
    succ, dev_a = columns.succ, columns.dev
    senders = np.flatnonzero(succ >= 0)
    codes = (dev_a[senders] * devices + dev_a[succ[senders]]) * stages + columns.stage[senders]
    distinct, inverse = np.unique(codes, return_inverse=True)
    message_keys = [(c // stages // devices, c // stages % devices, c % stages) for c in distinct.tolist()]
    message_of_a = np.full(n, -1, np.int64)
    message_of_a[senders] = inverse.reshape(-1)
    message_link = np.array([link_id(a, b) for a, b, _ in message_keys] + [-1], np.int64)  # [-1]: no message
    link_of = message_link[message_of_a].tolist()
    message_of = message_of_a.tolist()

    # Replicated stages: a ring all-reduce over the distinct replica devices.
    syncs: list[tuple[int, tuple[int, ...], tuple[tuple[int, int], ...], tuple[int, ...]]] = []
    sync_index: dict[int, int] = {}
    for s, holders in enumerate(flat.schedule.placement):
        replicas = tuple(dict.fromkeys(holders))
        if len(replicas) < 2:
            continue
        ring = tuple((replicas[r], replicas[(r + 1) % len(replicas)]) for r in range(len(replicas)))
        occupied = tuple(dict.fromkeys([link_id(a, b) for a, b in ring] + [link_id(b, a) for a, b in ring]))
        sync_index[s] = len(syncs)
        syncs.append((s, replicas, ring, occupied))
    sync_of = [-1] * n
    if syncs:  # a microbatch's weight gradient completes at its B, or its W where its backward is split
        sync_of = [sync_index.get(s, -1) if k in (_B, _W) else -1 for s, k in zip(stage_of, flat.kind)]
    shared = [False] * len(link_ids)
    for *_, occupied in syncs:
        for lid in occupied:
            shared[lid] = True
    return Prepared(flat, arrival, list(link_ids), link_of, message_keys, message_of, syncs, sync_of, shared)


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------


class _Run(NamedTuple):
    """Raw results in op ids; the :class:`Simulation` builds its views from them."""

    prepared: Prepared
    start: list[float]
    end: list[float]
    sent: list[float]  # when op i's message started on its link
    arrived: list[float]  # when it arrived
    send_bytes: list[float]  # per stage
    allreduces: list[Event]
    optimizer: list[Event]


@dataclass(frozen=True)
class Simulation:
    """The result of :func:`simulate`. Per-device tuples are indexed by device.

    ``timeline``, ``start_s`` and ``end_s`` are built on first access. Times are in the costs'
    unit (seconds; slots with unit costs), memory in theirs (bytes; activation units with unit
    costs).
    """

    step_time_s: float
    """From 0 to the end of the last op, gradient all-reduce or optimizer step."""
    idle_ratio: float
    """1 − Σ busy_s / (devices · step_time_s)."""
    busy_s: tuple[float, ...]
    """Compute (and optimizer) time per device."""
    peak_activation_bytes: tuple[float, ...]
    """Largest sum of live activations per device."""
    persistent_bytes: tuple[float, ...]
    """Weights, gradients and optimizer state per device."""
    peak_memory_bytes: tuple[float, ...]
    """persistent + peak activation per device."""
    _run: _Run | None = field(repr=False, compare=False)

    @property
    def devices(self) -> int:
        return len(self.busy_s)

    def summary(self) -> Simulation:
        """This simulation's figures without its per-op times: what a report of many schedules keeps
        (the per-op arrays and the flat form they index are about 500 bytes per op: ``compare`` at
        64 x 2,048 with a model held 3.4 GB for 14 families, against 0.4 GB in unit mode)."""
        return replace(self, _run=None)

    @property
    def _times(self) -> _Run:
        if self._run is None:
            raise ValueError("this simulation keeps only its figures (Simulation.summary): simulate the schedule again for its op times")
        return self._run

    @property
    def max_peak_memory_bytes(self) -> float:
        """Peak memory of the worst device."""
        return max(self.peak_memory_bytes, default=0.0)

    def op_times(self) -> tuple[Sequence[Op], Sequence[int], Sequence[float], Sequence[float]]:
        """Every op with its device, start and end (the costs' unit: seconds, or slots in unit mode),
        as four parallel sequences: what :attr:`start_s` and :attr:`end_s` hold, without building
        dictionaries keyed by op (a second at hundreds of thousands of ops)."""
        run = self._times
        flat = run.prepared.flat
        return flat.ops, flat.dev, run.start, run.end

    def device_starts(self) -> list[Sequence[float]]:
        """Start times, one list per device in that device's order (the ops are numbered device after
        device, :mod:`ppopt.flat`): :attr:`start_s` without the dictionary."""
        run = self._times
        return [run.start[ids.start:ids.stop] for ids in run.prepared.flat.orders]

    @cached_property
    def start_s(self) -> dict[Op, float]:
        """Start time of every op."""
        return dict(zip(self._times.prepared.flat.ops, self._times.start))

    @cached_property
    def end_s(self) -> dict[Op, float]:
        """End time of every op."""
        return dict(zip(self._times.prepared.flat.ops, self._times.end))

    @cached_property
    def timeline(self) -> tuple[Event, ...]:
        """Every compute, transfer, all-reduce and optimizer interval, sorted by start time (stable)."""
        run = self._times
        plan = run.prepared
        flat = plan.flat
        ops, succ, n = flat.ops, flat.succ, flat.size
        events = list(map(Event, ["compute"] * n, ops, flat.dev, run.start, run.end, [0.0] * n))
        events += [
            Event("transfer", (ops[i], ops[j]), plan.link_pairs[plan.link_of[i]], run.sent[i], run.arrived[i],
                  run.send_bytes[flat.stage[i]])
            for i, j in enumerate(succ)
            if j >= 0
        ]
        events += run.allreduces
        events += run.optimizer
        events.sort(key=itemgetter(3))
        return tuple(events)

    def events(self, kind: str) -> list[Event]:
        """The timeline's events of one kind: "compute", "transfer", "allreduce" or "optimizer"."""
        return [e for e in self.timeline if e.kind == kind]


def _durations(stage: StageCost) -> tuple[float, float, float, float]:
    """Durations indexed by op-kind code (F, B, I, W)."""
    return (stage.forward_s, stage.backward_s, stage.input_grad_s, stage.weight_grad_s)


def op_duration_s(op: Op, costs: Costs) -> float:
    """Compute time of ``op`` from its stage's costs, in the costs' unit (seconds, or slots)."""
    return _durations(costs.stages[op.stage])[_CODE[op.kind]]


def busy_s(schedule: Schedule, costs: Costs) -> tuple[float, ...]:
    """Compute time per device: the sum of its ops' durations (without an optimizer step), in the
    costs' unit (seconds, or slots)."""
    table = [_durations(c) for c in costs.stages]
    return tuple(float(sum(table[op.stage][_CODE[op.kind]] for op in order)) for order in schedule.orders)


def _gradient_bytes(stage: StageCost) -> float:
    explicit = getattr(stage, "gradient_bytes", 0.0)
    return float(explicit) if explicit else stage.param_count * GRADIENT_BYTES_PER_PARAM


def _link_chooser(system: SystemConfig | None, link: LinkConfig | None) -> Callable[[int, int], LinkConfig | None]:
    if link is not None:
        return lambda a, b: link
    if system is not None:
        return lambda a, b: link_between(system, a, b)
    return lambda a, b: None  # free communication


# --------------------------------------------------------------------------------------------------
# The simulation
# --------------------------------------------------------------------------------------------------


class _Times(NamedTuple):
    """The run's mutable state in op, device and link ids, filled in place by the two run loops."""

    start: list[float]
    end: list[float]
    sent: list[float]  # when op i's message started on its link
    arrived: list[float]  # when it arrived
    arrival: list[float]  # when op i's input is there; -1: not yet known
    free: list[float]  # when each device's compute stream is next free
    link_free: list[float]  # when each link is next free

    @classmethod
    def at_zero(cls, plan: Prepared) -> _Times:
        n, devices = plan.size, len(plan.flat.orders)
        return cls([0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n, plan.arrival[:], [0.0] * devices,
                   [0.0] * len(plan.link_pairs))


class _RunCosts(NamedTuple):
    """The costs of one run, per op id (``dur``, ``message_s``, ``occupy_s``) and per all-reduce."""

    dur: list[float]  # compute time of op i, the overlap rule applied
    message_s: list[float]  # transfer time of op i's message (0 if it sends none)
    occupy_s: list[float]  # how long op i's message holds its link: bytes / bandwidth
    sync_s: list[float]  # duration of each all-reduce of ``Prepared.syncs``
    send_bytes: list[float]  # per stage
    gradient_bytes: list[float]  # per stage: what its replicas all-reduce


def _run_costs(plan: Prepared, costs: Costs, system: SystemConfig | None,
               choose_link: Callable[[int, int], LinkConfig | None]) -> _RunCosts:
    """Op durations, message and all-reduce times of ``plan`` under ``costs`` (the module doc's rules)."""
    flat = plan.flat
    table = [t for c in costs.stages for t in _durations(c)]  # indexed by 4 * stage + kind
    dur = list(map(table.__getitem__, flat.stage_kind))
    send_bytes = [c.send_bytes for c in costs.stages]
    message_times, occupancy_times = [], []
    for a, b, s in plan.message_keys:
        chosen = choose_link(a, b)
        message_times.append(transfer_time_s(send_bytes[s], chosen) if chosen is not None else 0.0)
        occupancy_times.append(send_bytes[s] / chosen.bandwidth_bytes_per_s if chosen is not None else 0.0)
    message_times.append(0.0)  # index -1: ops that send nothing
    occupancy_times.append(0.0)
    message_s = list(map(message_times.__getitem__, plan.message_of))
    occupy_s = list(map(occupancy_times.__getitem__, plan.message_of))
    share = system.overlap_f_b_share if system is not None else 0.0
    for f, b in flat.overlapped if share > 0 else ():  # the overlap rule (module docstring)
        dur[b] -= min(share * min(message_s[f], message_s[b]), dur[f], dur[b])
    gradient_bytes = [_gradient_bytes(c) for c in costs.stages]
    sync_s = []
    for s, replicas, ring, _ in plan.syncs:
        ring_links = [choose_link(a, b) for a, b in ring]
        sync_s.append(max((allreduce_time_s(gradient_bytes[s], c, len(replicas)) for c in ring_links if c is not None),
                          default=0.0) if None not in ring_links else 0.0)
    return _RunCosts(dur, message_s, occupy_s, sync_s, send_bytes, gradient_bytes)


def _run_in_order(plan: Prepared, run: _RunCosts, overlap: bool, times: _Times) -> None:
    """The run when no link carries an all-reduce: ops in ``flat.order``, filling ``times`` in place.

    Exact, the same result as the general loop: an op's inputs (its device's previous op, its one
    message) come earlier in a topological order, and a link's messages come from one sender, so the
    order visits them in the sender's order, the order in which they take the link.
    """
    start, end, sent, arrived, arrival, free, link_free = times
    dur, message_s, occupy_s = run.dur, run.message_s, run.occupy_s
    flat = plan.flat
    dev, succ, link_of = flat.dev, flat.succ, plan.link_of
    for i in flat.order:
        d = dev[i]
        t = free[d]
        if arrival[i] > t:
            t = arrival[i]
        start[i] = t
        t += dur[i]
        end[i] = t
        j = succ[i]
        if j >= 0:  # send op i's message to op j
            lid = link_of[i]
            sent[i] = ts = link_free[lid] if link_free[lid] > t else t
            link_free[lid] = ts + occupy_s[i]
            arrived[i] = arrival[j] = te = ts + message_s[i]
            if not overlap:
                t = te  # the sender blocks until the message has arrived
        free[d] = t


def _run_through_heap(plan: Prepared, run: _RunCosts, overlap: bool,
                      times: _Times) -> list[Event] | None:
    """The general run (the module doc's "How it runs"): each device advances as far as its inputs
    allow; messages and all-reduces on links an all-reduce shares go through a heap in global time
    order. Fills ``times`` in place and returns the all-reduces, or None when some device's ops never
    became ready (a deadlocking order)."""
    start, end, sent, arrived, arrival, free, link_free = times
    dur, message_s, occupy_s, sync_s = run.dur, run.message_s, run.occupy_s, run.sync_s
    flat = plan.flat
    dev, succ, link_of, shared, sync_of = flat.dev, flat.succ, plan.link_of, plan.shared, plan.sync_of
    p = len(flat.orders)
    nxt = [o.start for o in flat.orders]  # next op id per device
    stop = [o.stop for o in flat.orders]
    held = [False] * p  # blocked on a message in the heap (sender blocks)
    remaining = [0] * len(plan.syncs)
    sync_ready = [0.0] * len(plan.syncs)
    for x in sync_of:
        if x >= 0:
            remaining[x] += 1
    allreduces: list[Event] = []
    heap: list[tuple[float, int, int]] = []  # (ready time, 0 message of op id | 1 all-reduce index, id)
    push, pop = heapq.heappush, heapq.heappop
    resume = list(range(p - 1, -1, -1))  # devices to advance

    while True:
        # Advance devices as far as their inputs allow.
        while resume:
            d = resume.pop()
            if held[d]:
                continue
            i, last, t = nxt[d], stop[d], free[d]
            while i < last:
                ready = arrival[i]
                if ready < 0.0:
                    break  # waiting for a message
                if ready > t:
                    t = ready
                start[i] = t
                t += dur[i]
                end[i] = t
                x = sync_of[i]
                if x >= 0:  # a weight gradient of a replicated stage is complete
                    if t > sync_ready[x]:
                        sync_ready[x] = t
                    remaining[x] -= 1
                    if remaining[x] == 0:
                        push(heap, (sync_ready[x], 1, x))
                j = succ[i]
                if j >= 0:  # send op i's message to op j
                    lid = link_of[i]
                    if shared[lid]:  # placed in global time order, through the heap
                        push(heap, (t, 0, i))
                        if not overlap:
                            held[d] = True
                            i += 1
                            break
                    else:
                        sent[i] = ts = link_free[lid] if link_free[lid] > t else t
                        link_free[lid] = ts + occupy_s[i]
                        arrived[i] = arrival[j] = te = ts + message_s[i]
                        if not overlap:
                            t = te
                        if nxt[dev[j]] == j:
                            resume.append(dev[j])
                i += 1
            nxt[d], free[d] = i, t
        if not heap:
            break
        # No device can advance: place the earliest message or all-reduce on a shared link.
        ready, what, x = pop(heap)
        if what == 1:
            s, replicas, _, occupied = plan.syncs[x]
            ts = max([ready] + [link_free[lid] for lid in occupied])
            for lid in occupied:
                link_free[lid] = ts + sync_s[x]
            allreduces.append(Event("allreduce", s, replicas, ts, ts + sync_s[x], run.gradient_bytes[s]))
            continue
        lid, j, d = link_of[x], succ[x], dev[x]
        sent[x] = ts = link_free[lid] if link_free[lid] > ready else ready
        link_free[lid] = ts + occupy_s[x]
        arrived[x] = arrival[j] = te = ts + message_s[x]
        if not overlap:
            free[d] = te
            held[d] = False
            resume.append(d)
        resume.append(dev[j])
    return allreduces if nxt == stop else None


def simulate(
    schedule: Schedule | Flat | Prepared,
    costs: Costs,
    system: SystemConfig | None = None,
    *,
    link: LinkConfig | None = None,
    overlap_comm_compute: bool | None = None,
    optimizer: bool = False,
) -> Simulation:
    """Simulate one training step of ``schedule`` with ``costs`` on ``system`` (see the module doc).

    Args:
        schedule: a valid schedule, its :class:`~ppopt.flat.Flat` form, or :func:`prepare`'s result
            for it (to simulate one schedule under many costs or systems without flattening it again).
        costs: per-stage costs, one entry per stage of the schedule.
        system: links (``link_between``), ``overlap_comm_compute`` and, for the optimizer step,
            memory bandwidth and latency. None: communication is free unless ``link`` is given.
        link: one link used between every pair of devices (overrides the system's links).
        overlap_comm_compute: overrides the system's setting (True when there is no system).
        optimizer: add a memory-bound optimizer step per device at the end (needs ``system``).

    Raises:
        ScheduleValidationError: an invalid schedule or a deadlocking order (the message names
            what each device waits for).
        ScheduleError: ``costs`` does not match the schedule's stages, or ``optimizer`` without a
            system.
    """
    if not isinstance(costs, Costs):
        raise ConfigError(f"must be the stages' Costs (ppopt.costs), got {costs!r:.60}", field="costs")
    if system is not None and not isinstance(system, SystemConfig):  # a preset name or file, as every command takes
        system = load_system(system)
    plan = schedule if isinstance(schedule, Prepared) else prepare(schedule)
    flat = plan.flat
    schedule = flat.schedule
    if len(costs.stages) != schedule.stages:
        raise ScheduleError(f"costs describe {len(costs.stages)} stages, the schedule has {schedule.stages}")
    if optimizer and system is None:
        raise ScheduleError("the optimizer step needs a system (memory bandwidth)")
    overlap = overlap_comm_compute
    if overlap is None:
        overlap = system.overlap_comm_compute if system is not None else True
    run = _run_costs(plan, costs, system, _link_chooser(system, link))
    times = _Times.at_zero(plan)
    if any(plan.shared):
        allreduces = _run_through_heap(plan, run, overlap, times)
        if allreduces is None:
            execution_order(schedule)  # raises, naming what each device waits for
            raise ScheduleValidationError("deadlock: some ops never became ready")  # pragma: no cover
    else:  # no all-reduce: visit the ops in the validated topological order
        _run_in_order(plan, run, overlap, times)
        allreduces = []

    p = schedule.devices
    stages_on = schedule.stages_by_device()
    persistent = tuple(float(sum(costs.stages[s].persistent_bytes for s in stages_on[d])) for d in range(p))
    busy = [float(sum(run.dur[o.start : o.stop])) for o in flat.orders]
    sync_end = {e.what: e.end_s for e in allreduces}
    steps, lengths = _optimizer_steps(system, times.free, sync_end, stages_on, persistent) if optimizer and system else ([], [])
    for d, length in enumerate(lengths):  # one per device, in device order
        busy[d] += length
    last_ends = [times.end[o.stop - 1] for o in flat.orders if o]  # a device's ops end in its order
    step = max([0.0, *last_ends, *sync_end.values(), *(e.end_s for e in steps)])
    idle = 1.0 - sum(busy) / (p * step) if step > 0 else 0.0
    peaks = tuple(peak_per_device(flat, [c.activation_bytes for c in costs.stages], [c.input_grad_release_bytes for c in costs.stages]))

    return Simulation(
        step_time_s=step,
        idle_ratio=idle,
        busy_s=tuple(busy),
        peak_activation_bytes=peaks,
        persistent_bytes=persistent,
        peak_memory_bytes=tuple(a + b for a, b in zip(peaks, persistent)),
        _run=_Run(plan, times.start, times.end, times.sent, times.arrived, run.send_bytes, allreduces, steps),
    )


def _optimizer_steps(system: SystemConfig, free: list[float], sync_end: dict[object, float],
                     stages_on: Sequence[Sequence[int]], persistent: tuple[float, ...]) -> tuple[list[Event], list[float]]:
    """One memory-bound optimizer step per device (the module doc), after its last op (``free``) and
    the all-reduces of its stages (``sync_end`` by stage): ``persistent`` bytes read and written once.
    Returns the steps and their lengths in seconds, one per device."""
    steps, lengths = [], []
    for d, held in enumerate(stages_on):
        ready = max([free[d]] + [sync_end[s] for s in held if s in sync_end])
        length = op_time_s(0.0, 2 * persistent[d], system)  # as ppopt.job times the step
        steps.append(Event("optimizer", None, d, ready, ready + length, 0.0))
        lengths.append(length)
    return steps, lengths
