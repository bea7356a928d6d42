"""ppopt's predictions against published runs it was never fitted to: Megatron-LM on DGX A100 nodes,
512 to 3,072 GPUs (Narayanan et al. 2021, Table 1; data/published/README.md)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.config import load_system
from ppopt.errors import ConfigError
from ppopt.io.published import read_published
from ppopt.published import megatron_flops_per_step

TABLE = Path(__file__).resolve().parent.parent / "data" / "published" / "megatron-lm-2021.csv"


def published_json(*systems: str) -> dict:
    """``ppopt published TABLE --system ... --json``, parsed."""
    result = CliRunner().invoke(main, ["published", str(TABLE), *(a for s in systems for a in ("--system", s)), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_within_ceilings(report: dict, system: str) -> None:
    """Every run predicted (some micro batch fits), MAPE <= 8 % (the upper end of what published
    simulators report on their own data: README, How accurate is ppopt?),
    and no run off by more than 10 %."""
    errors = [run["predictions"][system] and run["predictions"][system]["error"] for run in report["runs"]]
    assert len(errors) == 10 and None not in errors, "a run fits in no micro batch size"
    assert report["summary"][system]["mape"] == pytest.approx(sum(abs(e) for e in errors) / 10)
    assert report["summary"][system]["mape"] <= 0.08, f"MAPE {report['summary'][system]['mape']:.1%}"
    assert max(abs(e) for e in errors) <= 0.10, [f"{e:+.1%}" for e in errors]


@pytest.fixture(scope="module")
def runs():
    return read_published(TABLE)


def test_flops_per_step_by_hand():
    # 1.7B row: 96 * 512 * 2048 * 24 * 2304^2 = 1.28247e16, times
    # (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304)) = 1 + 0.148148 + 0.057870 = 1.206019
    assert megatron_flops_per_step(512, 2048, 24, 2304, 51200) == pytest.approx(1.54668e16, rel=1e-5)


def test_step_times_agree_with_the_papers_aggregate_throughput(runs):
    # Table 1 also gives the aggregate petaFLOP/s: 4.4 for 1.7B on 32 GPUs, 502.0 for 1T on 3,072;
    # step time x aggregate FLOP/s gives back the FLOPs of a step (to the table's rounding).
    first, last = runs[0], runs[-1]
    assert first.step_time_s * 4.4e15 == pytest.approx(megatron_flops_per_step(512, 2048, 24, 2304, 51200), rel=0.01)
    assert last.step_time_s == pytest.approx(102.63, abs=0.01)
    assert last.step_time_s * 502.0e15 == pytest.approx(megatron_flops_per_step(3072, 2048, 128, 25600, 51200),
                                                        rel=0.01)


def test_predictions_at_scale_are_within_the_published_simulators_accuracy():
    # The dgx-a100 preset with a datasheet guess for the GPU (50 % of peak) was 28 % off at 1T.
    report = published_json("dgx-a100", "a100-vtrain-calibrated")
    assert_within_ceilings(report, "dgx-a100")


def test_the_measured_clusters_network_does_not_carry_over_to_dgx_nodes():
    """a100-vtrain-calibrated is the measured cluster's network too: its data-parallel rings with some
    but not all of a node's GPUs (t = 2, 4 across nodes) reach about a fifth of their bandwidth there
    (README, How accurate is ppopt?). The published DGX A100 runs at t = 2 and 4 show no such loss:
    dgx-a100 (the same GPU fit, that efficiency left at 1) is within 4 % of them, the measured
    cluster's preset 10 to 30 % slow; on the other eight runs the two are within the ceilings."""
    report = published_json("dgx-a100", "a100-vtrain-calibrated")
    partial = [run for run in report["runs"] if run["tp"] in (2, 4)]
    assert len(partial) == 2
    for run in partial:
        assert abs(run["predictions"]["dgx-a100"]["error"]) < 0.04
        assert 0.10 < run["predictions"]["a100-vtrain-calibrated"]["error"] < 0.30
    errors = [run["predictions"]["a100-vtrain-calibrated"]["error"] for run in report["runs"] if run not in partial]
    assert sum(abs(e) for e in errors) / len(errors) <= 0.08 and max(abs(e) for e in errors) <= 0.10


