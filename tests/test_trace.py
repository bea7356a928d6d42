"""Chrome trace of a simulated step: every op once, busy time kept, one flow per message, counters."""

import json
from collections import Counter

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.generators import generate
from ppopt.io import write_json
from ppopt.report.trace import _lanes, chrome_trace
from ppopt.simulate import simulate
from ppopt.solve.instance import InstanceSpec
from ppopt.units import UnitCosts


def simulated(name, p, m, comm=0.5, **options):
    schedule = generate(name, p, m, **options)
    instance = InstanceSpec(p, m, units=UnitCosts(comm=comm)).instance(schedule.stages, schedule.stage_weights)
    return schedule, simulate(schedule, instance.costs, instance.system), instance.costs


CASES = [  # comm = 2 slots makes devices talk to both neighbours at once: extra comm lanes
    ("1f1b", 4, 8, 0.5), ("zb-v", 4, 8, 0.5), ("zb-v", 4, 8, 2.0), ("interleaved-1f1b", 4, 8, 2.0),
    ("chimera", 4, 4, 2.0), ("hanayo", 4, 4, 0.5),
]


@pytest.mark.parametrize("name,p,m,comm", CASES)
def test_trace_of_a_four_device_step_with_communication(name, p, m, comm):
    schedule, simulation, costs = simulated(name, p, m, comm)
    trace = chrome_trace(schedule, simulation, costs, time_unit="slots")
    events = trace["traceEvents"]
    assert trace["displayTimeUnit"] == "ms"
    json.loads(json.dumps(trace, allow_nan=False))  # valid, strict JSON

    # processes and threads
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert processes == {d: f"device {d}" for d in range(p)}
    for d in range(p):
        assert names[d, 0] == "compute" and names[d, 1] == "comm"

    # every simulated op exactly once, as an X event on its device's compute thread
    compute = [e for e in events if e["ph"] == "X" and e["tid"] == 0 and e["cat"] in "FBIW"]
    assert Counter(e["name"] for e in compute) == Counter(str(op) for op in schedule.ops())
    for e in compute:
        assert set(e) >= {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}
        assert e["args"]["kind"] == e["cat"] and f"{e['args']['stage']}{e['cat']}{e['args']['microbatch']}" == e["name"]

    # per device, compute durations add up to the simulated busy time (µs; 1 slot = 1 ms)
    for d in range(p):
        total = sum(e["dur"] for e in compute if e["pid"] == d)
        assert total == pytest.approx(simulation.busy_s[d] * 1e3, rel=1e-6)
        starts = {str(op): simulation.start_s[op] * 1e3 for op in schedule.orders[d]}
        assert all(e["ts"] == pytest.approx(starts[e["name"]]) for e in compute if e["pid"] == d)

    # one flow (s + f with a shared id) per transfer; s on the sender's comm lane, f on the receiver's compute
    transfers = simulation.events("transfer")
    sends = [e for e in events if e["ph"] == "X" and e["cat"] == "transfer"]
    assert len(sends) == len(transfers) > 0
    assert all(e["name"].startswith("send ") and "→" in e["name"] for e in sends)
    starts_ = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts_) == len(finishes) == len(transfers) and set(starts_) == set(finishes)
    for flow_id, f in finishes.items():
        s = starts_[flow_id]
        assert f["bp"] == "e" and f["tid"] == 0 and s["tid"] >= 1 and f["ts"] >= s["ts"]
    comm_lanes = {(e["pid"], e["tid"]) for e in sends}
    assert all(tid >= 1 and (pid, tid) in names for pid, tid in comm_lanes)
    if comm == 2.0:
        assert max(tid for _, tid in comm_lanes) >= 2 and "comm 2" in names.values()

    # no two slices overlap on one thread (Perfetto cannot draw that)
    by_thread = {}
    for e in events:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for slices in by_thread.values():
        slices.sort()
        assert all(a_end <= b_start + 1e-9 for (_, a_end), (b_start, _) in zip(slices, slices[1:]))

    # live activation counters peak at the simulator's peaks; unit costs count activations, not bytes
    for d in range(p):
        levels = [e["args"]["activations"] for e in events if e["ph"] == "C" and e["pid"] == d]
        assert levels[-1] == 0 and min(levels) >= 0  # all freed by the end of the step
        assert max(levels) == pytest.approx(simulation.peak_activation_bytes[d])
        assert all(e["name"] == "live activations (1/p model shares)" for e in events if e["ph"] == "C")


