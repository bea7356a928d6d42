"""Sweeps: rows, resume (also after a torn write), executors, spec validation, the CLI."""

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.cli.options import ProgressBar
from ppopt.errors import ConfigError, PpoptError
from ppopt.host import max_local_jobs
from ppopt.sweep import COLUMNS, LocalExecutor, load_spec, point_hash, read_rows, run_sweep
from ppopt.sweep.executors import make_executor
from ppopt.sweep.run import INPUT_COLUMNS, locked
from ppopt.sweep.spec import MAX_SWEEP_OPS, check_sweep_size

ROOT = Path(__file__).resolve().parent.parent

SPEC = """
description = "test sweep"
schedules = ["gpipe", "1f1b", "chimera", "chimera-asym", "hanayo"]
devices = [3, 4]
microbatches = [4, 8]
models = ["study"]
systems = ["mid-mid", "fast-slow"]
global_batch = 64

[options]
split = ["1:2", "1:1"]

[filters.hanayo]
microbatches_equal_devices = true

[solver]
schedules = ["gpipe", "1f1b", "zb-h1"]
devices = [2]
microbatches = [4]
memory_limits = ["none", 2]
time_limit_s = 20
deterministic_time = 1
"""


def write_spec(directory: Path, text: str = SPEC, name: str = "small.toml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted in-process run of SPEC."""
    directory = tmp_path_factory.mktemp("reference")
    result = run_sweep(load_spec(write_spec(directory)), directory / "out")
    return result


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_rows_are_written_with_inputs_hash_and_metrics(reference):
    out = reference.output
    rows = [json.loads(line) for line in lines(out / "rows.jsonl")]
    # evaluation: per system and (p, m): gpipe, 1f1b, chimera, chimera-asym x 2 splits; hanayo only at m = p = 4
    evaluate = [r for r in rows if r["kind"] == "evaluate"]
    assert len(evaluate) == 2 * (4 * 5 + 1)
    gap = [r for r in rows if r["kind"] == "gap"]
    assert len(gap) == 2 * 3
    assert reference.points == len(rows) == reference.computed + reference.skipped
    for row in rows:
        inputs = {k: row[k] for k in INPUT_COLUMNS if k in row}
        assert row["hash"] == point_hash(inputs)
        assert len(row["hash"]) == 16
    # Chimera needs an even p: its p = 3 points are rows that say why
    skipped = [r for r in evaluate if r["status"] == "skipped"]
    assert reference.skipped == len(skipped) == 2 * 2 * 3 and reference.reused == reference.missing == 0
    assert {r["schedule"] for r in skipped} == {"chimera", "chimera-asym"} and {r["devices"] for r in skipped} == {3}
    assert all(r["reason"] and "\n" not in r["reason"] for r in skipped)
    ok = [r for r in evaluate if r["status"] == "ok"]
    for column in ("formula_bubble_ratio", "formula_length", "formula_peak_activations_max", "table_length", "table_bubble_ratio",
                   "table_peak_activations_max", "sim_step_time_s", "sim_idle_ratio", "sim_peak_activation_bytes_max",
                   "sim_peak_memory_bytes_max", "sim_persistent_bytes_max"):
        assert all(isinstance(r[column], (int, float)) for r in ok), column
    assert all(r["split"] is None for r in evaluate if r["schedule"] != "chimera-asym")
    assert {r["split"] for r in evaluate if r["schedule"] == "chimera-asym"} == {"1:2", "1:1"}
    # gpipe and 1f1b share one search per memory limit; gpipe (4 live) is over a 2-activation limit at m = 4
    assert all(r["status"] == "ok" and r["solver_status"] == "optimal" for r in gap)
    # proven within their deterministic time, long before the time limit: nothing cut, so a rerun repeats them
    assert all(r["solver_cut"] is None for r in gap)
    over = [r for r in gap if r["memory_limit"] == 2.0 and r["schedule"] == "gpipe"]
    assert over[0]["solver_fits"] is False and over[0]["gap"] is None
    assert all(r["gap"] is not None and r["gap"] >= 0 for r in gap if r["solver_fits"])
    # the CSV: fixed header, rows in point order
    table = list(csv.reader(io.StringIO((out / "rows.csv").read_text())))
    assert tuple(table[0]) == COLUMNS
    assert len(table) == 1 + len(rows)
    assert [r[COLUMNS.index("kind")] for r in table[1:]] == ["evaluate"] * len(evaluate) + ["gap"] * len(gap)


def test_rerun_skips_every_point(reference, tmp_path):
    out = tmp_path / "out"
    loaded = load_spec(write_spec(tmp_path))
    run_sweep(loaded, out)
    before = (out / "rows.jsonl").read_bytes()
    again = run_sweep(loaded, out)
    assert again.computed == 0 and again.reused + again.skipped == again.points and again.skipped == reference.skipped
    assert (out / "rows.jsonl").read_bytes() == before
    assert (out / "rows.csv").read_text() == (reference.output / "rows.csv").read_text()


def test_lines_that_are_not_rows_are_counted_and_their_points_run_again(reference, tmp_path):
    """A hand-edited rows.jsonl: lines that are no row were ignored without a word. The rerun now
    names them, computes the points they replaced, and ends with the reference CSV."""
    from ppopt.cli.sweep import summary_text

    out = tmp_path / "out"
    loaded = load_spec(write_spec(tmp_path))
    run_sweep(loaded, out)
    data = (out / "rows.jsonl").read_text().splitlines(keepends=True)
    (out / "rows.jsonl").write_text("".join(data[:2]) + "garbage\n[1]\n" + '{"hash": 5}\n' + "".join(data[3:]))
    resumed = run_sweep(loaded, out)
    assert resumed.unreadable == (3, 4, 5) and resumed.missing == 0
    assert resumed.computed == (1 if json.loads(data[2])["status"] == "ok" else 0)
    assert "3 unreadable line(s) of rows.jsonl ignored (line 3, 4, 5), the points of this spec among them run again" in summary_text(resumed)
    assert (out / "rows.csv").read_text() == (reference.output / "rows.csv").read_text()


def test_a_row_edited_to_a_value_of_the_wrong_type_is_computed_again(reference, tmp_path):
    """A step time edited to "abc" (a number column) or a schedule to 5 (a text column): the row was
    reused, "abc" went into rows.csv, and the study's report failed with an internal error. Such a
    line is unreadable, and its point runs again."""
    out = tmp_path / "out"
    loaded = load_spec(write_spec(tmp_path))
    run_sweep(loaded, out)
    lines = (out / "rows.jsonl").read_text().splitlines(keepends=True)
    numbered = [k for k, line in enumerate(lines) if json.loads(line).get("sim_step_time_s") is not None][:2]
    edited = list(lines)
    for k, (column, value) in zip(numbered, [("sim_step_time_s", "abc"), ("schedule", 5)]):
        row = json.loads(lines[k])
        row[column] = value
        edited[k] = json.dumps(row) + "\n"
    (out / "rows.jsonl").write_text("".join(edited))
    resumed = run_sweep(loaded, out)
    assert resumed.unreadable == tuple(k + 1 for k in numbered) and resumed.computed == 2
    assert (out / "rows.csv").read_text() == (reference.output / "rows.csv").read_text()


def test_interrupted_and_torn_run_resumes_to_the_same_csv(reference, tmp_path):
    out = tmp_path / "out"
    loaded = load_spec(write_spec(tmp_path))
    partial = run_sweep(loaded, out, max_items=9)
    assert 0 < partial.missing < partial.points
    assert partial.computed + partial.skipped + partial.missing == partial.points
    # killed mid-write: keep 5 whole lines and half of the 6th
    data = (out / "rows.jsonl").read_text().splitlines(keepends=True)
    (out / "rows.jsonl").write_text("".join(data[:5]) + data[5][: len(data[5]) // 2])
    assert len(read_rows(out / "rows.jsonl")) == 5
    calls = []
    resumed = run_sweep(loaded, out, progress=lambda done, total: calls.append((done, total)))
    assert resumed.missing == 0
    assert resumed.computed + resumed.reused + resumed.skipped == resumed.points
    old = list(read_rows(out / "rows.jsonl").values())[:5]
    assert resumed.reused == sum(r["status"] == "ok" for r in old)
    # progress: once per work item, rows done so far out of the rows this run computes
    assert calls[-1] == (resumed.points - 5, resumed.points - 5)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and len({t for _, t in calls}) == 1
    for line in lines(out / "rows.jsonl"):
        json.loads(line)  # the torn line is gone, every line is whole
    assert len(lines(out / "rows.jsonl")) == resumed.points
    assert (out / "rows.csv").read_text() == (reference.output / "rows.csv").read_text()


def test_two_local_jobs_give_the_same_rows(reference, tmp_path):
    spec = SPEC.split("[solver]")[0]  # the evaluation points: the pool is under test, not the solver
    with LocalExecutor(2) as pool:
        result = run_sweep(load_spec(write_spec(tmp_path, spec)), tmp_path / "out", pool)
    expected = [r for r in reference.rows if r["kind"] == "evaluate"]
    assert result.computed + result.skipped == len(expected) == 42
    assert list(result.rows) == expected


def test_a_pool_draws_its_items_as_workers_free_up():
    """ppopt plan hands the pool a generator that stops at the budget's deadline: the pool must draw
    items when they are due (a window of 4 per worker), not list them all first, which let
    plan -j 2 evaluate every job whatever the time limit."""
    drawn = []

    def items():
        for i in range(1000):
            drawn.append(i)
            yield -i

    with LocalExecutor(2) as pool:
        results = pool.map_unordered(abs, items())
        got = [next(results) for _ in range(3)]
        results.close()
    assert len(set(got)) == 3 and set(got) <= set(drawn)  # abs(-i) = i: results of items drawn, each once
    assert len(drawn) <= 3 + 4 * 2  # the window plus one refill per result taken


def test_ray_gives_the_same_rows(reference, tmp_path):
    pytest.importorskip("ray")
    from ppopt.sweep import RayExecutor

    # three points of SPEC (one of them skipped): Ray's start-up is the cost, not the points
    spec = 'schedules = ["gpipe", "1f1b", "chimera"]\ndevices = [3]\nmicrobatches = [4]\nmodels = ["study"]\nsystems = ["mid-mid"]\nglobal_batch = 64\n'
    with RayExecutor(num_cpus=1) as pool:  # starts a local Ray and shuts it down on leaving
        assert pool.started
        result = run_sweep(load_spec(write_spec(tmp_path, spec)), tmp_path / "out", pool)
    assert not pool.ray.is_initialized()
    expected = [r for r in reference.rows if r["kind"] == "evaluate" and r["devices"] == 3 and r["microbatches"] == 4
                and r["system"] == "mid-mid" and r["schedule"] in ("gpipe", "1f1b", "chimera")]
    assert (result.computed, result.skipped) == (2, 1)
    assert list(result.rows) == expected


def test_ray_missing_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"^executor: ray needs ray: pip install 'ray>=2.9' \(ppopt's ray extra\)$"):
        make_executor("ray")


@pytest.mark.parametrize("command", [["sweep", "SPEC"], ["plan", "--model", "llama3-8b", "--gpus", "8", "--system", "dgx-h100",
                                                   "--search", "0"]])
def test_more_jobs_than_the_machine_runs_usefully_are_refused_before_any_process(tmp_path, command):
    """-j 1000000 (a typo, or a number meant for another machine) would start a process per work item
    on this one: refused in one line naming the limit, nothing started, nothing written."""
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    too_many = max_local_jobs() + 1
    args = [str(spec) if a == "SPEC" else a for a in command]
    result = CliRunner().invoke(main, [*args, "-j", str(too_many), "-q", *(["-o", str(tmp_path / "out")] if command[0] == "sweep" else [])])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (f"error: --jobs: {too_many} is more than this machine runs usefully: at most "
                                     f"{max_local_jobs()} (4 per CPU, 16 always allowed; {os.cpu_count() or 1} CPUs here)")
    assert not (tmp_path / "out").exists()
    with LocalExecutor(max_local_jobs()) as pool:  # the limit itself is taken
        assert sorted(pool.map_unordered(abs, [-1, -2])) == [1, 2]


@pytest.mark.parametrize("cpus, limit", [(1, 16), (2, 16), (4, 16), (8, 32), (64, 256), (None, 16)])
def test_the_jobs_limit_is_four_per_cpu_and_at_least_sixteen(monkeypatch, cpus, limit):
    from ppopt.errors import ConfigError
    from ppopt.sweep.executors import _check_jobs

    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    assert max_local_jobs() == limit
    _check_jobs(limit)
    with pytest.raises(ConfigError) as error:
        _check_jobs(limit + 1)
    assert (error.value.field, error.value.reason) == (
        "jobs", f"{limit + 1} is more than this machine runs usefully: at most {limit} (4 per CPU, 16 always allowed; "
                f"{cpus or 1} CPUs here)")


def test_jobs_with_a_ray_address_are_refused_not_dropped():
    """A running cluster has the CPUs it was started with: -j 4 was passed to nothing, without a word."""
    with pytest.raises(ConfigError) as error:
        make_executor("ray", jobs=4, address="127.0.0.1:1")
    assert (error.value.field, error.value.reason) == (
        "jobs", "gives a local Ray its CPUs; the cluster at --address 127.0.0.1:1 uses its own: drop -j 4")


def test_unreachable_ray_address_fails_fast():
    pytest.importorskip("ray")
    with pytest.raises(ConfigError, match="cannot reach the Ray cluster at 127.0.0.1:1"):
        make_executor("ray", address="127.0.0.1:1")


def test_a_ray_address_that_never_answers_ends_with_the_deadline():
    """A port where something other than Ray listens passed the reachability check, and ray.init
    retried for minutes, past --time-limit (over 120 s for a limit of 5). With a deadline the
    connection is waited for until then. In a subprocess: the abandoned connecting thread goes on
    retrying, which the test run must not inherit."""
    pytest.importorskip("ray")
    import socket

    with socket.socket() as listening:  # accepts connections (the backlog), never answers
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        port = listening.getsockname()[1]
        script = ("import time\nfrom ppopt.errors import ConfigError\nfrom ppopt.sweep.executors import make_executor\n"
                  f"try:\n    make_executor('ray', address='127.0.0.1:{port}', deadline=time.monotonic() + 2)\n"
                  "except ConfigError as error:\n    print(error.field, error.reason, flush=True)\n"
                  "import os\nos._exit(0)\n")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.stdout.startswith(f"address cannot reach the Ray cluster at 127.0.0.1:{port}: no answer within the time limit")


def test_edited_spec_keeps_old_rows_out_of_the_csv(reference, tmp_path):
    out = tmp_path / "out"
    run_sweep(load_spec(write_spec(tmp_path)), out)
    smaller = SPEC.replace('systems = ["mid-mid", "fast-slow"]', 'systems = ["mid-mid"]')
    result = run_sweep(load_spec(write_spec(tmp_path, smaller)), out)
    assert result.computed == 0
    table = list(csv.DictReader(io.StringIO((out / "rows.csv").read_text())))
    assert {r["system"] for r in table if r["kind"] == "evaluate"} == {"mid-mid"}
    assert len(lines(out / "rows.jsonl")) == reference.points
    # the rows of the earlier spec's other points are counted and said to be kept outside rows.csv
    assert result.other_rows == reference.points - result.points > 0
    from ppopt.cli.sweep import summary_text

    assert (f"rows.jsonl also holds {result.other_rows:,} rows of points outside this spec (an earlier spec's: kept, "
            "not in rows.csv)") in summary_text(result)
    assert reference.other_rows == 0 and "outside this spec" not in summary_text(reference)


def test_solver_rows_the_wall_clock_cut_are_counted_in_the_summary_and_the_report(reference, tmp_path):
    """Two runs of a spec whose searches the clock cut differed in three rows, and neither the summary,
    --json nor the study's report said so: only rows.csv's solver_cut column knew."""
    import dataclasses

    from ppopt.cli.sweep import summary_text
    from ppopt.report.study import write_report

    assert reference.cut_rows == 0 and "cut by the wall clock" not in summary_text(reference)
    gap_rows = [k for k, r in enumerate(reference.rows) if r["kind"] == "gap" and r["status"] == "ok"]
    cut = "a CP-SAT solve stopped at its wall-clock time limit"
    rows = tuple(dict(r, solver_cut=cut) if k in gap_rows[:2] else r for k, r in enumerate(reference.rows))
    result = dataclasses.replace(reference, rows=rows)
    assert result.summary()["solver_cut_rows"] == 2
    assert "\n2 solver rows cut by the wall clock (column solver_cut): a rerun may give other figures there." in summary_text(result)
    (tmp_path / "study").mkdir()
    (tmp_path / "plain").mkdir()
    report = write_report(load_spec(write_spec(tmp_path)), rows, tmp_path / "study", figures=False).read_text()
    assert f"2 rows of this table were cut by the wall clock (rows.csv's solver_cut, e.g. {cut})" in report
    plain = write_report(load_spec(write_spec(tmp_path)), reference.rows, tmp_path / "plain", figures=False).read_text()
    assert "cut by the wall clock" not in plain


@pytest.mark.parametrize(
    "change, key",
    [
        (("schedules =", "schedulez ="), "unknown key 'schedulez'; did you mean 'schedules'?"),
        # a key no spec takes lists the keys; a job field at the top says where it goes
        (("schedules =", "pp = 2\nschedules ="), "unknown key 'pp' (known: description, schedules, devices, microbatches, models, "
                                                  "systems, global_batch, backward, options, filters, solver, job)"),
        (("schedules =", "tp = 2\nschedules ="), "key 'tp': a field of the [job] table: write it under [job]"),
        # inside a table, and inside a named table of a table, the closest key of that table
        (("time_limit_s = 20", "time_limit = 20"), "unknown key 'solver.time_limit'; did you mean 'time_limit_s'?"),
        (("microbatches_equal_devices = true", "microbatches_equal_device = true"),
         "unknown key 'filters.hanayo.microbatches_equal_device'; did you mean 'microbatches_equal_devices'?"),
        (("time_limit_s = 20", "time_limit_s = 20\nworkers = 2"), "unknown key 'solver.workers'"),
        (("devices = [3, 4]", 'devices = ["3", 4]'), "key 'devices.0'"),
        (("global_batch = 64", "global_batch = 6.4"), "key 'global_batch'"),
        (('"hanayo"]', '"hanayo", "pipedream"]'), "key 'schedules': unknown schedule 'pipedream'"),
        (('models = ["study"]', 'models = ["nosuchmodel"]'), "key 'models.0': unknown model preset 'nosuchmodel'"),
        (('systems = ["mid-mid", "fast-slow"]', 'systems = ["mid-mid", "warp"]'), "key 'systems.1': unknown system preset 'warp'"),
        (('split = ["1:2", "1:1"]', 'split = "1:x"'), "key 'options.split'"),
        (('split = ["1:2", "1:1"]', 'split = []'), "key 'options.split': an empty list sweeps nothing"),
        (('schedules = ["gpipe", "1f1b", "zb-h1"]', "schedules = []"), "key 'solver.schedules': an empty list sweeps nothing"),
        (("[filters.hanayo]", "[filters.hanayoo]"), "key 'filters.hanayoo': unknown schedule"),
        # an empty list left out would mean every value: refused, not read as "all"
        (("devices = [2]", "devices = []"), "key 'solver.devices': List should have at least 1 item"),
        (("microbatches_equal_devices = true", "devices = []"), "key 'filters.hanayo.devices': List should have at least 1 item"),
        # a filter that keeps none of the sweep's points (the sweep has 3 and 4 devices)
        (("microbatches_equal_devices = true", "devices = [8]"), "key 'filters.hanayo': keeps no point of the sweep"),
        (("microbatches_equal_devices = true", "microbatches_equal_devices = true\nmicrobatches = [8]\ndevices = [3]"),
         "key 'filters.hanayo': keeps no point"),
        (("microbatches_equal_devices = true", "microbatches_equal_devices = 1"), "key 'filters.hanayo.microbatches_equal_devices'"),
        (("microbatches = [4, 8]", "microbatches = [4, 4]"), "key 'microbatches': duplicate value"),
        # the solver's own lists and a split given twice as another ratio: each search or point twice
        (("devices = [2]", "devices = [2, 2]"), "key 'solver.devices': duplicate value 2"),
        (("microbatches = [4]\nmemory", "microbatches = [4, 4]\nmemory"), "key 'solver.microbatches': duplicate value 4"),
        (('split = ["1:2", "1:1"]', 'split = ["1:2", "2:4"]'), "key 'options.split': duplicate value '2:4' (the same split as '1:2')"),
        (('memory_limits = ["none", 2]', 'memory_limits = ["unlimited"]'), "key 'solver.memory_limits.0'"),
        # values every point refused (each was skipped, exit 0), refused when the spec is read
        (("time_limit_s = 20", "time_limit_s = 20\nseed = 2147483648"), "key 'solver.seed': Input should be less than 2147483648"),
        (("time_limit_s = 20", "time_limit_s = 1e300"), "key 'solver.time_limit_s': Input should be less than or equal to 86400"),
        (("time_limit_s = 20", "time_limit_s = 20\ncomm = 1e300"), "key 'solver.comm': must be at most 1,000,000 slots"),
        (("time_limit_s = 20", "time_limit_s = 20\nforward = 0.0"), "key 'solver.forward': must be a finite number > 0"),
        (("time_limit_s = 20", "time_limit_s = 20\nweight = 3.0"), "key 'solver.weight': must lie between 0 and backward (2)"),
        (('memory_limits = ["none", 2]', "memory_limits = []"), "key 'solver.memory_limits': List should have at least 1 item"),
        (("global_batch = 64", "global_batch = 4611686018427387904"), "key 'global_batch': Input should be less than or equal to 1073741824"),
        # inf passed PositiveFloat and then broke the spec's strict-JSON hash with a traceback
        (("deterministic_time = 1", "deterministic_time = inf"), "key 'solver.deterministic_time': must be a finite number, got inf"),
        (('memory_limits = ["none", 2]', 'memory_limits = ["none", inf]'), "key 'solver.memory_limits.1'"),
    ],
)
def test_malformed_spec_is_a_one_line_error_naming_the_key(tmp_path, change, key):
    path = write_spec(tmp_path, SPEC.replace(*change, 1), "bad.toml")
    with pytest.raises(ConfigError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.split(":")[0].endswith("bad.toml")
    assert key in message


def test_not_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_spec(write_spec(tmp_path, "devices = [", "broken.toml"))
    with pytest.raises(ConfigError, match="missing key 'devices'"):
        load_spec(write_spec(tmp_path, 'models = ["study"]\nsystems = ["mid-mid"]\nmicrobatches = [4]', "short.toml"))
    with pytest.raises(ConfigError, match="nothing.toml: no such file$"):
        load_spec(tmp_path / "nothing.toml")


def test_a_model_or_system_file_given_as_a_spec_is_named_as_such(tmp_path):
    """A model file given to sweep listed its every key as unknown, each with the spec's eleven keys:
    a line of 2,500 characters. It is named as a model (system) file now, and a spec with several
    unknown keys lists the known ones once."""
    for noun, folder, name in (("model", "models", "llama3-8b.toml"), ("system", "configs", "dgx-h100.toml")):
        with pytest.raises(ConfigError, match=rf"{name}: a {noun} file, not a sweep spec \(it gives .*\); a spec names "
                                              rf"{noun}s in its '{noun}s' key$"):
            load_spec(ROOT / folder / name)
    spec = write_spec(tmp_path, 'foo = 1\nbar = 2\n' + SPEC, "unknown.toml")
    with pytest.raises(ConfigError) as caught:
        load_spec(spec)
    assert str(caught.value).count("(known: ") == 1 and "unknown key 'bar'" in str(caught.value)


def test_cli_sweep(tmp_path):
    runner = CliRunner()
    bad = write_spec(tmp_path, SPEC.replace("schedules =", "schedulez =", 1), "bad.toml")
    result = runner.invoke(main, ["sweep", str(bad)])
    assert result.exit_code == 1
    assert "unknown key 'schedulez'" in result.output
    assert len(result.output.strip().splitlines()) == 1
    spec = write_spec(tmp_path, SPEC.split("[solver]")[0])
    result = runner.invoke(main, ["sweep", str(spec), "--output", str(tmp_path / "out"), "--quiet", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["points"] == 2 * 21 and summary["skipped"] == 2 * 2 * 3 and summary["computed"] == 42 - 12
    result = runner.invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0
    assert "42 points: 0 computed, 30 already in rows.jsonl, 12 skipped (not applicable), 0 missing" in result.output
    result = runner.invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "out"), "--address", "x:1"])
    assert result.exit_code == 1 and "error: --address: is for the ray executor" in result.output
    assert runner.invoke(main, ["sweep", "--help"]).exit_code == 0
    assert runner.invoke(main, ["study", "--help"]).exit_code == 0


def test_progress_bar_draws_on_one_line():
    stream = io.StringIO()
    bar = ProgressBar("sweep x", stream)
    for done in (1, 2, 3):
        bar(done, 3)
    bar.close()
    text = stream.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    assert "3/3" in text and text.startswith("\r")


def test_progress_bar_waits_its_after_s_and_a_quick_run_draws_nothing(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("ppopt.cli.options.time.monotonic", lambda: clock[0])
    quick, stream = io.StringIO(), io.StringIO()
    bar = ProgressBar("x", quick, after_s=1.0)
    for done in (1, 2, 3):
        bar(done, 3)
    bar.close()
    assert quick.getvalue() == ""  # finished within the second
    bar = ProgressBar("x", stream, after_s=1.0)
    bar(1, 3)
    assert stream.getvalue() == ""
    clock[0] += 1.5
    bar(2, 3)
    bar(3, 3)
    bar.close()
    assert "3/3" in stream.getvalue() and stream.getvalue().endswith("\n")


def test_progress_bar_on_a_broken_stderr_stays_quiet():
    writes = []

    class Full(io.StringIO):
        def write(self, text):
            writes.append(text)
            raise OSError(28, "No space left on device")

    bar = ProgressBar("sweep x", Full())
    bar(1, 1)  # no exception: the sweep goes on without a bar
    bar(1, 1)
    bar.close()
    assert len(writes) == 1 and bar.stream is None  # it tried once, then stopped writing


def test_cli_draws_the_progress_bar_on_stderr(tmp_path):
    spec = write_spec(tmp_path, 'schedules = ["gpipe"]\ndevices = [2]\nmicrobatches = [2, 4]\nmodels = ["study"]\nsystems = ["mid-mid"]\n')
    result = CliRunner().invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    assert "] 2/2" in result.stderr and "2/2" not in result.stdout
    assert result.stdout.startswith("2 points: 2 computed")


def test_sweep_where_nothing_applies_says_so(tmp_path):
    # Chimera needs an even number of devices: the only point is skipped, nothing is computed
    spec = write_spec(tmp_path, 'schedules = ["chimera"]\ndevices = [3]\nmicrobatches = [4]\nmodels = ["study"]\nsystems = ["mid-mid"]\n')
    result = run_sweep(load_spec(spec), tmp_path / "out")
    assert (result.points, result.computed, result.reused, result.skipped, result.missing) == (1, 0, 0, 1, 0)
    again = CliRunner().invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "out"), "-q"])
    assert again.exit_code == 0
    first = again.output.splitlines()[0]
    assert first.startswith("1 point, none applicable: all 1 skipped") and "computed" not in first


