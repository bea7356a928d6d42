"""Inputs at and beyond ppopt's limits: sizes, rates and durations that would overflow or give
inf/NaN, names that would break a written file, special paths, runs that cannot fit in memory.
Each is refused in one line naming the file, field or value (or works, at the limit itself)."""

from __future__ import annotations

import csv
import json
import math
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.config import load_model, load_system
from ppopt.costs import Costs, StageCost
from ppopt.errors import PpoptError
from ppopt.io import atomic_write_text
from ppopt.io.cost_preset import write_cost_preset

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "data" / "measured" / "vtrain-multi-node-small.csv"
PUBLISHED = ROOT / "data" / "published" / "megatron-lm-2021.csv"
HUGE = str(10**200)


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _replace(source: Path, target: Path, key: str, value: str) -> Path:
    """``source`` (TOML) with the line ``key = ...`` set to ``value``."""
    lines = [f"{key} = {value}" if line.split("=")[0].strip() == key else line
             for line in source.read_text().splitlines()]
    target.write_text("\n".join(lines) + "\n")
    return target


def _model(tmp_path, key: str, value: str) -> Path:
    return _replace(ROOT / "models" / "llama3-8b.toml", tmp_path / "model.toml", key, value)


def _system(tmp_path, key: str, value: str) -> Path:
    return _replace(ROOT / "configs" / "dgx-h100.toml", tmp_path / "system.toml", key, value)


def _csv_with(source: Path, target: Path, column: str, value: str, rows: int = 2) -> Path:
    table = list(csv.reader(source.open(newline="")))
    table[1][table[0].index(column)] = value
    with target.open("w", newline="") as file:
        csv.writer(file).writerows(table[:rows + 1])
    return target


# --------------------------------------------------------------------------------------------------
# 1. Huge integers in a model
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "limit"), [("hidden_size", 16777216), ("seq_length", 1073741824)])
def test_a_model_size_beyond_the_limit_is_refused_naming_the_field(tmp_path, key, limit):
    path = _model(tmp_path, key, HUGE)
    expected = f"error: {path}: field '{key}': Input should be less than or equal to {limit}\n"
    result = cli("evaluate", "-s", "1f1b", "-p", 4, "-m", 8, "--model", path, "--system", "dgx-h100")
    assert (result.exit_code, result.output) == (1, expected)
    result = cli("job", "--model", path, "--system", "dgx-h100")
    assert (result.exit_code, result.output) == (1, expected)


def test_the_default_mlp_width_is_not_blamed_for_a_huge_hidden_size(tmp_path):
    path = _model(tmp_path, "hidden_size", HUGE)
    path.write_text(path.read_text().replace("ffn_hidden_size = 14336\n", ""))
    with pytest.raises(PpoptError) as caught:
        load_model(path)
    assert str(caught.value) == f"{path}: field 'hidden_size': Input should be less than or equal to 16777216"


def test_a_measured_row_with_a_huge_size_is_refused_naming_line_and_column(tmp_path):
    path = _csv_with(MEASURED, tmp_path / "big.csv", "hidden size", HUGE)
    expected = f"{path}: line 2, column 'hidden size': Input should be less than or equal to 16777216\n"
    for args, flag in ((["validate", path, "--system", "a100-vtrain"], ""),
                       (["calibrate", path, "--system", "a100-vtrain", "-o", tmp_path / "cal.toml"], ""),
                       (["plan", "--candidates", path, "--system", "a100-vtrain", "-q"], "--candidates: ")):
        result = cli(*args)
        assert (result.exit_code, result.output) == (1, f"error: {flag}{expected}"), args
    assert not (tmp_path / "cal.toml").exists()


def test_a_measured_iteration_time_outside_its_range_is_refused(tmp_path):
    path = _csv_with(MEASURED, tmp_path / "fast.csv", "iteration time (ms)", "1e-300")
    result = cli("validate", path, "--system", "a100-vtrain")
    assert (result.exit_code, result.output) == (
        1, f"error: {path}: line 2, column 'iteration time (ms)': must lie between 0.001 and 1e+12, got '1e-300'\n")


@pytest.mark.parametrize("source, command", [(MEASURED, ["validate"]), (PUBLISHED, ["published"])])
def test_a_row_longer_than_the_header_is_refused_naming_its_line(tmp_path, source, command):
    """A cell past the header's columns (a shifted row, a stray comma) used to be dropped in silence."""
    table = list(csv.reader(source.open(newline="")))
    table[2].append("99")
    path = tmp_path / "long.csv"
    with path.open("w", newline="") as file:
        csv.writer(file).writerows(table[:4])
    result = cli(*command, path)
    columns = len(table[0])
    assert (result.exit_code, result.output) == (
        1, f"error: {path}: line 3: {columns + 1} cells, but the header names {columns} columns\n")


# --------------------------------------------------------------------------------------------------
# 2. Published throughput
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e300", "1e-300"])
def test_a_published_throughput_outside_its_range_is_refused(tmp_path, value):
    path = _csv_with(PUBLISHED, tmp_path / "pub.csv", "teraFLOP/s per GPU", value, rows=10)
    result = cli("published", path)
    assert (result.exit_code, result.output) == (
        1, f"error: {path}: line 2, column 'teraFLOP/s per GPU': must lie between 1e-06 and 1,000,000, got '{value}'\n")


def test_a_published_size_beyond_the_model_limits_is_refused(tmp_path):
    path = _csv_with(PUBLISHED, tmp_path / "pub.csv", "hidden size", "1e300", rows=10)
    result = cli("published", path)
    assert (result.exit_code, result.output) == (
        1, f"error: {path}: line 2, column 'hidden size': must lie between 1 and 16,777,216, got '1e300'\n")


