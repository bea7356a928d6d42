"""Solver commands end to end: JSON keys, outputs, and one-line errors with exit status 1."""

import csv
import json
import math
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from ppopt.cli import main
from ppopt.config import load_model, load_system
from ppopt.costs import partition_layers, stage_costs
from ppopt.errors import InfeasibleError
from ppopt.evaluate import evaluate
from ppopt.host import max_local_jobs
from ppopt.io.torch_csv import read_torch_csv
from ppopt.solve.options import MAX_WORKERS

UNIT = ["-p", "4", "-m", "8", "--unit", "--backward", "2", "--comm", "1", "--time-limit", "30", "-q"]


def unit_with(flag, value):
    """UNIT with ``flag``'s value replaced (an option that takes one value may be given once)."""
    args = list(UNIT)
    args[args.index(flag) + 1] = value
    return args


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def stage_memory(model, system, stages, microbatches, global_batch=None):
    """Per stage of the model split evenly into ``stages``: (persistent bytes, one microbatch's
    activation bytes), from the cost model."""
    model, system = load_model(model), load_system(system)
    costs = stage_costs(model, system, partition_layers(model.num_layers, stages), microbatches, global_batch)
    return [c.persistent_bytes for c in costs.stages], [c.activation_bytes for c in costs.stages]


def least_bidirectional_free_bytes():
    """llama3-70b on dgx-h100, p = 4, m = 8, 32 sequences, bidirectional placement: device d holds
    stages d and 3 - d (the persistent state of both). One microbatch at a time down either route
    puts the activation of stage d on one of that pair's devices and stage 3 - d's on the other, so
    either route needs the pair's persistent state plus the larger of its two activations."""
    persistent, act = stage_memory("llama3-70b", "dgx-h100", 4, 8, 32)
    return math.ceil(max(persistent[d] + persistent[3 - d] + max(act[d], act[3 - d]) for d in (0, 1)))


def test_search_json_keys_and_outputs(tmp_path):
    csv, trace, png, svg = (tmp_path / name for name in ("found.csv", "found.json", "found.png", "found.svg"))
    result = run("search", *UNIT, "--memory-limit", "4", "--json", "--csv", csv, "--trace", trace, "--plot", png)
    assert run("search", *UNIT, "--memory-limit", "4", "--no-grid", "--plot", svg).exit_code == 0
    assert png.read_bytes()[:4] == b"\x89PNG" and b"<svg" in svg.read_bytes()[:400]
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "optimal"
    assert data["step_time_s"] == data["bound_s"] == 46
    assert data["gap"] == 0
    assert data["time_unit"] == "slots"
    # unit mode counts activations (of a 1/p model share), not bytes, under the simulation's memory keys
    assert data["memory_unit"] == "activations" and max(data["simulation"]["peak_activation_bytes"]) == 4
    assert (data["devices"], data["microbatches"]) == (4, 8)  # from -p and -m: unit mode has no job to say them
    one_f_one_b = next(h for h in data["handcrafted"] if h["schedule"] == "1f1b")
    # 1F1B's 49 slots with one-slot messages: its critical path, written out in tests/test_solve.py
    assert one_f_one_b["step_time_s"] == 49 and one_f_one_b["gap"] == pytest.approx(3 / 46)
    # the exported CSV reads back to the schedule found
    schedule = read_torch_csv(csv)
    assert [[str(op) for op in order] for order in schedule.orders] == data["schedule"]["orders"]
    assert {e["ph"] for e in json.loads(trace.read_text())["traceEvents"]} >= {"X", "M"}


def test_search_progress_goes_to_stderr():
    result = CliRunner().invoke(main, ["search", *UNIT[:-1], "--memory-limit", "4", "--no-grid"])
    assert result.exit_code == 0
    assert "steady state" in result.stderr and "steady state" not in result.stdout
    assert "reduced-problem bound" in result.stderr and "reduced-problem bound" not in result.stdout
    assert "status     optimal" in result.stdout