def test_a_second_sweep_into_a_locked_directory_refuses(tmp_path):
    out = tmp_path / "out"
    spec = write_spec(tmp_path, SPEC.split("[solver]")[0])
    out.mkdir()
    with locked(out):  # another sweep holds the directory
        with pytest.raises(PpoptError, match="another sweep is writing to this directory"):
            run_sweep(load_spec(spec), out)
        result = CliRunner().invoke(main, ["sweep", str(spec), "-o", str(out), "-q"])
        assert result.exit_code == 1
        assert result.output == f"error: {out}: another sweep is writing to this directory (wait for it, or give another --output)\n"
        assert not (out / "rows.jsonl").exists()
    # released: the sweep runs
    assert run_sweep(load_spec(spec), out).missing == 0


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.csv", "spec.json"])
def test_an_output_file_that_is_a_directory_is_refused_before_any_point(tmp_path, name):
    """rows.csv is written after every point: a directory in its place was found only then."""
    out = tmp_path / "out"
    spec = write_spec(tmp_path, SPEC.split("[solver]")[0])
    (out / name).mkdir(parents=True)
    result = CliRunner().invoke(main, ["sweep", str(spec), "-o", str(out), "-q"])
    assert result.exit_code == 1
    assert result.output == f"error: --output: cannot write {out / name}: it is a directory\n"
    assert sorted(p.name for p in out.iterdir()) == [name]  # no row computed, nothing else written