# --------------------------------------------------------------------------------------------------
# 3. and 4. Rates and durations that give inf/NaN; one line for a pydantic error in a cost preset
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value", "reason"), [
    ("peak_flops", "1e-300", "must be at least 1e+09 FLOP/s, got 1e-300 (a file gives FLOP/s: 989e12 for 989 TFLOP/s)"),
    ("memory_bandwidth_bytes_per_s", "0.5", "must be at least 1e+06 bytes/s, got 0.5 (a file gives bytes/s: 3.35e12 for 3.35 TB/s)"),
    ("compute_efficiency", "1e-300", "Input should be greater than or equal to 0.000001"),
    ("compute_latency_s", "1e308", "must be at most 1 s, got 1e+308 s (seconds: 10 µs is 1e-05)"),
    ("bytes_per_param_state", "1e300", "must be at most 1024, got 1e+300"),
    # no inf, but an MFU of 4e-283 % and a memory that "fits in 1.7e+299 GB"
    ("peak_flops", "1e300", "must be at most 1e+21, got 1e+300"),
    ("memory_capacity_bytes", "1.7e308", "must be at most 1e+21, got 1.7e+308"),
])
def test_a_system_value_that_would_give_inf_or_nan_is_refused(tmp_path, key, value, reason):
    path = _system(tmp_path, key, value)
    for extra in ([], ["--json"]):
        result = cli("evaluate", "-s", "1f1b", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", path, *extra)
        assert (result.exit_code, result.output) == (1, f"error: {path}: field '{key}': {reason}\n")


def test_every_limit_at_once_still_gives_finite_numbers(tmp_path):
    from ppopt.config import MODEL_LIMITS

    model = tmp_path / "largest.toml"
    model.write_text("".join(f"{key} = {value}\n" for key, value in MODEL_LIMITS.items()))
    system = ROOT / "configs" / "dgx-h100.toml"
    for key, value in [("peak_flops", "1e9"), ("memory_bandwidth_bytes_per_s", "1e6"), ("compute_efficiency", "1e-6"),
                       ("memory_efficiency", "1e-6"), ("compute_latency_s", "1.0"), ("bandwidth_bytes_per_s", "1e6"),
                       ("latency_s", "1.0"), ("bytes_per_param_state", "1024.0")]:
        system = _replace(system, tmp_path / "slowest.toml", key, value)
    head, tables = system.read_text().split("[intra_node]", 1)  # top-level keys precede the tables
    system.write_text(head + "gemm_half_saturation_flops = 1e30\ngemm_saturation_exponent = 4.0\nkernel_host_s = 1.0\n"
                      "op_time_rule = \"additive\"\n[intra_node]" + tables)
    result = cli("job", "--model", model, "--system", system, "--tp", 8, "--pp", 4, "--dp", 2, "--micro-batch", 4,
                 "--global-batch", 64, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert math.isfinite(data["step_time_s"]) and data["step_time_s"] > 1e55  # about 4e55 s: every limit reached, none clamped
    assert math.isfinite(data["peak_memory_bytes"])


def _preset(tmp_path, name="costs.json", **changes) -> Path:
    stage = StageCost(layers=1, forward_s=1.0, backward_s=2.0, input_grad_s=1.0, weight_grad_s=1.0,
                      activation_bytes=0.0, persistent_bytes=0.0, param_count=0.0, send_bytes=1e5)
    path = tmp_path / name
    write_cost_preset(path, Costs((stage, stage), 1, 4), None, {})
    data = json.loads(path.read_text())
    data["link"] = {"bandwidth_bytes_per_s": 1e6, "latency_s": 0.1}
    for key, value in changes.items():
        if key in ("microbatches", "link"):
            data[key] = value
        else:
            for stage_data in data["stages"]:
                stage_data[key] = value
    path.write_text(json.dumps(data))
    return path


def test_a_cost_preset_duration_beyond_the_limit_is_refused_by_every_command(tmp_path):
    path = _preset(tmp_path, forward_s=1e308)
    expected = f"error: --costs: {path}: stage 0: forward_s must be a number between 0 and 1e+06 s, got 1e+308\n"
    result = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", path)
    assert (result.exit_code, result.output) == (1, expected)
    result = cli("search", "-p", 2, "-m", 4, "--costs", path, "--time-limit", 5)
    assert (result.exit_code, result.output) == (1, expected)


@pytest.mark.parametrize(("change", "reason"), [
    ({"backward_s": True}, "stage 0: backward_s must be a number between 0 and 1e+06 s, got true"),
    ({"send_bytes": 1e300}, "stage 0: send_bytes must be a number between 0 and 1e+18, got 1e+300"),
    # an integer beyond a float's range (math.isfinite of it raised OverflowError)
    ({"activation_bytes": 10 ** 400}, "stage 0: activation_bytes must be a number between 0 and 1e+18, got 1" + "0" * 36 + "..."),
    ({"layers": 1.5}, "stage 0: layers must be an integer between 1 and 1,073,741,824, got 1.5"),
    ({"microbatches": 4.0}, "microbatches must be an integer between 1 and 1,073,741,824, got 4.0"),
    ({"link": {"bandwidth_bytes_per_s": 0}}, "field 'link.bandwidth_bytes_per_s': must be at least 1e+06 bytes/s, got 0 (a file "
                                             "gives bytes/s: 50e9 for 50 GB/s)"),
    ({"link": {"bandwidth_bytes_per_s": 1e6, "latency_s": 1e308}},
     "field 'link.latency_s': must be at most 1 s, got 1e+308 s (seconds: 10 µs is 1e-05)"),
])
def test_a_malformed_cost_preset_value_is_one_line_naming_the_field(tmp_path, change, reason):
    path = _preset(tmp_path, **change)
    result = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", path)
    assert (result.exit_code, result.output) == (1, f"error: --costs: {path}: {reason}\n")


def test_an_empty_cost_preset_name_is_an_empty_file_name():
    result = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", "")
    assert (result.exit_code, result.output) == (1, "error: --costs: empty file name: give a cost preset file (.json)\n")


def test_a_cost_preset_the_unit_model_cannot_take_names_the_file_not_a_flag(tmp_path):
    path = _preset(tmp_path, forward_s=1000.0)  # I + W = 2 s: 0.002 slots, rounded to 0
    result = cli("search", "-p", 2, "-m", 4, "--costs", path, "--time-limit", 5)
    assert (result.exit_code, result.output) == (
        1, f"error: --costs: {path}: in the unit model (one slot = the mean forward_s, ratios rounded to 2 decimals) its "
           "durations give backward = 0.0 slots, which must be a finite number > 0\n")
    path = _preset(tmp_path, forward_s=0.0)  # refused by every command: evaluate and compare ranked every schedule at 0 us
    for command in (["search", "--time-limit", 5], ["evaluate", "-s", "1f1b"], ["compare"]):
        result = cli(*command, "-p", 2, "-m", 4, "--costs", path)
        assert (result.exit_code, result.output) == (
            1, f"error: --costs: {path}: every forward_s is 0: a measured forward takes time (write a preset with `ppopt profile`)\n")
    result = cli("compare", "-p", 2, "-m", 4, "--costs", _preset(tmp_path, forward_s=1e-300))
    assert result.exit_code == 1 and "forward_s must be 0 or at least 1e-09 s (a nanosecond), got 1e-300" in result.output


# --------------------------------------------------------------------------------------------------
# 5. Names written into a calibrated system file
# --------------------------------------------------------------------------------------------------


def test_a_name_with_a_control_character_is_refused_before_the_fit(tmp_path):
    output = tmp_path / "cal2.toml"
    result = cli("calibrate", MEASURED, "--system", "a100-vtrain", "-o", output, "--name", 'evil"name\nx = 1')
    assert (result.exit_code, result.output) == (
        1, "error: --name: must be one line of printable text, got 'evil\"name\\nx = 1' (control character '\\n' at position 9)\n")
    assert not output.exists()
    result = cli("calibrate", MEASURED, "--system", "a100-vtrain", "-o", tmp_path / "cal\x1b.toml")
    assert (result.exit_code, result.output) == (
        1, "error: --output: its stem, the system's name by default, must be one line of printable text, got 'cal\\x1b' "
           "(control character '\\x1b' at position 3); give --name\n")


def test_a_model_file_whose_name_has_a_control_character_is_refused(tmp_path):
    path = _model(tmp_path, "name", '"llama\\nx = 1"')
    result = cli("job", "--model", path, "--system", "dgx-h100")
    assert (result.exit_code, result.output) == (
        1, f"error: {path}: field 'name': must be one line of printable text, got 'llama\\nx = 1' (control character "
           "'\\n' at position 5)\n")


def test_a_calibrated_file_round_trips_quotes_backslashes_and_odd_file_names(tmp_path):
    data = tmp_path / "multi\nx = 1.csv"  # the file name is written into the header comment
    data.write_bytes(MEASURED.read_bytes())
    output = tmp_path / "cal.toml"
    result = cli("calibrate", data, "--system", "a100-vtrain", "-o", output, "--name", 'evil"na\\me')
    assert result.exit_code == 0, result.output
    lines = output.read_text().splitlines()
    assert lines[0].startswith("# evil\"na\\me: 'a100-vtrain' calibrated by `ppopt calibrate` on ")
    assert lines[1].startswith("# (multi\\nx = 1.csv); MAPE ")
    assert 'name = "evil\\"na\\\\me"' in lines
    assert load_system(output).name == 'evil"na\\me'
    result = cli("job", "--model", "llama3-8b", "--system", output)
    assert result.exit_code == 0, result.output
    assert result.output.startswith('llama3-8b on 1 x evil"na\\me: ')


# --------------------------------------------------------------------------------------------------
# 6. and 7. ppopt run: memory and timeout checked before any rank starts
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def no_launch(monkeypatch):
    """No rank may start; this machine has 1 GB available."""
    import ppopt.host as host
    import ppopt.run.launcher as launcher

    monkeypatch.setattr(launcher, "launch", lambda *a, **k: pytest.fail("a process was started"))
    monkeypatch.setattr(host, "available_memory_bytes", lambda: 10**9)


def assert_needs(output, size, check=True):
    """``output`` refuses a run of 2 ranks and 4 microbatches of the model ``size`` (float32), naming
    what it needs in GB to 3 significant digits (in full below a million GB): 2 x one rank's bytes
    (RunSpec.rank_memory_bytes, the formula of ppopt.run.spec's module doc, checked in
    test_the_memory_estimate_counts_the_model_s_parameters_and_lets_small_runs_through), and one rank's."""
    from ppopt.run.spec import RunSpec

    def shown(count):  # every amount here is at least 100 GB: no decimals below a million
        gb = float(f"{count / 1e9:.3g}")
        return f"{gb:,.0f}" if gb < 1e6 else f"{gb:.3g}"

    rank = RunSpec((), 2, size, check=check).rank_memory_bytes(4)
    assert output.startswith(f"error: the run needs about {shown(2 * rank)} GB of memory (2 ranks x {shown(rank)} GB: "), output


def test_a_run_that_cannot_fit_in_memory_is_refused_before_any_rank_starts(no_launch):
    from ppopt.run.spec import ModelSize

    result = cli("run", "-s", "1f1b", "-p", 2, "-m", 4, "--sequence", 100000000)
    assert result.exit_code == 1 and result.output.endswith(
        " GB: the parameters and gradients of the model and its reference copy, and the activations of 4 microbatches "
        "of 2 x 100000000 tokens, layers 4, hidden 32, vocab 64, float32), more than the 1.00 GB this machine has "
        "available\n")  # 10^9 bytes available
    assert_needs(result.output, ModelSize(sequence=100000000))  # 18,600 GB
    result = cli("run", "-s", "1f1b", "-p", 2, "-m", 4, "--hidden", 1000000000, "--heads", 1)
    assert result.exit_code == 1
    assert_needs(result.output, ModelSize(hidden=1000000000, heads=1))
    result = cli("run", "-s", "1f1b", "-p", 2, "-m", 4, "--micro-batch", 0)
    assert result.output == "error: --micro-batch: must be >= 1, got 0\n"  # the flag's current name
    for flag in ("--micro-batch", "--microbatch-size"):  # the name of every other command, and the former one
        result = cli("run", "-s", "1f1b", "-p", 2, "-m", 4, flag, 100000000, "--no-check")
        assert result.exit_code == 1 and " GB: the parameters and gradients, and " in result.output
        assert_needs(result.output, ModelSize(microbatch_size=100000000), check=False)  # 148,000 GB
    # a profile keeps no reference copy: as the run with --no-check
    result = cli("profile", "-p", 2, "-m", 4, "--sequence", 100000000, "-o", "x.json")
    assert result.exit_code == 1
    assert_needs(result.output, ModelSize(sequence=100000000), check=False)  # 18,500 GB
    result = cli("run", "-s", "1f1b", "-p", 2, "-m", 4, "--hidden", 2**31)
    assert (result.exit_code, result.output) == (1, "error: --hidden: must be at most 1073741824, got 2147483648\n")


def test_the_memory_estimate_counts_the_model_s_parameters_and_lets_small_runs_through(monkeypatch):
    import ppopt.host as host
    import ppopt.run.execute as execute
    from ppopt.run.spec import ModelSize, RunSpec

    size = ModelSize(layers=5, hidden=24, heads=3, sequence=7, microbatch_size=1, vocab=11)
    assert size.parameters() == sum(size.stage_parameters(3))
    # 5 blocks of 12h² + 13h, token and position embeddings, final norm and head (ModelSize.stage_parameters)
    assert size.parameters() == 5 * (12 * 24**2 + 13 * 24) + 11 * 24 + 7 * 24 + 2 * 24 + 24 * 11 + 11
    spec = RunSpec((), 2, size, dtype="float64")
    tokens = 4 * 7
    assert spec.rank_memory_bytes(4) == 4 * size.parameters() * 8 + 16 * tokens + tokens * (5 * 20 * 24 + 4 * 24 + 3 * 11) * 8
    monkeypatch.setattr(host, "available_memory_bytes", lambda: 10**9)
    execute.check_memory(8, 64, RunSpec((), 8))  # the default tiny model: far below 1 GB
    monkeypatch.undo()  # this machine's
    available = host.available_memory_bytes()
    assert available is None or available > 0


@pytest.fixture
def two_gb_available(monkeypatch):
    """This machine has 2 GB available (10^9 bytes each)."""
    import ppopt.host as host

    monkeypatch.setattr(host, "available_memory_bytes", lambda: 2 * 10**9)


def test_a_schedule_this_machine_cannot_hold_is_refused_before_it_is_built(two_gb_available, tmp_path, monkeypatch):
    """Under the 10 M-op limit a schedule can need more memory than a small machine has: refused
    in one line with what it needs (HELD_BYTES_PER_OP a op), nothing written, nothing built."""
    import ppopt.generators as generators
    from ppopt.ir import HELD_BYTES_PER_OP

    monkeypatch.setattr(generators, "paused_gc", lambda: pytest.fail("a schedule was built"))
    out = tmp_path / "big.csv"
    needed = 4 * 1_000_000 * 2 * HELD_BYTES_PER_OP  # 8 M ops: 4.80 GB
    for args in (("table",), ("evaluate",), ("export", "-o", out)):
        result = cli(*args, "-s", "1f1b", "-p", 4, "-m", 1_000_000)
        assert result.exit_code == 1
        assert result.output == (f"error: not enough memory: 1f1b with 4 devices, 1000000 microbatches (8,000,000 ops): about "
                                 f"{needed / 1e9:.2f} GB needed, more than the 2.00 GB this machine has available\n")
    assert not out.exists()


def test_a_search_this_machine_cannot_hold_is_refused_before_the_model(two_gb_available):
    """A search holds SEARCH_BYTES_PER_OP a op (gap one schedule more): p = 64, m = 4,096 needs
    524,288 x 3,400 = 1.78 GB, within 2 GB; m = 8,192 needs 3.57 GB, refused naming --microbatches."""
    from ppopt.solve.search import SCHEDULE_BYTES_PER_OP, SEARCH_BYTES_PER_OP

    assert 64 * 4096 * 2 * SEARCH_BYTES_PER_OP < 2e9 < 64 * 8192 * 2 * SEARCH_BYTES_PER_OP
    result = cli("search", "--unit", "-p", 64, "-m", 8192, "--time-limit", 600)
    assert result.exit_code == 1
    assert result.output == ("error: --microbatches: not enough memory: a search of 64 devices, 8192 microbatches (1,048,576 ops): "
                             f"about {64 * 8192 * 2 * SEARCH_BYTES_PER_OP / 1e9:.2f} GB needed, more than the 2.00 GB this "
                             "machine has available\n")
    result = cli("gap", "--unit", "-p", 64, "-m", 4096, "--time-limit", 600)  # gap holds a second schedule
    held = 64 * 4096 * 2 * (SEARCH_BYTES_PER_OP + SCHEDULE_BYTES_PER_OP)
    assert result.exit_code == 1 and f"about {held / 1e9:.2f} GB needed" in result.output


def test_memory_is_not_checked_for_small_work_nor_when_unknown(monkeypatch):
    import ppopt.host as host

    monkeypatch.setattr(host, "available_memory_bytes", lambda: pytest.fail("read for a small schedule"))
    assert cli("table", "-s", "1f1b", "-p", 4, "-m", 8).exit_code == 0  # 64 ops
    monkeypatch.setattr(host, "available_memory_bytes", lambda: None)  # not Linux, no sysconf
    host.require_memory(10**15, "a petabyte")
    monkeypatch.setattr(host, "available_memory_bytes", lambda: 10**9)
    with pytest.raises(PpoptError, match=r"^not enough memory: x: about 1.50 GB needed, more than the 1.00 GB"):
        host.require_memory(1.5e9, "x")


@pytest.mark.parametrize(("value", "shown"), [("inf", "inf"), ("1e300", "1e+300"), ("nan", "nan")])
def test_a_timeout_that_is_not_finite_or_too_long_is_refused(no_launch, value, shown):
    result = cli("run", "-s", "1f1b", "-p", 2, "-m", 4, "--timeout", value, "--steps", 1)
    assert (result.exit_code, result.output) == (
        1, f"error: --timeout: must be a positive number of seconds, at most 604800 (7 days), got {shown}\n")


# --------------------------------------------------------------------------------------------------
# 8. Special paths as a model or system file
# --------------------------------------------------------------------------------------------------


MISSING = ("missing field 'num_layers'; missing field 'hidden_size'; missing field 'num_attention_heads'; "
           "missing field 'vocab_size'; missing field 'seq_length'")


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_dev_null_is_an_empty_file():
    result = cli("job", "--model", "/dev/null", "--system", "dgx-h100")
    assert (result.exit_code, result.output) == (1, f"error: /dev/null: {MISSING}\n")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_symlink_to_dev_zero_is_not_text(tmp_path):
    for name in ("zero.toml", "zero"):
        link = tmp_path / name
        link.symlink_to("/dev/zero")
        result = cli("job", "--model", "llama3-8b", "--system", link)
        assert (result.exit_code, result.output) == (1, f"error: {link}: cannot read file (not a text file: NUL byte at byte 0)\n")


def test_a_dangling_symlink_says_where_it_points(tmp_path):
    link = tmp_path / "gone.toml"
    link.symlink_to(tmp_path / "missing.toml")
    result = cli("job", "--model", link, "--system", "dgx-h100")
    assert (result.exit_code, result.output) == (1, f"error: {link}: no such file (a broken symbolic link to "
                                                    f"{tmp_path / 'missing.toml'})\n")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_read_like_a_file(tmp_path):
    """The whole model file comes through the FIFO: its own name heads the job's line."""
    fifo = tmp_path / "model.toml"
    os.mkfifo(fifo)
    text = (ROOT / "models" / "llama3-8b.toml").read_text().replace('name = "llama3-8b"', 'name = "piped"')
    writer = threading.Thread(target=lambda: fifo.write_text(text), daemon=True)
    writer.start()
    try:
        result = cli("job", "--model", fifo, "--system", "dgx-h100")
    finally:
        if writer.is_alive():  # the FIFO was never opened for reading: let the writer go
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(timeout=10)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("piped on 1 x dgx-h100: t1 p1 d1 b1 m256 (1f1b, recompute none)\n")


def test_an_empty_name_is_an_empty_file_name(tmp_path):
    result = cli("job", "--model", "", "--system", "dgx-h100")
    assert (result.exit_code, result.output) == (1, "error: empty file name: give a model preset name or a .toml/.json file\n")
    result = cli("job", "--model", "llama3-8b", "--system", "")
    assert (result.exit_code, result.output) == (1, "error: empty file name: give a system preset name or a .toml/.json file\n")
    with pytest.raises(PpoptError) as caught:
        atomic_write_text("", "x")
    assert str(caught.value) == "cannot write '': empty file name"


# --------------------------------------------------------------------------------------------------
# 9. ppopt plan --micro-batch
# --------------------------------------------------------------------------------------------------


def test_a_micro_batch_dividing_no_replica_batch_is_named():
    result = cli("plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--micro-batch", 3, "--time-limit", 10, "-q")
    assert (result.exit_code, result.output) == (
        1, "error: --micro-batch: 3 does not divide the batch per data-parallel replica of any layout of 8 GPUs "
           "(global batch 256 / d: 256 at d = 1, 128 at d = 2, 64 at d = 4, 32 at d = 8)\n")


def test_a_non_positive_micro_batch_is_printed_as_a_value():
    result = cli("plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--micro-batch", 0, "--time-limit", 10, "-q")
    assert (result.exit_code, result.output) == (1, "error: --micro-batch: must be positive integers, got 0\n")


def test_a_global_batch_beyond_the_limit_is_refused():
    result = cli("job", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", 10**20)
    assert (result.exit_code, result.output) == (
        1, "error: --global-batch: must be a positive integer of at most 1073741824, got 100000000000000000000\n")
    result = cli("plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--global-batch", 10**20, "-q")
    assert (result.exit_code, result.output) == (
        1, "error: --global-batch: must be a positive integer of at most 1073741824, got 100000000000000000000\n")


@pytest.mark.parametrize("command", [
    ["evaluate", "-s", "1f1b", "-p", 2, "-m", 2], ["compare", "-p", 2, "-m", 2], ["export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", "-"],
    ["search", "-p", 2, "-m", 2, "--time-limit", 5], ["job"], ["plan", "--gpus", 8, "--search", 0, "-q"],
], ids=lambda command: command[0])
@pytest.mark.parametrize("value", [0, -3, 10**20])
def test_every_command_refuses_a_global_batch_in_the_same_words(command, value):
    """--global-batch 0 read "must be positive" (evaluate, compare, job), "must be an integer >= 1"
    (export and the solver commands) or "must be a positive integer" (plan), and plan's upper bound
    "must be at most ...": one check now words them all."""
    result = cli(*command, "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", value)
    assert (result.exit_code, result.output) == (
        1, f"error: --global-batch: must be a positive integer of at most 1073741824, got {value}\n")


DEEP = 5000
"""Brackets nested deeper than Python's recursion limit (1,000): the JSON and TOML parsers recurse."""


@pytest.mark.parametrize("flag, name, text, line", [
    ("--costs", "deep.json", "[" * DEEP + "]" * DEEP, "error: --costs: {path}: not a readable JSON file (nested too deeply)"),
    ("--model", "deep.json", "[" * DEEP + "]" * DEEP, "error: {path}: not valid JSON: nested too deeply"),
    ("--system", "deep.toml", "a = " + "[" * DEEP + "]" * DEEP, "error: {path}: not valid TOML: nested too deeply"),
])
def test_input_nested_too_deeply_is_a_one_line_error(tmp_path, flag, name, text, line):
    path = tmp_path / name
    path.write_text(text)
    others = {"--costs": [], "--model": ["--system", "a100-vtrain"], "--system": ["--model", "llama3-8b"]}[flag]
    result = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, flag, path, *others)
    assert (result.exit_code, result.output) == (1, line.format(path=path) + "\n")


def test_a_sweep_spec_nested_too_deeply_is_a_one_line_error_and_a_deep_row_line_is_skipped(tmp_path):
    from ppopt.sweep import read_rows

    spec = tmp_path / "deep.toml"
    spec.write_text("a = " + "[" * DEEP + "]" * DEEP)
    result = cli("sweep", spec, "-o", tmp_path / "out")
    assert (result.exit_code, result.output) == (1, f"error: {spec}: not valid TOML: nested too deeply\n")
    rows = tmp_path / "rows.jsonl"
    row = {"hash": "h", "status": "ok", "kind": "evaluate", "schedule": "1f1b", "devices": 2, "microbatches": 4}
    rows.write_text("[" * DEEP + "]" * DEEP + "\n" + json.dumps(row) + "\n")
    assert read_rows(rows) == {"h": row}  # the unreadable line skipped, as a torn one


@pytest.mark.parametrize("command", [["sweep", "{spec}"], ["study", "--spec", "{spec}", "--no-figures"]])
@pytest.mark.parametrize("output, reason", [
    ("", "empty directory name"),  # was the current directory
    ("{tmp}/missing/out", "cannot create {tmp}/missing/out: no directory {tmp}/missing"),  # was created, parents and all
    ("{spec}", "{spec} is not a directory"),
])
def test_a_sweep_output_directory_is_checked_before_any_work(tmp_path, monkeypatch, command, output, reason):
    spec = tmp_path / "small.toml"
    spec.write_text('devices = [2]\nmicrobatches = [4]\nschedules = ["1f1b"]\nmodels = ["study"]\nsystems = ["mid-mid"]\n')
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    fill = {"spec": spec, "tmp": tmp_path}
    result = cli(*(part.format(**fill) for part in command), "-o", output.format(**fill), "-q")
    assert result.exit_code == 1
    assert result.output == (f"error: Invalid value for '--output' / '-o': {reason.format(**fill)} "
                             f"(see 'ppopt {command[0]} --help')\n")
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


def test_calibrate_writes_only_a_toml_name(tmp_path):
    """The fit is TOML, and a system file is read by its suffix: cal.json would not load back."""
    result = cli("calibrate", MEASURED, "-o", tmp_path / "cal.json")
    assert result.exit_code == 1
    assert result.output == (f"error: Invalid value for '--output' / '-o': {tmp_path / 'cal.json'}: the calibrated system is "
                             "TOML: give a name ending in .toml (see 'ppopt calibrate --help')\n")
    assert not list(tmp_path.iterdir())


def test_profile_writes_only_a_json_name(tmp_path):
    """The cost preset is JSON and `--costs` reads it as such: x.toml got JSON inside, without a word."""
    result = cli("profile", "-p", 2, "-m", 2, "-o", tmp_path / "x.toml")
    assert result.exit_code == 1
    assert result.output == (f"error: Invalid value for '--output' / '-o': {tmp_path / 'x.toml'}: the cost preset is "
                             "JSON: give a name ending in .json (see 'ppopt profile --help')\n")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("fmt, name", [("torch-csv", "x.png"), ("chrome-trace", "x.svg"), ("torch-csv", "x.PNG")])
def test_export_refuses_text_into_a_picture_name(tmp_path, fmt, name):
    result = cli("export", "-s", "1f1b", "-p", 2, "-m", 4, "--unit", "--format", fmt, "-o", tmp_path / name)
    suffix = {"torch-csv": ".csv", "chrome-trace": ".json"}[fmt]
    assert (result.exit_code, result.output) == (
        1, f"error: --format {fmt} writes text ({suffix}), but --output {str(tmp_path / name)!r} names a picture\n")
    assert not list(tmp_path.iterdir())


def test_compare_with_a_cost_preset_no_schedule_fits_is_an_error_not_an_empty_ranking(tmp_path):
    """A 2-stage preset at p = 4: every schedule has 4 or 8 stages, so nothing is compared (the
    ranking was printed empty, exit 0); at p = 2 the 2-stage schedules are ranked, the others noted."""
    path = tmp_path / "costs.json"
    stage = StageCost(layers=1, forward_s=1.0, backward_s=2.0, input_grad_s=1.0, weight_grad_s=1.0,
                      activation_bytes=0.0, persistent_bytes=0.0, param_count=0.0, send_bytes=0.0)
    write_cost_preset(path, Costs((stage, stage), 1, 4), None, {})
    result = CliRunner().invoke(main, ["compare", "-p", "4", "-m", "8", "--costs", str(path)])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith(f"error: --costs: {path}: no schedule to compare at p = 4, m = 8 (gpipe: 4 stages, "
                                    "the cost preset describes 2; 1f1b: 4 stages,")
    assert len(result.stderr.splitlines()) == 1
    ranked = CliRunner().invoke(main, ["compare", "-p", "2", "-m", "4", "--costs", str(path)])
    assert ranked.exit_code == 0 and "1f1b" in ranked.stdout and "skipped zb-v: 4 stages" in ranked.stderr
    # fastest first: GPipe's m + p - 1 = 5 rounds of F + B = 3 s, 15 s, is the slowest 2-stage schedule ranked
    rows = [r for r in json.loads(CliRunner().invoke(main, ["compare", "-p", "2", "-m", "4", "--costs", str(path), "--json"]).stdout)
            if "simulation" in r]  # compare --json's shape: the step under "simulation", the rank per layer
    steps = [r["simulation"]["step_time_s"] for r in rows]
    assert steps == sorted(steps) and dict(zip([r["schedule"] for r in rows], steps))["gpipe"] == pytest.approx(15.0) == max(steps)
    # equal steps share a rank ("1, 2, 2, 4"), as compare's layers rank: two schedules of one step were 4th and 5th
    ranks = [r["rank"]["simulation"] for r in rows]
    assert ranks == [1 + sum(s < step for s in steps) for step in steps] and len(set(ranks)) < len(ranks)


def test_two_outputs_of_one_command_may_not_name_the_same_file(tmp_path, monkeypatch):
    """--csv X --trace X wrote the schedule, then replaced it with the trace; the second flag is refused
    before any work, also when the two spellings differ. A device such as /dev/null takes both."""
    monkeypatch.chdir(tmp_path)
    result = cli("search", "-p", 2, "-m", 4, "--unit", "--csv", tmp_path / "x", "--trace", "./x")
    assert (result.exit_code, result.output) == (
        1, "error: Invalid value for '--trace': x is also the --csv file: give each output its own name "
           "(see 'ppopt search --help')\n")
    assert not list(tmp_path.iterdir())
    devices = cli("search", "-p", 2, "-m", 4, "--unit", "--csv", os.devnull, "--trace", os.devnull, "-q")
    assert devices.exit_code == 0, devices.output


@pytest.mark.parametrize("extra, line", [
    (["--model", "llama3-8b", "--system", "a100-vtrain", "--forward", "3"],
     "error: --forward: is a unit-mode duration: with --model and --system the durations come from the cost model\n"),
    (["--unit", "--global-batch", "8"], "error: --global-batch: needs --model and --system (unit mode has no sequences)\n"),
    (["--global-batch", "8"], "error: --global-batch: needs --model and --system (unit mode has no sequences)\n"),
])
def test_export_refuses_a_flag_its_mode_ignores_as_search_does(tmp_path, extra, line):
    """With a model and a system the unit durations were silently ignored (the export was the model's)."""
    result = cli("export", "-s", "1f1b", "-p", 4, "-m", 8, *extra, "-o", tmp_path / "x.csv")
    assert (result.exit_code, result.output) == (1, line)
    assert not list(tmp_path.iterdir())


def test_job_refuses_a_chimera_split_beside_explicit_layer_counts():
    """--split only sets the default layers per stage: beside --layers-per-stage it was ignored while
    the header still printed it."""
    base = ["job", "--model", "llama3-8b", "--system", "a100-vtrain", "--pp", 4, "--schedule", "chimera-asym"]
    result = cli(*base, "--split", "5:7", "--layers-per-stage", "8,8,8,8")
    assert (result.exit_code, result.output) == (
        1, "error: --split: sets the layers per stage, which --layers-per-stage gives here: give one of the two\n")
    assert cli(*base, "--split", "5:7").exit_code == 0 and cli(*base, "--layers-per-stage", "8,8,8,8").exit_code == 0


def test_plan_refuses_a_ray_address_without_the_ray_executor(monkeypatch):
    """With one local job the address was ignored; it is refused before any job is planned."""
    import ppopt.plan as planning

    monkeypatch.setattr(planning, "plan", lambda *args, **kwargs: pytest.fail("planned"))
    result = cli("plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--address", "x:1", "-q")
    assert (result.exit_code, result.output) == (1, "error: --address: is for the ray executor\n")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_output_in_a_directory_that_takes_no_files_is_refused_before_any_work():
    """/proc passes the permission check for root, and the write failed only after the search; a
    temporary file tried in the directory up front finds it."""
    result = cli("search", "-p", 2, "-m", 4, "--unit", "--csv", "/proc/x.csv")
    assert result.exit_code == 1
    assert result.output.startswith("error: Invalid value for '--csv' / '--torch-csv': cannot write /proc/x.csv: directory /proc takes no "
                                    "new file (")  # the probe's words: as non-root, the permission check would speak
    assert "status" not in result.output


def test_an_output_name_too_long_to_look_up_is_a_one_line_error(tmp_path):
    """stat() raises ENAMETOOLONG, which Path.exists() does not swallow: it was a traceback."""
    long = str(tmp_path / ("a" * 300))
    file = cli("export", "-s", "1f1b", "-p", 2, "-m", 4, "-o", long + ".csv")
    assert (file.exit_code, file.output) == (
        1, f"error: Invalid value for '--output' / '-o': cannot write {long}.csv: File name too long (see 'ppopt export --help')\n")
    folder = cli("sweep", ROOT / "configs" / "studies" / "quick.toml", "-o", long, "-q")
    assert (folder.exit_code, folder.output) == (
        1, f"error: Invalid value for '--output' / '-o': cannot create {long}: File name too long (see 'ppopt sweep --help')\n")


@pytest.mark.parametrize("args, line", [
    (["evaluate", "-s", "all", "-p", 4, "-m", 4, "--waves", 0], "error: --waves: must be a positive integer, got 0\n"),
    (["evaluate", "-s", "all", "-p", 4, "-m", 8, "--split", "0:1"],
     "error: --split: must be two positive numbers A:B, e.g. 1:2, got '0:1'\n"),
    (["compare", "-p", 4, "-m", 8, "--chunks", -1], "error: --chunks: must be a positive integer, got -1\n"),
    (["gap", "--unit", "-p", 4, "-m", 4, "--chunks", 0, "--time-limit", 5], "error: --chunks: must be a positive integer, got 0\n"),
])
def test_a_schedule_option_value_no_schedule_takes_is_refused_over_several_schedules(args, line):
    """Over several schedules each one that takes the option was skipped with the reason, and the
    command printed the others and exited 0."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert (result.exit_code, result.stderr, result.stdout) == (1, line, "")


@pytest.mark.parametrize("split", ["1_0:2", "inf:1", "١:2"])
def test_a_split_is_two_plain_decimal_numbers(split):
    """float() also reads 1_0 (10), inf and other scripts' digits."""
    result = cli("evaluate", "-s", "chimera-asym", "-p", 4, "-m", 8, "--split", split)
    assert (result.exit_code, result.output) == (1, f"error: --split: must be two positive numbers A:B, e.g. 1:2, got {split!r}\n")


def test_more_stages_than_layers_is_refused_before_the_table_is_built(monkeypatch):
    """hanayo with 100,000 waves on p = 2 is 400,000 stages for 32 layers: the table (400,000 stages x
    4 microbatches) was built first, 20 s, then the same error."""
    import ppopt.cli.schedules as schedules

    monkeypatch.setattr(schedules, "resolve_schedule", lambda *a, **k: pytest.fail("the table was built"))
    result = cli("evaluate", "-s", "hanayo", "-p", 2, "-m", 4, "--waves", 100000, "--model", "llama3-8b", "--system", "dgx-h100")
    assert (result.exit_code, result.output) == (
        1, "error: --waves: 400000 stages (2 devices x 200000 under hanayo) exceed the model's 32 layers\n")


def test_a_json_key_given_twice_is_refused(tmp_path):
    """json.loads keeps the last of two equal keys without a word; TOML refuses them, and so does ppopt's JSON now."""
    import tomllib

    data = tomllib.loads((ROOT / "configs" / "dgx-a100.toml").read_text())
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(data).replace('"peak_flops"', '"peak_flops": 1.0, "peak_flops"', 1))
    result = cli("evaluate", "-s", "1f1b", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", path)
    assert (result.exit_code, result.output) == (1, f"error: {path}: not valid JSON: key 'peak_flops' is given twice\n")
    costs = tmp_path / "costs.json"
    costs.write_text('{"format": 1, "format": 1}')
    result = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", costs)
    assert (result.exit_code, result.output) == (
        1, f"error: --costs: {costs}: not a readable JSON file (key 'format' is given twice)\n")
    toml = tmp_path / "dup.toml"  # tomllib names the line only; the key is named too
    toml.write_text("peak_flops = 1.0\n" + (ROOT / "configs" / "dgx-a100.toml").read_text())
    result = cli("evaluate", "-s", "1f1b", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", toml)
    assert result.exit_code == 1 and result.output.startswith(f"error: {toml}: not valid TOML: key 'peak_flops' is given "
                                                              "twice (Cannot overwrite a value (at line ")


@pytest.mark.parametrize("command", [["evaluate", "-s", "1f1b"], ["compare"], ["export", "-s", "1f1b", "-o", os.devnull]])
def test_a_global_batch_without_a_model_is_refused_by_every_command(command):
    """evaluate and compare ignored it in unit mode (the solver commands and export refused it)."""
    result = cli(*command, "-p", 4, "-m", 8, "--global-batch", 8)
    assert (result.exit_code, result.output) == (1, "error: --global-batch: needs --model and --system (unit mode has no sequences)\n")


def test_a_preset_file_is_named_as_the_format_it_was_read_in(tmp_path):
    """A model file named .csv was read as TOML, but the error said "not valid CSV"; and a name that
    is neither .toml nor .json (a YAML file) is told what ppopt reads."""
    path = tmp_path / "model.csv"
    path.write_text("a,b\n1,2\n")
    result = CliRunner().invoke(main, ["job", "--model", str(path), "--system", "dgx-a100"])
    assert result.exit_code == 1 and result.output.startswith(
        f"error: {path}: not valid TOML (ppopt reads .toml and .json files; any other name is read as TOML): "), result.output
    path = tmp_path / "model.json"
    path.write_text("a: 1\n")
    result = CliRunner().invoke(main, ["job", "--model", str(path), "--system", "dgx-a100"])
    assert result.exit_code == 1 and result.output.startswith(f"error: {path}: not valid JSON: "), result.output


def test_a_cost_preset_with_an_unknown_field_is_refused(tmp_path):
    """A misspelt field of a cost preset was ignored (a missing optional value taken as its default),
    where model and system files refuse it; a preset `ppopt profile` writes still reads."""
    path = _preset(tmp_path)
    assert cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", path).exit_code == 0
    written = path.read_text()
    for where in ("top", "stage"):
        data = json.loads(written)
        (data if where == "top" else data["stages"][1])["extra"] = 1
        path.write_text(json.dumps(data))
        result = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", path)
        prefix = f"error: --costs: {path}: " + ("" if where == "top" else "stage 1: ")
        assert result.exit_code == 1 and result.output.startswith(prefix + "unknown field 'extra'"), result.output


@pytest.mark.parametrize("command", [
    ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", 8, "--search", 0],
    ["sweep", ROOT / "configs" / "studies" / "quick.toml"], ["study", "--quick"],
], ids=lambda command: command[0])
@pytest.mark.parametrize("value", [0, -2])
def test_every_command_with_jobs_refuses_fewer_than_one_in_the_same_words(tmp_path, command, value):
    """plan said "must be at least 1" where sweep and study (the executors' own check) say "must be >= 1"."""
    result = cli(*command, "--jobs", value, "-q", *(["-o", tmp_path / "out"] if command[0] != "plan" else []))
    assert (result.exit_code, result.output) == (1, f"error: --jobs: must be >= 1, got {value}\n")
    assert not (tmp_path / "out").exists()
