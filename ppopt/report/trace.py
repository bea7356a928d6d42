"""A simulated step as a Chrome trace (``chrome://tracing``, https://ui.perfetto.dev).

:func:`chrome_trace` turns a :class:`~ppopt.simulate.Simulation` into the Trace Event Format:

* one process per device (``pid`` = device, named "device d"), with a ``compute`` thread (tid 0)
  and a ``comm`` thread (tid 1). Perfetto cannot draw overlapping slices on one track, so when a
  device's communication overlaps itself (messages to both neighbours at once, an all-reduce beside
  a message) the extra slices go to further lanes "comm 2" (tid 2), "comm 3" ... as needed;
* one complete event (``ph: "X"``) per op on the compute thread: ``name`` is the PyTorch action
  string (``3F12``, as PyTorch's profiler labels ``PP:3F12``), ``cat`` the kind (F, B, I, W),
  ``args`` its stage, microbatch and kind, plus ``overlapped_with`` (the other op's action string)
  for the two ops of an overlapped F&B pair (``Schedule.overlapped``); the optimizer step (when simulated) is an "optimizer"
  slice there too;
* one complete event per point-to-point message on the sender's comm thread, named
  ``send 3F12→4F12`` (sending op → receiving op), from when it starts on its link to its arrival;
  its ``args`` name both devices and ops and the message's ``bytes`` (null in unit mode, whose
  messages have a duration and no size); a flow arrow joins it to the receiving op: ``ph: "s"`` at the send's start on the sender's comm
  thread and ``ph: "f"`` (``bp: "e"``) on the receiver's compute thread at the receiving op's
  start, which is the arrival or later if the receiver was busy (binding the arrow's head to the
  op that consumes the message, not to whatever the receiver was running when it arrived; the
  arrival time itself is the send slice's end and is in its ``args``);
* one complete event per all-reduce (replicated stages, Chimera) on the comm thread of each
  replica device;
* a counter (``ph: "C"``) "live activation bytes" per device ("live activations (1/p model
  shares)" in unit mode, where the simulator counts activations, not bytes), updated at every F start and every
  end of an op that frees activations (B, or W when backward is split, and I for the part W does not
  need: :func:`ppopt.table.activation_changes`), a release counted before
  an allocation at the same instant (the simulator's convention), so its maximum is
  ``simulation.peak_activation_bytes``.

Times: ``ts`` and ``dur`` are microseconds. Simulator times are seconds (``time_unit="s"``); in unit
mode (``time_unit="slots"``) one slot is drawn as one millisecond, so the viewer's "ms" reads as
slots (recorded in ``otherData``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from ppopt.costs import Costs
from ppopt.errors import ConfigError, ScheduleError
from ppopt.flat import paused_gc
from ppopt.ir import Kind, Op, Schedule
from ppopt.simulate import Simulation

__all__ = ["MAX_TRACE_OPS", "TRACE_TIME_SCALE", "check_trace_size", "chrome_trace", "trace_time_s"]

MAX_TRACE_OPS = 500_000
"""The most ops a trace holds, so that an export finishes within about half a minute and a few GB.
Each op takes about 5 KB while the trace is built and about 0.6 KB of JSON: on this project's 2-core
machine `export -s 1f1b --unit` to a trace at 60 x 4,096 (491,520 ops) took 19.5 s and 2.3 GB and
wrote 285 MB (`benchmarks/json_output.py`). Perfetto's UI loads a JSON trace into the browser's
memory."""


TRACE_S_PER_OP = 5e-5
"""Wall time per op of building and writing a trace, generously (19.5 s at 491,520 ops, see
:data:`MAX_TRACE_OPS`: 4e-5 s)."""


def trace_time_s(ops: int) -> float:
    """Seconds a trace of ``ops`` ops may take to build and write: what a command with a time limit
    keeps for it after its search."""
    return TRACE_S_PER_OP * ops


def check_trace_size(ops: int) -> None:
    """ScheduleError for a trace of more than :data:`MAX_TRACE_OPS` ops, before the work that makes it."""
    if ops > MAX_TRACE_OPS:
        raise ScheduleError(f"a trace of {ops:,} ops would take gigabytes to build and to load; it holds at most "
                            f"{MAX_TRACE_OPS:,}: use fewer microbatches, or export torch-csv")

TRACE_TIME_SCALE = {"s": 1e6, "slots": 1e3}
"""Microseconds per time unit in the trace: a second is 1e6 µs; a unit slot is drawn as 1 ms."""

COMPUTE_TID = 0
COMM_TID = 1


def _lanes(intervals: Iterable[tuple[float, float]]) -> list[int]:
    """Greedy lane per interval (in the given order, which must be by start) so none overlap."""
    lane_end: list[float] = []
    lanes = []
    for start, end in intervals:
        lane = next((i for i, busy_until in enumerate(lane_end) if busy_until <= start), len(lane_end))
        if lane == len(lane_end):
            lane_end.append(start)
        lane_end[lane] = max(end, start)
        lanes.append(lane)
    return lanes


COUNTER_NAMES = {"s": ("live activation bytes", "bytes"), "slots": ("live activations (1/p model shares)", "activations")}
"""The activation counter's name and argument per time unit: unit costs count activations of a 1/p
share of the model (a chunk of a multi-stage device is a fraction of one), not bytes."""


def _activation_counters(schedule: Schedule, simulation: Simulation, costs: Costs, scale: float, time_unit: str) -> list[dict]:
    from ppopt.table import activation_changes

    name, key = COUNTER_NAMES[time_unit]
    changes = activation_changes(schedule, simulation.start_s, simulation.end_s, lambda s: costs.stages[s].activation_bytes,
                                 lambda s: costs.stages[s].input_grad_release_bytes)
    events = []
    for device, device_changes in enumerate(changes):
        values: dict[float, float] = {0.0: 0.0}  # timestamp -> level after every change at it
        live = 0.0
        for t, _, change in device_changes:
            live += change
            values[t] = live
        for t, level in values.items():
            events.append(
                {"name": name, "ph": "C", "pid": device, "tid": COMPUTE_TID, "ts": t * scale, "args": {key: level}}
            )
    return events


def chrome_trace(schedule: Schedule, simulation: Simulation, costs: Costs, time_unit: str = "s") -> dict:
    """The Chrome trace of a simulated step (see the module docstring).

    Args:
        schedule: the schedule that was simulated.
        simulation: :func:`ppopt.simulate.simulate`'s result for it.
        costs: the costs it was simulated with (activation bytes for the memory counters).
        time_unit: ``"s"`` (simulator seconds) or ``"slots"`` (unit mode, a slot drawn as 1 ms).

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``, ready for
        :func:`ppopt.io.write_json`.
    """
    if time_unit not in TRACE_TIME_SCALE:
        raise ConfigError(f"must be one of {', '.join(TRACE_TIME_SCALE)}, got {time_unit!r}", field="time_unit")
    if not isinstance(schedule, Schedule):
        raise ConfigError(f"must be a Schedule, got {schedule!r:.60}", field="schedule")
    if not isinstance(simulation, Simulation):
        raise ConfigError(f"must be a Simulation (ppopt.simulate.simulate), got {simulation!r:.60}", field="simulation")
    try:
        simulated, _, _, _ = simulation.op_times()
    except ValueError as error:  # a summary keeps no op times
        raise ConfigError(str(error), field="simulation") from None
    if len(simulated) != schedule.op_count or len(simulation.busy_s) != schedule.devices:  # a trace of one, labelled as the other
        raise ConfigError(f"is not of {schedule.name} ({schedule.devices} devices, {schedule.op_count:,} ops): it simulated "
                          f"{len(simulation.busy_s)} devices and {len(simulated):,} ops", field="simulation")
    check_trace_size(schedule.op_count)
    with paused_gc():  # millions of small dicts, no cycles: the collector would only walk them
        return _trace(schedule, simulation, costs, time_unit)


def _trace(schedule: Schedule, simulation: Simulation, costs: Costs, time_unit: str) -> dict:
    scale = TRACE_TIME_SCALE[time_unit]
    p = schedule.devices
    events: list[dict] = []

    def message_bytes(size: float) -> float | None:
        """A message's bytes; null in unit mode, whose messages have a duration and no size."""
        return size if time_unit == "s" else None

    name = {op: str(op) for op in schedule.ops()}  # each op's action string, made once (an op is named up to 3 times)
    letter = {kind: kind.value for kind in Kind}
    partner = {a: b for f, b in schedule.overlapped for a, b in ((f, b), (b, f))}
    for event in simulation.events("compute"):
        op = cast(Op, event.what)
        kind = letter[op.kind]
        args: dict[str, object] = {"stage": op.stage, "microbatch": op.microbatch, "kind": kind}
        if op in partner:
            args["overlapped_with"] = name[partner[op]]
        events.append(
            {"name": name[op], "cat": kind, "ph": "X", "pid": event.where, "tid": COMPUTE_TID,
             "ts": event.start_s * scale, "dur": (event.end_s - event.start_s) * scale, "args": args}
        )
    for event in simulation.events("optimizer"):
        events.append(
            {"name": "optimizer", "cat": "optimizer", "ph": "X", "pid": event.where, "tid": COMPUTE_TID,
             "ts": event.start_s * scale, "dur": (event.end_s - event.start_s) * scale, "args": {}}
        )

    # Communication slices, per device, laid on as few non-overlapping comm lanes as needed.
    comm: list[list[tuple[float, float, dict, dict | None]]] = [[] for _ in range(p)]
    start_s = simulation.start_s
    for flow_id, event in enumerate(simulation.events("transfer"), start=1):
        sender, receiver = cast(tuple[Op, Op], event.what)
        source, destination = cast(tuple[int, int], event.where)
        slice_ = {
            "name": f"send {name[sender]}→{name[receiver]}", "cat": "transfer", "ph": "X", "pid": source,
            "ts": event.start_s * scale, "dur": (event.end_s - event.start_s) * scale,
            "args": {"from_device": source, "to_device": destination, "bytes": message_bytes(event.bytes),
                     "sending_op": name[sender], "receiving_op": name[receiver],
                     "arrival": event.end_s * scale},
        }
        message: dict[str, float] = {"id": flow_id, "start": event.start_s * scale, "receiver": destination,
                                         "head": max(start_s[receiver], event.end_s) * scale}
        comm[source].append((event.start_s, event.end_s, slice_, message))
    for event in simulation.events("allreduce"):
        ring = cast(tuple[int, ...], event.where)
        for device in ring:
            slice_ = {
                "name": f"all-reduce stage {event.what}", "cat": "allreduce", "ph": "X", "pid": device,
                "ts": event.start_s * scale, "dur": (event.end_s - event.start_s) * scale,
                "args": {"stage": event.what, "devices": list(ring), "bytes": message_bytes(event.bytes)},
            }
            comm[device].append((event.start_s, event.end_s, slice_, None))

    lanes_used = [1] * p
    for device, slices in enumerate(comm):
        slices.sort(key=lambda item: (item[0], item[1]))
        for lane, (_, _, piece, link_flow) in zip(_lanes((a, b) for a, b, _, _ in slices), slices):
            tid = COMM_TID + lane
            lanes_used[device] = max(lanes_used[device], lane + 1)
            piece["tid"] = tid
            events.append(piece)
            if link_flow is not None:
                events.append({"name": "message", "cat": "transfer", "ph": "s", "id": link_flow["id"],
                               "pid": device, "tid": tid, "ts": link_flow["start"]})
                events.append({"name": "message", "cat": "transfer", "ph": "f", "bp": "e", "id": link_flow["id"],
                               "pid": link_flow["receiver"], "tid": COMPUTE_TID, "ts": link_flow["head"]})

    events += _activation_counters(schedule, simulation, costs, scale, time_unit)
    events.sort(key=lambda e: e["ts"])

    metadata: list[dict] = []
    for device in range(p):
        metadata.append({"name": "process_name", "ph": "M", "pid": device, "tid": 0, "ts": 0, "args": {"name": f"device {device}"}})
        metadata.append({"name": "process_sort_index", "ph": "M", "pid": device, "tid": 0, "ts": 0, "args": {"sort_index": device}})
        metadata.append({"name": "thread_name", "ph": "M", "pid": device, "tid": COMPUTE_TID, "ts": 0, "args": {"name": "compute"}})
        for lane in range(lanes_used[device]):
            label = "comm" if lane == 0 else f"comm {lane + 1}"
            metadata.append({"name": "thread_name", "ph": "M", "pid": device, "tid": COMM_TID + lane, "ts": 0, "args": {"name": label}})
            metadata.append({"name": "thread_sort_index", "ph": "M", "pid": device, "tid": COMM_TID + lane, "ts": 0, "args": {"sort_index": COMM_TID + lane}})

    return {
        "traceEvents": metadata + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "schedule": schedule.name,
            "devices": p,
            "microbatches": schedule.microbatches,
            "stages": schedule.stages,
            "time_unit": "s" if time_unit == "s" else "slots (1 slot shown as 1 ms)",
            "step_time": simulation.step_time_s,
            "idle_ratio": simulation.idle_ratio,
        },
    }