def test_a_row_cut_down_by_hand_is_computed_again(tmp_path):
    """A line of rows.jsonl with the point's hash but none of its inputs is not a row: it made an
    all-blank "ok" row of rows.csv and counted as reused."""
    out = tmp_path / "out"
    spec = write_spec(tmp_path, SPEC.split("[solver]")[0])
    first = run_sweep(load_spec(spec), out)
    lines = (out / "rows.jsonl").read_text().splitlines()
    cut = json.loads(lines[0])
    lines[0] = json.dumps({"hash": cut["hash"], "status": "ok"})
    (out / "rows.jsonl").write_text("\n".join(lines) + "\n")
    again = run_sweep(load_spec(spec), out)
    assert again.computed == 1 and again.reused == first.computed - 1
    rows = list(csv.DictReader((out / "rows.csv").open()))
    assert all(row["schedule"] for row in rows)


def test_a_sweep_too_large_to_finish_is_refused_before_its_directory_is_made(tmp_path):
    """99 device counts x 10 microbatch counts x every schedule x 4 models x 5 systems: tens of billions
    of ops, days of work, refused in one line with the sum; so is a day of solver time."""
    out = tmp_path / "out"
    big = write_spec(tmp_path, 'schedules = ["gpipe"]\ndevices = [64]\nmicrobatches = [4096, 8192]\n'
                               'models = ["study"]\nsystems = ["mid-mid", "fast-fast", "slow-slow", "mid-slow", "fast-slow"]\n'
                               'global_batch = 8192\n', name="big.toml")
    spec = load_spec(big).spec
    ops = 5 * (64 * 4096 * 2 + 64 * 8192 * 2)
    assert ops < MAX_SWEEP_OPS  # this one fits ...
    check_sweep_size(spec)
    many = spec.model_copy(update={"devices": list(range(2, 202))})  # ... 200 times as many does not
    total = sum(5 * (p * 4096 * 2 + p * 8192 * 2) for p in range(2, 202))
    assert total > MAX_SWEEP_OPS
    with pytest.raises(ConfigError, match=f"^sweep too large: 2,000 points make {total:,} ops to simulate"):
        check_sweep_size(many)
    big.write_text(big.read_text().replace("devices = [64]", f"devices = {list(range(2, 202))}"))
    result = CliRunner().invoke(main, ["sweep", str(big), "-o", str(out), "-q"])
    assert result.exit_code == 1 and result.output.startswith(f"error: sweep too large: 2,000 points make {total:,} ops")
    assert not out.exists()


