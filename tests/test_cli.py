"""The CLI: real output, JSON keys, one-line errors with exit status 1, help text everywhere."""

import csv
import json

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.generators import names


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result


def test_every_command_has_help_text():
    for name, command in main.commands.items():
        assert command.help, f"command {name} has no help text"
        assert run(name, "--help").exit_code == 0


def test_every_command_that_does_work_takes_quiet(monkeypatch, tmp_path):
    """The README: `-q` turns progress off in every command that prints any; table, job, validate
    and published print "still working" lines and had no -q. Each now starts its heartbeat without
    -q and none with it (and so do export, import and a search writing its outputs)."""
    import contextlib
    from pathlib import Path

    import ppopt.solve.options as solve_options

    for name, command in main.commands.items():
        if name != "list":  # prints the registry, no progress
            assert any("--quiet" in p.opts and "-q" in p.opts for p in command.params), name
    beats = []

    @contextlib.contextmanager
    def heartbeat(say, every_s, first_s=None):
        beats.append(every_s)
        say(0.0)  # its line, at once: which step beats shows on stderr
        yield

    monkeypatch.setattr(solve_options, "heartbeat", heartbeat)
    data = Path(__file__).resolve().parent.parent / "data"
    exported = tmp_path / "s.csv"
    for args in (["table", "-s", "1f1b", "-p", 2, "-m", 2], ["job", "--model", "llama3-8b", "--system", "dgx-h100"],
                 ["validate", data / "measured" / "vtrain-multi-node-small.csv"],
                 ["published", data / "published" / "megatron-lm-2021.csv"],
                 # export and import printed nothing for 11 and 20 s before their first phase at millions of ops
                 ["export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", exported], ["import", exported],
                 # a search's trace (500,000 ops) was written silently for 12 to 15 s
                 ["search", "--unit", "-p", 2, "-m", 2, "--csv", exported.with_name("found.csv"), "--time-limit", 5]):
        beats.clear()
        result = run(*args)
        assert result.exit_code == 0 and beats, args
        if args[0] == "search":  # the writing itself beats, not only the solve before it
            assert "search: writing the outputs: still working (0 s)" in result.stderr
        beats.clear()
        assert run(*args, "-q").exit_code == 0 and not beats, args


def test_list_names_every_schedule():
    result = run("list")
    assert result.exit_code == 0
    for name in names():
        assert name in result.output
    listed = json.loads(run("list", "--json").stdout)
    assert [row["schedule"] for row in listed] == names()
    # the JSON says what the text says: a family without rules takes any p, m (GPipe), one with
    # rules names them (Chimera's two pipelines need an even p)
    rules = {row["schedule"]: row["rules"] for row in listed}
    assert rules["gpipe"] == "any p, m" and "p even" in rules["chimera"]


def test_list_names_the_presets_with_their_fields():
    """`--model`/`--system` take preset names: `list models` and `list systems` show them (the
    only way from the CLI was a misspelt name's error). Each row is what the preset loads."""
    from ppopt.config import list_models, list_systems, load_model, load_system

    models = run("list", "models")
    assert models.exit_code == 0
    rows = {line.split()[0]: line.split() for line in models.output.splitlines()[2:]}
    assert sorted(rows) == list_models()
    llama = load_model("llama3-8b")
    assert rows["llama3-8b"][1:7] == ["8.03", "B", str(llama.num_layers), str(llama.hidden_size), str(llama.ffn_hidden_size),
                                      str(llama.num_attention_heads)]  # 32 x 218,112,000 + 2 x 128,256 x 4,096 = 8.03e9
    as_csv = {row[0]: row for row in csv.reader(run("list", "models", "--format", "csv").stdout.splitlines())}
    assert as_csv["model"][1] == "parameters" and int(as_csv["llama3-8b"][1]) == 32 * 218_112_000 + 2 * 128_256 * 4_096
    presets = {m["name"]: m for m in json.loads(run("list", "models", "--json").stdout)}
    assert presets["llama3-8b"]["parameters"] == 8_030_257_152
    assert (as_csv["model"][5:7], as_csv["llama3-70b"][5:7]) == (["heads", "KV heads"], ["64", "8"])  # one number per cell
    systems = json.loads(run("list", "systems", "--json").stdout)
    assert [s["name"] for s in systems] == list_systems()
    assert systems[list_systems().index("dgx-h100")]["peak_flops"] == load_system("dgx-h100").peak_flops
    h100 = next(line.split() for line in run("list", "systems").output.splitlines() if line.startswith("dgx-h100 "))
    assert h100[1:4] == ["8", "989", "80"]  # GPUs per node, peak TFLOP/s, memory GB
    # the inter-node bandwidth says whose it is: a GPU's own NIC, or one NIC a node's GPUs share
    assert h100[5:7] == ["50", "device"]
    vtrain = next(line.split() for line in run("list", "systems").output.splitlines() if line.startswith("a100-vtrain "))
    assert vtrain[5:7] == ["100", "node"]
    fast = next(line.split() for line in run("list", "systems").output.splitlines() if line.startswith("fast-fast "))
    assert fast[2] == "10,000"  # the study's fast compute, ten times 1,000 TFLOP/s, not 1e+04
    assert run("list", "systems", "--format", "csv").output.splitlines()[1].split(",")[5:7] == ["100", "node"]  # numbers stay numbers
    assert run("list", "tables").exit_code == 1


def test_table_prints_the_grid():
    result = run("table", "-s", "1f1b", "-p", 2, "-m", 2, "--backward", 1)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0] == "device 0 | F0 F1 .  B0 .  B1"
    assert lines[1] == "device 1 | .  F0 B0 F1 B1 ."
    assert "length 6 slots" in result.output


def test_the_grid_leaves_out_zero_length_ops_and_says_when_it_rounds():
    """--weight 0 makes every W last no time: each took a column, so device 0's row had 10 columns
    for a 9-slot step and hid the idle slot before I1. With F = 1, B = 1.5 and messages of 0.001
    slots no column width fits every time: the grid drew them rounded without a word."""
    zero = run("table", "-s", "zb-h1", "-p", 2, "-m", 2, "--weight", 0).output.splitlines()
    assert [line.rstrip() for line in zero[:2]] == ["device 0 | F0 F1 .  .  I0 -  .  I1 -", "device 1 | .  F0 I0 -  F1 I1 -  .  ."]
    assert zero[2] == "(4 ops of zero length not drawn)" and "length 9 slots" in zero[4]
    odd = run("table", "-s", "1f1b", "-p", 4, "-m", 4, "--backward", 1.5, "--comm", 0.001).output
    assert "(a column is the shortest op's length; ops starting or ending between columns are drawn at the nearest one)" in odd
    assert "drawn at the nearest one" not in run("table", "-s", "1f1b", "-p", 4, "-m", 4).output