def test_gap_json_lists_each_handcrafted_schedule():
    result = run("gap", *UNIT, "--memory-limit", "4", "-s", "1f1b", "-s", "zb-h1", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {row["schedule"]: row for row in data["schedules"]}
    assert set(rows) == {"1f1b", "zb-h1"}
    assert rows["1f1b"]["step_time_s"] == 49 and rows["1f1b"]["bound_s"] == 46  # 49: tests/test_solve.py
    assert rows["1f1b"]["gap"] == pytest.approx(3 / 46)
    assert "live activations" in data["memory_semantics"]
    # the unit of each row's peak_memory, as frontier --json gives it (gap gave none)
    assert data["memory_unit"] == "activations" and rows["1f1b"]["peak_memory"] <= 4
    assert (data["devices"], data["microbatches"]) == (4, 8)


def test_gap_marks_a_schedule_over_the_gpu_memory_when_no_limit_is_given():
    """Without --memory-limit every schedule 'fits' the (absent) limit; GPipe at 4 x 4 with one
    sequence per microbatch still holds all 4 microbatches' activations on every GPU, over the 80 GB
    of an H100 where 1F1B's at most 4 - r are not: the row says so, as evaluate marks it."""
    result = run("gap", "-p", 4, "-m", 4, "--model", "llama3-8b", "--system", "dgx-h100", "--micro-batch", 1,
                 "-s", "gpipe", "-s", "1f1b", "--time-limit", 20, "-q", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {row["schedule"]: row for row in data["schedules"]}
    assert data["memory_capacity_bytes"] == load_system("dgx-h100").memory_capacity_bytes
    for name in ("gpipe", "1f1b"):
        peak = evaluate(name, 4, 4, model="llama3-8b", system="dgx-h100", global_batch=4).simulation.peak_memory_bytes
        assert rows[name]["fits"] and rows[name]["peak_memory"] == max(peak)
        assert rows[name]["over_memory"] == (max(peak) > data["memory_capacity_bytes"])
    assert rows["gpipe"]["over_memory"] and not rows["1f1b"]["over_memory"]
    text = run("gap", "-p", 4, "-m", 4, "--model", "llama3-8b", "--system", "dgx-h100", "--micro-batch", 1,
               "-s", "gpipe", "--time-limit", 20, "-q").stdout
    assert "# over the system's 74.51 GiB (80 GB) per device" in text
    unit = json.loads(run("gap", *UNIT, "-s", "1f1b", "-q", "--json").stdout)
    assert unit["memory_capacity_bytes"] is None and unit["schedules"][0]["over_memory"] is None


def test_frontier_is_monotone_and_places_handcrafted():
    result = run("frontier", "-p", "4", "-m", "8", "--unit", "--time-limit", "30", "-q", "--space",
                 "placement=linear,backward=split", "--limits", "1,2,4,8", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["devices"], data["microbatches"]) == (4, 8)
    steps = [p["step_time_s"] for p in data["points"]]
    assert steps == sorted(steps, reverse=True)
    assert all(p["status"] == "optimal" for p in data["points"])
    assert {"zb-h1"} <= {h["schedule"] for h in data["handcrafted"]}


def test_frontier_marks_peaks_over_the_gpus_memory():
    """llama3-8b on dgx-a100, p = 4, m = 16 microbatches of 16 sequences: even the least memory any
    schedule needs is far over an 80 GB GPU, so every peak is marked (JSON: over_memory against the
    system's capacity); unit mode has no system, so nothing is marked there."""
    args = ["frontier", "-p", "4", "-m", "16", "--model", "llama3-8b", "--system", "dgx-a100", "--time-limit", "20", "-q"]
    text = run(*args)
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith("p = 4, m = 16; space: placement=linear")
    hand = text.stdout.split("handcrafted")[1]
    assert re.search(r"^1f1b +\S+ GiB # ", hand, re.M)
    assert "# a peak over the system's 74.51 GiB (80 GB) per device" in text.stdout
    data = json.loads(run(*args, "--json").stdout)
    capacity = load_system("dgx-a100").memory_capacity_bytes
    assert data["memory_capacity_bytes"] == capacity
    assert all(h["over_memory"] == (h["peak_memory"] > capacity) for h in data["handcrafted"])
    assert any(h["over_memory"] for h in data["handcrafted"])
    # the searched points too (they had no over_memory, though the text marks them)
    assert all(p["over_memory"] == (None if p["peak_memory"] is None else p["peak_memory"] > capacity) for p in data["points"])
    assert any(p["over_memory"] for p in data["points"])
    rows = list(csv.DictReader(run(*args, "--format", "csv").stdout.splitlines()))
    assert {r["over memory"] for r in rows if r["row"] == "handcrafted"} == {"yes"}
    unit = json.loads(run("frontier", "-p", "4", "-m", "8", "--unit", "--time-limit", "20", "-q", "--json").stdout)
    assert unit["memory_capacity_bytes"] is None and {h["over_memory"] for h in unit["handcrafted"] + unit["points"]} == {None}


def test_workers_beyond_the_machine_are_refused():
    """More CP-SAT threads than the CPUs run usefully only overrun the time limit (64 on 2 CPUs took
    6.6 s for a 5 s gap), so they are refused by the rule of sweep's --jobs, before any work."""
    too_many = max_local_jobs() + 1
    if too_many > MAX_WORKERS:
        pytest.skip(f"this machine runs {max_local_jobs()} workers usefully, more than the {MAX_WORKERS} allowed anywhere")
    done = run("gap", *UNIT, "--workers", too_many)
    assert done.exit_code == 1 and done.stdout == ""
    assert done.stderr == (f"error: --workers: {too_many} is more than this machine runs usefully: at most "
                           f"{max_local_jobs()} (4 per CPU, 16 always allowed; {os.cpu_count() or 1} CPUs here)\n")


@pytest.mark.parametrize(
    "args, reason",
    [
        (["search", *UNIT, "--memory-limit", "0.5"], "below the minimum 1 activation"),
        (["search", *UNIT, "--space", "placement=diagonal"], "space key 'placement' must be one of"),
        (["search", *UNIT, "--space", "fixed:zb-x"], "unknown schedule 'zb-x'"),
        (["search", *UNIT, "--memory-limit", "4GiB"], "--memory-limit: must be a number of live activations"),
        (["search", "-p", "4", "-m", "8"], "give --unit, --costs FILE, or --model and --system (see 'ppopt search --help')"),
        (["search", "-p", "4", "-m", "8", "--model", "nope", "--system", "mid-mid"], "unknown model preset 'nope'"),
        (["search", "-p", "4", "-m", "8", "--unit", "--comm", "-1"], "--comm: must be a finite number >= 0"),
        (["search", *UNIT, "--workers", "0"], "--workers: must be an integer from 1 to 64"),
        (["search", *UNIT, "--workers", "100000"], "--workers: must be an integer from 1 to 64"),
        (["search", *unit_with("--time-limit", "nan")], "--time-limit: must be a finite number of seconds > 0, got nan"),
        (["search", *unit_with("--time-limit", "inf")], "--time-limit: must be a finite number of seconds > 0, got a number too large"),
        (["search", *unit_with("--time-limit", "1e400")], "--time-limit: must be a finite number of seconds > 0, got a number too large"),
        (["gap", *unit_with("--time-limit", "0")], "--time-limit: must be a finite number of seconds > 0"),
        (["frontier", *unit_with("--time-limit", "-1")], "--time-limit: must be a finite number of seconds > 0"),
        (["search", *unit_with("--backward", "0")], "--backward: must be a finite number > 0"),
        (["search", *UNIT, "--weight", "3"], "--weight: must lie between 0 and backward (2)"),
        (["search", "-p", "4", "-m", "8", "--unit", "--model", "llama3-8b", "--system", "dgx-h100"], "--unit: give either"),
        (["search", "-p", "4", "-m", "8", "--model", "llama3-70b", "--system", "dgx-h100", "--global-batch", "32",
          "--memory-limit", "20GiB"], "below the minimum"),
        (["frontier", *UNIT, "--memory-limit", "3"], "--memory-limit: frontier sweeps memory limits itself: use --limits"),
        (["frontier", *UNIT, "--limits", "1,x"], "--limits: must be a number of live activations, got 'x'"),
        (["search", *UNIT, "--space", "placement=looped", "--chunks", "0"], "--chunks: must be a positive integer"),
        (["gap", *UNIT, "-s", "nope"], "unknown schedule 'nope'"),
        # Every named schedule undefined or infeasible: an error, not an empty table with exit 0.
        (["gap", "-p", "3", "-m", "6", "--unit", "-s", "dualpipe"], "no schedule to report at p = 3, m = 6 (dualpipe: dualpipe needs an even"),
        (["gap", "-p", "2", "-m", "2", "--unit", "--memory-limit", "0.5", "-s", "1f1b"], "no schedule fits the memory limit (the least need is that of 1f1b): memory limit 0.5 activations is below the minimum 1"),
        # Over the op limit: refused before any placement or model is built (no hang).
        (["search", "-p", "10000000", "-m", "2", "--unit"], "--devices: schedule too large: 10000000 devices, 2 microbatches make 40,000,000 ops"),
        # the larger factor is named: the flag to lower (it named --microbatches for a million devices)
        (["search", "-p", "1000000", "-m", "4", "--unit", "--time-limit", "5"], "--devices: search too large: 1000000 devices, 4 microbatches"),
        (["search", "-p", "4", "-m", "10000000", "--unit"], "--microbatches: schedule too large: 4 devices, 10000000 microbatches"),
        (["frontier", "-p", "2", "-m", str(10**20), "--unit"], "the limit is 10,000,000 ops"),
        (["gap", "-p", "2", "-m", "2", "--waves", "10000000", "--unit"], "2 devices x 20000000 stages each, 2 microbatches"),
        # Under the op limit but over the solver's (about 3.4 KB of memory per op): no out-of-memory.
        (["search", "-p", "64", "-m", "16384", "--unit", "--time-limit", "1000"],
         "--microbatches: search too large: 64 devices, 16384 microbatches make 2,097,152 ops (stages x microbatches x "
         "kinds); this command holds about 3,400 bytes per op and takes at most 2,058,823 ops"),
        # gap holds a search and one more schedule at once, so its limit is lower than search's
        (["gap", "-p", "64", "-m", "12288", "--unit", "--time-limit", "100000"],
         "this command holds about 4,500 bytes per op and takes at most 1,555,555 ops"),
        # a batch that does not split is named before the time is weighed (the time was named first, and
        # once given, the batch)
        (["gap", "-p", "32", "-m", "512", "--model", "study", "--system", "mid-mid", "--time-limit", "5"],
         "--microbatches: 512 microbatches exceed the global batch of 256 sequences"),
        (["gap", "-p", "32", "-m", "512", "--model", "study", "--system", "mid-mid", "--dp", "3", "--time-limit", "5"],
         "--microbatches: global batch of 256 sequences does not split into 512 microbatches x 3 replicas"),
    ],
)
def test_bad_solver_input_is_one_line_and_exit_1(args, reason):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1 and reason in result.stderr, result.stderr


def test_evaluate_a_schedule_file_with_plot_and_trace(tmp_path):
    csv = tmp_path / "mine.csv"
    assert run("export", "-s", "1f1b", "-p", 4, "-m", 8, "-o", csv).exit_code == 0
    plot, trace = tmp_path / "t.png", tmp_path / "t.json"
    result = run("evaluate", "--schedule-file", csv, "--model", "llama3-8b", "--system", "dgx-h100",
                 "--global-batch", 8, "--json", "--plot", plot, "--trace", trace)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schedule"] == "mine" and data["formula"] is None
    assert data["table"]["length"] == 33  # (m + p - 1)(F + B) with the unit model F = 1, B = 2
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert json.loads(trace.read_text())["traceEvents"]


def test_schedule_and_schedule_file_are_exclusive(tmp_path):
    result = CliRunner().invoke(main, ["table", "-s", "1f1b", "--schedule-file", str(tmp_path / "x.csv")])
    assert result.exit_code == 1 and "exactly one of --schedule" in result.stderr


def test_a_search_too_large_for_its_time_limit_is_refused_before_any_work():
    """64 x 4096 (524,288 ops) cannot be built, simulated and printed in 5 s: one line, exit 1, and
    the least limit that can be honoured."""
    from ppopt.solve.search import minimum_time_s

    result = CliRunner().invoke(main, ["search", "-p", "64", "-m", "4096", "--unit", "--time-limit", "5"])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "--time-limit: 5 s is too short for 64 devices, 4096 microbatches (524,288 ops)" in result.stderr
    assert f"takes up to {math.ceil(minimum_time_s(524_288))} s; give at least that" in result.stderr
    # gap simulates each schedule it reports, then searches: its least limit counts them all
    result = CliRunner().invoke(main, ["gap", "-p", "64", "-m", "4096", "--unit", "-s", "1f1b", "-s", "gpipe",
                                       "--time-limit", "30"])
    assert result.exit_code == 1
    assert f"the 3 schedules this command builds at that size takes up to {math.ceil(3 * minimum_time_s(524_288))} s" \
        in result.stderr


def test_a_short_budget_keeps_the_first_hint_and_skips_the_others(monkeypatch):
    """When the time left cannot cover another schedule, the search keeps its first handcrafted hint,
    tries no other and skips the greedy one, and says so (a candidate costs a second per op here)."""
    from ppopt.solve import search as searching
    from ppopt.solve.instance import InstanceSpec
    from ppopt.solve.options import SolveOptions
    from ppopt.solve.space import handcrafted_in, parse_space
    from ppopt.units import UnitCosts

    spec, space = InstanceSpec(4, 8, units=UnitCosts(1, 2, None, 1)), parse_space("placement=linear")
    everything = searching.search(spec, space, SolveOptions(10, every_hint=True))
    assert len(everything.handcrafted) > 1
    notes: list[str] = []
    monkeypatch.setattr(searching, "SCHEDULE_S_PER_OP", 1.0)
    # GPipe's 39 slots meet the analytic bound here, which skips the greedy hint for another reason
    monkeypatch.setattr(searching, "_meets_cheap_bound", lambda *args: False)
    short = searching.search(spec, space, SolveOptions(10, progress=notes.append))
    assert [c.name for c in short.handcrafted] == [next(handcrafted_in(space, 4, 8)).name]
    assert "time limit: no further handcrafted hints tried" in notes
    assert "time limit: greedy hint skipped" in notes


def test_hints_stop_at_one_that_meets_the_analytic_bound(monkeypatch):
    """In the split space at p = 4, m = 8 without a memory limit, the first hint built (a zero-bubble
    schedule) meets the analytic bound: once further hints are not cheap against the time left (here
    by a TIE_HINT_SHARE that no hint meets), the search builds no other hint and says so (at 64 x 4,096
    the others took 11 s of a 16 s search), while ``every_hint`` (what frontier asks for) still builds
    every handcrafted schedule of the space. Where they are cheap (the default at this size) they are
    all built, and a tie goes to the least memory."""
    from ppopt.solve import search as searching
    from ppopt.solve.instance import InstanceSpec
    from ppopt.solve.options import SolveOptions
    from ppopt.solve.space import handcrafted_in, parse_space
    from ppopt.units import UnitCosts

    spec, space = InstanceSpec(4, 8, units=UnitCosts(1, 2, 1, 0)), parse_space("placement=linear,backward=split")
    cheap = searching.search(spec, space, SolveOptions(10))
    assert sorted(c.name for c in cheap.handcrafted) == sorted(s.name for s in handcrafted_in(space, 4, 8))
    tied = [c for c in cheap.handcrafted if c.simulation.step_time_s == cheap.step_time]
    assert len({c.simulation.max_peak_memory_bytes for c in tied}) > 1  # ZB-H1 (4 live) and ZB-H2 (7) tie at 27
    assert cheap.simulation.max_peak_memory_bytes == min(c.simulation.max_peak_memory_bytes for c in tied)
    monkeypatch.setattr(searching, "TIE_HINT_SHARE", 0.0)
    notes: list[str] = []
    first = searching.search(spec, space, SolveOptions(10, progress=notes.append))
    name = next(handcrafted_in(space, 4, 8)).name
    # ZB-H1's length, Qi et al. 2024 §2.2: m(F + I + W) + (p - 1)(F + I - W) = 8·3 + 3·1 = 27 slots
    assert name.startswith("zb-") and first.status == "optimal" and first.step_time == first.bound == 8 * 3 + 3 * 1
    assert [c.name for c in first.handcrafted] == [name]
    assert f"no further handcrafted hints built: {name} meets the analytic bound" in notes
    every = searching.search(spec, space, SolveOptions(10, every_hint=True))
    assert sorted(c.name for c in every.handcrafted) == sorted(s.name for s in handcrafted_in(space, 4, 8))
    assert len(every.handcrafted) > 1 and every.step_time == first.step_time


def test_the_minimum_a_refusal_names_is_accepted_when_passed_back():
    """The minimum used to be printed rounded to nearest (4.78877e+11 bytes, 445.989 GiB), and
    passing either figure back was refused as below it. It is now rounded up: whole bytes and the
    next thousandth of a GiB."""
    flags = ["search", "-p", "4", "-m", "8", "--model", "llama3-70b", "--system", "dgx-h100", "--global-batch", "32"]
    refused = run(*flags, "--memory-limit", "20GiB")
    assert refused.exit_code == 1
    found = re.search(r"below the minimum ([\d.]+) GiB \((\d+) bytes\)", refused.stderr)
    assert found, refused.stderr
    for limit in (found[2], found[1] + "GiB"):
        result = run(*flags, "--memory-limit", limit, "--time-limit", "2", "-q")
        assert result.exit_code == 0 and "below the minimum" not in result.output, (limit, result.output)


@pytest.mark.parametrize("flags, least", [
    # 8 stages on 4 devices: some device holds two stages of one microbatch, both live: 2 x 0.5
    (["-p", "4", "-m", "4", "--unit", "--space", "placement=any"], "1"),
    # free directions: every microbatch may take one route, but stage 3's larger activation is then
    # on device 0 or 3, which both hold the persistent state of stages 0 and 3 (taking each device's
    # least route on its own named 708.8 GiB, which no schedule meets)
    (["-p", "4", "-m", "8", "--model", "llama3-70b", "--system", "dgx-h100", "--global-batch", "32",
      "--space", "placement=bidirectional,directions=free"], str(least_bidirectional_free_bytes())),
    # a fixed order has one peak per device whatever its timing: 1F1B's device 0 holds p = 4 (the
    # generic minimum of 1 used to be named, and limits 1 to 3 were accepted, then "infeasible")
    (["-p", "4", "-m", "8", "--unit", "--space", "fixed:1f1b"], "4"),
    # every member refused: the least demanding member's minimum (the linear placement's 1)
    (["-p", "4", "-m", "8", "--unit", "--space", "placement=family"], "1"),
])
def test_the_named_minimum_memory_is_met_by_a_schedule(flags, least):
    """The minimum a refusal names is a limit some schedule meets: searching at it finds one, and
    the refusal of a smaller limit names it."""
    refused = run("search", *flags, "--memory-limit", "0.1" if "--unit" in flags else "1GiB")
    error = refused.stderr.strip().splitlines()[-1]  # after the progress lines
    named = error.split("below the minimum ")[1].split(" any schedule")[0]  # "4 activations", "716.651 GiB (769497497600 bytes)"
    assert refused.exit_code == 1 and error.startswith("error: ") and least in named.replace("(", " ").split(), refused.stderr
    found = run("search", *flags, "--memory-limit", least, "--time-limit", "5", "-q", "--json")
    assert found.exit_code == 0, found.output
    data = json.loads(found.stdout)
    assert data["status"] in ("optimal", "feasible")
    assert data["memory_unit"] == ("activations" if "--unit" in flags else "bytes")


def test_the_frontier_of_a_fixed_schedule_starts_at_its_own_peak():
    result = run("frontier", "-p", "4", "-m", "8", "--unit", "--space", "fixed:1f1b", "--json", "-q")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [p["memory_limit"] for p in data["points"]] == [4]
    assert data["points"][0]["status"] == "optimal"


@pytest.mark.parametrize("space, flag", [("placement=bidirectional", "--csv"), ("fixed:chimera", "--csv"),
                                         ("fixed:dualpipe", "--run")])
def test_search_refuses_torch_outputs_of_a_replicated_space_before_searching(tmp_path, monkeypatch, space, flag):
    """Chimera's and DualPipe's weight replicas put a stage on two ranks, which PyTorch's CSV and
    runtime cannot hold: the CSV used to be refused only after the whole search, with no output written."""
    import ppopt.plan_search  # noqa: F401  (these bind `search` when first imported: not to the stand-in)
    import ppopt.solve.gap  # noqa: F401
    import ppopt.solve.search as searching

    monkeypatch.setattr(searching, "search", lambda *a, **k: pytest.fail("searched"))
    extra = [flag, tmp_path / "x.csv"] if flag == "--csv" else [flag]
    result = run("search", "--unit", "-p", 4, "-m", 8, "--space", space, *extra, "--trace", tmp_path / "t.json")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {flag}: space {space}") and result.stderr.endswith(
        "places each stage on two ranks, and PyTorch's schedule CSV and runtime hold one rank per stage\n")
    assert not list(tmp_path.iterdir())


def test_a_frontier_of_limits_all_below_the_minimum_is_refused_naming_it(monkeypatch):
    """--limits 0.5 (the minimum is 1 activation) printed one row "infeasible" with exit 0, as
    80 GiB did where every schedule needs 14 TiB. Refused now, naming the minimum, before any search
    of a free space; a fixed space's minimum is its schedule's peak (4 for 1F1B at p = 4). A limit
    below the minimum among others stays a row."""
    import ppopt.solve.gap as gap

    searched = []
    real = gap.search
    monkeypatch.setattr(gap, "search", lambda *a, **k: searched.append(1) or real(*a, **k))
    result = run("frontier", "-p", "4", "-m", "4", "--unit", "--time-limit", "5", "-q", "--limits", "0.5")
    assert (result.exit_code, result.stderr.count("\n")) == (1, 1), result.output
    assert result.stderr.startswith("error: --limits: the limit is below the minimum 1 activation any schedule of "
                                    "placement=linear,backward=full,order=free needs (device 3: ")
    assert not searched
    modelled = run("frontier", "-p", "4", "-m", "4", "--model", "study", "--system", "mid-mid", "--time-limit", "5", "-q",
                   "--limits", "80GiB,90GiB")
    # linear placement: device d holds stage d, its persistent state and one microbatch's activation;
    # the minimum is named rounded up to the next thousandth of a GiB
    persistent, act = stage_memory("study", "mid-mid", 4, 4)
    least = max(map(sum, zip(persistent, act))) / 2**30
    assert modelled.exit_code == 1, modelled.output
    assert f"error: --limits: all 2 limits are below the minimum {math.ceil(least * 1000) / 1000:.3f} GiB" in modelled.stderr
    fixed = run("frontier", "-p", "4", "-m", "4", "--unit", "--time-limit", "5", "-q", "--space", "fixed:1f1b", "--limits", "3")
    assert fixed.exit_code == 1 and "the limit is below the minimum 4 activations any schedule of fixed:1f1b" in fixed.stderr
    mixed = run("frontier", "-p", "4", "-m", "4", "--unit", "--time-limit", "5", "-q", "--limits", "0.5,2", "--json")
    assert mixed.exit_code == 0, mixed.output
    assert [p["status"] for p in json.loads(mixed.stdout)["points"]] == ["infeasible", "optimal"]


def test_frontier_s_help_does_not_offer_the_memory_limit_it_refuses():
    assert "--memory-limit" in run("search", "--help").output
    assert "--memory-limit" not in run("frontier", "--help").output
    assert "--limits" in run("frontier", "--help").output


def test_optimal_means_within_the_rounding_of_the_bound():
    """The solver proves optimality in rounded-down ticks, so an optimal schedule's simulated step may
    exceed the bound by the rounding cost, and no more: what the simulation adds beyond the model (the
    replicas' gradient all-reduce of DualPipe, contention on a slow link) made 'optimal' rows 0.12 %
    and 20 % above their bounds. Those are 'feasible' now, with the reason in the note."""
    cases = [
        ["-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", 32,
         "--space", "placement=bidirectional,backward=split,directions=even"],  # DualPipe's space: replica all-reduce
        ["-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "fast-slow", "--micro-batch", 1],  # 13 ms messages, 3 ms forwards
        ["-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100", "--micro-batch", 1],
    ]
    statuses = []
    for args in cases:
        # a deterministic budget (each search takes under a second of it): the statuses cannot depend on the machine's load
        result = run("search", *args, "-q", "--time-limit", 60, "--deterministic-time", 5, "--workers", 1, "--json")
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        over = data["step_time_s"] / data["bound_s"] - 1
        statuses.append(data["status"])
        if data["status"] == "optimal":
            assert over <= data["rounding_cost"] + 1e-9
        else:
            assert over > data["rounding_cost"] and "the simulation adds what the solver leaves out" in data["note"]
    assert statuses == ["feasible", "feasible", "optimal"]
    gap = run("gap", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", 32,
              "-s", "dualpipe", "-q", "--time-limit", 30)
    row = next(line for line in gap.stdout.splitlines() if line.startswith("dualpipe "))
    assert " feasible " in row and "integer ticks" not in gap.stdout


def test_progress_says_its_incumbents_are_in_ticks_when_times_are_rounded():
    """With a model the solver's incumbents are rounded-down ticks, below the step the result is then
    simulated at (4.03695 s in progress against 4.0467 s at the end, llama3-8b, p = 2, V placement): the
    search's header says so. Unit mode is exact and says nothing of it."""
    modelled = run("search", "-p", 2, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100", "--dp", 8, "--micro-batch", 1,
                   "--space", "placement=v,backward=split", "--time-limit", 20, "--deterministic-time", 2, "--workers", 1)
    assert modelled.exit_code == 0, modelled.output
    header = next(line for line in modelled.stderr.splitlines() if line.startswith("searching "))
    assert "below are in ticks (times rounded down)" in header
    unit = run("search", "--unit", "-p", 4, "-m", 8, "--space", "placement=v", "--time-limit", 20, "--workers", 1)
    assert unit.exit_code == 0, unit.output
    header = next(line for line in unit.stderr.splitlines() if line.startswith("searching "))
    assert "in ticks" not in header


def test_a_byte_limit_is_echoed_in_the_unit_the_user_gave():
    """--memory-limit 78GiB came back as '8.375e+10 bytes'; GiB first now, the bytes beside."""
    result = run("search", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", 32,
                 "--memory-limit", "98GiB", "-q", "--no-grid")
    assert result.exit_code == 0, result.output
    memory = next(line for line in result.stdout.splitlines() if line.startswith("memory: "))
    assert memory.startswith("memory: at most 98 GiB (105226698752 bytes) per device: persistent")


def test_gap_csv_gives_the_gap_as_a_bare_percentage():
    """The gap column read "25.64%" in CSV, text a spreadsheet does not take as a number."""
    import csv
    import io

    result = run("gap", "-p", 4, "-m", 8, "--unit", "--comm", 1, "-s", "1f1b", "--format", "csv", "-q")
    assert result.exit_code == 0, result.output
    row = next(csv.DictReader(io.StringIO(result.stdout)))
    step, bound = float(row["step slots"]), float(row["bound slots"])
    assert float(row["gap %"]) == pytest.approx(100 * (step - bound) / bound, abs=1e-3)


def test_gap_and_frontier_csv_are_one_table_of_bare_numbers_with_units_in_the_header():
    """Modelled, the cells read "2.914 s" and "60 GiB" (units glued on, unlike unit mode's bare
    numbers), and frontier's CSV was two tables a blank line apart, which no CSV reader takes."""
    import csv
    import io

    modelled = ["--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "8", "-p", "4", "-m", "8",
                "--time-limit", "5", "-q", "--format", "csv"]
    gap = run("gap", *modelled, "-s", "1f1b")
    assert gap.exit_code == 0, gap.output
    (row,) = csv.DictReader(io.StringIO(gap.stdout))
    assert float(row["step s"]) >= float(row["bound s"]) > 0
    limits = run("frontier", *modelled, "--limits", "60GiB,90GiB")
    assert limits.exit_code == 0, limits.output
    rows = list(csv.DictReader(io.StringIO(limits.stdout)))
    assert "" not in limits.stdout.splitlines()
    searched = [r for r in rows if r["row"] == "searched"]
    assert [float(r["memory limit GiB"]) for r in searched] == [60, 90]
    assert all(float(r["peak memory GiB"]) <= float(r["memory limit GiB"]) for r in searched if r["peak memory GiB"])
    handcrafted = [r for r in rows if r["row"] == "handcrafted"]
    assert handcrafted and all(r["schedule"] and r["on the frontier"] in ("yes", "no") and float(r["step s"]) > 0
                               for r in handcrafted)


def test_gap_under_a_limit_no_schedule_meets_is_one_short_error():
    """Every family's space refused the limit, and gap printed their 14 reasons on one line of
    5,678 characters; now one reason, the least minimum's, with the families that share it."""
    result = run("gap", "--model", "llama3-8b", "--system", "dgx-a100", "-p", 4, "-m", 8, "--memory-limit", "60GiB")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 1 and len(lines[0]) < 700
    assert lines[0].startswith("error: no schedule fits the memory limit (the least need is that of gpipe, 1f1b, ")
    assert "memory limit 60.000 GiB (64424509440 bytes) is below the minimum " in lines[0]
    minimum = float(lines[0].split("the minimum ")[1].split(" GiB")[0])
    accepted = run("gap", "--model", "llama3-8b", "--system", "dgx-a100", "-p", 4, "-m", 8, "-s", "1f1b",
                   "--memory-limit", f"{minimum}GiB", "--time-limit", 10, "-q")
    assert accepted.exit_code == 0, accepted.output  # the minimum, passed back, is accepted


def test_gap_under_a_limit_no_schedule_meets_names_the_families_skipped_otherwise():
    """At p = 3 Chimera and DualPipe are undefined (odd p): their other reasons sent gap back to the
    kilobytes-long line; they are now counted and named after the one memory reason."""
    result = run("gap", "-p", 3, "-m", 6, "--unit", "--memory-limit", 0.5)
    line = result.output.strip()
    assert result.exit_code == 1 and "\n" not in line and len(line) < 500
    assert line.startswith("error: no schedule fits the memory limit (the least need is that of gpipe, 1f1b, ")
    assert line.endswith("; 3 more skipped for other reasons (chimera, chimera-asym, dualpipe)")


def test_a_family_search_names_the_placements_it_covers():
    """placement=family leaves out the replicated placement; the report did not say so, and a user
    took its bound for one over every schedule (DualPipe, outside it, was faster)."""
    result = run("search", "--unit", "-p", 4, "-m", 8, "--space", "placement=family", "--time-limit", 5, "-q", "--no-grid")
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("space: placement=family,") and "(the best of linear, looped, v and zigzag;" in first
    linear = run("search", "--unit", "-p", 4, "-m", 8, "--time-limit", 5, "-q", "--no-grid")
    assert "the best of" not in linear.stdout


def test_a_family_search_searches_one_stage_map_once():
    """Zigzag with one wave puts stage s on device s and 2p-1-s, as the V does: the family search
    spent a quarter of its budget on the same space twice. With two waves the maps differ."""
    from dataclasses import replace

    from ppopt.solve.space import parse_space, placement_of

    one = parse_space("placement=family")
    assert placement_of(replace(one, placement="v"), 4) == placement_of(replace(one, placement="zigzag"), 4)
    result = run("search", "--unit", "-p", 4, "-m", 8, "--space", "placement=family", "--time-limit", 5, "--no-grid")
    assert result.exit_code == 0, result.output
    assert "skipped placement=zigzag: the same stage map as placement=v\n" in result.stderr
    two = run("search", "--unit", "-p", 4, "-m", 8, "--space", "placement=family,waves=2", "--time-limit", 5, "--no-grid")
    assert two.exit_code == 0 and "same stage map" not in two.stderr


def test_a_family_search_reports_the_parts_of_its_own_bound():
    """placement=family's bound is its weakest member's (v's, unproven at 42.5 when it had a quarter
    of the time, proven since it shares it with linear and looped alone), but the solver, analytic
    and period bounds beside it were the winning linear member's (46, 46, 45): bounds above the one
    they make up. Every part shown is now at most the bound."""
    result = run("search", "-p", 4, "-m", 8, "--unit", "--comm", 1, "--memory-limit", 4, "--space", "placement=family",
                 "--time-limit", 100, "--deterministic-time", 0.3, "--seed", 1, "-q", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    parts = [data["solver_bound_s"] or 0.0, *data["analytic_bounds_s"].values(), data["period_bound_s"] or 0.0]
    assert max(parts) <= data["bound_s"] <= data["step_time_s"]
    assert data["bound_s"] in parts


def test_the_least_time_limit_named_is_one_the_command_takes():
    """The refusal named 1 s (rounded up) while 0.001 s was taken: the figure it names is accepted."""
    refused = run("search", "-p", 4, "-m", 4, "--unit", "--time-limit", "1e-300", "-q")
    least = re.search(r"takes up to ([0-9.e+-]+) s; give at least that", refused.stderr)
    assert refused.exit_code == 1 and least is not None, refused.stderr
    assert float(least.group(1)) < 1
    assert run("search", "-p", 4, "-m", 4, "--unit", "--time-limit", least.group(1), "-q").exit_code == 0


@given(st.floats(min_value=1e-9, max_value=1e5, allow_nan=False, allow_infinity=False))
def test_a_least_time_shown_is_never_below_it(seconds):
    """The figure a refusal names must itself be accepted: rounded up, never down (5.64 s was
    shown as 5.6 by two significant digits), and within a tenth (or a second) of the truth."""
    from ppopt.cli.solver import _rounded_up

    shown = float(_rounded_up(seconds))
    assert seconds <= shown <= max(seconds * 1.1, seconds + 1)


@pytest.mark.parametrize("outputs", [(), ("--plot", "x.png"), ("--trace", "x.json"), ("--plot", "x.png", "--trace", "x.json")])
def test_search_leaves_its_outputs_their_time_within_the_limit(monkeypatch, still_clock, tmp_path, outputs):
    """--time-limit is the whole command's budget: a picture (under half a millisecond per op, plus
    matplotlib's start) or a trace is made after the search, so the search ends that much earlier.
    The search is replaced by one that records its deadline on a still fake clock."""
    from ppopt.report.plot import picture_time_s
    from ppopt.report.trace import trace_time_s

    still_clock("ppopt.solve.options")
    seen = []

    def search(spec, space, options, minimize_memory=False, hints=()):
        seen.append(options.remaining_s())
        raise InfeasibleError("recorded", field="memory_limit")

    monkeypatch.setattr("ppopt.solve.search.search", search)
    monkeypatch.chdir(tmp_path)
    result = run("search", "--unit", "-p", 4, "-m", 8, "--memory-limit", 4, "--time-limit", 100, *outputs)
    assert result.exit_code == 1 and "recorded" in result.output
    ops = 4 * 8 * 2  # the linear space with full backwards: an F and a B per stage and microbatch
    kept = (picture_time_s(ops) if "--plot" in outputs else 0.0) + (trace_time_s(ops) if "--trace" in outputs else 0.0)
    assert seen == [pytest.approx(100 - kept)]
    assert not list(tmp_path.iterdir())  # nothing written


def test_schedules_whose_overlap_the_solver_does_not_model_are_kept_out_of_its_bounds(tmp_path):
    """With overlap_f_b_share > 0 the simulator shortens DualPipeV's overlapped F&B pairs, which the
    solver times as two ops: DualPipeV ran in 386.9 ms against a bound of 400.2 ms reported 'optimal'.
    gap now skips it with the reason, a fixed space of it is refused, and the rest is unchanged."""
    text = (Path(__file__).parents[1] / "configs" / "fast-slow.toml").read_text()
    assert "overlap_f_b_share" not in text
    system = tmp_path / "overlap.toml"
    system.write_text(text.replace("overlap_comm_compute = true", "overlap_comm_compute = true\noverlap_f_b_share = 1.0"))
    def job(on):
        return ["-p", 2, "-m", 16, "--model", "llama3-8b", "--system", on, "--micro-batch", 1, "--time-limit", 10, "--workers", 1]

    gap = run("gap", "-s", "dualpipev", "-s", "zb-v", *job(system), "--json")
    assert gap.exit_code == 0, gap.output
    data = json.loads(gap.stdout)
    assert [r["schedule"] for r in data["schedules"]] == ["zb-v"]
    assert "runs overlapped F&B pairs" in data["skipped"]["dualpipev"]
    assert all(r["bound_s"] <= r["best_found_s"] <= r["step_time_s"] for r in data["schedules"])
    fixed = run("search", "--space", "fixed:dualpipev", *job(system))
    assert fixed.exit_code == 1
    assert fixed.stderr.strip().splitlines()[-1].startswith("error: overlap_f_b_share: dualpipev runs overlapped F&B pairs")
    relaxed = run("search", "--space", "placement=v,backward=split", *job(system), "--json")
    assert relaxed.exit_code == 0, relaxed.output
    found = json.loads(relaxed.stdout)  # DualPipeV's hint runs its pairs as plain ops: no hint beats the bound
    assert "dualpipev+split" in [h["schedule"] for h in found["handcrafted"]]
    assert all(found["bound_s"] <= h["step_time_s"] for h in found["handcrafted"]) and found["bound_s"] <= found["step_time_s"]
    plain = system.with_name("plain.toml")
    plain.write_text(text)
    assert run("search", "--space", "fixed:dualpipev", *job(plain), "-q").exit_code == 0


def test_a_free_placement_takes_a_byte_limit():
    """With the placement free, each device's persistent bytes depend on which stages it gets; the
    capacity of its cumulative was a sum over the placement literals, which CP-SAT rejects: every
    such search ended 'invalid' (exit 0, no schedule). The state is now an interval over the whole
    horizon, present when the stage is on the device."""
    job = ["-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100", "--space", "placement=any", "--workers", 1, "-q", "--json"]
    budget = ["--time-limit", 60, "--deterministic-time", 2]  # machine-independent: a loaded machine found nothing in 10 s
    # the limit binds: a member of the space, interleaved-1F1B (two stages per device, looped), needs more
    looped = json.loads(run("evaluate", "-s", "interleaved-1f1b", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100",
                            "--json").stdout)
    assert max(looped["simulation"]["peak_memory_bytes"]) > 1200 * 2**30
    limited = json.loads(run("search", *job, "--memory-limit", "1200GiB", *budget).stdout)
    assert limited["status"] in ("optimal", "feasible") and limited["step_time_s"] is not None
    assert max(limited["simulation"]["peak_memory_bytes"]) <= 1200 * 2**30
    least = run("search", *job, "--minimize-memory", *budget)
    assert least.exit_code == 0, least.output
    found = json.loads(least.stdout)  # the second solve, over the same byte model, gives a peak it reaches
    assert found["status"] in ("optimal", "feasible") and found["peak_memory_status"] in ("optimal", "feasible")
    assert found["peak_memory"] == max(found["simulation"]["peak_memory_bytes"])


@pytest.mark.parametrize("args", [
    ["-p", 4, "-m", 8, "--system", "dgx-h100", "--micro-batch", 1, "--memory-limit", "80GiB", "-s", "gpipe", "-s", "1f1b"],
    ["-p", 2, "-m", 4, "--system", "slow-fast", "--micro-batch", 2, "-s", "1f1b"],
])
def test_gap_never_reports_a_bound_above_the_best_found(args):
    """A space a handcrafted schedule settles took the analytic bound as summed, which came out one
    float step above that schedule's step (gap 1.45e-16, bound_s > best_found_s in the JSON)."""
    result = run("gap", "--model", "llama3-8b", *args, "-q", "--time-limit", 20, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["schedules"]
    assert rows and all(r["bound_s"] <= r["best_found_s"] for r in rows)
    assert all(r["gap"] is None or r["gap"] >= 0 for r in rows)


def test_a_fixed_space_names_the_options_its_schedule_was_built_with():
    """`--space fixed:interleaved-1f1b --chunks 4` searched the 4-chunk schedule but reported the
    space as plain `fixed:interleaved-1f1b`, the 2-chunk default's name."""
    result = run("search", "--unit", "-p", 4, "-m", 8, "--space", "fixed:interleaved-1f1b", "--chunks", 4, "--time-limit", 5,
                 "-q", "--no-grid")
    assert result.exit_code == 0 and result.output.splitlines()[0] == "space: fixed:interleaved-1f1b,chunks=4"
    # the name reads back as the same space, and the default's options are not named (one name per schedule)
    again = run("search", "--unit", "-p", 4, "-m", 8, "--space", "fixed:interleaved-1f1b,chunks=4", "--time-limit", 5, "-q",
                "--no-grid")
    assert again.output.splitlines()[:-1] == result.output.splitlines()[:-1]  # all but the timing line
    default = run("search", "--unit", "-p", 4, "-m", 8, "--space", "fixed:interleaved-1f1b", "--chunks", 2, "--time-limit", 5,
                  "-q", "--no-grid")
    assert default.output.splitlines()[0] == "space: fixed:interleaved-1f1b"
    clash = run("search", "--unit", "-p", 4, "-m", 8, "--space", "fixed:interleaved-1f1b,chunks=4", "--chunks", 3)
    assert clash.exit_code == 1 and "sets chunks=4, and --chunks another value" in clash.output
    # an option written in the spec is the spec's error; one given as a flag, the flag's
    for spec, flags, line in (("fixed:1f1b,chunks=2", (), "error: --space: 1f1b does not take chunks (fixed:1f1b)"),
                              ("fixed:1f1b", ("--chunks", 2), "error: --chunks: 1f1b does not take it (fixed:1f1b)"),
                              ("fixed:1f1b,foo=1", (), "error: --space: fixed:1f1b takes chunks=V, waves=W or split=A:B "
                                                       "after a comma, got 'foo=1'"),
                              # read as any space's keys: a key twice was called a clash with a --chunks never given,
                              # and a bad split passed the spec and was blamed on --split when described
                              ("fixed:interleaved-1f1b,chunks=2,chunks=4", (), "error: --space: space key 'chunks' is given twice"),
                              ("fixed:chimera-asym,split=abc", (), "error: --space: space key 'split' must be two positive "
                                                                   "numbers A:B, e.g. 1:2, got 'abc'")):
        refused = run("search", "--unit", "-p", 4, "-m", 8, "--space", spec, *flags)
        assert (refused.exit_code, refused.output.splitlines()) == (1, [line])


def test_a_fractional_byte_count_does_not_overflow_the_memory_model():
    """The distributed optimizer's state over d = 200 replicas is a fractional byte count; the
    common denominator of several overflowed CP-SAT's 64-bit integers (a traceback from search and
    plan). Byte counts are whole bytes now, and the search runs."""
    result = run("search", "-p", 8, "-m", 16, "--model", "llama3-70b", "--system", "dgx-h100", "--tp", 8, "--dp", 200,
                 "--global-batch", 3200, "--distributed-optimizer", "--memory-limit", "80GB", "--method", "cp",
                 "--space", "placement=looped", "--time-limit", 20, "--deterministic-time", 1, "--workers", 1, "-q", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["step_time_s"] > 0


def test_a_free_placement_model_too_large_to_build_in_time_is_not_built():
    """Under a free placement the model holds an optional interval per op and device: at p = 256,
    m = 8 (1M intervals) building it ran 105 s past a 5 s limit, the estimate counting ops only.
    The estimate counts the devices too, and the hint is reported with the reason."""
    import ppopt.solve.search as searching

    result = run("search", "--unit", "-p", 256, "-m", 8, "--space", "placement=any", "--time-limit", 5, "-q", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    found = re.fullmatch(r"building the model of ([\d,]+) ops takes about (\d+) s, more than the time left: the best hint is reported",
                         data["note"])
    assert found, data["note"]
    ops = int(found.group(1).replace(",", ""))
    assert int(found.group(2)) == round(searching.BUILD_S_PER_OP * ops + searching.BUILD_S_PER_PLACEMENT * ops * 256) > 5
    assert data["hint"] == "greedy" and data["step_time_s"] == data["hint_step_time_s"]


def test_a_frontier_of_too_many_limits_is_refused_before_any_search():
    """10,000 limits ran 18 s past a 10 s limit, silent, sharing their results pair by pair."""
    from ppopt.solve.gap import MAX_LIMITS

    many = ",".join(str(4 + k / 1000) for k in range(MAX_LIMITS + 1))
    result = run("frontier", "-p", 4, "-m", 8, "--unit", "--limits", many, "--time-limit", 10)
    assert (result.exit_code, result.output) == (
        1, f"error: --limits: {MAX_LIMITS + 1:,} memory limits: a frontier takes at most {MAX_LIMITS:,} (each gets a share of "
           "the time limit)\n")
    assert run("frontier", "-p", 4, "-m", 8, "--unit", "--limits", ",".join(["5"] * (MAX_LIMITS + 1)), "--time-limit", 10,
               "-q").exit_code == 0  # a limit given twice is one point


def test_a_time_limit_too_short_for_the_trace_is_refused_before_the_search(tmp_path):
    """A trace of 499,200 ops (about 25 s to write) was written after a 14 s limit had passed (17 s)."""
    from ppopt.cli.solver import _rounded_up
    from ppopt.report.trace import trace_time_s

    trace = tmp_path / "s.json.gz"
    result = run("search", "--unit", "-p", 64, "-m", 3900, "--no-grid", "--trace", trace, "--time-limit", 14)
    assert (result.exit_code, result.output) == (
        1, f"error: --time-limit: 14 s cannot cover a search of 499,200 ops and writing --trace (about "
           f"{_rounded_up(trace_time_s(499_200))} s for it): give more, or leave --trace out\n")
    assert not trace.exists()


def test_no_solver_bound_is_null_in_json_as_it_is_a_dash_in_text():
    """A solve cut before CP-SAT proved anything left solver_bound_s at 0.0 in JSON (a bound of 0
    slots) where the text said "solver -"."""
    args = ["search", "--unit", "-p", 8, "-m", 32, "--comm", 1, "--memory-limit", 2.5, "--space", "placement=v,backward=split",
            "--deterministic-time", 0.05, "--time-limit", 30, "-q", "--no-grid"]
    text = run(*args)
    assert text.exit_code == 0 and "(solver -, analytic " in text.stdout
    data = json.loads(run(*args, "--json").stdout)
    assert data["solver_bound_s"] is None and data["bound_s"] == max(data["analytic_bounds_s"].values())


def test_gap_says_its_bound_holds_within_the_memory_limit_when_a_row_is_over_it():
    """GPipe over a cap of 4 runs 39 slots beside its space's bound of 46: the table's own line
    said the bound held for every schedule of the space, which GPipe seemed to contradict."""
    over = run("gap", *UNIT, "--memory-limit", "4", "-s", "gpipe", "-s", "1f1b")
    assert over.exit_code == 0, over.output
    gpipe = next(line.split() for line in over.stdout.splitlines() if line.startswith("gpipe "))
    assert gpipe[1:4] == ["39", "46", "46"] and "over the memory limit" in over.stdout
    assert "bound valid for every schedule of the space within the memory limit (a schedule over it may be shorter" in over.stdout
    # every row within the limit: the bound still holds only within it (46 at a cap of 4; 39 without)
    fits = run("gap", *UNIT, "--memory-limit", "4", "-s", "1f1b")
    assert "bound valid for every schedule of the space within the memory limit\n" in fits.stdout
    free = run("gap", *UNIT, "-s", "1f1b")
    assert "bound valid for every schedule of the space\n" in free.stdout


def test_gap_csv_leaves_the_gap_of_a_row_over_the_memory_limit_empty():
    """A numeric CSV column holds numbers only: the gap of GPipe over the cap was '-', which made
    pandas read the whole 'gap %' column as text."""
    rows = run("gap", "-p", 3, "-m", 6, "--unit", "--comm", 1, "--memory-limit", 3, "-s", "1f1b", "-s", "gpipe",
               "--time-limit", 20, "-q", "--format", "csv").stdout.splitlines()
    header, *cells = list(csv.reader(rows))
    gaps = {row[0]: row[header.index("gap %")] for row in cells}
    assert gaps["gpipe"] == "" and float(gaps["1f1b"]) == pytest.approx(100 / 33, abs=1e-3)


def test_search_json_says_whether_the_schedule_fits_the_system_s_memory_as_evaluate_json_does():
    """The text said "device 0 peaks at 373.6 GiB, 299.1 GiB over ..."; the JSON had no such field,
    so a script could not tell whether the schedule found fits the GPU."""
    args = ["-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", 32]
    found = json.loads(run("search", *args, "--space", "placement=linear,backward=full", "--time-limit", 10, "-q", "--json").stdout)
    sim = found["simulation"]
    worst = max(range(4), key=lambda d: (sim["peak_memory_bytes"][d], -d))
    assert sim["memory_capacity_bytes"] == 80e9 and sim["over_memory"] is True and sim["over_memory_device"] == worst
    assert sim["memory_excess_bytes"] == pytest.approx(sim["peak_memory_bytes"][worst] - 80e9)
    evaluated = json.loads(run("evaluate", "-s", "1f1b", *args, "--json").stdout)["simulation"]
    assert set(evaluated) - set(sim) == {"job"} and "job" in found  # evaluate's fields; search gives the job at its top
    unit = json.loads(run("search", "-p", 4, "-m", 8, "--unit", "--time-limit", 10, "-q", "--json").stdout)["simulation"]
    assert "over_memory" not in unit  # no system, no capacity


def test_gap_names_the_fastest_handcrafted_schedule_and_the_best_any_search_found():
    """Each gap is against the schedule's own space: 1F1B optimal in its space reads 0.00 % beside
    a faster family. Under a table of several rows a line says which is fastest, and how low the
    searches went; one row gets none (it would repeat the row)."""
    args = ["gap", *UNIT, "--memory-limit", 4, "-s", "1f1b", "-s", "zb-h1", "-s", "gpipe", "--json"]
    data = json.loads(run(*args).stdout)
    rows = {row["schedule"]: row for row in data["schedules"]}
    fastest = min((r for r in rows.values() if r["fits"]), key=lambda r: r["step_time_s"])
    best = min(rows.values(), key=lambda r: (r["best_found_s"], r["bound_s"]))
    text = run(*args[:-1]).stdout.splitlines()[-1]
    assert fastest["schedule"] == "zb-h1" and not rows["gpipe"]["fits"]  # GPipe, faster, is over the cap
    assert text == (f"fastest handcrafted within the limit: zb-h1 ({fastest['step_time_s']:g}); best found by the searches: "
                    f"{best['best_found_s']:g} in {best['schedule']}'s space (bound {best['bound_s']:g}); each gap is against "
                    "its own schedule's space")
    alone = run("gap", *UNIT, "-s", "1f1b").stdout
    assert "fastest handcrafted" not in alone


def test_gap_does_not_call_a_schedule_over_the_gpus_memory_the_fastest():
    """llama3-8b on dgx-h100 at p = 4: DualPipe ran fastest but holds two weight copies, over an 80 GB
    GPU (marked #), and the summary line still named it the fastest handcrafted schedule."""
    from ppopt.report.solve import gap_text
    from ppopt.solve.gap import GapReport, GapRow

    rows = (GapRow("dualpipe", "placement=bidirectional", 2.07, 90e9, True, 2.03, 2.02, 0.02, "feasible"),
            GapRow("hanayo", "placement=wave", 2.69, 60e9, True, 2.5, 2.4, 0.12, "feasible"))
    report = GapReport(rows, {}, {}, "s", "no memory limit", memory_unit="bytes", memory_capacity=80e9)
    text = gap_text(report, 4, 8)
    assert "fastest handcrafted within the GPU's memory: hanayo (2.69 s)" in text
    roomy = GapReport(rows, {}, {}, "s", "no memory limit", memory_unit="bytes", memory_capacity=100e9)
    assert "fastest handcrafted: dualpipe (2.07 s)" in gap_text(roomy, 4, 8)


def test_a_search_that_finds_nothing_within_the_limit_does_not_say_it_reports_a_hint():
    """Every hint of the DualPipe space is over a cap of 4 here, and a tiny deterministic time finds
    nothing: the report said "the best hint is reported" and "best from handcrafted dualpipe+split"
    beside a step of "-"."""
    args = ["search", "--unit", "-p", 8, "-m", 32, "--comm", 1, "--memory-limit", 4, "--space",
            "placement=bidirectional,backward=split,directions=even", "--time-limit", 20, "--deterministic-time", 0.001,
            "-q", "--no-grid"]
    data = json.loads(run(*args, "--json").stdout)
    assert data["status"] == "unknown" and data["step_time_s"] is None and data["schedule"] is None
    assert data["note"].endswith(": no schedule within the memory limit to report (the hints are over it)")
    text = run(*args).stdout
    assert "step time  - (no schedule found within the memory limit)" in text and "best hint is reported" not in text


def test_the_frontiers_minimum_memory_works_as_a_memory_limit():
    """frontier printed "minimum memory 46.24 GiB", and search refused --memory-limit 46.24GiB (the
    minimum is 46.244 GiB): the minimum is now rounded up, with its bytes."""
    common = ["-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", 8, "--time-limit", 10, "-q"]
    lines = run("frontier", *common).stdout.splitlines()
    found = re.search(r"minimum memory (\S+) GiB \((\d+) bytes\)$", lines[0])
    assert found is not None, lines[0]
    assert run("search", *common, "--memory-limit", f"{found[1]}GiB", "--no-grid").exit_code == 0
    # so does the first point's limit, at four digits (it read 80.74 GiB for a minimum of 80.7441 GiB)
    first_limit = lines[next(k for k, line in enumerate(lines) if line.startswith("---")) + 1].split(" GiB")[0]
    assert float(first_limit) * 2**30 >= int(found[2])
    below = run("search", *common, "--memory-limit", f"{int(found[2]) - 1}B", "--no-grid")
    assert below.exit_code == 1 and "below the minimum" in below.stderr


def test_the_memory_bound_carries_no_float_noise():
    """V placement, p = 8, m = 16, a cap of one activation: the activation-area bound is 378.5 slots;
    its divisions made it 378.499999999632 in JSON, beside 378.5 in the text and the frontier."""
    data = json.loads(run("search", "--unit", "-p", 8, "-m", 16, "--comm", 1, "--space", "placement=v,backward=split",
                          "--memory-limit", 1, "--json", "-q", "--time-limit", 10, "--deterministic-time", 0.05).stdout)
    assert data["analytic_bounds_s"]["memory"] == 378.5


def test_the_family_is_optimal_where_its_one_member_is(tmp_path):
    """A 4-layer model where only the linear placement fits 7 GiB: placement=linear said optimal
    (a 0.09 % gap, within the ticks' rounding), placement=family feasible for the same schedule and
    bound, as it asked for a gap of 0 where every search allows the rounding (README, Solver ticks)."""
    model = tmp_path / "tiny4v.toml"
    model.write_text('name = "tiny4v"\nnum_layers = 4\nhidden_size = 4096\nffn_hidden_size = 14336\nnum_attention_heads = 32\n'
                     'num_kv_heads = 8\nvocab_size = 1024\nseq_length = 8192\nglobal_batch_size = 8\nactivation = "swiglu"\n'
                     'flash_attention = true\ndropout = false\ntie_embeddings = false\nlearned_position_embeddings = false\n')
    common = ["search", "--model", model, "--system", "dgx-h100", "-p", 4, "-m", 8, "--global-batch", 8, "--memory-limit", "7GiB",
              "--workers", 1, "--json", "-q"]
    linear = json.loads(run(*common, "--space", "placement=linear").stdout)
    family = json.loads(run(*common, "--space", "placement=family").stdout)
    assert linear["status"] == "optimal" and 0 < linear["gap"] <= linear["rounding_cost"]
    assert (family["status"], family["step_time_s"], family["bound_s"]) == ("optimal", linear["step_time_s"], linear["bound_s"])


def test_no_reported_bound_lies_above_the_step():
    """Llama 3 8B, p = 4, m = 8 under 50 GiB: the period bound read 7.682866663314595 s beside a step
    and bound of 7.682866663314584 s (float sums' last bits), so 'bound <= step' failed on the JSON."""
    data = json.loads(run("search", "--model", "llama3-8b", "--system", "dgx-h100", "-p", 4, "-m", 8, "--global-batch", 8,
                          "--workers", 1, "--memory-limit", "50GiB", "--json", "-q").stdout)
    parts = [data["bound_s"], data["period_bound_s"], data["solver_bound_s"], *data["analytic_bounds_s"].values()]
    assert data["period_bound_s"] is not None and all(bound <= data["step_time_s"] for bound in parts)


def test_a_hint_file_over_the_memory_limit_is_said(tmp_path):
    """search --schedule-file with a schedule over the limit reported another hint and no word of it:
    1F1B on 4 devices keeps 4 activations on device 0, over a limit of 3."""
    path = tmp_path / "mine.csv"
    assert run("export", "-s", "1f1b", "-p", 4, "-m", 8, "-o", path).exit_code == 0
    result = run("search", "--unit", "-p", 4, "-m", 8, "--schedule-file", path, "--memory-limit", 3, "--time-limit", 10, "-q",
                 "--no-grid", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["note"].endswith("hint mine needs 4 activations on its worst device, over the memory "
                                                      "limit: not a schedule of the space (only a version fitted to the "
                                                      "limit can start the search)")
    fitting = run("search", "--unit", "-p", 4, "-m", 8, "--schedule-file", path, "--memory-limit", 4, "--time-limit", 10, "-q",
                  "--no-grid", "--json")
    assert "hint mine" not in (json.loads(fitting.stdout)["note"] or "")


def test_a_limit_below_the_minimum_advises_only_settings_not_at_their_least():
    """The refusal advised recomputation and a smaller micro batch to a job with full recomputation
    and one sequence per microbatch; it names what would lower the need, and only that."""
    common = ["search", "--model", "llama3-8b", "--system", "dgx-h100", "-p", 4, "-m", 8, "--memory-limit", "1GiB", "-q"]
    plain = run(*common, "--global-batch", 64)  # 8 sequences per microbatch, no recomputation
    assert plain.exit_code == 1 and plain.stderr.rstrip().endswith(
        "; more tensor parallelism, recomputation, a smaller micro batch, or a distributed optimizer over data-parallel "
        "replicas need less per device")
    least = run(*common, "--global-batch", 8, "--recompute", "full")
    assert least.exit_code == 1 and least.stderr.rstrip().endswith(
        "; more tensor parallelism or a distributed optimizer over data-parallel replicas need less per device")
    selective = run(*common, "--global-batch", 8, "--recompute", "selective")
    assert "; more tensor parallelism, full recomputation, or a distributed optimizer" in selective.stderr