def test_the_dgx_a100_preset_runs_the_gpu_as_fitted_on_measured_a100_steps():
    dgx, fitted = load_system("dgx-a100"), load_system("a100-vtrain-calibrated")
    for field in ("compute_efficiency", "compute_latency_s", "gemm_half_saturation_flops",
                  "gemm_saturation_exponent", "kernel_host_s", "op_accounting", "op_time_rule",
                  "memory_efficiency", "memory_latency_s"):
        assert getattr(dgx, field) == getattr(fitted, field), field
    assert dgx.intra_node.latency_s == fitted.intra_node.latency_s
    assert dgx.intra_node.bandwidth_bytes_per_s == fitted.intra_node.bandwidth_bytes_per_s


def test_a_bad_cell_names_its_line_and_column(tmp_path):
    bad = tmp_path / "table.csv"
    lines = TABLE.read_text().splitlines()
    bad.write_text("\n".join([lines[0], lines[1].replace(",137", ",fast")]) + "\n")
    with pytest.raises(ConfigError, match=r"line 2, column 'teraFLOP/s per GPU': not a number: 'fast'"):
        read_published(bad)
    bad.write_text("\n".join([lines[0], lines[1].replace("1.7,24,", "1.7,24.5,")]) + "\n")
    with pytest.raises(ConfigError, match=r"line 2, column 'attention heads': not an integer: '24.5'"):
        read_published(bad)
    bad.write_text("\n".join([lines[0], lines[5].replace(",512,1536,", ",500,1536,")]) + "\n")
    with pytest.raises(ConfigError, match=r"line 2, column 'GPUs': 500 is not a multiple of t x p = 16"):
        read_published(bad)
    # 25 heads cannot split a hidden size of 2304 (validate refuses the same model; published predicted it)
    bad.write_text("\n".join([lines[0], lines[1].replace("1.7,24,2304,", "1.7,25,2304,")]) + "\n")
    with pytest.raises(ConfigError, match=r"line 2, column 'attention heads': 25 does not divide the hidden size 2304 "):
        read_published(bad)
    # an empty cell and a short row are a missing value, as validate says (no Python value shown)
    bad.write_text("\n".join([lines[0], lines[1].replace(",137", ",")]) + "\n")
    with pytest.raises(ConfigError, match=r"line 2, column 'teraFLOP/s per GPU': missing value$"):
        read_published(bad)
    bad.write_text("\n".join([lines[0], lines[1].rsplit(",", 3)[0]]) + "\n")
    with pytest.raises(ConfigError, match=r"line 2, column '[^']+': missing value$"):
        read_published(bad)


def test_the_command_prints_every_run_and_refuses_bad_input_in_one_line(tmp_path):
    text = CliRunner().invoke(main, ["published", str(TABLE)])
    lines = text.output.splitlines()
    assert text.exit_code == 0 and len(lines) == 1 + 10 + 1 + 2 and "1008B" in lines[10]
    assert lines[-2].startswith("dgx-a100: MAPE ") and lines[-1].startswith("a100-vtrain-calibrated: MAPE ")
    layout = TABLE.read_text().splitlines()
    bad_tp = tmp_path / "tp.csv"
    bad_tp.write_text(f"{layout[0]}\n{layout[1].replace('1.7,24,2304,24,1,1,32', '1.7,24,2304,24,5,1,160')}\n")
    huge = tmp_path / "huge.csv"  # 64 stages x 1,000,000 microbatches (b = 1), F and B, for each micro batch size
    huge.write_text(f"{layout[0]}\n1,16,1024,64,1,64,64,1000000,100\n")
    for argv, message in ((["--system", "no-such-system"], "error: unknown system preset 'no-such-system'"),
                          ([str(huge)], "input too large: 1 run on 2 systems make 480,000,000 ops"),
                          ([str(tmp_path / "none.csv")], "none.csv: no such file"),
                          ([str(bad_tp)], "tp.csv: line 2, column 'tensor parallelism': tensor parallelism 5 does not divide")):
        result = CliRunner().invoke(main, ["published", *(argv if argv[0].endswith(".csv") else [str(TABLE), *argv])])
        assert result.exit_code == 1 and result.output.count("\n") == 1 and message in result.output, result.output


