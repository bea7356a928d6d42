"""Sweeps: rows, resume (also after a torn write), executors, spec validation, the CLI."""

import csv
import io
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.errors import ConfigError
from ppopt.sweep import COLUMNS, LocalExecutor, load_spec, point_hash, read_rows, run_sweep
from ppopt.sweep.executors import make_executor
from ppopt.sweep.run import INPUT_COLUMNS, ProgressBar

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
    result = run_sweep(load_spec(write_spec(directory)), directory / "out", progress=False)
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
    assert reference.points == len(rows) == reference.computed
    for row in rows:
        inputs = {k: row[k] for k in INPUT_COLUMNS if k in row}
        assert row["hash"] == point_hash(inputs)
        assert len(row["hash"]) == 16
    # Chimera needs an even p: its p = 3 points are rows that say why
    skipped = [r for r in evaluate if r["status"] == "skipped"]
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
    run_sweep(loaded, out, progress=False)
    before = (out / "rows.jsonl").read_bytes()
    again = run_sweep(loaded, out, progress=False)
    assert again.computed == 0 and again.reused == again.points
    assert (out / "rows.jsonl").read_bytes() == before
    assert (out / "rows.csv").read_text() == (reference.output / "rows.csv").read_text()


def test_interrupted_and_torn_run_resumes_to_the_same_csv(reference, tmp_path):
    out = tmp_path / "out"
    loaded = load_spec(write_spec(tmp_path))
    partial = run_sweep(loaded, out, progress=False, max_items=9)
    assert 0 < partial.missing < partial.points
    # killed mid-write: keep 5 whole lines and half of the 6th
    data = (out / "rows.jsonl").read_text().splitlines(keepends=True)
    (out / "rows.jsonl").write_text("".join(data[:5]) + data[5][: len(data[5]) // 2])
    assert len(read_rows(out / "rows.jsonl")) == 5
    resumed = run_sweep(loaded, out, progress=False)
    assert resumed.reused == 5 and resumed.missing == 0
    assert resumed.computed == resumed.points - 5
    for line in lines(out / "rows.jsonl"):
        json.loads(line)  # the torn line is gone, every line is whole
    assert len(lines(out / "rows.jsonl")) == resumed.points
    assert (out / "rows.csv").read_text() == (reference.output / "rows.csv").read_text()


def test_two_local_jobs_give_the_same_rows(reference, tmp_path):
    with LocalExecutor(2) as pool:
        result = run_sweep(load_spec(write_spec(tmp_path)), tmp_path / "out", pool, progress=False)
    assert result.computed == reference.points
    assert (tmp_path / "out" / "rows.csv").read_text() == (reference.output / "rows.csv").read_text()


def test_ray_gives_the_same_rows(reference, tmp_path):
    ray = pytest.importorskip("ray")
    from ppopt.sweep import RayExecutor

    spec = SPEC.split("[solver]")[0]  # evaluation points only: keeps the Ray test short
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with RayExecutor() as pool:
            result = run_sweep(load_spec(write_spec(tmp_path, spec)), tmp_path / "out", pool, progress=False)
    finally:
        ray.shutdown()
    expected = [r for r in reference.rows if r["kind"] == "evaluate"]
    assert result.computed == len(expected)
    assert list(result.rows) == expected


def test_ray_missing_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"^--executor ray needs ray: pip install 'ppopt\[ray\]'$"):
        make_executor("ray")


def test_unreachable_ray_address_fails_fast():
    pytest.importorskip("ray")
    with pytest.raises(ConfigError, match="cannot reach the Ray cluster at 127.0.0.1:1"):
        make_executor("ray", address="127.0.0.1:1")


def test_edited_spec_keeps_old_rows_out_of_the_csv(reference, tmp_path):
    out = tmp_path / "out"
    run_sweep(load_spec(write_spec(tmp_path)), out, progress=False)
    smaller = SPEC.replace('systems = ["mid-mid", "fast-slow"]', 'systems = ["mid-mid"]')
    result = run_sweep(load_spec(write_spec(tmp_path, smaller)), out, progress=False)
    assert result.computed == 0
    table = list(csv.DictReader(io.StringIO((out / "rows.csv").read_text())))
    assert {r["system"] for r in table if r["kind"] == "evaluate"} == {"mid-mid"}
    assert len(lines(out / "rows.jsonl")) == reference.points


@pytest.mark.parametrize(
    "change, key",
    [
        (("schedules =", "schedulez ="), "unknown key 'schedulez'"),
        (("time_limit_s = 20", "time_limit_s = 20\nworkers = 2"), "unknown key 'solver.workers'"),
        (("devices = [3, 4]", 'devices = ["3", 4]'), "key 'devices.0'"),
        (("global_batch = 64", "global_batch = 6.4"), "key 'global_batch'"),
        (('"hanayo"]', '"hanayo", "pipedream"]'), "key 'schedules': unknown schedule 'pipedream'"),
        (('models = ["study"]', 'models = ["nosuchmodel"]'), "key 'models.0': unknown model preset 'nosuchmodel'"),
        (('systems = ["mid-mid", "fast-slow"]', 'systems = ["mid-mid", "warp"]'), "key 'systems.1': unknown system preset 'warp'"),
        (('split = ["1:2", "1:1"]', 'split = "1:x"'), "key 'options.split'"),
        (("[filters.hanayo]", "[filters.hanayoo]"), "key 'filters.hanayoo': unknown schedule"),
        (("microbatches_equal_devices = true", "microbatches_equal_devices = 1"), "key 'filters.hanayo.microbatches_equal_devices'"),
        (("microbatches = [4, 8]", "microbatches = [4, 4]"), "key 'microbatches': duplicate value"),
        (('memory_limits = ["none", 2]', 'memory_limits = ["unlimited"]'), "key 'solver.memory_limits.0'"),
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
    with pytest.raises(ConfigError, match="cannot read spec"):
        load_spec(tmp_path / "nothing.toml")


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
    summary = json.loads(result.output)
    assert summary["points"] == summary["computed"] == 2 * 21 and summary["skipped"] == 2 * 2 * 3
    result = runner.invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0 and "0 computed, 42 already in rows.jsonl" in result.output
    result = runner.invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "out"), "--address", "x:1"])
    assert result.exit_code == 1 and "--address is for --executor ray" in result.output
    assert runner.invoke(main, ["sweep", "--help"]).exit_code == 0
    assert runner.invoke(main, ["study", "--help"]).exit_code == 0


def test_progress_bar_draws_on_one_line():
    stream = io.StringIO()
    bar = ProgressBar(3, "sweep x", stream)
    for _ in range(3):
        bar.advance()
    bar.close()
    text = stream.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    assert "3/3" in text and text.startswith("\r")