def test_a_day_of_solver_time_is_refused_unless_the_solver_points_are_left_out(tmp_path):
    """6 searches of 50,000 s are 83 h: refused in one line before the directory is made; with
    only the evaluation points run (``study --no-solver``) no search runs, and the sweep goes on."""
    from ppopt.sweep.run import run_sweep

    slow = write_spec(tmp_path, SPEC.replace("time_limit_s = 20", "time_limit_s = 50000"), name="slow.toml")
    loaded = load_spec(slow)
    with pytest.raises(ConfigError, match=r"^sweep too large: up to 6 searches of 50000 s make 83 h of solver time"):
        check_sweep_size(loaded.spec)
    check_sweep_size(loaded.spec, searches_run=False)
    with pytest.raises(ConfigError, match="h of solver time"):
        run_sweep(loaded, tmp_path / "both")
    assert not (tmp_path / "both").exists()
    result = run_sweep(loaded, tmp_path / "evaluation", kinds=("evaluate",))
    assert result.rows and {row["kind"] for row in result.rows} == {"evaluate"}


def _children(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is ``pid`` (Linux /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if int(ppid) == pid and state != "Z":
                found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_killed_sweep_takes_its_workers_with_it(tmp_path):
    # small points (the first row comes soon) but hundreds of them: the sweep still runs when it is killed
    spec = write_spec(tmp_path, 'schedules = "all"\ndevices = [8]\nmicrobatches = [32, 64, 128]\nmodels = ["study"]\n'
                                'systems = ["slow-slow", "slow-mid", "slow-fast", "mid-slow", "mid-mid", "mid-fast", "fast-slow", '
                                '"fast-mid", "fast-fast"]\n')
    out = tmp_path / "out"
    command = [sys.executable, "-c", "from ppopt.cli import main; main()", "sweep", str(spec), "-j", "2", "-q", "-o", str(out)]
    parent = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    try:
        # the workers run: two children besides the resource tracker, and a first row written
        assert _wait_for(lambda: len(_children(parent.pid)) >= 3 and (out / "rows.jsonl").exists()
                         and (out / "rows.jsonl").stat().st_size > 0, 60), "the sweep did not start its workers"
        workers = _children(parent.pid)
        parent.send_signal(signal.SIGKILL)
        assert len(read_rows(out / "rows.jsonl")) < 200, "the sweep ended before it was killed"
        parent.wait()
        assert _wait_for(lambda: not any(map(_alive, workers)), 10), "workers outlived the killed sweep"
    finally:
        parent.kill()
        parent.wait()
        for pid in filter(_alive, workers):  # a failed test leaves no orphans behind
            os.kill(pid, signal.SIGKILL)


def test_an_empty_schedule_list_is_refused_unless_the_solver_has_schedules(tmp_path):
    """schedules = [] with no solver schedules swept 0 points and exited 0; with [solver] schedules it
    is a sweep of gap points alone."""
    evaluation_only = SPEC.split("[solver]")[0].replace('schedules = ["gpipe", "1f1b", "chimera", "chimera-asym", "hanayo"]',
                                                        "schedules = []")
    with pytest.raises(ConfigError, match="key 'schedules': an empty list sweeps nothing"):
        load_spec(write_spec(tmp_path, evaluation_only, "empty.toml"))
    solver_only = SPEC.replace('schedules = ["gpipe", "1f1b", "chimera", "chimera-asym", "hanayo"]', "schedules = []")
    loaded = load_spec(write_spec(tmp_path, solver_only, "solver.toml"))
    assert loaded.spec.schedule_names() == [] and loaded.spec.solver_schedule_names() == ["gpipe", "1f1b", "zb-h1"]


def test_counts_that_every_point_would_refuse_are_refused_when_the_spec_is_read(tmp_path):
    """devices = [99999999999] (every schedule over the op limit) and global_batch = 7 with 8
    microbatches (no microbatch size) each swept 'none applicable: all skipped' with exit 0 and a
    directory made; both are now refused naming the key, before any directory exists. (A list of
    microbatch counts of which only some split the global batch stays a sweep whose rows say why
    the others are skipped.)"""
    evaluation_only = SPEC.split("[solver]")[0]
    huge = evaluation_only.replace("devices = [3, 4]", "devices = [3, 99999999999]")
    with pytest.raises(ConfigError, match=r"key 'devices': 99999999999 makes every schedule larger than the limit of "
                                          r"10,000,000 ops \(at least 2 x 99999999999 x 4 microbatches"):
        load_spec(write_spec(tmp_path, huge, "huge.toml"))
    many = evaluation_only.replace("microbatches = [4, 8]", "microbatches = [4, 2000000]")
    with pytest.raises(ConfigError, match=r"key 'microbatches': 2000000 makes every schedule larger"):
        load_spec(write_spec(tmp_path, many, "many.toml"))
    # both keys' values are over with the other's fewest: the outlier is named, not devices = 3
    outlier = evaluation_only.replace("microbatches = [4, 8]", "microbatches = [1000000000]")
    with pytest.raises(ConfigError, match=r"key 'microbatches': 1000000000 makes every schedule larger"):
        load_spec(write_spec(tmp_path, outlier, "outlier.toml"))
    indivisible = evaluation_only.replace("global_batch = 64", "global_batch = 7")
    result = CliRunner().invoke(main, ["sweep", str(write_spec(tmp_path, indivisible, "seven.toml")), "-o",
                                       str(tmp_path / "out"), "-q"])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert "key 'microbatches': no count splits the global batch: global batch of 7 sequences is not divisible by 4 " \
           "microbatches" in result.output
    assert not (tmp_path / "out").exists()
    # a tensor-parallel degree no model splits into: every point skipped, so refused when read
    untaken = evaluation_only + "\n[job]\ntp = 7\n"
    with pytest.raises(ConfigError, match=r"key 'job.tp': tensor parallelism 7 does not divide the model's \d+ query heads"):
        load_spec(write_spec(tmp_path, untaken, "seven_ranks.toml"))
    # flags `ppopt job` refuses at t = 1 or d = 1, and device counts over every model's layers: the same
    for job, said in (("sequence_parallel = true", r"key 'job.sequence_parallel': splits activations .* give tp > 1"),
                      ("distributed_optimizer = true", r"key 'job.distributed_optimizer': shards the optimizer .* give dp > 1")):
        with pytest.raises(ConfigError, match=said):
            load_spec(write_spec(tmp_path, evaluation_only + f"\n[job]\n{job}\n", "idle.toml"))
    small = 'microbatches = [4]\nmodels = ["llama3-8b"]\nsystems = ["dgx-h100"]\n'  # 32 layers
    with pytest.raises(ConfigError, match=r"key 'devices': every count is over the 32 layers of the model"):
        load_spec(write_spec(tmp_path, "devices = [33, 100000]\n" + small, "over.toml"))
    assert load_spec(write_spec(tmp_path, "devices = [32, 100000]\n" + small, "some.toml")).spec.devices == [32, 100000]
    # with the solver's points using the same counts (no microbatches of its own) they stay
    shared = indivisible + "[solver]\nschedules = [\"1f1b\"]\ndevices = [2]\ntime_limit_s = 5\n"
    assert load_spec(write_spec(tmp_path, shared, "shared.toml")).spec.microbatches == [4, 8]


def test_a_fractional_backward_is_a_unit_duration_as_on_the_command_line(tmp_path):
    """backward = 1.5 was refused ('Input should be a valid integer') where --backward 1.5 works;
    an integer keeps its type, so the points' hashes of existing specs are unchanged."""
    evaluation_only = SPEC.split("[solver]")[0]
    fractional = load_spec(write_spec(tmp_path, "backward = 1.5\n" + evaluation_only, "half.toml"))
    assert fractional.spec.backward == 1.5
    whole = load_spec(write_spec(tmp_path, "backward = 3\n" + evaluation_only, "whole.toml"))
    assert type(whole.spec.backward) is int and whole.spec.backward == 3


def test_sigterm_stops_a_sweep_as_ctrl_c_does_and_rows_csv_is_written(tmp_path, monkeypatch):
    """`kill` or `timeout` sends SIGTERM, whose default action ended the process without rows.csv;
    the sweep now winds down as on Ctrl-C: the rows computed so far are in rows.csv, exit 1."""
    import ppopt.sweep.run as sweeping

    real, calls = sweeping.run_item, []
    before = signal.getsignal(signal.SIGTERM)

    def item_then_term(item):
        calls.append(item)
        if len(calls) == 3:
            if signal.getsignal(signal.SIGTERM) in (before, signal.SIG_DFL):  # the kill would end pytest itself
                pytest.fail("no SIGTERM handler during the sweep")
            os.kill(os.getpid(), signal.SIGTERM)
        return real(item)

    monkeypatch.setattr(sweeping, "run_item", item_then_term)
    spec = write_spec(tmp_path, SPEC.split("[solver]")[0])
    result = CliRunner().invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "out"), "-q"])
    # what is kept and how to go on, then "aborted" (only "aborted" was said)
    assert (result.exit_code, result.output.strip()) == (1, f"interrupted: the rows computed are kept in {tmp_path / 'out'}; "
                                                            "rerun the same command to compute the rest\n\naborted")
    written = list(csv.DictReader(io.StringIO((tmp_path / "out" / "rows.csv").read_text())))
    assert 0 < len(written) == len(lines(tmp_path / "out" / "rows.jsonl"))
    assert signal.getsignal(signal.SIGTERM) is before  # restored after the sweep