def test_a_table_where_nothing_fits_is_refused_and_an_odd_label_gets_a_note(tmp_path):
    """1008B on 32 GPUs (t = 8, p = 4) fits no system: the table said "does not fit" and "MAPE -"
    with exit 0. A parameter count of 999 for the 1.7B model's dimensions (1.65 billion by the
    paper's count) was printed as "999B" without a word."""
    header = TABLE.read_text().splitlines()[0]
    crowded = tmp_path / "crowded.csv"
    crowded.write_text(f"{header}\n1008,160,25600,128,8,4,32,1536,163\n")
    refused = CliRunner().invoke(main, ["published", str(crowded), "--system", "dgx-a100"])
    assert refused.exit_code == 1 and refused.output.count("\n") == 1, refused.output
    assert "no run fits in the memory of dgx-a100 at a micro batch of 1, 2, 4, 8 (line 2: 1008B on 32 GPUs" in refused.output
    labelled = tmp_path / "labelled.csv"
    labelled.write_text(f"{header}\n999,24,2304,24,1,1,32,512,137\n")
    noted = CliRunner().invoke(main, ["published", str(labelled), "--system", "dgx-a100"])
    assert noted.exit_code == 0, noted.output
    assert f"note: {labelled}: line 2: 'parameters (billion)' says 999, but the layers and hidden size give 1.65 billion" \
        in noted.stderr
    assert "999B" in noted.stdout
    plain = CliRunner().invoke(main, ["published", str(TABLE), "--system", "dgx-a100"])
    assert plain.stderr == ""