def test_allreduces_of_replicated_stages_are_on_the_comm_threads():
    schedule, simulation, costs = simulated("chimera", 4, 4)
    events = chrome_trace(schedule, simulation, costs, "slots")["traceEvents"]
    allreduce = [e for e in events if e.get("cat") == "allreduce"]
    assert len(allreduce) == sum(len(e.where) for e in simulation.events("allreduce")) == 8
    assert all(e["tid"] >= 1 and e["name"].startswith("all-reduce stage ") for e in allreduce)
    # unit mode's messages have a duration and no size: their bytes are null, not a placeholder
    assert all(e["args"]["bytes"] is None for e in events if e.get("cat") in ("allreduce", "transfer") and e["ph"] == "X")


def test_modelled_step_is_in_microseconds(tmp_path):
    schedule = generate("1f1b", 4, 4)
    instance = InstanceSpec(4, 4, model="llama3-8b", system="dgx-h100").instance(schedule.stages, None)
    simulation = simulate(schedule, instance.costs, instance.system, optimizer=True)
    trace = chrome_trace(schedule, simulation, instance.costs)
    events = trace["traceEvents"]
    assert max(e["ts"] + e.get("dur", 0) for e in events) == pytest.approx(simulation.step_time_s * 1e6)
    assert sum(e["name"] == "optimizer" for e in events) == 4
    sends = [e for e in events if e.get("cat") == "transfer" and e["ph"] == "X"]  # a modelled message's bytes: one microbatch's activations
    assert sends and all(e["args"]["bytes"] == instance.costs.stages[0].send_bytes for e in sends)
    counters = [e for e in events if e["ph"] == "C"]  # a modelled step counts bytes
    assert counters and all(e["name"] == "live activation bytes" and set(e["args"]) == {"bytes"} for e in counters)
    path = write_json(trace, tmp_path / "trace.json")
    assert json.loads(path.read_text())["otherData"]["schedule"] == "1f1b"


def test_modelled_counters_free_the_part_a_split_backward_frees_at_i():
    """ZB-H1 on llama3-8b: the last stage's loss softmax goes at each I; each device's counter peaks
    at the simulator's peak (freed whole at W, the last device's counter rose above it)."""
    schedule = generate("zb-h1", 4, 8)
    instance = InstanceSpec(4, 8, model="llama3-8b", system="dgx-h100", global_batch=32).instance(schedule.stages, None)
    assert instance.costs.stages[-1].input_grad_release_bytes > 0
    simulation = simulate(schedule, instance.costs, instance.system)
    events = chrome_trace(schedule, simulation, instance.costs)["traceEvents"]
    for d in range(4):
        levels = [e["args"]["bytes"] for e in events if e["ph"] == "C" and e["pid"] == d]
        assert max(levels) == pytest.approx(simulation.peak_activation_bytes[d], rel=1e-12)


def test_lanes_never_overlap():
    assert _lanes([(0, 2), (1, 3), (2, 4), (2, 2), (3, 5)]) == [0, 1, 0, 2, 1]


def test_cli_export_chrome_trace(tmp_path):
    path = tmp_path / "step.json"
    result = CliRunner().invoke(main, ["export", "-s", "zb-h1", "-p", "4", "-m", "4", "--comm", "0.25", "-o", str(path)])
    assert result.exit_code == 0, result.output
    trace = json.loads(path.read_text())
    assert {e["ph"] for e in trace["traceEvents"]} == {"M", "X", "s", "f", "C"}
    assert sum(e["ph"] == "X" and e["tid"] == 0 for e in trace["traceEvents"]) == 4 * 4 * 3
    result = CliRunner().invoke(main, ["export", "-s", "1f1b", "-p", "2", "-m", "2", "--format", "chrome-trace", "-o", "-"])
    assert result.exit_code == 0 and json.loads(result.stdout)["traceEvents"]


def test_a_trace_named_json_gz_is_the_same_trace_gzip_compressed(tmp_path):
    """`-o step.json.gz` (or `--trace step.json.gz`) writes the trace gzip-compressed, byte for byte
    the same twice (no timestamp in the header), and decompresses to the plain export; a .gz name
    for a format other than chrome-trace is refused in one line, nothing written."""
    import gzip

    args = ["export", "-s", "1f1b", "-p", "4", "-m", "8", "--unit", "--comm", "1", "-o"]
    plain, packed, again = tmp_path / "step.json", tmp_path / "step.json.gz", tmp_path / "again.json.gz"
    for path in (plain, packed, again):
        result = CliRunner().invoke(main, [*args, str(path)])
        assert result.exit_code == 0, result.output
    assert packed.read_bytes()[:2] == b"\x1f\x8b" and packed.read_bytes() == again.read_bytes()
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    assert len(packed.read_bytes()) < len(plain.read_bytes()) / 3
    traced = tmp_path / "modelled.json.gz"
    result = CliRunner().invoke(main, ["evaluate", "-s", "1f1b", "-p", "4", "-m", "8", "--model", "llama3-8b",
                                       "--system", "dgx-a100", "--trace", str(traced)])
    assert result.exit_code == 0, result.output
    assert json.loads(gzip.decompress(traced.read_bytes()))["otherData"]["schedule"] == "1f1b"
    for name, flags in (("step.csv.gz", []), ("step.png.gz", ["--format", "png"])):
        result = CliRunner().invoke(main, [*args, str(tmp_path / name), *flags])
        assert result.exit_code == 1
        assert result.output.startswith(f"error: --output '{tmp_path / name}' ends in .gz, but only a chrome-trace")
        assert not (tmp_path / name).exists()