def test_a_sweep_started_off_the_main_thread_runs_without_the_sigterm_handler(tmp_path):
    """Only the main thread may set a signal handler (signal.signal raises ValueError elsewhere)."""
    import threading

    spec = write_spec(tmp_path, SPEC.split("[solver]")[0])
    results = []
    worker = threading.Thread(target=lambda: results.append(
        CliRunner().invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "out"), "-q"])))
    worker.start()
    worker.join(120)
    (result,) = results
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "rows.csv").exists()


def test_a_solver_point_the_time_limit_cuts_says_so(tmp_path):
    """p = 16, m = 64, a cap of 16, one-slot messages (never proven within seconds), 2 s against a
    deterministic time of 100: the clock ends the search first, and the row names where, since a
    rerun may then differ."""
    spec = """schedules = ["1f1b"]
devices = [2]
microbatches = [2]
models = ["study"]
systems = ["mid-mid"]
global_batch = 8

[solver]
schedules = ["1f1b"]
devices = [16]
microbatches = [64]
memory_limits = [16]
comm = 1.0
time_limit_s = 2
deterministic_time = 100
max_ops = 2048
"""
    result = run_sweep(load_spec(write_spec(tmp_path, spec)), tmp_path / "out")
    rows = [r for r in read_rows(tmp_path / "out" / "rows.jsonl").values() if r["kind"] == "gap"]
    assert result.computed >= 1 and len(rows) == 1
    assert rows[0]["solver_cut"] and "wall-clock time limit" in rows[0]["solver_cut"]


