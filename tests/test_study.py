"""The study report, regenerated on the reduced grid (configs/studies/quick.toml)."""

import csv
import importlib.util
import json

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.report.study import write_report
from ppopt.sweep import load_spec, resolve_spec
from ppopt.sweep.study import SAME_RUNTIME

SECTIONS = (
    "## Step time vs m per system",
    "## Idle ratio vs m",
    "## Peak memory per device",
    "## Rankings per layer and where they flip",
    "## Optimality gaps",
    "## Claims",
)
FIGURES = ("step_time_S4.png", "step_time_S8.png", "idle_ratio_S4.png", "idle_ratio_S8.png", "peak_memory.png", "peak_memory_per_device.png")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    result = CliRunner().invoke(main, ["study", "--quick", "--output", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "report:" in result.output
    rows = list(csv.DictReader((out / "rows.csv").open()))
    return out, rows, (out / "report.md").read_text(), json.loads((out / "claims.json").read_text())


def step(rows, system, p, m, schedule):
    match = [r for r in rows if r["kind"] == "evaluate" and (r["system"], int(r["devices"]), int(r["microbatches"]), r["schedule"]) == (system, p, m, schedule)]
    assert len(match) == 1
    return match[0]


def test_report_has_every_section_and_its_figures(study):
    out, rows, report, _ = study
    for section in SECTIONS:
        assert section in report
    assert report.index("## Claims") > report.index("## Optimality gaps")
    if importlib.util.find_spec("matplotlib") is not None:
        for name in FIGURES:
            path = out / "figures" / name
            assert path.is_file() and path.stat().st_size > 1000
            assert f"figures/{name}" in report
    # hanayo only where m = p (here (8, 8)); the solver rows are in the gaps table
    assert {(r["devices"], r["microbatches"]) for r in rows if r["schedule"] == "hanayo" and r["kind"] == "evaluate"} == {("8", "8")}
    gaps = [r for r in rows if r["kind"] == "gap"]
    assert gaps and all(r["status"] == "ok" for r in gaps)
    assert f"| gpipe | 4 | 4 | none | {float(gaps[0]['solver_step']):.4g} |" in report


def test_claim_numbers_match_the_rows(study):
    _, rows, report, claims = study
    spec = load_spec(resolve_spec("quick")).spec
    diffs = []
    for system in spec.systems:
        for p in spec.devices:
            for m in spec.microbatches:
                g = float(step(rows, system, p, m, "gpipe")["sim_step_time_s"])
                o = float(step(rows, system, p, m, "1f1b")["sim_step_time_s"])
                diffs.append(abs(o - g) / g)
    claim = claims["gpipe_vs_1f1b"]
    assert claim["points"] == len(diffs)
    assert claim["max_relative_step_time_difference"] == pytest.approx(max(diffs), rel=1e-12)
    assert f"differ by at most {100 * max(diffs):.2f} %" in report
    # the study's claim holds on the balanced systems of the quick grid: within 1 %
    assert claim["max_by_system"]["mid-mid"] < SAME_RUNTIME
    assert claim["max_by_system"]["fast-fast"] < SAME_RUNTIME
    assert claim["holds"] == (max(diffs) < SAME_RUNTIME)
    assert ("**holds**" if claim["holds"] else "**does not hold**") in report.split("1. *GPipe and 1F1B")[1].split("\n")[0]

    # 1F1B's activation peak
    ratios = [
        float(step(rows, sy, p, m, "1f1b")["sim_peak_activation_bytes_max"]) / float(step(rows, sy, p, m, "gpipe")["sim_peak_activation_bytes_max"])
        for sy in spec.systems for p in spec.devices for m in spec.microbatches
    ]
    assert claims["1f1b_activation_peak"]["points_lower"] == sum(r < 1 for r in ratios) == len(ratios)
    assert f"{min(ratios):.3f}x to {max(ratios):.3f}x GPipe's" in report

    # Chimera in the simulation: fastest of chimera, gpipe, 1f1b, hanayo where the rows say so
    wins = []
    for p in spec.devices:
        for m in spec.microbatches:
            for system in spec.systems:
                times = {s: float(step(rows, system, p, m, s)["sim_step_time_s"]) for s in ("gpipe", "1f1b", "chimera", "hanayo")
                         if any(r["kind"] == "evaluate" and r["schedule"] == s and (r["system"], int(r["devices"]), int(r["microbatches"])) == (system, p, m) for r in rows)}
                if min(times, key=times.get) == "chimera":
                    wins.append(f"{system} S={p} m={m}")
    assert [f"{w['system']} S={w['devices']} m={w['microbatches']}" for w in claims["chimera"]["simulation"]["wins"]] == wins
    assert ", ".join(wins) in report
    # formula layer: Chimera's closed-form bubble is below GPipe/1F1B/Hanayo everywhere
    assert claims["chimera"]["formula"]["wins"] == claims["chimera"]["formula"]["points"] == 4

    # asymmetric placement: same worst-device peak as Chimera
    asym = claims["asymmetric"]
    ratio = [float(step(rows, sy, p, m, "chimera-asym")["sim_peak_memory_bytes_max"]) / float(step(rows, sy, p, m, "chimera")["sim_peak_memory_bytes_max"])
             for sy in spec.systems for p in spec.devices for m in spec.microbatches]
    assert asym["global_peak_ratio_min"] == pytest.approx(min(ratio)) and asym["global_peak_ratio_max"] == pytest.approx(max(ratio))


def test_report_without_matplotlib_says_so(study, tmp_path, monkeypatch):
    out, _, _, _ = study
    import ppopt.report.study_figures as module

    monkeypatch.setattr(module, "available", lambda: None)
    loaded = load_spec(resolve_spec("quick"))
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    path = write_report(loaded, rows, tmp_path)
    text = path.read_text()
    assert "matplotlib is not installed" in text and "![" not in text
    assert not (tmp_path / "figures").exists()
    for section in SECTIONS:
        assert section in text
    # the claims do not depend on the figures (nor on the order of the rows)
    assert json.loads((tmp_path / "claims.json").read_text()) == json.loads((out / "claims.json").read_text())


def test_study_rerun_resumes(study):
    out, rows, _, _ = study
    result = CliRunner().invoke(main, ["study", "--quick", "--output", str(out), "--quiet", "--no-figures", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["computed"] == 0 and summary["reused"] + summary["skipped"] == len(rows)
    assert list(csv.DictReader((out / "rows.csv").open())) == rows


def test_quick_and_spec_together_is_an_error():
    result = CliRunner().invoke(main, ["study", "--quick", "--spec", "x.toml"])
    assert result.exit_code == 1 and "give --quick or --spec, not both" in result.output
