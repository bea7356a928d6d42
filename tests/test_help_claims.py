"""What the --help texts promise, held: options named alike across commands, and outputs that leave
something out say so."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ppopt.cli import main

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "data" / "measured" / "vtrain-multi-node-small.csv"
PUBLISHED = ROOT / "data" / "published" / "megatron-lm-2021.csv"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_a_csv_report_that_leaves_out_the_summary_says_where_it_is():
    """--format csv is one table; validate's summary (and with --by its rows) and published's
    figures per system are in the other formats, as a note on stderr says (plan's did already)."""
    rows = run("validate", MEASURED, "--system", "a100-vtrain-calibrated", "--format", "csv")
    assert rows.exit_code == 0 and rows.stdout.startswith("line,model,job,")
    assert rows.stderr == ("note: --format csv prints one table, the rows; the summary (MAPE, median, p95, worst, "
                           "Spearman) is in the text, markdown and --json outputs\n")
    groups = run("validate", MEASURED, "--system", "a100-vtrain-calibrated", "--format", "csv", "--by", "tp")
    assert groups.stdout.startswith("tp,rows,") and "the groups; the rows and the summary are in" in groups.stderr
    published = run("published", PUBLISHED, "--system", "a100-vtrain-calibrated", "--format", "csv")
    assert published.exit_code == 0, published.output
    assert "note: --format csv prints one table, the runs; each system's figures are in" in published.stderr


def test_gap_takes_all_as_evaluate_and_plan_do():
    args = ["gap", "--unit", "-p", 2, "-m", 4, "--time-limit", 20, "-q", "--json"]
    every = json.loads(run(*args, "-s", "all").stdout)["schedules"]
    assert every == json.loads(run(*args).stdout)["schedules"] and len(every) > 10
    mixed = run(*args, "-s", "all", "-s", "1f1b")
    assert (mixed.exit_code, mixed.stderr) == (1, "error: --schedule: 'all' stands for every schedule: give it alone\n")


def test_plan_refuses_a_name_beside_all_rather_than_dropping_it():
    """plan -s all -s zb-h7 planned every family and said nothing of the misspelt name."""
    mixed = run("plan", "--model", "llama3-8b", "--system", "dgx-a100", "--gpus", 8, "--search", 0, "-s", "all", "-s", "zb-h7")
    assert (mixed.exit_code, mixed.stderr) == (1, "error: --schedule: 'all' stands for every schedule: give it alone\n")


def test_job_takes_the_stage_splits_plan_names():
    """even is job's default (the remainder on the first stages); balanced is plan's balanced split of
    the job: Llama 3 8B on 4 stages of a DGX A100 puts a layer less on the last stage, which carries
    the output layer, and one more on stage 1, and the step is shorter."""
    from ppopt.config import load_model, load_system
    from ppopt.job import Job
    from ppopt.plan import balanced_layers

    def job(*extra):
        result = run("job", "--model", "llama3-8b", "--system", "dgx-a100", "-p", 4, "--json", *extra)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    default, even, balanced = job(), job("--layers-per-stage", "even"), job("--layers-per-stage", "balanced")
    assert default == even and even["layers_per_stage"] == [8, 8, 8, 8]
    assert balanced["layers_per_stage"] == list(balanced_layers(Job(load_model("llama3-8b"), load_system("dgx-a100"), pp=4)))
    assert balanced["layers_per_stage"][-1] < 8 and balanced["step_time_s"] < even["step_time_s"]
    assert run("job", "--model", "llama3-8b", "--system", "dgx-a100", "--layers-per-stage", "x").stderr == \
        "error: --layers-per-stage: must be even, balanced or counts like 7,8,8,7 or 3,2*14,1, got 'x'\n"
    # n*k is k stages of n layers; a run of no stages, and one that would fill the memory, are refused
    assert job("--layers-per-stage", "9,8*2,7")["layers_per_stage"] == [9, 8, 8, 7]
    for runs, error in (("8*0,8*4", "'8*0': a run n*k needs k >= 1 stages"), ("1*999999999", "more than 100,000 stages")):
        assert run("job", "--model", "llama3-8b", "--system", "dgx-a100", "--layers-per-stage", runs).stderr == \
            f"error: --layers-per-stage: {error}\n"


def test_even_means_equal_counts_for_a_schedule_with_a_split_of_its_own():
    """chimera-asym splits the layers 1:2 by default; --layers-per-stage even gives equal counts."""
    def layers(*extra):
        result = run("job", "--model", "llama3-8b", "--system", "dgx-a100", "-p", 4, "-s", "chimera-asym", "--json", *extra)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["layers_per_stage"]

    assert layers() == [5, 5, 11, 11] and layers("--layers-per-stage", "even") == [8, 8, 8, 8]
    # the header named the 1:2 split it no longer applied; the help says which split is the default
    text = run("job", "--model", "llama3-8b", "--system", "dgx-a100", "-p", 4, "-s", "chimera-asym", "--layers-per-stage", "even")
    assert "(chimera-asym, recompute none" in text.stdout.splitlines()[0], text.output
    assert "(chimera-asym 1:2, recompute none" in run("job", "--model", "llama3-8b", "--system", "dgx-a100", "-p", 4,
                                                        "-s", "chimera-asym").stdout.splitlines()[0]
    assert "[default:even,butchimera-asym's--split" in "".join(run("job", "--help").output.split())  # wrapped at hyphens too


def test_only_the_commands_with_a_space_say_the_options_fill_it_in():
    for command, says in (("search", True), ("frontier", True), ("gap", False), ("evaluate", False)):
        text = " ".join(run(command, "--help").output.split())
        assert ("fills in what --space leaves out" in text) == says, command
        # a solver command names no schedule: "over several schedules ('all', compare)" was not its case,
        # and its split's default is the space's (even), which a bare search shows
        assert ("over several schedules" in text) != says, command
    split_help = "".join(run("search", "--help").output.split())
    assert "[default:chimera-asym's1:2;placement=bidirectional'sevensplit]" in split_help
    bare = run("search", "--unit", "-p", 2, "-m", 2, "--space", "placement=bidirectional", "--time-limit", 5, "-q", "--no-grid")
    assert "directions=even" in bare.stdout and "split=" not in bare.stdout, bare.output



def test_no_color_turns_the_grid_s_colours_off(monkeypatch):
    """On a terminal the table's ops are coloured by kind; NO_COLOR (no-color.org) or TERM=dumb turn
    that off (CliRunner's color=True stands for the terminal)."""
    args = ["table", "-s", "1f1b", "-p", "2", "-m", "2"]
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert "\x1b[" in CliRunner().invoke(main, args, color=True).stdout
    monkeypatch.setenv("NO_COLOR", "1")
    plain = CliRunner().invoke(main, args, color=True).stdout
    assert "\x1b[" not in plain and plain.startswith("device 0 | F0 F1 .  .  B0 -  .  B1 -")
    monkeypatch.setenv("NO_COLOR", "")  # empty: not set, by the convention
    monkeypatch.setenv("TERM", "dumb")
    assert "\x1b[" not in CliRunner().invoke(main, args, color=True).stdout


def test_a_stage_split_of_the_wrong_length_is_counted_in_words():
    result = run("job", "--model", "llama3-8b", "--system", "dgx-a100", "--layers-per-stage", "1,2")
    assert result.stderr == "error: --layers-per-stage: needs 1 positive count summing to the model's 32 layers, got 1,2\n"


def test_a_seed_that_no_solve_used_is_said():
    """`plan --search 0 --seed 5` said nothing, where --deterministic-time got a note: nothing used the seed."""
    base = ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--gpus", 4, "--search", 0, "-q", "--top", 1]
    note = "note: --seed: no CP-SAT solve ran, so it did not apply"
    assert note in run(*base, "--seed", 5).stderr
    assert note not in run(*base).stderr  # the default seed was not asked for
    searched = run("search", "--unit", "-p", 2, "-m", 4, "--seed", 3, "-q", "--no-grid", "--time-limit", 10)
    assert searched.exit_code == 0 and note not in searched.stderr, searched.output


def test_a_job_field_in_unit_mode_is_refused_for_what_it_is():
    """--micro-batch was refused as "tensor/data parallelism and recomputation need --model and --system"."""
    for command in (["evaluate", "-s", "1f1b"], ["search", "--unit", "--time-limit", 5]):
        result = run(*command, "-p", 2, "-m", 4, "--micro-batch", 2)
        assert result.exit_code == 1
        assert result.output == ("error: --micro-batch: is a job field, which needs --model and --system (the unit model has "
                                 "no tensor or data parallelism, micro batch size or recomputation)\n")


def test_help_names_what_an_option_keeps_or_ignores():
    def help_of(command):
        return " ".join(run(command, "--help").output.split())

    assert "It keeps 9 s for report.md and its figures (1 s with --no-figures)" in help_of("study")
    assert "keeps" not in help_of("sweep").split("--time-limit")[1].split("-q,")[0]
    assert "at least the --search ones" in help_of("plan")
    assert "--json always holds its orders and timeline" in help_of("search")
