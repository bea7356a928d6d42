"""A user's own measured runs: the optional columns of a measured-data CSV (architecture, recomputation,
schedule) set each row's model and job instead of the data's GPT / full-recomputation / 1F1B assumptions."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.config import load_system
from ppopt.errors import ConfigError
from ppopt.io.measured import MeasuredDataError, read_measured, unused_columns
from ppopt.job import Job, evaluate_job

MULTI = Path(__file__).resolve().parent.parent / "data" / "measured" / "vtrain-multi-node-small.csv"
SINGLE = MULTI.parent / "vtrain-single-node.csv"
SYSTEM = load_system("a100-vtrain-calibrated")


def _with_columns(tmp_path: Path, extra: dict[str, list[str]], rows: int = 4, name: str = "own.csv") -> Path:
    """The first ``rows`` rows of the multi-node file, with the columns ``extra`` (a value per row;
    rows past a list's end have an empty cell)."""
    table = list(csv.reader(MULTI.open()))
    header, body = table[0], table[1:rows + 1]
    path = tmp_path / name
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow([*header, *extra])
        for k, row in enumerate(body):
            writer.writerow([*row, *(values[k] if k < len(values) else "" for values in extra.values())])
    return path


def test_optional_columns_set_the_rows_model_and_job(tmp_path):
    path = _with_columns(tmp_path, {
        "activation": ["swiglu", "", "gelu", "SwiGLU"],
        "flash attention": ["true", "", "false", "TRUE"],
        "dropout": ["false", "", "", "false"],
        "tied embeddings": ["false", "", "", ""],
        "learned positions": ["false", "", "true", ""],
        "ffn hidden size": ["8192", "", "", ""],
        "kv heads": ["8", "", "", ""],
        "recompute": ["selective", "", "none", ""],
        "schedule": ["", "", "interleaved-1f1b", ""],
        "chunks": ["", "", "3", ""],
        "sequence parallel": ["", "", "true", ""],  # the row of t = 2 (at t = 1 it is refused, as by `ppopt job`)
        "distributed optimizer": ["", "", "true", ""],
    })
    rows, unmodelled = read_measured(path, SYSTEM)
    assert not unmodelled and len(rows) == 4
    first, plain, interleaved, last = (r.job for r in rows)
    assert (first.model.activation, first.model.flash_attention, first.model.dropout, first.model.ffn_hidden_size,
            first.model.num_kv_heads, first.recompute) == ("swiglu", True, False, 8192, 8, "selective")
    # an empty cell keeps the data's assumption (the GPT of data/measured, full recomputation, 1F1B)
    assert (plain.model.activation, plain.model.flash_attention, plain.model.dropout, plain.model.ffn_hidden_size,
            plain.recompute, plain.schedule) == ("gelu", False, True, 4 * plain.model.hidden_size, "full", "1f1b")
    assert (interleaved.schedule, interleaved.chunks, interleaved.recompute) == ("interleaved-1f1b", 3, "none")
    assert interleaved.sequence_parallel and interleaved.distributed_optimizer and interleaved.tp == 2
    assert not (last.sequence_parallel or last.distributed_optimizer) and last.model.activation == "swiglu"
    # the model key names what departs from GPT, so Spearman's groups do not mix architectures
    assert rows[0].model_key.endswith(" f8192 kv8 swiglu flash no-dropout untied rotary")
    # the data's GPT ties its embeddings and learns its positions (a row saying so is the same model)
    assert (first.model.tie_embeddings, first.model.learned_position_embeddings) == (False, False)
    assert plain.model.tie_embeddings and plain.model.learned_position_embeddings and interleaved.model.learned_position_embeddings
    assert rows[1].model_key == rows[2].model_key == "h3072 a32 L30 s2048"
    assert rows[3].model_key.endswith(" swiglu flash no-dropout")
    assert unused_columns(path) == []


def test_a_rows_recomputation_reaches_its_prediction(tmp_path):
    """One layout measured with and without recomputation: each row is predicted in its own mode (as
    a job built by hand in that mode), and without recomputation the step is shorter (the forward
    does not run twice)."""
    table = list(csv.reader(MULTI.open()))
    path = tmp_path / "modes.csv"
    path.write_text("\n".join(",".join(row) for row in ([*table[0], "recompute"], [*table[1], "none"], [*table[1], "full"])) + "\n")
    result = CliRunner().invoke(main, ["validate", str(path), "--system", "a100-vtrain-calibrated", "--json", "-q"])
    assert result.exit_code == 0, result.output
    predicted = {r["line"]: r["predicted_s"] for r in json.loads(result.stdout)["rows"]}
    rows, _ = read_measured(path, SYSTEM)
    for row, mode in zip(rows, ("none", "full")):
        job = row.job
        by_hand = Job(job.model, SYSTEM, tp=job.tp, pp=job.pp, dp=job.dp, micro_batch=job.micro_batch,
                      global_batch=job.global_batch, recompute=mode)
        assert predicted[row.line] == pytest.approx(evaluate_job(by_hand).step_time_s)
    assert predicted[2] < predicted[3]


@pytest.mark.parametrize(("column", "value", "message"), [
    ("activation", "relu", "column 'activation': must be gelu or swiglu, got 'relu'"),
    ("flash attention", "yes", "column 'flash attention': must be true or false, got 'yes'"),
    ("recompute", "partial", "column 'recompute': must be none or selective or full, got 'partial'"),
    ("schedule", "1f2b", "column 'schedule': must be one of gpipe, "),
    ("chunks", "0", "column 'chunks': must be positive, got 0"),
    ("kv heads", "5", "column 'kv heads': num_kv_heads (5) must divide num_attention_heads (32)"),
    ("ffn hidden size", "x", "column 'ffn hidden size': not an integer"),
])
def test_a_bad_optional_cell_is_one_line_naming_the_row_and_column(tmp_path, column, value, message):
    path = _with_columns(tmp_path, {column: [value]}, rows=1)
    result = CliRunner().invoke(main, ["validate", str(path), "--system", "a100-vtrain-calibrated"])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: {path}: line 2, {message}"), result.output
    assert len(result.output.splitlines()) == 1


def test_chunks_for_a_schedule_without_them_is_refused(tmp_path):
    path = _with_columns(tmp_path, {"chunks": ["4"]}, rows=1)
    with pytest.raises(MeasuredDataError, match="line 2, column 'chunks': schedule 1f1b takes no chunks \\(those that do: "):
        read_measured(path, SYSTEM)


def test_a_schedule_the_layout_cannot_run_is_listed_not_dropped(tmp_path):
    """DualPipeV needs m >= 2p: a row that cannot have run it is listed with the generator's reason."""
    table = list(csv.reader(MULTI.open()))
    row = next(r for r in table[1:] if int(r[table[0].index("pipeline parallelism")]) == 8)
    path = tmp_path / "v.csv"
    header = table[0]
    m = int(row[header.index("global batch")]) // (int(row[header.index("micro batch")]) * int(row[header.index("data parallelism")]))
    assert m < 16  # the row's m is below DualPipeV's 2p
    path.write_text(",".join([*header, "schedule"]) + "\n" + ",".join([*row, "dualpipev"]) + "\n")
    rows, unmodelled = read_measured(path, SYSTEM)
    assert not rows and len(unmodelled) == 1 and "dualpipev" in unmodelled[0].reason


def test_calibrate_fits_the_1f1b_rows_and_lists_the_others(tmp_path):
    """The fit times 1F1B in closed form: a row run with another schedule is validated, not fitted."""
    path = _with_columns(tmp_path, {"schedule": ["", "interleaved-1f1b", "", ""], "chunks": ["", "2", "", ""]}, rows=12)
    result = CliRunner().invoke(main, ["calibrate", str(path), "--system", "a100-vtrain", "-o", str(tmp_path / "fit.toml"), "-q",
                                       "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [u["line"] for u in data["unmodelled"]] == [3]
    assert "calibrate fits 1F1B steps in closed form" in data["unmodelled"][0]["reason"]
    assert data["summary"]["rows"] == 11


def test_rows_that_differ_only_in_an_optional_column_are_not_repeats(tmp_path):
    """Two runs of one layout, with and without recomputation and the same step time, are two
    measurements (a repeated line would be refused)."""
    table = list(csv.reader(MULTI.open()))
    path = tmp_path / "twice.csv"
    path.write_text(",".join([*table[0], "recompute"]) + "\n" + ",".join([*table[1], "none"]) + "\n"
                    + ",".join([*table[1], "full"]) + "\n")
    result = CliRunner().invoke(main, ["validate", str(path), "--system", "a100-vtrain-calibrated", "--json", "-q"])
    assert result.exit_code == 0, result.output
    path.write_text(",".join([*table[0], "recompute"]) + "\n" + ",".join([*table[1], "none"]) + "\n"
                    + ",".join([*table[1], "none"]) + "\n")
    assert "repeats line 2" in CliRunner().invoke(main, ["validate", str(path), "--system", "a100-vtrain-calibrated"]).output


def test_plan_candidates_names_each_model_and_leaves_out_one_that_cannot_fit(tmp_path):
    """--candidates plans each model of the file: models that differ only in an optional column were
    printed under one name, and one model with no job within memory stopped the whole command."""
    path = _with_columns(tmp_path, {"kv heads": ["8", "8", "", ""], "flash attention": ["", "", "", ""],
                                    "recompute": ["none", "none", "", ""]}, rows=4)
    system = tmp_path / "small.toml"
    text = (Path(__file__).resolve().parent.parent / "configs" / "a100-vtrain-calibrated.toml").read_text()
    system.write_text(text.replace("memory_capacity_bytes = 8e+10", "memory_capacity_bytes = 60e9"))
    result = CliRunner().invoke(main, ["plan", "--candidates", str(path), "--system", str(system), "--search", "0", "-q"])
    assert result.exit_code == 0, result.output
    headers = [line for line in result.stdout.splitlines() if " on 64 x " in line]
    assert [h.split(" on ")[0] for h in headers] == ["gpt h3072 a32 L30 s2048"]
    assert result.stderr.startswith("note: gpt h3072 a32 L30 s2048 kv8 on 64 GPUs, global batch 512 left out: no job fits 60.00 GB per GPU")


def test_plan_candidates_ranks_jobs_of_one_gpu_count_and_batch_together(tmp_path):
    """Rows of one model on 2 GPUs at batch 16 and on 8 GPUs at batch 32 are two plans: they were
    ranked in one table under the first row's header ("on 2 x ..., global batch 16"), where the
    smaller job always came first by step time."""
    table = list(csv.reader(SINGLE.open()))
    header, rows = table[0], table[1:]
    column = {name: header.index(name) for name in ("# GPUs", "global batch", "hidden size", "# layers")}
    by_model: dict[tuple, dict[tuple, list]] = {}
    for row in rows:
        model = (row[column["hidden size"]], row[column["# layers"]])
        by_model.setdefault(model, {}).setdefault((row[column["# GPUs"]], row[column["global batch"]]), row)
    chosen = next(jobs for jobs in by_model.values() if len(jobs) >= 2)
    (small, small_row), (large, large_row) = sorted(chosen.items(), key=lambda item: int(item[0][0]) * 10**6 + int(item[0][1]))[:2]
    path = tmp_path / "two.csv"
    path.write_text("\n".join(",".join(line) for line in (header, small_row, large_row)) + "\n")
    result = CliRunner().invoke(main, ["plan", "--candidates", str(path), "--system", "a100-vtrain-calibrated", "--search", "0", "-q"])
    assert result.exit_code == 0, result.output
    headers = [line for line in result.stdout.splitlines() if " x a100-vtrain-calibrated, global batch " in line]
    assert [(h.split(" on ")[1].split(" x ")[0], h.split("global batch ")[1].split(",")[0]) for h in headers] == [small, large]


def test_a_row_stating_an_assumption_is_the_same_model(tmp_path):
    """A row giving ffn = 4h, kv heads = heads, gelu, no flash attention, dropout states the GPT
    assumption: it was labelled (three Spearman groups for one model) and no longer a repeat."""
    table = list(csv.reader(MULTI.open()))
    hidden, heads = int(table[1][table[0].index("hidden size")]), int(table[1][table[0].index("attention heads")])
    path = _with_columns(tmp_path, {"ffn hidden size": [str(4 * hidden), ""], "kv heads": [str(heads), ""],
                                    "activation": ["gelu", ""], "flash attention": ["false", ""], "dropout": ["true", ""]}, rows=2)
    rows, _ = read_measured(path, SYSTEM)
    assert rows[0].model_key == rows[1].model_key == "h3072 a32 L30 s2048"


def test_calibrate_itself_refuses_rows_it_would_fit_wrong(tmp_path):
    """The library's calibrate (the benchmarks call it) took rows of any schedule into its 1F1B closed form."""
    from ppopt.calibrate import calibrate, fittable

    path = _with_columns(tmp_path, {"schedule": ["", "interleaved-1f1b"], "chunks": ["", "2"]}, rows=2)
    rows, _ = read_measured(path, SYSTEM)
    with pytest.raises(ConfigError, match="1 rows run another schedule than 1F1B \\(line 3\\)"):
        calibrate(rows, SYSTEM)
    assert [r.line for r in fittable(rows)[0]] == [2]
    with pytest.raises(ConfigError, match="no rows to calibrate on"):
        calibrate([], SYSTEM)
    with pytest.raises(ConfigError, match="unknown fit model 'nope'") as unknown:
        calibrate(fittable(rows)[0], SYSTEM, model="nope")
    assert unknown.value.field == "model"


def test_the_summary_figures_by_hand():
    """20 rows of model "a" predicted 1 % to 19 % too slow and one 50 % too fast (measured 1 s each),
    2 rows of model "b": the absolute errors sorted are 0.01, ..., 0.19, 0.50, so the median is
    (0.10 + 0.11) / 2 = 0.105, the 95th percentile (linear, numpy's default) 0.19 + 0.05 x 0.31 =
    0.2055, the worst row the one 50 % too fast (not the 19 % too slow one), and model "b" has no
    Spearman rho (it needs 3 rows)."""
    from ppopt.accuracy import RowResult, summarize

    errors = [i / 100 for i in range(1, 20)] + [-0.5]
    rows = [RowResult(line, "a", "job", 1.0, 1.0 + error, 0.0) for line, error in enumerate(errors, start=2)]
    rows += [RowResult(30, "b", "job", 1.0, 1.0, 0.0), RowResult(31, "b", "job", 2.0, 2.1, 0.0)]
    accuracy = summarize(rows[:20])
    assert accuracy.median == pytest.approx(0.105) and accuracy.p95 == pytest.approx(0.2055)
    assert accuracy.mape == pytest.approx((sum(errors[:19]) + 0.5) / 20)
    assert accuracy.worst is not None and accuracy.worst.line == 21 and accuracy.worst.error == pytest.approx(-0.5)
    both = summarize(rows)
    assert both.spearman["b"] is None and both.spearman["a"] is not None
    assert both.summary()["worst"] == pytest.approx(0.5)


def test_calibrate_on_no_1f1b_row_says_it_fits_1f1b_alone(tmp_path):
    """Every row another schedule, some of them not even defined at their layout: the error named the
    first undefined row's reason, not that calibrate fits only 1F1B rows, the reason to act on."""
    table = list(csv.reader(MULTI.open()))
    header = table[0]
    rows = [r for r in table[1:] if int(r[header.index("pipeline parallelism")]) == 8][:2]
    path = tmp_path / "zb.csv"
    path.write_text("\n".join(",".join(r) for r in ([*header, "schedule"], [*rows[0], "dualpipev"], [*rows[1], "zb-h1"])) + "\n")
    result = CliRunner().invoke(main, ["calibrate", str(path), "--system", "a100-vtrain", "-o", str(tmp_path / "fit.toml"), "-q"])
    assert result.exit_code == 1 and not (tmp_path / "fit.toml").exists()
    assert result.stderr == ("error: no row can be calibrated on: zb.csv, line 3: schedule zb-h1: calibrate fits 1F1B steps in "
                             "closed form (validate predicts this row) (and 1 more row outside the model)\n")


def test_a_parameter_label_far_from_the_dimensions_gets_a_note(tmp_path):
    """'Parameters (billion)' is only a label, yet validate took 36 for a 3.6B model without a word
    (published notes the same mismatch in its runs). The shipped labels (3.6, 18.4) lie within 2 %
    of the counts their dimensions give (3.56, 18.44): no note."""
    lines = MULTI.read_text().splitlines()
    path = tmp_path / "labels.csv"
    path.write_text("\n".join([lines[0], lines[1].replace("3.6,", "36,", 1), *lines[2:4]]) + "\n")
    done = CliRunner().invoke(main, ["validate", str(path), "--system", "a100-vtrain-calibrated"])
    assert done.exit_code == 0, done.output
    assert done.stderr == ("note: labels.csv, line 2: 'Parameters (billion)' says 36, but the layers, hidden size and vocabulary "
                           "give 3.56 billion; the prediction follows them, the label is only read\n")
    assert CliRunner().invoke(main, ["validate", str(MULTI), "--system", "a100-vtrain-calibrated"]).stderr == ""