def test_a_sweep_of_too_many_points_is_refused_before_they_are_counted(tmp_path, monkeypatch):
    """1..499 devices x 1..4,999 microbatches x every schedule x 3 models x 2 systems (209 million
    points) counted its ops point by point for minutes, printing nothing; the number of points is
    a product, checked first."""
    import ppopt.sweep.spec as sweep_spec
    from ppopt.generators import Family, names

    spec_text = (f"schedules = \"all\"\ndevices = {list(range(1, 500))}\nmicrobatches = {list(range(1, 5000))}\n"
                 'models = ["llama3-8b", "study", "llama3-70b"]\nsystems = ["dgx-h100", "mid-mid"]\n')
    huge = write_spec(tmp_path, spec_text, name="huge.toml")
    points = 499 * 4999 * len(names()) * 3 * 2  # one option combination per family: no [options] table
    monkeypatch.setattr(Family, "ops", lambda *a, **k: pytest.fail("ops counted before the points"))
    for command in (["sweep", str(huge), "-o", str(tmp_path / "out"), "-q"],
                    ["study", "--spec", str(huge), "-o", str(tmp_path / "out"), "-q"]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 1, result.output
        assert result.output == (f"error: sweep too large: {points:,} points before its filters; the limit is "
                                 f"{sweep_spec.MAX_SWEEP_POINTS:,} points, {sweep_spec.MAX_SWEEP_UNFILTERED:,} before "
                                 "filters: split the spec into several sweeps\n")
        assert not (tmp_path / "out").exists()


def test_the_point_limit_counts_the_points_the_filters_keep(tmp_path, monkeypatch):
    """A spec of 256,000 listed points whose filters keep 25,600 was refused as 256,000 points: the
    filtered combinations are not points."""
    import ppopt.sweep.spec as sweep_spec

    systems = ["dgx-h100", "mid-mid", "fast-fast", "slow-slow", "mid-slow", "fast-slow", "slow-fast", "mid-fast",
               "fast-mid", "slow-mid"]
    text = (f'schedules = ["gpipe", "1f1b", "zb-h1", "zb-v"]\ndevices = {list(range(1, 9))}\n'
            f'microbatches = {list(range(1, 201))}\nmodels = ["llama3-8b", "study", "llama3-70b", "gpt3-175b"]\n'
            f"systems = {systems}\n")
    text += "".join(f'[filters.{name}]\nsystems = ["dgx-h100"]\n' for name in ("gpipe", "1f1b", "zb-h1", "zb-v"))
    spec = load_spec(write_spec(tmp_path, text, name="filtered.toml")).spec
    check_sweep_size(spec, searches_run=False)  # 8 x 200 x 4 x 4 x 1 = 25,600 points kept
    monkeypatch.setattr(sweep_spec, "MAX_SWEEP_POINTS", 25_599)
    with pytest.raises(ConfigError, match="^sweep too large: 25,600 points; the limit is 25,599"):
        check_sweep_size(spec, searches_run=False)


def test_a_spec_without_backward_uses_the_unit_model_of_every_command(tmp_path):
    """A spec's table layer took B = 1 by default while every command (and its own [solver]) takes
    B = 2: one sweep gave 1F1B at p = 4, m = 8 two lengths. Now its row has evaluate's length."""
    spec = write_spec(tmp_path, 'schedules = ["1f1b"]\ndevices = [4]\nmicrobatches = [8]\nmodels = ["study"]\n'
                                'systems = ["mid-mid"]\n')
    run_sweep(load_spec(spec), tmp_path / "out")
    (row,) = read_rows(tmp_path / "out" / "rows.jsonl").values()
    evaluated = json.loads(CliRunner().invoke(main, ["evaluate", "-s", "1f1b", "-p", "4", "-m", "8", "--json"]).stdout)
    assert row["backward"] == evaluated["unit_model"]["backward"] == 2
    assert row["table_length"] == evaluated["table"]["length"] == 33


def test_a_solver_point_over_max_ops_is_a_skipped_row_that_says_why(tmp_path):
    """A [solver] point over max_ops left no row and no count ("0 skipped"): the user could not
    tell it from a point never asked for. It is a skipped row now, with the reason."""
    spec = write_spec(tmp_path, 'schedules = ["1f1b"]\ndevices = [8]\nmicrobatches = [8]\nmodels = ["study"]\n'
                                'systems = ["mid-mid"]\n[solver]\ndevices = [8]\nmicrobatches = [128, 8]\ntime_limit_s = 5\n')
    result = run_sweep(load_spec(spec), tmp_path / "out")
    gaps = {row["microbatches"]: row for row in read_rows(tmp_path / "out" / "rows.jsonl").values() if row["kind"] == "gap"}
    assert gaps[128]["status"] == "skipped" and gaps[128]["reason"] == "2048 ops, over the [solver] max_ops of 1000"
    assert gaps[8]["status"] == "ok" and gaps[8]["gap"] is not None
    assert (result.points, result.skipped) == (3, 1)


def test_sweep_finds_a_spec_by_name_as_study_does(tmp_path, monkeypatch):
    """`sweep ''` says "give a study spec (a .toml file, or a name such as paper)", and study --spec
    takes names, but `sweep quick` said "quick: cannot read spec (No such file or directory)"; a
    missing file is now named in study's words too."""
    import ppopt.cli.sweep as sweep_cli

    class Loaded(Exception):
        """Raised with the spec the command loaded, instead of running its points."""

    def stop(spec, *args):
        raise Loaded(spec)

    monkeypatch.setattr(sweep_cli, "_run", stop)
    with pytest.raises(Loaded) as loaded:
        CliRunner().invoke(main, ["sweep", "quick", "-o", str(tmp_path / "out")], catch_exceptions=False)
    assert loaded.value.args[0].path.resolve() == ROOT / "configs" / "studies" / "quick.toml"
    missing = str(tmp_path / "nothing.toml")
    for args in (["sweep", missing], ["study", "--spec", missing]):
        result = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "out")])
        assert (result.exit_code, result.output) == (1, f"error: {missing}: no such spec file\n"), args