def test_a_trace_too_large_is_refused_before_the_work(tmp_path, monkeypatch):
    """1F1B at 4 x 600,000 (4.8 million ops, under the schedule limit) built its trace for 90 s and
    died of a MemoryError traceback; every command that writes a trace now refuses it first, in one
    line, and leaves no file (the limit is lowered here so the check is cheap to reach)."""
    import ppopt.evaluate
    import ppopt.plan_search  # noqa: F401  (these bind the patched names when first imported: not to the stand-ins)
    import ppopt.report.trace as trace
    import ppopt.run.compare  # noqa: F401
    import ppopt.simulate
    import ppopt.solve.gap  # noqa: F401
    import ppopt.solve.search

    monkeypatch.setattr(trace, "MAX_TRACE_OPS", 63)  # 1f1b at p = 4, m = 8 has 64 ops
    out = tmp_path / "t.json"
    unsized = lambda *a, **k: pytest.fail("the work ran before the trace was sized")  # noqa: E731
    import ppopt.cli.outputs
    import ppopt.cli.schedules

    for module, name in ((ppopt.simulate, "simulate"), (ppopt.evaluate, "evaluate_schedule"), (ppopt.solve.search, "search"),
                         (ppopt.cli.outputs, "resolve_schedule"), (ppopt.cli.schedules, "resolve_schedule")):
        monkeypatch.setattr(module, name, unsized)  # a named schedule is sized before it is even built
    commands = [
        ["export", "-s", "1f1b", "-p", "4", "-m", "8", "--format", "chrome-trace", "-o", str(out)],
        ["evaluate", "-s", "1f1b", "-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "dgx-h100", "--trace", str(out)],
        ["search", "--unit", "-p", "4", "-m", "8", "--trace", str(out), "--time-limit", "5"],
    ]
    for args in commands:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, (args, result.output)
        assert "error: a trace of 64 ops would take gigabytes" in result.output and "at most 63" in result.output
        assert not out.exists()
    monkeypatch.undo()  # the real work, at the limit: written
    monkeypatch.setattr(trace, "MAX_TRACE_OPS", 64)
    assert CliRunner().invoke(main, commands[0]).exit_code == 0 and out.exists()


def test_running_out_of_memory_is_one_line(monkeypatch):
    """A request that a size check misses and that exhausts memory ends in one line, not a traceback."""
    import ppopt.evaluate

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(ppopt.evaluate, "evaluate_schedule", exhausted)
    result = CliRunner().invoke(main, ["evaluate", "-s", "1f1b", "-p", "2", "-m", "2"], standalone_mode=True)
    assert result.exit_code == 1
    assert result.output.strip().startswith("error: out of memory") and "Traceback" not in result.output


def test_a_trace_refuses_a_simulation_of_another_schedule():
    """chrome_trace(1F1B at 4 x 8, a simulation of 1F1B at 2 x 2) labelled the 2 x 2 step as the 4 x 8
    one, and with ZB-V's schedule failed with a raw KeyError; a summary or a bad unit raised a raw
    ValueError."""
    from ppopt.errors import ConfigError

    small, simulation, costs = simulated("1f1b", 2, 2)
    for schedule in (generate("1f1b", 4, 8), generate("zb-v", 2, 2)):
        with pytest.raises(ConfigError) as raised:
            chrome_trace(schedule, simulation, costs)
        assert raised.value.field == "simulation"
    for args, field in (((small, simulation.summary(), costs), "simulation"), ((small, None, costs), "simulation"),
                        ((small, simulation, costs, "ms"), "time_unit")):
        with pytest.raises(ConfigError) as raised:
            chrome_trace(*args)
        assert raised.value.field == field
    assert chrome_trace(small, simulation, costs)["otherData"]["devices"] == 2