def test_table_uses_the_unit_model_defaults():
    """F = 1, B = 2 slots by default, as in search and export; a multi-slot op shows `-` after its label."""
    result = run("table", "-s", "1f1b", "-p", 2, "-m", 2)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].rstrip() == "device 0 | F0 F1 .  .  B0 -  .  B1 -"
    assert lines[1] == "device 1 | .  F0 B0 -  F1 B1 -  .  ."
    assert "length 9 slots" in result.output
    delayed = run("table", "-s", "1f1b", "-p", 2, "-m", 2, "--comm", 1)
    assert "length 11 slots" in delayed.output  # two messages per microbatch on the critical path


def test_evaluate_json_has_the_documented_keys():
    result = run("evaluate", "-s", "1f1b", "-p", 4, "-m", 8, "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["schedule"] == "1f1b" and data["devices"] == 4 and data["microbatches"] == 8
    assert data["formula"]["bubble_ratio"] == pytest.approx(3 / 11)
    assert data["table"]["bubble_ratio"] == pytest.approx(3 / 11)
    assert data["table"]["length"] == 33  # (m + p - 1)(F + B), F = 1, B = 2
    assert data["formula"]["peak_activations"] == data["table"]["peak_activations"] == [4, 3, 2, 1]


def test_evaluate_json_gives_no_closed_form_figures_outside_their_range():
    """ZB-V's forms hold from m = 2p - 1 on: at p = 4, m = 4 the text prints n/a and the CSV leaves the
    cells empty, so the JSON's figures are null there (a script reading them got the forms' 13.5)."""
    outside = json.loads(run("evaluate", "-s", "zb-v", "-p", 4, "-m", 4, "--json").stdout)["formula"]
    assert (outside["valid"], outside["outside_range"]) == (False, "m < 2p - 1")
    assert outside["bubble_ratio"] is outside["length"] is outside["peak_activations"] is None
    inside = json.loads(run("evaluate", "-s", "zb-v", "-p", 4, "-m", 8, "--json").stdout)
    assert inside["formula"]["valid"] and inside["formula"]["length"] == inside["table"]["length"]


def test_evaluate_all_lists_the_applicable_schedules():
    result = run("evaluate", "-s", "all", "-p", 4, "-m", 8, "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert [row["schedule"] for row in data] == names()  # p = 4, m = 8 suits every schedule
    by_name = {row["schedule"]: row for row in data}
    # the default unit model F = I = W = 1: ZB-H1 takes m(F + I + W) + p - 1 = 27 slots, 3 of them idle per device
    assert by_name["zb-h1"]["table"]["bubble_ratio"] == pytest.approx(3 / 27)
    assert by_name["chimera"]["formula"]["bubble_ratio"] == pytest.approx(2 / 18)


def test_evaluate_all_reports_skipped_schedules_on_stderr():
    result = CliRunner().invoke(main, ["evaluate", "-s", "all", "-p", "3", "-m", "4"])
    assert result.exit_code == 0
    assert "skipped chimera:" in result.stderr


@pytest.mark.parametrize("command", [["evaluate", "-s", "all"], ["compare", "--model", "study", "--system", "mid-mid"]])
def test_json_of_every_family_names_the_skipped_ones_with_their_reason(command):
    """At p = 3 chimera and dualpipe need an even number of devices: the JSON ends with them, each with
    the reason stderr gives, so a reader of the JSON alone sees every family."""
    result = run(*command, "-p", 3, "-m", 4, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    skipped = {row["schedule"]: row["skipped"] for row in rows if "skipped" in row}
    assert skipped["chimera"] == "chimera needs an even number of devices, got 3"
    assert f"skipped chimera: {skipped['chimera']}" in result.stderr
    assert set(skipped) | {row["schedule"] for row in rows if "table" in row} == set(names())
    assert not set(skipped) & {row["schedule"] for row in rows if "table" in row}


@pytest.mark.parametrize(
    "args, reason",
    [
        (["evaluate", "-s", "1f1b", "-p", "0", "-m", "4"], "--devices: must be an integer >= 1, got 0"),
        (["evaluate", "-s", "1f1b", "-p", "4", "-m", "0"], "--microbatches: must be an integer >= 1, got 0"),
        (["evaluate", "-s", "nope", "-p", "4", "-m", "4"], "unknown schedule 'nope'"),
        (["evaluate", "-s", "chimera", "-p", "3", "-m", "3"], "even number of devices"),
        (["table", "-s", "1f1b", "-p", "4", "-m", "4", "--backward", "0"], "--backward: must be a finite number > 0"),
        (["table", "-s", "1f1b", "-p", "4", "-m", "4", "--comm", "1e300"], "--comm: must be at most 1,000,000 slots, got 1e+300"),
        (["evaluate", "-s", "1f1b", "-p", "4", "-m", "4", "--forward", "2e6"], "--forward: must be at most 1,000,000 slots"),
        # below the tables' resolution of 1e-6 slot a duration became 0 (F ops drawn with no width)
        (["table", "-s", "1f1b", "-p", "4", "-m", "4", "--forward", "1e-7"],
         "--forward: must be at least 1e-06 slots (the tables' resolution), got 1e-07"),
        (["table", "-s", "1f1b", "-p", "4", "-m", "4", "--comm", "1e-9"], "--comm: must be 0 or at least 1e-06 slots"),
        (["table", "-s", "zb-h1", "-p", "4", "-m", "4", "--weight", "1e-8"], "--weight: must be 0 or at least 1e-06 slots"),
        # and the parts worked out from them: I = B - W, W = B / 2
        (["table", "-s", "zb-h1", "-p", "4", "-m", "4", "--backward", "1", "--weight", "0.9999996"],
         "--weight: gives I = backward - weight = 4e-07 slots, under the tables' resolution of 1e-06"),
        # just under the resolution, not shown rounded to it ("= 1e-06 slots, under ... of 1e-06")
        (["table", "-s", "zb-h1", "-p", "4", "-m", "8", "--weight", "1.999999"],
         "--weight: gives I = backward - weight = 9.999999999e-07 slots, under the tables' resolution of 1e-06"),
        (["table", "-s", "zb-h1", "-p", "4", "-m", "4", "--backward", "1.5e-6"], "--backward: gives W = backward / 2 = 7.5e-07 slots"),
        (["import", "x.csv", "--weight", "-1"], "--weight: must lie between 0 and backward"),
        (["search", "--unit", "-p", "4", "-m", "8", "--space", "fixed:"], "--space: fixed:NAME needs a schedule: unknown schedule ''"),
        (["frontier", "--unit", "-p", "4", "-m", "8", "--limits", ""], "--limits: must list at least one memory limit"),
        # modelled mode reads a bare number as bytes: 80 meant 80 GB ("no job fits 0.00 GB")
        (["plan", "--model", "llama3-8b", "--gpus", "8", "--system", "dgx-h100", "--memory-limit", "80"],
         "--memory-limit: '80' would be 80 bytes: give a unit, e.g. 80GB or 80GiB"),
        # a unit without its B is ambiguous (GB or GiB?): refused, naming the units (their case is free)
        (["plan", "--model", "llama3-8b", "--gpus", "8", "--system", "dgx-h100", "--memory-limit", "80G"],
         "--memory-limit: must be bytes, e.g. 60GiB or 6.4e10 (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '80G'"),
        (["search", "--unit", "-p", "4", "-m", "8", "--memory-limit", "-1"], "--memory-limit: must be positive, got '-1'"),
        # the global batch a micro batch makes is the micro batch's error, not the flag not given
        (["evaluate", "-s", "1f1b", "-p", "4", "-m", "4", "--model", "study", "--system", "mid-mid", "--micro-batch",
          "1000000000"], "--micro-batch: 1000000000 x 4 microbatches x 1 replica makes a global batch of 4,000,000,000 sequences, more than 1,073,741,824"),
        (["evaluate", "-s", "1f1b", "-p", "4", "-m", "4", "--model", "study", "--system", "mid-mid", "--global-batch", "0"],
         "--global-batch: must be a positive integer of at most 1073741824, got 0"),
        (["evaluate", "-s", "chimera-asym", "-p", "4", "-m", "4", "--split", "1:x"], "--split"),
        (["evaluate", "-s", "all", "-p", "-2", "-m", "4"], "--devices: must be an integer >= 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(args, reason):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.stderr.count("\n") == 1
    assert reason in result.stderr


def test_memory_units_are_read_in_any_case():
    """80gib and 80GiB are the same limit (80gb was refused, naming units it then accepted as GB)."""
    from ppopt.cli.options import parse_amount

    assert parse_amount("80gib", False) == parse_amount("80GiB", False) == 80 * 2**30
    assert parse_amount("80gb", False) == parse_amount("80 GB", False) == 80e9
    assert parse_amount("1kib", False) == 1024



def test_csv_lengths_and_system_figures_have_ten_significant_digits(monkeypatch):
    """Hanayo's table at p = 2, m = 2, W = 3 lasts 20/3 slots: evaluate's CSV said 6.66667 (the text's
    six digits), and `list systems` rounded the calibrated inter-node bandwidth to 88.79 GB/s."""
    import csv
    import io

    from ppopt.config import load_system
    from ppopt.report.text import csv_number

    rows = list(csv.DictReader(io.StringIO(run("evaluate", "-s", "hanayo", "-p", 2, "-m", 2, "--waves", 3, "--format", "csv").stdout)))
    assert rows[0]["length table"] == "6.666666667"
    # the calibration that fitted 88.79 GB/s (it now fits the base's round 100): a preset with that figure
    calibrated = load_system("a100-vtrain-calibrated")
    odd = calibrated.model_copy(update={"inter_node": calibrated.inter_node.model_copy(update={"bandwidth_bytes_per_s": 88789760467.89331})})
    monkeypatch.setattr("ppopt.config.load_system", lambda name: odd if name == "a100-vtrain-calibrated" else load_system(name))
    systems = {r["system"]: r for r in csv.DictReader(io.StringIO(run("list", "systems", "--format", "csv").stdout))}
    assert systems["a100-vtrain-calibrated"]["inter-node GB/s"] == csv_number(88789760467.89331 / 1e9) == "88.78976047"


def test_markdown_footnotes_marked_over_memory_are_not_headings():
    """The over-memory footnote begins with its mark, #: in Markdown a line "# 1f1b: device 0 peaks
    at ..." is a top-level heading. Escaped there; the text keeps the bare mark."""
    args = ["evaluate", "-s", "1f1b", "-p", 8, "-m", 8, "--model", "study", "--system", "mid-mid"]
    markdown = run(*args, "--format", "markdown").stdout.splitlines()
    assert any(line.startswith("\\# 1f1b: device 0 peaks at") for line in markdown)
    assert not any(line.startswith("#") for line in markdown)
    assert any(line.startswith("# 1f1b: device 0 peaks at") for line in run(*args).stdout.splitlines())


@pytest.mark.parametrize("fmt", ["markdown", "csv"])
def test_tables_in_markdown_and_csv(fmt):
    result = run("evaluate", "-s", "all", "-p", 4, "-m", 8, "--format", fmt)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    if fmt == "csv":
        assert lines[0].startswith("schedule,bubble formula,bubble table")
        assert lines[2].split(",")[:3] == ["1f1b", "0.2727272727", "0.2727272727"]  # 3/11, ten significant digits
    else:
        header = next(i for i, line in enumerate(lines) if line.startswith("| schedule |"))
        assert lines[header + 1].startswith("|---|")
        assert lines[header + 3].startswith("| 1f1b | 0.2727 | 0.2727 |")


def test_grid_colours_only_when_asked():
    from ppopt.evaluate import table_of
    from ppopt.report.text import grid

    table = table_of("1f1b", 2, 2)
    assert "\x1b[" not in grid(table)
    coloured = grid(table, colour=True)
    assert "\x1b[34mF0" in coloured and "\x1b[31mB0" in coloured


def test_library_errors_name_the_flag_the_user_typed():
    result = CliRunner().invoke(main, ["table", "-s", "interleaved-1f1b", "-p", "4", "-m", "6", "--chunks", "2"])
    assert result.exit_code == 1  # the generator's field "microbatches" printed as the flag
    assert result.output.strip() == ("error: --microbatches: interleaved-1f1b needs microbatches to be a multiple of devices (4), "
                                     "got 6: 4 or 8 would do")


def test_evaluate_lengths_are_in_one_unit_for_every_schedule():
    # F = I = W = 1 slot of a 1/p model share (B = 2), p = m = 8, by hand:
    # 1F1B (m + p - 1)(F + B) = 45; ZB-H1 m(F + B) + (p - 1)(F + I - W) = 31 (Qi et al., ICLR 2024,
    # Section 2); interleaved 1F1B with v = 2 chunks m(F + B) + (p - 1)(F + B)/v = 34.5 (Narayanan
    # et al., SC'21, Section 2.2).
    result = run("evaluate", "-s", "all", "-p", 8, "-m", 8, "--json")
    assert result.exit_code == 0, result.output
    rows = {row["schedule"]: row for row in json.loads(result.stdout) if "skipped" not in row}  # dualpipev needs m >= 2p
    assert {name: rows[name]["table"]["length"] for name in ("1f1b", "zb-h1", "interleaved-1f1b")} == {
        "1f1b": 45, "zb-h1": 31, "interleaved-1f1b": 34.5}
    assert {row["length_unit"] for row in rows.values()} == {"slots"}
    assert rows["1f1b"]["unit_model"] == {"forward": 1, "backward": 2, "input_grad": 1, "weight_grad": 1, "comm": 0,
                                          "chunk_ops_scaled_by": "p/S"}
    text = run("evaluate", "-s", "1f1b", "-p", 8, "-m", 8, "--backward", 3).stdout
    assert text.splitlines()[0].startswith("p = 8 devices, m = 8 microbatches; lengths in unit slots of a 1/p model share "
                                           "F = 1, B = 3 (I = 1.5, W = 1.5)")
    assert "  60  " in text  # (8 + 7)(1 + 3)
    assert "Lengths are in unit slots" in run("evaluate", "--help").stdout


def test_pp_names_the_devices_as_in_the_job_command():
    """`ppopt job` calls the pipeline degree --pp; the schedule commands take it beside -p/--devices."""
    by_pp = json.loads(run("evaluate", "-s", "1f1b", "--pp", 5, "-m", 7, "--json").stdout)
    by_p = json.loads(run("evaluate", "-s", "1f1b", "-p", 5, "-m", 7, "--json").stdout)
    assert by_pp == by_p
    assert by_pp != json.loads(run("evaluate", "-s", "1f1b", "-p", 4, "-m", 7, "--json").stdout)


def test_job_takes_the_short_flags_of_the_schedule_commands():
    """-s, -p and -v mean --schedule, --pp and --chunks in `job` as in evaluate and search, so a
    command line moves between them; `job -s` was "No such option"."""
    base = ["job", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", 2, "--json"]
    long = json.loads(run(*base, "--schedule", "interleaved-1f1b", "--pp", 4, "--chunks", 2).stdout)
    short = json.loads(run(*base, "-s", "interleaved-1f1b", "-p", 4, "-v", 2).stdout)
    assert short == long
    assert short != json.loads(run(*base, "-s", "interleaved-1f1b", "-p", 4, "-v", 4).stdout)


def test_evaluate_all_shows_progress_only_for_large_requests(monkeypatch):
    """Evaluating every schedule at hundreds of thousands of ops takes up to a minute: a bar on
    stderr once it has run PROGRESS_AFTER_S (ending at every schedule done); quick runs print none."""
    import ppopt.solve.options as shared

    small = CliRunner().invoke(main, ["evaluate", "-s", "all", "-p", "4", "-m", "8"])
    assert small.exit_code == 0 and "schedules [" not in small.stderr
    monkeypatch.setattr(shared, "PROGRESS_AFTER_S", 0.0)  # as if it had taken long
    large = CliRunner().invoke(main, ["evaluate", "-s", "all", "-p", "4", "-m", "8"])
    assert large.exit_code == 0 and large.stdout == small.stdout
    assert f"evaluate: schedules [{'#' * 28}] {len(names())}/{len(names())}" in large.stderr
    quiet = CliRunner().invoke(main, ["evaluate", "-s", "all", "-p", "4", "-m", "8", "-q"])
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, small.stdout, "")
    model = ["--model", "study", "--system", "mid-mid"]
    loud, hushed = (CliRunner().invoke(main, ["compare", "-p", "4", "-m", "8", *model, *flag]) for flag in ([], ["-q"]))
    assert "compare: schedules [" in loud.stderr and "compare: schedules" not in hushed.stderr
    assert hushed.exit_code == 0 and hushed.stdout == loud.stdout


def test_export_and_import_report_their_phases_only_when_long(tmp_path, monkeypatch):
    """Millions of ops take seconds per phase: once a command has run PROGRESS_AFTER_S, each phase
    is a line on stderr (none with -q); quick runs print only what they wrote."""
    import ppopt.solve.options as shared

    path = tmp_path / "s.csv"
    quick = CliRunner().invoke(main, ["export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", str(path)])
    assert quick.exit_code == 0 and quick.stderr == f"wrote {path} (torch-csv: 1f1b, p=2, m=2)\n"
    monkeypatch.setattr(shared, "PROGRESS_AFTER_S", 0.0)
    slow = CliRunner().invoke(main, ["export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", str(path)])
    # the heartbeat's "still working" lines (due at once here, as PROGRESS_AFTER_S is 0) may come between
    phases = lambda result: [line.split(" (")[0] for line in result.stderr.splitlines() if "still working" not in line]  # noqa: E731
    assert phases(slow) == ["export: schedule built", "export: simulated", f"wrote {path}"]
    read = CliRunner().invoke(main, ["import", str(path)])
    assert phases(read) == [f"import {path}: read and validated", f"import {path}: table built"]
    hushed = CliRunner().invoke(main, ["export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", str(path), "-q"])
    assert hushed.exit_code == 0 and hushed.stderr == f"wrote {path} (torch-csv: 1f1b, p=2, m=2)\n"
    read_quietly = CliRunner().invoke(main, ["import", str(path), "-q"])
    assert (read_quietly.exit_code, read_quietly.stderr, read_quietly.stdout) == (0, "", read.stdout)


def test_one_long_step_says_it_is_still_working(monkeypatch, capsys):
    """One simulation of millions of ops (`job` with a global batch of 410,000, `table -p 1000000`)
    ran 15 to 31 s with nothing on stderr. The heartbeat waits PROGRESS_AFTER_S, then STILL_WORKING_S
    between lines, and stops with the step; its waits are counted here with a stand-in event, not
    timed."""
    import contextlib

    import ppopt.cli.options as options
    import ppopt.solve.options as shared

    class Event:  # returns "set" from its fourth wait on: three beats, whatever the clock says
        def __init__(self):
            self.waits = []

        def wait(self, seconds):
            self.waits.append(seconds)
            return len(self.waits) > 3

        def set(self):
            pass

    events = []
    import threading
    from types import SimpleNamespace

    monkeypatch.setattr(shared, "threading", SimpleNamespace(Event=lambda: events.append(Event()) or events[-1], Thread=threading.Thread))
    said = []
    with shared.heartbeat(said.append, 5.0, first_s=1.0):
        pass
    assert events[0].waits == [1.0, 5.0, 5.0, 5.0] and len(said) == 3
    monkeypatch.undo()

    calls = []

    @contextlib.contextmanager
    def beats(say, every_s, first_s=None):
        calls.append((every_s, first_s))
        say(3.2)
        say(8.4)
        yield

    monkeypatch.setattr(shared, "heartbeat", beats)
    with options.working("job t1 p8"):
        pass
    assert capsys.readouterr().err == "job t1 p8: still working (3 s)\njob t1 p8: still working (8 s)\n"
    assert calls == [(options.STILL_WORKING_S, shared.PROGRESS_AFTER_S)]
    with options.working("hushed", quiet=True):
        pass
    assert calls == [(options.STILL_WORKING_S, shared.PROGRESS_AFTER_S)] and capsys.readouterr().err == ""


def test_evaluate_counts_one_working_clock_from_reading_to_the_result(monkeypatch, tmp_path):
    """Reading a schedule and evaluating it are one step to the user: its "still working" clock must
    not restart in between (two blocks printed 3 s, then 3 s again, for a 6 s run)."""
    import contextlib

    import ppopt.cli.schedules as schedules

    entered = []

    @contextlib.contextmanager
    def once(label, quiet=False):
        entered.append(label)
        yield

    monkeypatch.setattr(schedules, "working", once)
    assert run("evaluate", "-s", "1f1b", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100").exit_code == 0
    path = tmp_path / "s.csv"
    assert run("export", "-s", "1f1b", "-p", 2, "-m", 4, "-o", path).exit_code == 0
    assert run("evaluate", "--schedule-file", path).exit_code == 0
    assert entered == ["evaluate 1f1b", f"evaluate {path}"]


def test_compare_names_both_sources_of_durations():
    """compare has no unit-only mode: its help and its error name --model/--system and --costs."""
    result = run("compare", "-p", 4, "-m", 8)
    assert result.exit_code == 1 and "give --model and --system, or --costs FILE" in result.output
    assert "ppopt evaluate -s all" in result.output  # where the two layers without durations are
    assert "or --costs FILE (the simulation layer only" in " ".join(run("compare", "--help").output.split())


def test_a_schedule_file_s_microbatches_that_the_batch_does_not_split_name_the_file(tmp_path):
    """--microbatches was not given: the file set 3 microbatches, so the error names the file and
    asks for another global batch, not for other microbatches."""
    path = tmp_path / "s3.csv"
    assert run("export", "-s", "1f1b", "-p", 2, "-m", 3, "-o", path).exit_code == 0
    result = run("evaluate", "--schedule-file", path, "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", 8)
    assert result.exit_code == 1 and result.stderr == (
        f"error: --global-batch: global batch of 8 sequences is not divisible by 3 microbatches, and {path} sets the "
        "microbatches: give another global batch\n")


def test_a_table_of_chunks_says_its_peaks_count_chunks():
    """ZB-V puts 2 chunks of 1/(2p) on each device: the table counts 8 live chunks at p = 4, m = 8,
    which the solver's reports, in 1/p model shares, count as 4; the line says which unit it uses."""
    v = run("table", "-s", "zb-v", "-p", 4, "-m", 8)
    assert v.exit_code == 0, v.output
    assert v.output.splitlines()[-1].endswith("peak live activations per device (stage chunks, 1/8 of the model each) 8 (all)")
    linear = run("table", "-s", "1f1b", "-p", 4, "-m", 8)
    assert linear.output.splitlines()[-1].endswith("peak live activations per device 4,3,2,1")
    # ZB-V's grid draws a column per half slot (51 columns for 25.5 slots): the line says so, 1F1B's has none
    assert v.output.splitlines()[-1].startswith("length 25.5 slots (one column = 0.5 slot), bubble ratio")
    assert linear.output.splitlines()[-1].startswith("length 33 slots, bubble ratio")
    # the same schedule in the solver's report: 4 model shares, and it says so
    searched = run("search", "--unit", "-p", 4, "-m", 8, "--space", "fixed:zb-v", "--time-limit", 5, "-q").output
    assert "; peak live activations (1/p model shares) per device 4 (all)" in searched


def test_compare_prints_different_steps_differently():
    """At p = 2, m = 8 (study on mid-mid) chimera-asym and dualpipe take 108.172 and 108.212 s: four
    digits printed both as 108.2 s under ranks 1 and 2; the column takes the digits that tell them apart."""
    text = run("compare", "-p", 2, "-m", 8, "--model", "study", "--system", "mid-mid").output
    data = json.loads(run("compare", "-p", 2, "-m", 8, "--model", "study", "--system", "mid-mid", "--json").stdout)
    steps = {row["schedule"]: row["simulation"]["step_time_s"] for row in data}
    assert steps["chimera-asym"] != steps["dualpipe"] and f"{steps['chimera-asym']:.4g}" == f"{steps['dualpipe']:.4g}"
    printed = {line.split()[0]: line.split("(")[-1].split(")")[0] for line in text.splitlines()
               if line.split()[:1] in (["chimera-asym"], ["dualpipe"])}
    # each as its own value, rounded to the one digit more that tells them apart
    assert printed == {"chimera-asym": f"{steps['chimera-asym']:.2f} s", "dualpipe": f"{steps['dualpipe']:.2f} s"}
    assert printed["chimera-asym"] != printed["dualpipe"]


def test_json_output_is_indented_when_small_and_compact_when_large(monkeypatch):
    """Above PRETTY_JSON_BYTES of compact JSON the output is one line (the indenting encoder is the
    slow pure-Python one), with the same content."""
    import ppopt.cli.options as options

    pretty = run("table", "-s", "1f1b", "-p", 2, "-m", 4, "--json").output
    assert pretty.startswith("{\n  ") and len(pretty.splitlines()) > 20
    monkeypatch.setattr(options, "PRETTY_JSON_BYTES", 100)
    compact = run("table", "-s", "1f1b", "-p", 2, "-m", 4, "--json").output
    assert len(compact.splitlines()) == 1 and json.loads(compact) == json.loads(pretty)


def test_the_footnote_says_the_closed_forms_leave_out_messages():
    """With --comm every table is longer than its closed form, which has no messages: the footnote
    pointed to the README's formula-vs-table section, which is about something else."""
    result = run("evaluate", "-s", "1f1b", "-p", 4, "-m", 8, "--comm", 1)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1] == ("* the table differs from the closed form, which leaves out the messages "
                                              "(comm = 1 slot); some differ without them too (see README: formula vs table)")


def test_schedules_with_more_stages_than_layers_are_skipped_not_fatal(tmp_path):
    """On a 4-layer model at p = 4 the families of two stages per device (8 stages) cannot be
    costed: `evaluate -s all`, `compare` and `gap` failed whole on them ("cannot split 4 layers
    over 8 stages"); now they skip those families with the reason and report the others."""
    from pathlib import Path

    preset = (Path(__file__).resolve().parents[1] / "models" / "llama3-8b.toml").read_text()
    model = tmp_path / "four.toml"
    model.write_text(preset.replace('name = "llama3-8b"', 'name = "four"').replace("num_layers = 32", "num_layers = 4"))
    common = ["-p", 4, "-m", 8, "--model", model, "--system", "dgx-h100"]
    two_per_device = [n for n in names() if n not in ("gpipe", "1f1b", "chimera", "chimera-asym", "zb-h1", "zb-h2", "dualpipe")]
    for args in (["evaluate", "-s", "all", *common], ["compare", *common],
                 ["gap", *common, "-s", "1f1b", "-s", "zb-v", "--time-limit", 10, "-q"]):
        result = run(*args)
        assert result.exit_code == 0, (args, result.output)
        assert "skipped zb-v: 8 stages (4 devices x 2 under zb-v) exceed the model's 4 layers" in result.output
        assert "1f1b" in result.stdout
    evaluated = run("evaluate", "-s", "all", *common)
    for name in two_per_device:
        assert f"skipped {name}: 8 stages" in evaluated.output
    alone = run("evaluate", "-s", "interleaved-1f1b", *common)
    assert alone.exit_code == 1
    assert alone.output == "error: --devices: 8 stages (4 devices x 2 under interleaved-1f1b) exceed the model's 4 layers\n"


def test_csv_tables_carry_their_marks_in_columns_not_in_cells():
    """CSV is printed bare, without the footnotes that explain `!`, `#` and `*`: those marks sat in
    the cells ("dualpipe !", "1490 GiB #"); CSV has yes/no columns for them instead."""
    import csv
    import io

    common = ["-p", 4, "-m", 8, "--model", "study", "--system", "mid-mid", "--format", "csv"]  # 3 keep their rank
    compared = list(csv.DictReader(io.StringIO(run("compare", *common).stdout)))
    evaluated = list(csv.DictReader(io.StringIO(run("evaluate", "-s", "all", *common).stdout)))
    text = run("compare", *common[:-2]).stdout
    for row in compared:
        flagged = any(line.startswith(f"{row['schedule']} ! ") for line in text.splitlines())
        assert row["rank changes"] == ("yes" if flagged else "no")
        assert row["over memory"] == "yes" and float(row["peak memory GiB"]) > 80  # terabytes per device
    assert {row["rank changes"] for row in compared} == {"yes", "no"}
    for row in evaluated:
        assert not row["bubble table"].endswith("*") and float(row["sim peak memory GiB"]) > 0
        differs = row["bubble formula"] not in ("", row["bubble table"])
        # empty where there is no closed form to differ from (v-min; it read "no")
        expected = "" if row["bubble formula"] == "" else "yes" if differs else "no"
        assert row["table differs from formula"] == expected, row["schedule"]
    assert {row["table differs from formula"] for row in evaluated} == {"yes", "no", ""}


def test_csv_cells_are_bare_numbers_with_units_in_the_header():
    """CSV cells read "74.49 s", "5.575e+04 GiB", "8 (all)", "n/a (m < 2p - 1)" and, in compare,
    "2  (0.0769)": two values, or a number with its unit, in one cell. Each cell of a numeric column
    now holds one number (lists of per-device numbers separated by ';', as in a sweep's rows.csv) or
    nothing, and agrees with the JSON."""
    import csv
    import io
    import json

    common = ["-p", 4, "-m", 4, "--model", "study", "--system", "mid-mid"]
    evaluated = list(csv.DictReader(io.StringIO(run("evaluate", "-s", "all", *common, "--format", "csv").stdout)))
    as_json = {r["schedule"]: r for r in json.loads(run("evaluate", "-s", "all", *common, "--json").stdout)}
    numeric = ("bubble formula", "bubble table", "length formula", "length table", "sim step s", "sim idle", "sim peak memory GiB")
    for row in evaluated:
        for column in numeric:
            assert row[column] == "" or float(row[column]) >= 0, (row["schedule"], column, row[column])
        for column in ("peak act. formula", "peak act. table", "weights"):
            assert row[column] == "" or all(float(v) >= 0 for v in row[column].split(";")), (column, row[column])
        simulated = as_json[row["schedule"]]["simulation"]
        # ten significant digits, as every numeric CSV cell (the ratios had the text's four decimals)
        assert row["bubble table"] == f"{as_json[row['schedule']]['table']['bubble_ratio']:.10g}"
        assert row["sim idle"] == f"{simulated['idle_ratio']:.10g}"
        assert float(row["sim step s"]) == pytest.approx(simulated["step_time_s"], rel=1e-5)
        assert float(row["sim peak memory GiB"]) == pytest.approx(max(simulated["peak_memory_bytes"]) / 2**30, rel=1e-5)
    zb_v = next(row for row in evaluated if row["schedule"] == "zb-v")
    assert zb_v["bubble formula"] == "" and zb_v["peak act. table"] == "5;6;7;8"  # m = 4 < 2p - 1: outside the forms
    compared = list(csv.DictReader(io.StringIO(run("compare", *common[:2], "-m", 8, *common[4:], "--format", "csv").stdout)))
    compared_json = {r["schedule"]: r for r in json.loads(run("compare", *common[:2], "-m", 8, *common[4:], "--json").stdout)}
    for row in compared:
        assert int(row["table rank"]) >= 1 and float(row["table bubble"]) >= 0 and float(row["step s"]) > 0
        assert row["formula rank"] == row["formula bubble"] == "" or int(row["formula rank"]) >= 1
        assert row["idle"] == f"{compared_json[row['schedule']]['simulation']['idle_ratio']:.10g}"


def test_gap_csv_says_over_memory_in_a_column_and_gives_the_gap_to_ten_digits():
    """gap's CSV carried the text's "# over the system's ... per device" note in a cell and its gap to
    four digits; it has an `over memory` yes/no column like compare's, and csv_number's digits."""
    import csv
    import io
    import json

    common = ["gap", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", 8, "-s", "zb-h1",
              "--time-limit", 10, "--deterministic-time", 2, "--workers", 1, "-q"]
    (row,) = csv.DictReader(io.StringIO(run(*common, "--format", "csv").stdout))
    (entry,) = json.loads(run(*common, "--json").stdout)["schedules"]
    assert entry["over_memory"] is True and row["over memory"] == "yes" and row["note"] == ""
    assert row["gap %"] == f"{100 * entry['gap']:.10g}"


def test_evaluate_all_sizes_only_the_families_it_can_cost(monkeypatch):
    """The total-size check of `evaluate -s all` counted the families then skipped for having more
    stages than the model has layers, so it could refuse a request whose other schedules fit."""
    import ppopt.evaluate

    counted = []
    monkeypatch.setattr(ppopt.evaluate, "check_total_size", lambda total, label: counted.append(label))
    result = run("evaluate", "-s", "all", "-p", 32, "-m", 64, "--model", "llama3-8b", "--system", "dgx-h100")
    assert result.exit_code == 0, result.output
    skipped = result.output.count("exceed the model's 32 layers")
    assert skipped == 7 and counted == [f"the {len(names()) - skipped} schedules at p = 32, m = 64"]


def test_shell_completion_offers_presets_and_schedules():
    """`eval "$(_PPOPT_COMPLETE=bash_source ppopt)"` completes preset and schedule names (and a file
    once the word looks like a path); `all` only where the option takes it."""
    from click.shell_completion import ShellComplete

    from ppopt.config import list_models, list_systems
    from ppopt.generators import names

    def values(args, incomplete):
        items = ShellComplete(main, {}, "ppopt", "_PPOPT_COMPLETE").get_completions(args, incomplete)
        return [(item.type, item.value) for item in items]

    assert values(["evaluate", "-s"], "zb") == [("plain", n) for n in names() if n.startswith("zb")] != []
    assert ("plain", "all") in values(["evaluate", "-s"], "") and ("plain", "all") in values(["gap", "-s"], "")
    assert ("plain", "all") not in values(["table", "-s"], "")  # one schedule
    assert values(["evaluate", "--model"], "") == [("plain", n) for n in list_models()]
    assert values(["plan", "--system"], "dgx") == [("plain", n) for n in list_systems() if n.startswith("dgx")] != []
    assert values(["published", "x.csv", "--system"], "a100") != []
    assert values(["job", "--model"], "./my") == [("file", "./my")]
    # file inputs and outputs complete file names (they completed nothing), an output directory dirs
    for args in (["import"], ["search", "--csv"], ["evaluate", "--trace"], ["gap", "--schedule-file"], ["export", "-o"],
                 ["compare", "--costs"], ["plan", "--torch-csv"], ["calibrate", "x.csv", "-o"]):
        assert values(args, "w") == [("file", "w")], args
    assert values(["study", "-o"], "o") == [("dir", "o")]
    assert values(["list", "models"], "ll") == [("plain", n) for n in list_models() if n.startswith("ll")] != []
    assert values(["list", "systems"], "dgx") == [("plain", n) for n in list_systems() if n.startswith("dgx")]


def test_evaluate_all_leaves_out_the_schedules_a_deadline_cannot_fit(monkeypatch):
    """With a deadline, a schedule is evaluated only while its estimated time (EVALUATE_S_PER_OP per
    op) fits before it. At one second per op and 80 s left, at p = 4, m = 8 the families of at most
    80 ops (one F and one B per stage: 64) run; those with split backwards (96) or chunks (128, 192)
    are skipped with the time limit as their reason."""
    import time

    import ppopt.evaluate as evaluating
    from ppopt.generators import get

    monkeypatch.setattr(evaluating, "EVALUATE_S_PER_OP", 1.0)
    results, skipped = evaluating.evaluate_all(4, 8, deadline=time.monotonic() + 80)
    ops = {name: get(name).ops(4, 8, {}) for name in names()}
    assert {r.schedule for r in results} == {name for name, size in ops.items() if size is not None and size <= 80 and name not in skipped}
    assert len(results) >= 3
    late = {name for name, reason in skipped.items() if reason.startswith("time limit: about ")}
    assert late == {name for name, size in ops.items() if size is not None and size > 80}
    assert late >= {"zb-h1", "zb-v", "interleaved-1f1b"}
    with pytest.raises(evaluating.ScheduleError, match=r"no schedule evaluated within the time limit: the quickest, gpipe, needs about 64.0 s, and no time is left \(it counts from the command.s start"):
        evaluating.evaluate_all(4, 8, deadline=time.monotonic())


@pytest.mark.parametrize("args, line", [
    # one schedule: refused before it is built, from its op count
    (["evaluate", "-s", "1f1b", "-p", 4, "-m", 1000000, "--time-limit", 5],
     "error: --time-limit: too short for 1f1b: about 36.0 s to evaluate its 8,000,000 ops, "),
    (["compare", "-p", 4, "-m", 8, "--model", "study", "--system", "mid-mid", "--time-limit", 1e-9],
     "error: --time-limit: no schedule evaluated within the time limit: the quickest, "),
    (["evaluate", "-s", "all", "-p", 4, "-m", 8, "--time-limit", 0], "error: --time-limit: must be a finite number of seconds > 0"),
    # the stacked picture of up to 14 schedules, 1,632 ops at p = 4, m = 8: 2 s + 13 x 0.6 s + 1,632 x 0.4 ms = 10.45 s
    (["compare", "-p", 4, "-m", 8, "--model", "study", "--system", "mid-mid", "--plot", "c.png", "--time-limit", 5],
     "error: --time-limit: 5 s leaves nothing for the schedules once 10.5 s are kept for the picture"),
])
def test_evaluate_and_compare_refuse_a_time_limit_too_short_in_one_line(args, line):
    result = run(*args)
    assert result.exit_code == 1 and result.output.startswith(line) and result.output.count("\n") == 1, result.output


def test_a_tiny_schedule_under_a_spent_limit_is_worded_without_zeros():
    """It said "about 0.0 s to evaluate its 32 ops, 0.0 s left"."""
    import time

    from ppopt.cli.schedules import _check_one_in_time
    from ppopt.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        _check_one_in_time("1f1b", 32, time.monotonic() - 1, False, False)
    assert refused.value.reason == "too short for 1f1b: about 144 us to evaluate its 32 ops, no time is left"


def test_a_misspelt_schedule_or_preset_name_gets_the_closest_known_one():
    """Names are lower case: '-s 1F1B' was refused with the list only; the closest name is now offered,
    case aside first, and nothing when no name is close."""
    cases = [(["-s", "1F1B"], "did you mean '1f1b'?"), (["-s", "zb-h7"], "did you mean 'zb-h2'?"),
             (["-s", "1f1b", "--model", "llama3-8B", "--system", "dgx-h100"], "did you mean 'llama3-8b'?"),
             (["-s", "1f1b", "--model", "llama3-8b", "--system", "dgx-h10"], "did you mean 'dgx-h100'?")]
    for args, hint in cases:
        result = run("evaluate", "-p", 4, "-m", 8, *args)
        assert result.exit_code == 1 and result.stderr.rstrip().endswith(hint), result.stderr
    far = run("evaluate", "-p", 4, "-m", 8, "-s", "xyz")
    assert far.exit_code == 1 and "did you mean" not in far.stderr


@pytest.mark.parametrize("command, extra", [("job", ["--pp", 2]), ("plan", ["--gpus", 8])])
def test_a_microbatch_count_given_to_job_or_plan_says_how_they_set_it(command, extra):
    """`job -m 8` was "No such option '-m'" alone: job and plan take the batch, not a count."""
    result = run(command, "--model", "llama3-8b", "--system", "dgx-h100", *extra, "-m", 8)
    assert (result.exit_code, result.stderr) == (1, "error: No such option '-m': a job's microbatch count follows from its "
                                                 "batch: m = global batch / (micro batch x d); give --global-batch and "
                                                 f"--micro-batch (see 'ppopt {command} --help')\n")


def test_a_split_whole_layers_cannot_follow_is_named_in_a_note():
    """chimera-asym's --split 1:1000000 over llama3-8b's 32 layers and 4 stages gives 1,1,15,15
    layers (every stage keeps one), yet the report named 1:1000000 alone; the default 1:2 (10:22
    layers, a share of 0.31 for 0.33) needs no note."""
    args = ["evaluate", "-s", "chimera-asym", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100"]
    far = run(*args, "--split", "1:1000000")
    assert far.exit_code == 0, far.output
    assert ("note: chimera-asym's split 1:1e+06 becomes 2:30 layers on this model (1,1,15,15 per stage: whole layers, at least "
            "one per stage)") in far.stderr.splitlines()
    assert "becomes" not in run(*args).stderr


def test_job_prints_no_part_of_a_step_as_zero_when_it_is_not(tmp_path):
    """A step of hours is printed in s, and its 17 ms optimizer step read "0.0 s"; a toy model's
    peak read "0.0 GB" and its MFU "0.0 %". A part now takes a finer unit, or three significant digits."""
    args = ["job", "--model", "llama3-8b", "--system", "dgx-h100", "--pp", 8, "--dp", 2, "--global-batch", 200000, "-s", "zb-h1"]
    text, data = run(*args).output, json.loads(run(*args, "--json").output)
    assert data["step_time_s"] >= 1e4 and f"{data['step_time_s']:,.1f} s" in text
    assert f"{1e3 * data['optimizer_s']:.1f} ms" in text and f"{1e3 * data['gradient_sync_s']:.1f} ms" in text
    toy = tmp_path / "toy.toml"
    toy.write_text('name = "toy"\nnum_layers = 4\nhidden_size = 8\nnum_attention_heads = 2\nvocab_size = 16\n'
                   "seq_length = 4\nglobal_batch_size = 8\n")
    args = ["job", "--model", str(toy), "--system", "dgx-h100", "--pp", 2]
    text, data = run(*args).output, json.loads(run(*args, "--json").output)
    assert f"peak memory {data['peak_memory_bytes'] / 1e9:>10.3g} GB" in text and f"MFU {100 * data['mfu']:.3g} %" in text
    assert " 0.0 GB" not in text and "MFU 0.0 %" not in text


def test_evaluate_names_a_schedule_built_with_options_other_than_its_defaults():
    """`evaluate -s hanayo --waves 2` labelled its row `hanayo`, where a job names it `hanayo w2`."""
    assert "hanayo w2 " in run("evaluate", "-s", "hanayo", "--waves", 2, "-p", 4, "-m", 8).output
    rows = run("evaluate", "-s", "all", "-p", 4, "-m", 8, "--chunks", 4).output
    assert "interleaved-1f1b v4 " in rows and "looped-bfs v4 " in rows and "\n1f1b " in rows
    assert "interleaved-1f1b  " in run("evaluate", "-s", "all", "-p", 4, "-m", 8).output  # its default, v2: the name alone


def test_compare_names_a_schedule_built_with_options_other_than_its_defaults():
    """compare ranked `hanayo` and `interleaved-1f1b` under their names alone with --waves 2 -v 4, in
    its rows, its rank-change line and its over-memory footnotes."""
    args = ["compare", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-h100", "--waves", 2, "-v", 4]
    text = run(*args).output
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("---")) + 1
    rows = {line.split("  ")[0].rstrip(" !") for line in lines[start:lines.index("", start)]}
    assert {"hanayo w2", "interleaved-1f1b v4", "looped-bfs v4", "1f1b"} <= rows
    assert "# hanayo w2: device" in text
    csv_rows = {line.split(",")[0] for line in run(*args, "--format", "csv").output.splitlines()}
    assert {"hanayo w2", "interleaved-1f1b v4", "1f1b"} <= csv_rows


def test_the_pytorch_csv_flag_has_the_same_two_names_on_search_and_plan(tmp_path):
    """`search --csv` and `plan --torch-csv` were one output under two names, each refused by the
    other command: both now take both, and each name writes the same file."""
    commands = {"search": ["search", "--unit", "-p", 2, "-m", 4, "--time-limit", 5, "-q", "--no-grid"],
                "plan": ["plan", "--model", "llama3-8b", "--gpus", 8, "--pp", 2, "--system", "dgx-h100", "--search", 0, "-q"]}
    for command, args in commands.items():
        written = []
        for flag in ("--csv", "--torch-csv"):
            path = tmp_path / f"{command}{flag}.csv"
            result = run(*args, flag, path)
            assert result.exit_code == 0, result.output
            written.append(path.read_text())
        assert written[0] == written[1] and written[0].count("\n") > 1, command