def test_expanding_one_kind_of_point_gives_the_items_of_that_kind(tmp_path):
    """`study --no-solver` builds no search items (each generates the schedules it searches)."""
    from ppopt.sweep.spec import EvalItem, GapItem, expand

    loaded = load_spec(write_spec(tmp_path))
    every = expand(loaded)
    evaluations, searches = expand(loaded, ("evaluate",)), expand(loaded, ("gap",))
    assert [i.hashes for i in evaluations] == [i.hashes for i in every if isinstance(i, EvalItem)]
    assert [i.hashes for i in searches] == [i.hashes for i in every if isinstance(i, GapItem)]
    assert evaluations and searches


def test_solver_points_over_max_ops_are_listed_without_generating_their_schedules(tmp_path, monkeypatch):
    """Listing built every solver schedule in full to count its ops: p = 500, m = 4,000 took a minute
    and 1.4 GB before the sweep's deadline could act, for points never searched (over max_ops). They
    are counted from the registry now; the rows say why they were not searched."""
    import ppopt.sweep.spec as sweep_spec
    from ppopt.sweep.spec import expand

    text = SPEC.split("[solver]")[0].replace('["gpipe", "1f1b", "chimera", "chimera-asym", "hanayo"]', '["1f1b"]') + \
        '[solver]\nschedules = ["gpipe", "1f1b", "zb-h1"]\ndevices = [500]\nmicrobatches = [4000]\ntime_limit_s = 1\n'
    real = sweep_spec.generate

    def small_only(name, devices, microbatches, **options):
        assert devices * microbatches < 10_000, f"generated {name} at p = {devices}, m = {microbatches}"
        return real(name, devices, microbatches, **options)

    monkeypatch.setattr(sweep_spec, "generate", small_only)
    gap = [item for item in expand(load_spec(write_spec(tmp_path, text)), ("gap",))]
    inputs = [i for item in gap for i in item.inputs]
    assert {i["schedule"] for i in inputs} == {"gpipe", "1f1b", "zb-h1"}
    assert all(i["skip_reason"].endswith("ops, over the [solver] max_ops of 1000") for i in inputs)
    assert {i["skip_reason"].split()[0] for i in inputs if i["schedule"] == "1f1b"} == {str(500 * 4000 * 2)}


def test_a_point_this_machine_lacks_the_memory_for_is_left_for_a_later_run(tmp_path, monkeypatch):
    """A point refused for lack of memory was recorded as skipped for good: a rerun on a machine with
    more memory free never computed it. It is left missing now, with the reason, and the rerun
    computes it."""
    import ppopt.host as host

    spec = write_spec(tmp_path, 'schedules = ["1f1b", "gpipe"]\ndevices = [2]\nmicrobatches = [4]\nmodels = ["study"]\n'
                                'systems = ["mid-mid"]\nglobal_batch = 8\n\n[solver]\nschedules = ["1f1b"]\ndevices = [2]\n'
                                'microbatches = [4]\ntime_limit_s = 10\ndeterministic_time = 1\n', name="mem.toml")
    monkeypatch.setattr(host, "CHECKED_FROM_BYTES", 0)
    monkeypatch.setattr(host, "available_memory_bytes", lambda: 1)
    short = run_sweep(load_spec(spec), tmp_path / "out")
    assert (short.points, short.computed, short.skipped, short.missing) == (3, 0, 0, 3)  # two evaluations and a gap
    assert len(short.deferred) == 3 and all(why.startswith("not enough memory: ") for why in short.deferred)
    assert not (tmp_path / "out" / "rows.jsonl").read_text()
    said = CliRunner().invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "cli")])
    assert said.exit_code == 0 and "\n3 points left missing, as this machine lacks the memory for them now (not enough " \
        "memory: " in said.stdout and said.stdout.rstrip().endswith("a rerun with more memory free computes them")
    monkeypatch.setattr(host, "available_memory_bytes", lambda: 10**12)
    rerun = run_sweep(load_spec(spec), tmp_path / "out")
    assert (rerun.computed, rerun.missing, rerun.deferred) == (3, 0, ())


JOB_SPEC = """
schedules = ["1f1b", "zb-v"]
devices = [4]
microbatches = [8, 16]
models = ["llama3-70b"]
systems = ["dgx-h100"]

[job]
tp = 8
micro_batch = 1
sequence_parallel = true
"""


def test_a_spec_s_job_table_sweeps_a_3d_parallel_job_as_evaluate_simulates_it(tmp_path):
    """A sweep could only be pipeline parallel: llama3-70b's global batch of 256 in 8 microbatches
    made 32 sequences each, every row far over memory. [job] gives the fields `evaluate --tp ...`
    takes; a micro batch without a global batch makes the batch micro_batch x m x d, as evaluate does."""
    from ppopt.evaluate import evaluate
    from ppopt.job import Parallelism

    result = run_sweep(load_spec(write_spec(tmp_path, JOB_SPEC)), tmp_path / "out")
    assert (result.points, result.computed) == (4, 4)
    parallel = Parallelism(tp=8, micro_batch=1, sequence_parallel=True)
    for row in result.rows:
        assert (row["tp"], row["micro_batch"], row["global_batch"]) == (8, 1, row["microbatches"])
        expected = evaluate(row["schedule"], 4, row["microbatches"], model="llama3-70b", system="dgx-h100",
                            parallel=parallel).simulation
        assert row["sim_step_time_s"] == expected.step_time_s and row["sim_over_memory"] is False
    header = (tmp_path / "out" / "rows.csv").read_text().splitlines()[0].split(",")
    assert header[header.index("backward") + 1:header.index("backward") + 7] == ["tp", "dp", "micro_batch", "recompute",
                                                                                "sequence_parallel", "distributed_optimizer"]


