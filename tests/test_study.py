"""The study report on a small grid that reaches every claim's code path; each claim's numbers are
recomputed here from rows.csv. The paper's own grid is checked in tests/test_study_claims.py."""

import csv
import importlib.util
import json

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.errors import PpoptError
from ppopt.evaluate import evaluate
from ppopt.report.study import write_report
from ppopt.sweep import expand, load_spec, resolve_spec
from ppopt.sweep.study import SAME_RUNTIME, StudyData
from ppopt.units import UnitCosts

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None

# One S, two m (Chimera's table bubble loses to 1F1B's at S = 4, m = 16), a slow and a fast network at
# one compute level (Hanayo's sensitivity), three systems that do not fill a compute x network grid.
SPEC = """
description = "test study"
schedules = ["gpipe", "1f1b", "chimera", "hanayo", "chimera-asym", "zb-h1"]
devices = [4]
microbatches = [4, 16]
models = ["study"]
systems = ["mid-slow", "mid-fast", "fast-mid"]
global_batch = 64

[options]
split = "1:2"
waves = [1, 2]   # Hanayo's waves: each W is a schedule of its own in the report

[filters.hanayo]
microbatches_equal_devices = true

[solver]
schedules = ["gpipe", "1f1b", "zb-h1"]
devices = [2]
microbatches = [2]
time_limit_s = 20
deterministic_time = 1
"""
SYSTEMS = ("mid-slow", "mid-fast", "fast-mid")
RIVALS = ("gpipe", "1f1b", "hanayo W=1", "hanayo W=2")  # Chimera's paper rivals, each Hanayo W on its own
SECTIONS = (
    "## Step time vs m per system",
    "## Idle ratio vs m",
    "## Peak memory per device",
    "## Rankings per layer and where they flip",
    "## Optimality gaps",
    "## Claims",
)
FIGURES = ("step_time_S4.png", "idle_ratio_S4.png", "peak_memory.png", "peak_memory_per_device.png")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    directory = tmp_path_factory.mktemp("study")
    spec = directory / "study.toml"
    spec.write_text(SPEC)
    out = directory / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("ppopt.report.study_figures.DPI", 30)  # the figures' content, not their resolution, is tested
        result = CliRunner().invoke(main, ["study", "--spec", str(spec), "--output", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "report:" in result.output
    rows = list(csv.DictReader((out / "rows.csv").open()))
    return out, rows, (out / "report.md").read_text(), json.loads((out / "claims.json").read_text())


def evaluated(rows):
    """Simulated rows by (system, m, schedule label): Hanayo's carry their W (``hanayo W=2``)."""
    def label(r):
        return r["schedule"] + (f" W={r['waves']}" if r["schedule"] == "hanayo" else "")

    return {(r["system"], int(r["microbatches"]), label(r)): r for r in rows if r["kind"] == "evaluate" and r["status"] == "ok"}


def num(row, column):
    return float(row[column])


def test_report_has_every_section_and_its_figures(study):
    out, rows, report, _ = study
    for section in SECTIONS:
        assert section in report
    assert report.index("## Claims") > report.index("## Optimality gaps")
    if HAS_MATPLOTLIB:
        for name in FIGURES:
            assert (out / "figures" / name).read_bytes().startswith(b"\x89PNG")
            assert f"figures/{name}" in report
    # hanayo only where m = p; the solver rows are in the gaps table
    assert {r["microbatches"] for r in rows if r["schedule"] == "hanayo" and r["kind"] == "evaluate"} == {"4"}
    gaps = [r for r in rows if r["kind"] == "gap"]
    assert len(gaps) == 3 and all(r["status"] == "ok" for r in gaps)
    assert f"| gpipe | 2 | 2 | none | {float(gaps[0]['solver_step']):.4g} |" in report


def test_gpipe_and_1f1b_claims_match_the_rows(study):
    _, rows, report, claims = study
    at = evaluated(rows)
    diffs = {(sy, m): abs(num(at[sy, m, "1f1b"], "sim_step_time_s") / num(at[sy, m, "gpipe"], "sim_step_time_s") - 1)
             for sy in SYSTEMS for m in (4, 16)}
    claim = claims["gpipe_vs_1f1b"]
    assert claim["points"] == len(diffs) == 6
    assert claim["max_relative_step_time_difference"] == pytest.approx(max(diffs.values()), rel=1e-12)
    assert claim["max_by_system"] == pytest.approx({sy: max(d for (s, _), d in diffs.items() if s == sy) for sy in SYSTEMS})
    assert claim["points_within_threshold"] == sum(d < SAME_RUNTIME for d in diffs.values())
    assert claim["holds"] == (max(diffs.values()) < SAME_RUNTIME)
    assert f"differ by at most {100 * max(diffs.values()):.2f} %" in report
    assert ("**holds**" if claim["holds"] else "**does not hold**") in report.split("1. *GPipe and 1F1B")[1].split("\n")[0]
    ratios = [num(at[sy, m, "1f1b"], "sim_peak_activation_bytes_max") / num(at[sy, m, "gpipe"], "sim_peak_activation_bytes_max")
              for sy in SYSTEMS for m in (4, 16)]
    assert claims["1f1b_activation_peak"]["points_lower"] == sum(r < 1 for r in ratios) == 6
    assert f"{min(ratios):.3f}x to {max(ratios):.3f}x GPipe's" in report


def test_chimera_claims_match_the_rows(study):
    _, rows, report, claims = study
    at = evaluated(rows)
    chimera = claims["chimera"]
    # formula and table: Chimera against the best paper rival present, on the first system
    for layer, column in (("formula", "formula_bubble_ratio"), ("table", "table_bubble_ratio")):
        lost = [m for m in (4, 16) if num(at[SYSTEMS[0], m, "chimera"], column)
                >= min(num(at[SYSTEMS[0], m, s], column) for s in RIVALS if (SYSTEMS[0], m, s) in at) - 1e-9]
        assert chimera[layer]["points"] == 2 and [x["microbatches"] for x in chimera[layer]["not_won"]] == lost
    assert chimera["table"]["not_won"]  # the direct concatenation: Chimera's table bubble does not fall with m
    # simulation: fastest of Chimera and its rivals where the rows say so
    wins = [(sy, m) for m in (4, 16) for sy in SYSTEMS
            if min((s for s in ("chimera",) + RIVALS if (sy, m, s) in at), key=lambda s: num(at[sy, m, s], "sim_step_time_s")) == "chimera"]
    assert [(w["system"], w["microbatches"]) for w in chimera["simulation"]["wins"]] == wins
    assert chimera["simulation"]["wins_by_microbatches"] == {str(m): [sum(w[1] == m for w in wins), 3] for m in (4, 16)}
    network = {sy: sy.split("-")[1] for sy in SYSTEMS}
    assert chimera["simulation"]["wins_by_network"] == {
        n: [sum(network[sy] == n for sy, _ in wins), 2 * sum(network[sy] == n for sy in SYSTEMS)] for n in ("slow", "mid", "fast")}
    # the sentence itself, with its count: "none" alone also matches "recompute none" elsewhere
    listed = ", ".join(f"{sy} S=4 m={m}" for sy, m in wins) or "none"
    assert f"at {len(wins)} of {chimera['simulation']['points']} simulated points: {listed}. " in report


def hanayo_row(at, system, waves):
    return at[system, 4, f"hanayo W={waves}"]


def test_both_hanayo_waves_are_swept_and_match_the_table_layer(study):
    """The paper does not state Hanayo's W: the study sweeps W = 1 and W = 2 at m = p, and each row's
    table figures are those of the table layer for its W (2W chunks per device)."""
    _, rows, report, _ = study
    hanayo = [r for r in rows if r["schedule"] == "hanayo" and r["kind"] == "evaluate"]
    assert sorted({(r["microbatches"], r["waves"]) for r in hanayo}) == [("4", "1"), ("4", "2")]
    for row in hanayo:
        table = evaluate("hanayo", 4, 4, waves=int(row["waves"]), units=UnitCosts(backward=float(row["backward"]))).table
        assert num(row, "table_length") == pytest.approx(table.length)
        assert num(row, "table_bubble_ratio") == pytest.approx(table.bubble_ratio)
        assert num(row, "table_peak_activations_max") == max(table.peak_activations)
    assert evaluate("hanayo", 4, 4, waves=2).table.length != evaluate("hanayo", 4, 4, waves=1).table.length
    assert "| hanayo W=1 |" in report and "| hanayo W=2 |" in report


def test_hanayo_asymmetric_and_system_claims_match_the_rows(study):
    _, rows, report, claims = study
    at = evaluated(rows)
    hanayo = claims["hanayo"]
    assert (hanayo["devices"], hanayo["microbatches"]) == (4, 4)
    assert [v["schedule"] for v in hanayo["variants"]] == ["hanayo W=1", "hanayo W=2"]
    holds = []
    for variant, waves in zip(hanayo["variants"], (1, 2)):
        ratio = {}
        for sy in SYSTEMS:
            others = {s: num(at[sy, 4, s], "sim_step_time_s") for s in ("gpipe", "1f1b", "chimera")}
            ratio[sy] = num(hanayo_row(at, sy, waves), "sim_step_time_s") / min(others.values())
        assert [r["ratio_to_best_other"] for r in variant["per_system"]] == pytest.approx([ratio[sy] for sy in SYSTEMS])
        # only the mid compute level has both a slow and a fast network
        assert list(variant["by_compute"]) == ["mid"]
        assert variant["by_compute"]["mid"] == pytest.approx({"slow_network": ratio["mid-slow"], "fast_network": ratio["mid-fast"]})
        holds.append(ratio["mid-slow"] > ratio["mid-fast"])
        assert f"`hanayo W={waves}`: mid-slow: {num(hanayo_row(at, 'mid-slow', waves), 'sim_step_time_s'):.3f} s" in report
    assert hanayo["holds"] == all(holds)

    asym = claims["asymmetric"]
    peak = [num(at[sy, m, "chimera-asym"], "sim_peak_memory_bytes_max") / num(at[sy, m, "chimera"], "sim_peak_memory_bytes_max")
            for sy in SYSTEMS for m in (4, 16)]
    assert asym["points"] == 6
    assert (asym["global_peak_ratio_min"], asym["global_peak_ratio_max"]) == pytest.approx((min(peak), max(peak)))
    assert asym["holds"] == all(r >= 1 - 1e-3 for r in peak)

    differ = 0
    for m in (4, 16):
        winners = set()
        for sy in SYSTEMS:
            times = {s: num(r, "sim_step_time_s") for (system, mm, s), r in at.items() if (system, mm) == (sy, m)}
            low = min(times.values())
            winners.add("=".join(s for s, t in times.items() if t <= low * (1 + 1e-9)))
        differ += len(winners) > 1
    assert claims["system_dependence"]["points"] == 2
    assert claims["system_dependence"]["points_with_different_winners"] == differ
    assert "6. *Schedule quality only means something" in report


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="needs matplotlib")
def test_figures_have_a_panel_per_system_with_data_and_no_empty_one(study, tmp_path):
    from ppopt.report.study_figures import available, study_figures

    out, _, _, _ = study
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    data = StudyData.from_rows(load_spec(out.parent / "study.toml"), rows)
    figures = {name: fig for name, _, fig in study_figures(data, available())}
    assert sorted(figures) == sorted(FIGURES)
    for name, fig in figures.items():
        for ax in fig.axes:
            assert ax.get_lines() or ax.patches, f"{name}: an empty panel"
    # three systems that do not fill the compute x network grid: three panels, not six
    step = figures["step_time_S4.png"]
    assert sorted(ax.get_title().split(" (")[0] for ax in step.axes) == sorted(SYSTEMS)
    assert all(len(ax.get_lines()) == 7 for ax in step.axes)  # every schedule (each Hanayo W) has a row at S = 4 on every system
    assert len(figures["peak_memory.png"].axes) == 1


def test_report_without_matplotlib_says_so(study, tmp_path, monkeypatch):
    out, _, _, _ = study
    import ppopt.report.study_figures as module

    monkeypatch.setattr(module, "available", lambda: None)
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    path = write_report(load_spec(out.parent / "study.toml"), rows[::-1], tmp_path)
    text = path.read_text()
    assert "matplotlib is not installed" in text and "![" not in text
    assert not (tmp_path / "figures").exists()
    for section in SECTIONS:
        assert section in text
    # the claims do not depend on the figures (nor on the order of the rows)
    assert json.loads((tmp_path / "claims.json").read_text()) == json.loads((out / "claims.json").read_text())


def test_study_rerun_resumes(study):
    out, rows, _, _ = study
    result = CliRunner().invoke(main, ["study", "--spec", str(out.parent / "study.toml"), "--output", str(out), "--quiet",
                                       "--no-figures", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["computed"] == 0 and summary["reused"] + summary["skipped"] == len(rows)
    assert list(csv.DictReader((out / "rows.csv").open())) == rows
    assert "Figures were not drawn: they were turned off (--no-figures)" in (out / "report.md").read_text()


def test_a_study_where_nothing_applies_says_so(tmp_path):
    spec = tmp_path / "none.toml"
    spec.write_text('schedules = ["chimera"]\ndevices = [3]\nmicrobatches = [4]\nmodels = ["study"]\nsystems = ["mid-mid"]\n')
    result = CliRunner().invoke(main, ["study", "--spec", str(spec), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("1 point, none applicable: all 1 skipped")
    report = (tmp_path / "out" / "report.md").read_text()
    assert "0 evaluated points, 0 solver rows, 1 skipped points" in report
    assert ("No figures: no point of the grid has a simulated row" in report) == HAS_MATPLOTLIB
    assert not (tmp_path / "out" / "figures").exists()


@pytest.mark.parametrize("name", ["quick", "paper"])
def test_the_shipped_study_specs_load(name):
    loaded = load_spec(resolve_spec(name))
    assert loaded.spec.solver is not None and len(expand(loaded)) > 0


def test_quick_and_spec_together_is_an_error():
    result = CliRunner().invoke(main, ["study", "--quick", "--spec", "x.toml"])
    assert result.exit_code == 1 and "give --quick or --spec, not both" in result.output


def test_rows_and_report_mark_peaks_over_the_system_memory(study):
    from ppopt.config import load_system

    _, rows, report, _ = study
    marked = 0
    for row in evaluated(rows).values():
        capacity = load_system(row["system"]).memory_capacity_bytes
        peak = num(row, "sim_peak_memory_bytes_max")
        assert (row["sim_over_memory"] == "true") == (peak > capacity)
        assert num(row, "sim_memory_excess_bytes") == (peak - capacity if peak > capacity else 0.0)
        marked += row["sim_over_memory"] == "true"
    section = report.split("## Peak memory per device")[1].split("## Rankings")[0]
    baseline = [(label, r) for (_, _, label), r in evaluated(rows).items() if r["system"] == "mid-slow" and r["sim_over_memory"] == "true"]
    assert section.count(" #") >= len(baseline)
    for label, r in baseline:
        assert f"S = {r['devices']}, m = {r['microbatches']}, {label} device " in section
    # the study model (128 blocks of width 4096) on S = 4 without tensor parallelism fits nowhere
    assert marked == len(evaluated(rows)) and baseline
    # the footnote is a sentence, not a markdown heading (a line starting with '#' was one)
    assert "\n`#` marks a peak over the memory of a `mid-slow` device" in section
    assert not any(line.startswith("#") for line in section.splitlines()[1:])


def test_a_report_that_cannot_be_written_leaves_the_earlier_one_whole(study, tmp_path):
    """report.md, claims.json and the figures are written all or none: a report that could not be
    written (here: a link to a full device) left new figures and claims beside the old report."""
    out, _, _, _ = study
    target = tmp_path / "again"
    target.mkdir()
    (target / "claims.json").write_text("earlier\n")
    (target / "report.md").symlink_to("/dev/full")
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    with pytest.raises(PpoptError, match="No space left on device"):
        write_report(load_spec(out.parent / "study.toml"), rows, target)
    assert (target / "claims.json").read_text() == "earlier\n"
    assert not any((target / "figures").glob("*.png"))
    assert sorted(p.name for p in target.iterdir() if p.name != "figures") == ["claims.json", "report.md"]


def test_the_chimera_microbatch_claim_does_not_depend_on_the_spec_s_order():
    """"Mainly at low microbatch counts" compared the first and the last m of the spec's list: with
    microbatches = [16, 4] it compared the high one with the low one and flipped its verdict. Here
    Chimera is fastest at m = 4 and slowest at m = 16, listed either way."""
    from ppopt.sweep.study import StudyData, _chimera

    steps = {4: {"chimera": 1.0, "gpipe": 2.0, "1f1b": 2.0, "hanayo": 2.0},
             16: {"chimera": 3.0, "gpipe": 2.0, "1f1b": 2.0, "hanayo": 2.0}}
    rows = {("mid-fast", 4, m, name): {"sim_step_time_s": step, "formula_bubble_ratio": 0.1, "table_bubble_ratio": 0.1}
            for m, by_name in steps.items() for name, step in by_name.items()}
    verdicts = []
    for order in ([4, 16], [16, 4]):
        data = StudyData("study", ["gpipe", "1f1b", "chimera", "hanayo"], ["mid-fast"], [4], order, rows, [], [])
        simulation = _chimera(data)["simulation"]
        assert simulation["wins_by_microbatches"] == {4: [1, 1], 16: [0, 1]}
        verdicts.append(simulation["mainly_low_microbatches"])
    assert verdicts == [True, True]


def test_a_partial_study_with_hanayo_before_its_rivals_reports_no_hanayo_claim_rather_than_failing():
    """A study stopped by its time limit can hold Hanayo's row at a (p, m) before any rival's:
    `study --quick --time-limit 2` failed with "internal error (ValueError: min() arg is an empty
    sequence)". The claim skips that point; with a rival present it is computed."""
    from ppopt.sweep.study import StudyData, _hanayo_variant

    alone = {("mid-fast", 4, 8, "hanayo"): {"sim_step_time_s": 2.0}}
    data = StudyData("study", ["gpipe", "1f1b", "hanayo"], ["mid-fast"], [4], [8], alone, [], [])
    assert _hanayo_variant(data, "hanayo", 4, 8)["per_system"] == []
    rivals = {**alone, ("mid-fast", 4, 8, "1f1b"): {"sim_step_time_s": 2.5}}
    data = StudyData("study", ["gpipe", "1f1b", "hanayo"], ["mid-fast"], [4], [8], rivals, [], [])
    (row,) = _hanayo_variant(data, "hanayo", 4, 8)["per_system"]
    assert (row["best_other"], row["ratio_to_best_other"], row["rank"]) == ("1f1b", 0.8, 1)


def test_a_hanayo_claim_without_rivals_reads_as_partial_in_the_report():
    """The claim of a partial sweep (Hanayo's row before its rivals') printed "`hanayo`: . Step time"."""
    from ppopt.report.study import _hanayo_text

    claim = {"hanayo": {"devices": 4, "microbatches": 4, "holds": None,
                        "variants": [{"schedule": "hanayo", "per_system": [], "by_compute": {}, "holds": None}]}}
    assert "`hanayo`: no rival's row at this point yet (a partial sweep). Step time" in _hanayo_text(claim)


TINY_STUDY = """schedules = ["gpipe", "1f1b", "chimera", "chimera-asym"]
devices = [2]
microbatches = [2]
models = ["study"]
systems = ["mid-mid"]
global_batch = 8
"""


def test_a_study_output_it_cannot_write_is_refused_before_any_point(tmp_path):
    """figures/ a file, or report.md a directory: the study computed every point and wrote rows.*
    first, then failed (the figures with a traceback). Now one line, before any point."""
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY_STUDY)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "figures").write_text("")
    result = CliRunner().invoke(main, ["study", "--spec", str(spec), "-o", str(tmp_path / "a"), "-q"])
    assert (result.exit_code, result.stderr) == (1, f"error: --output: cannot write into {tmp_path / 'a' / 'figures'}: "
                                                    "it is a file, not a directory\n")
    (tmp_path / "b" / "report.md").mkdir(parents=True)
    result = CliRunner().invoke(main, ["study", "--spec", str(spec), "-o", str(tmp_path / "b"), "-q", "--no-figures"])
    assert (result.exit_code, result.stderr) == (1, f"error: --output: cannot write {tmp_path / 'b' / 'report.md'}: it is a directory\n")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["figures"]
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["report.md"]


def test_claims_a_grid_cannot_test_say_so(tmp_path):
    """One system and one m: no two systems to differ (claim 6) and no low and high m or two networks
    to compare (claim 3's simulation part); both said "does not hold" / "not supported" from 0 of 0."""
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY_STUDY)
    result = CliRunner().invoke(main, ["study", "--spec", str(spec), "-o", str(tmp_path / "o"), "-q", "--no-figures"])
    assert result.exit_code == 0, result.output
    claims = json.loads((tmp_path / "o" / "claims.json").read_text())
    assert claims["system_dependence"]["points"] == 0 and claims["system_dependence"]["holds"] is None
    simulation = claims["chimera"]["simulation"]
    assert simulation["mainly_low_microbatches"] is None and simulation["fast_networks_not_worse"] is None
    report = (tmp_path / "o" / "report.md").read_text()
    assert "*...but wins in the simulation mainly at low microbatch counts on fast networks*: **cannot be checked" in report
    assert "6. *Schedule quality only means something in the context of the modelled system*: **cannot be checked" in report
    assert "No solver points in this spec." in report  # it has no [solver] table


def test_a_study_without_its_solver_points_does_not_say_the_spec_has_none(tmp_path):
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY_STUDY + "\n[solver]\ndevices = [2]\nmicrobatches = [2]\nmemory_limits = [\"none\"]\n")
    result = CliRunner().invoke(main, ["study", "--spec", str(spec), "-o", str(tmp_path / "o"), "-q", "--no-figures", "--no-solver"])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "o" / "report.md").read_text()
    assert "No solver points in this spec" not in report and "No solver point computed: " in report