def test_the_csv_has_one_number_per_cell():
    """Each system's cell read "3.8 s (+6.3 %, b = 8)" in CSV; now the step, the error (a bare
    percentage of the published step) and the micro batch are columns of their own."""
    import csv
    import io

    result = CliRunner().invoke(main, ["published", str(TABLE), "--system", "dgx-a100", "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 10
    for row in rows:  # every run fits on dgx-a100 (tests above): every cell holds a number
        published, predicted = float(row["published step s"]), float(row["dgx-a100 step s"])
        # ten significant digits (they had four): the error computes back from the two steps
        assert float(row["dgx-a100 error %"]) == pytest.approx(100 * (predicted - published) / published, rel=1e-6)
        assert int(row["dgx-a100 micro batch"]) in (1, 2, 4, 8)


def test_trailing_blank_rows_are_skipped_as_validate_skips_them(runs, tmp_path):
    """A line of spaces or of empty cells at the end (a spreadsheet's export) was refused as 'not a
    number'; `validate` skipped such rows. Both skip them now."""
    padded = tmp_path / "table.csv"
    padded.write_text(TABLE.read_text() + "   \n" + "," * 8 + "\n")
    assert read_published(padded) == runs


def test_blank_lines_before_the_header_are_skipped(tmp_path):
    """The first record was taken as the header, so a file starting with a blank line was missing
    every column; the measured-data reader shares the same header helper."""
    padded = tmp_path / "padded.csv"
    padded.write_text("\n \n" + TABLE.read_text(encoding="utf-8-sig"))
    # the same runs, each on its own line of the file: two lines further down
    assert read_published(padded) == [replace(run, line=run.line + 2) for run in read_published(TABLE)]
    (tmp_path / "blank.csv").write_text("\n\n")
    with pytest.raises(ConfigError, match="empty file"):
        read_published(tmp_path / "blank.csv")


def test_columns_published_does_not_read_get_a_note_as_in_validate(tmp_path):
    """A user's table may say each run's micro batch or schedule: the runs are still predicted as
    the command's help says (fastest micro batch that fits, 1F1B), which the note says, and the
    predictions do not change. The shipped table gets no note."""
    lines = TABLE.read_text(encoding="utf-8-sig").splitlines()
    extra = tmp_path / "extra.csv"
    extra.write_text("\n".join([lines[0] + ",micro batch,schedule"] + [line + ",1,gpipe" for line in lines[1:]]) + "\n")
    noted = CliRunner().invoke(main, ["published", str(extra), "--system", "dgx-a100", "--json"])
    assert noted.exit_code == 0, noted.output
    assert noted.stderr.startswith(f"note: {extra}: columns 'micro batch', 'schedule' are not read: ")
    assert "fastest micro batch" in noted.stderr and "1F1B" in noted.stderr
    plain = CliRunner().invoke(main, ["published", str(TABLE), "--system", "dgx-a100", "--json"])
    assert plain.stderr == ""
    assert json.loads(noted.stdout)["summary"] == json.loads(plain.stdout)["summary"]


def test_a_pipe_in_a_system_name_is_escaped_in_markdown_as_other_tables_escape_it(tmp_path):
    """The markdown of validate, published and plan (their own table writer) left a '|' in a cell
    or a header as it was, so a system named "dgx|a100" added a column to the header; the other
    commands' tables escaped it in cells. They share one writer now, which escapes headers too."""
    system = tmp_path / "pipe.toml"
    system.write_text((TABLE.parent.parent.parent / "configs" / "dgx-a100.toml").read_text().replace(
        'name = "dgx-a100"', 'name = "dgx|a100"'))
    result = CliRunner().invoke(main, ["published", str(TABLE), "--system", str(system), "--format", "markdown"])
    assert result.exit_code == 0, result.output
    header, rule, *rows = result.stdout.split("\n\n")[0].splitlines()
    assert header == "| model | GPUs (t × p × d) | published step | dgx\\|a100 |"
    assert rule == "|---|---|---|---|"
    assert all(row.replace("\\|", "").count("|") == 5 for row in rows)


def test_markdown_headers_are_escaped_like_cells():
    from ppopt.report.text import render_table

    assert render_table(["a|b", "c"], [["x|y", "z"]], "markdown").splitlines() == [
        "| a\\|b | c |", "|---|---|", "| x\\|y | z |"]


def test_a_tiny_negative_error_prints_as_zero(tmp_path):
    """published printed '-0.0 %' for an error of -0.01 %, then '+0.0 %': rounded to the digits shown,
    it is 0, with no sign."""
    from ppopt.report.text import percent

    assert percent(-0.0001, "text") == "0.0 %" and percent(-0.0001, "text", signed=True) == "0.0 %"
    assert percent(-0.054, "text", signed=True) == "-5.4 %"
    # CSV keeps ten significant digits to compute with: -0.001 % is a value there, a rounding error is 0
    assert percent(-0.00001, "csv") == "-0.001" and percent(-1e-17, "csv") == "0" and percent(0.0152693945645, "csv") == "1.526939456"
    # and published's own cells: the first run, its throughput set so that dgx-a100 predicts it 0.01 % fast
    first = published_json("dgx-a100")["runs"][0]
    published_s = first["predictions"]["dgx-a100"]["predicted_s"] / (1 - 0.0001)
    lines = TABLE.read_text().splitlines()
    cells = lines[1].split(",")
    cells[-1] = repr(float(cells[-1]) * first["published_s"] / published_s)  # teraFLOP/s per GPU
    close = tmp_path / "close.csv"
    close.write_text("\n".join([lines[0], ",".join(cells)]) + "\n")
    table = CliRunner().invoke(main, ["published", str(close), "--system", "dgx-a100", "-q"]).stdout
    assert "(-0.0 %" not in table and "(+0.0 %" not in table and "(0.0 %" in table


def test_two_systems_of_one_name_are_refused():
    """The table and its JSON are keyed by system name: a second file named like a preset replaced the
    preset's column and kept its label. Both given, the command now asks for distinct names."""
    same = CliRunner().invoke(main, ["published", str(TABLE), "--system", "dgx-a100", "--system",
                                     str(Path(__file__).resolve().parent.parent / "configs" / "dgx-a100.toml")])
    assert (same.exit_code, same.output) == (1, "error: --system: two systems are named 'dgx-a100': give each file its own "
                                                "`name` to compare them\n")


def test_a_run_the_job_model_refuses_names_the_files_column(tmp_path):
    """The job's field (dp) was named for a file that has no such column: d follows from GPUs / (t·p)."""
    header = TABLE.read_text().splitlines()[0]
    for row, column in (("1.7,24,2304,24,1,1,30,512,137", "GPUs"), ("1.7,24,2304,24,1,1,32,500,137", "GPUs")):
        path = tmp_path / "run.csv"
        path.write_text(f"{header}\n{row}\n")
        result = CliRunner().invoke(main, ["published", str(path)])
        assert result.exit_code == 1 and result.output.startswith(f"error: {path}: line 2, column '{column}': "), result.output