def test_a_pipeline_only_spec_keeps_its_points_hashes_and_a_bad_job_field_is_named(tmp_path):
    """The job's fields join a point's inputs only when the spec sets them: rows.jsonl written before
    [job] existed are reused. A bad field is refused with its key."""
    from ppopt.sweep.spec import expand

    plain = expand(load_spec(write_spec(tmp_path, JOB_SPEC.split("[job]")[0])), ("evaluate",))
    assert plain and all("tp" not in item.inputs for item in plain)
    for bad, key in (("tp = 0", "key 'job.tp'"), ("pp = 2", "unknown key 'job.pp'"), ('recompute = "some"', "key 'job.recompute'")):
        with pytest.raises(ConfigError, match=key):
            load_spec(write_spec(tmp_path, JOB_SPEC.replace("tp = 8", bad), "bad.toml"))


def test_the_readme_s_example_spec_loads(tmp_path):
    """The README's spec (with its [job] table) is one a user copies: it must load as written (a
    micro_batch beside global_batch = 256 made it refused: no count gave 256 sequences)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("### Sweeps of your own", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    loaded = load_spec(write_spec(tmp_path, block, "readme.toml"))
    assert loaded.spec.job.tp == 8 and loaded.spec.solver is not None


def test_a_second_sigterm_during_the_first_one_s_clean_up_is_ignored():
    """GNU timeout signals the process and then its group: the second SIGTERM, 2 ms after the first,
    interrupted the clean-up the first started (a traceback after "aborted", a run's folder left)."""
    import os
    import signal

    from ppopt.solve.interrupt import sigterm_as_ctrl_c

    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    cleaned = False
    try:
        with pytest.raises(KeyboardInterrupt), sigterm_as_ctrl_c():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises at once; never reached
            finally:  # the clean-up: a second SIGTERM now must not interrupt it
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                cleaned = True
        assert cleaned
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the block restores what was there
    finally:
        signal.signal(signal.SIGTERM, before)


def test_sigterm_as_ctrl_c_keeps_an_ignored_sigterm_ignored():
    """A parent that ignores SIGTERM (nohup-like launchers) keeps it ignored, as the command line's
    install() keeps it; a default SIGTERM becomes Ctrl-C inside the block and is restored after."""
    import signal

    from ppopt.solve.interrupt import sigterm_as_ctrl_c

    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with sigterm_as_ctrl_c():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with sigterm_as_ctrl_c():
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler) and handler not in (signal.SIG_DFL, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_misspelt_spec_name_gets_the_named_specs():
    """`ppopt sweep quik` said only "no such spec file"; a name (not a path) now gets the closest named
    spec, or the list of them."""
    assert CliRunner().invoke(main, ["sweep", "quik"]).output == "error: quik: no such spec file; did you mean 'quick'?\n"
    assert CliRunner().invoke(main, ["study", "--spec", "zzz"]).output == \
        "error: zzz: no such spec file (named specs: paper, quick)\n"


def test_a_quoted_fraction_for_backward_is_refused_as_a_number(tmp_path):
    """backward takes a whole or a fractional number of slots; quoted, it was refused as "a valid
    integer" (the first branch of the int-or-float key), which read as if 1.5 were not allowed."""
    path = write_spec(tmp_path, SPEC.replace('global_batch = 64', 'global_batch = 64\nbackward = "1.5"'))
    with pytest.raises(ConfigError) as caught:
        load_spec(path)
    assert caught.value.reason.endswith("key 'backward': Input should be a valid number, got the text '1.5': give the number unquoted")
    assert load_spec(write_spec(tmp_path, SPEC.replace('global_batch = 64', 'global_batch = 64\nbackward = 1.5'))).spec.backward == 1.5


def test_a_dangling_link_among_the_outputs_is_refused(tmp_path):
    """rows.jsonl a link to a file that does not exist: the sweep appended its rows there, outside its
    output directory (at /nonexistent). Refused in one line, nothing written."""
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere.jsonl"
    (out / "rows.jsonl").symlink_to(elsewhere)
    with pytest.raises(PpoptError, match=f"cannot write {out / 'rows.jsonl'}: it is a link to {elsewhere}, which does not exist"):
        run_sweep(load_spec(write_spec(tmp_path)), out)
    assert not elsewhere.exists()


def test_every_column_is_documented_and_the_readme_says_so():
    """rows.csv's 60 columns were named nowhere but the header (units, lists, when gap is empty):
    each has a line in COLUMN_DOCS, and the README's table is that reference as written now."""
    from pathlib import Path

    from ppopt.sweep.run import COLUMN_DOCS, COLUMNS, columns_markdown

    assert list(COLUMN_DOCS) == list(COLUMNS) and all(COLUMN_DOCS.values())
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    summary = "(and keys of <code>rows.jsonl</code>, where lists stay lists)</summary>\n\n"
    assert readme.split(summary, 1)[1].split("\n\n</details>", 1)[0] == columns_markdown()


def test_a_run_of_one_kind_keeps_the_spec_s_other_rows(tmp_path):
    """study --no-solver after a whole study counted the spec's own search rows as "rows of points
    outside this spec (an earlier spec's)" and wrote rows.csv without them: they stay, and only the
    rows of another spec are counted as such."""
    loaded = load_spec(write_spec(tmp_path))
    whole = run_sweep(loaded, tmp_path / "out")
    csv_text = (tmp_path / "out" / "rows.csv").read_text()
    evaluations = run_sweep(loaded, tmp_path / "out", kinds=("evaluate",))
    assert evaluations.other_rows == 0 and evaluations.missing == 0 and evaluations.computed == 0
    assert evaluations.points < whole.points and len(evaluations.rows) == len(whole.rows)
    assert (tmp_path / "out" / "rows.csv").read_text() == csv_text


def test_a_full_disk_names_rows_jsonl_and_leaves_no_torn_line(tmp_path, monkeypatch):
    """A full disk failed the append of a row to rows.jsonl half-way; writing rows.csv then failed as
    well, and its error hid the first ("cannot write rows.csv"). Now the half line is cut off again,
    the error names rows.jsonl, and rows.csv still holds the rows appended before."""
    import errno

    import ppopt.sweep.run as sweep_run

    real_write, appended = os.write, []

    def write(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("rows.jsonl"):
            appended.append(data)
            if len(appended) == 3:  # the third row: half of it lands, then the disk is full
                real_write(fd, data[: len(data) // 2])
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(sweep_run.os, "write", write)
    out = tmp_path / "out"
    with pytest.raises(PpoptError, match=r"^cannot write .*rows\.jsonl: No space left on device$"):
        run_sweep(load_spec(write_spec(tmp_path)), out)
    monkeypatch.undo()
    kept = (out / "rows.jsonl").read_bytes()
    assert kept == b"".join(appended[:2])  # two whole lines, nothing of the third
    assert len(lines(out / "rows.csv")) == 1 + 2


def test_rows_jsonl_that_is_not_a_regular_file_is_refused_before_it_is_read(tmp_path):
    """rows.jsonl linked to /dev/zero was read whole: 24 GB before the kernel stopped the process."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "rows.jsonl").symlink_to("/dev/zero")
    with pytest.raises(PpoptError, match=r"rows\.jsonl: not a regular file$"):
        read_rows(out / "rows.jsonl")
    # a named pipe is refused before it is opened (opening it would wait for a writer), in a child
    # process, so that a regression hangs that process and not the test run
    pipe = tmp_path / "pipe.jsonl"
    os.mkfifo(pipe)
    code = f"from ppopt.sweep import read_rows; read_rows(__import__('pathlib').Path({str(pipe)!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.rstrip().endswith("pipe.jsonl: not a regular file")
