"""The study report: the rows of a study sweep (``configs/studies/paper.toml`` or quick.toml) as
``report.md``.

Sections: step time vs m per system, idle ratio vs m, worst-device peak memory per schedule, the
ranking in each layer and where it flips, the solver's optimality gaps, and the paper's qualitative
claims (Barley et al., ISPDC 2026) checked against the numbers. Every number in the text is
computed from the rows (:mod:`ppopt.sweep.study` computes the claims); the claim numbers are also
written to ``claims.json`` so they can be checked against ``rows.csv``.

Figures (:mod:`ppopt.report.study_figures`) need matplotlib (``pip install 'matplotlib>=3.8'``); without
it the report is written without figures and says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from ppopt.errors import counted
from ppopt.io import atomic_write_text, output_group, write_json
from ppopt.report.evaluation import OVER_MEMORY
from ppopt.report.study_figures import GiB, write_figures
from ppopt.report.text import percent, render_table
from ppopt.sweep.run import REPEAT_CUT
from ppopt.sweep.spec import LoadedSpec
from ppopt.sweep.study import StudyData, claims, is_paper

__all__ = ["claims_text", "render", "write_report"]


# --------------------------------------------------------------------------------------------------
# Claims
# --------------------------------------------------------------------------------------------------


def _verdict(ok: bool | None) -> str:
    return "**cannot be checked on this grid**" if ok is None else ("**holds**" if ok else "**does not hold**")


def _consistent(ok: bool | None) -> str:
    return "**cannot be checked on this grid**" if ok is None else (
        "**consistent with the data**" if ok else "**not supported by the data**")


def _yes_no_or_unknown(flag: bool | None, why: str) -> str:
    return f"cannot tell ({why})" if flag is None else ("yes" if flag else "no")


def claims_text(c: dict) -> list[str]:
    """Markdown paragraphs stating each claim of :func:`ppopt.sweep.study.claims`, the numbers and the verdict."""
    return [write(c) for key, write in _CLAIM_TEXT.items() if key in c]


def _same_runtime_text(c: dict) -> str:
    g = c["gpipe_vs_1f1b"]
    at = g["at"]
    return (
        f"1. *GPipe and 1F1B have the same runtime*: {_verdict(g['holds'])}. Over {g['points']} (S, m, system) points the "
        f"simulated step times differ by at most {percent(g['max_relative_step_time_difference'], 'markdown', decimals=2)} "
        f"(at S = {at['devices']}, m = {at['microbatches']}, {at['system']}), {percent(g['mean_relative_step_time_difference'], 'markdown', decimals=3)} on average "
        f"(threshold {percent(g['threshold'], 'markdown', decimals=0)}); within the threshold at {g['points_within_threshold']} of {g['points']} points. "
        f"Largest difference per system: "
        + ", ".join(f"{sy} {percent(d, 'markdown', decimals=2)}" for sy, d in g["max_by_system"].items())
        + f" (within {percent(g['threshold'], 'markdown', decimals=0)} on {len(g['systems_within_threshold'])} of {len(g['max_by_system'])} systems)."
    )


def _activation_peak_text(c: dict) -> str:
    a = c["1f1b_activation_peak"]
    return (
        f"2. *1F1B has a lower activation peak*: {_verdict(a['holds'])}. 1F1B's worst-device activation peak is lower than "
        f"GPipe's at {a['points_lower']} of {a['points']} points; it is {a['min_ratio']:.3f}x to {a['max_ratio']:.3f}x GPipe's."
    )


def _chimera_text(c: dict) -> str:
    ch = c["chimera"]
    f, t, s = ch["formula"], ch["table"], ch["simulation"]
    not_won = ", ".join(f"(S = {x['devices']}, m = {x['microbatches']}: {x['chimera']:.3f} vs {x['best_rival']:.3f})" for x in t["not_won"]) or "none"
    rivals = ", ".join(ch["rivals"])
    wins = ", ".join(f"{w['system']} S={w['devices']} m={w['microbatches']}" for w in s["wins"]) or "none"
    by_m = ", ".join(f"m = {m}: {v[0]}/{v[1]}" for m, v in s["wins_by_microbatches"].items())
    by_net = ", ".join(f"{lvl} network: {v[0]}/{v[1]}" for lvl, v in s["wins_by_network"].items())
    all_wins = ", ".join(f"{w['system']} S={w['devices']} m={w['microbatches']}" for w in s["fastest_of_all_schedules"]) or "none"
    parts = (s["mainly_low_microbatches"], s["fast_networks_not_worse"])
    consistent = None if None in parts else all(parts)
    return (
        f"3. *Chimera wins on bubbles in the formula and table layers*: against {rivals}, Chimera has the lowest bubble "
        f"ratio at {f['wins']} of {f['points']} (S, m) points in the formula layer ({_verdict(f['wins'] == f['points'] if f['points'] else None)}) and at "
        f"{t['wins']} of {t['points']} in the table layer ({_verdict(t['wins'] == t['points'] if t['points'] else None)}; points it does not win, "
        f"bubble ratio Chimera vs best rival: {not_won}). "
        f"The direct concatenation of basic units keeps Chimera's table bubble ratio from falling with m as the closed form does.\n"
        f"   *...but wins in the simulation mainly at low microbatch counts on fast networks*: "
        f"{_consistent(consistent)}. Chimera is the fastest of "
        f"Chimera and {rivals} at {len(s['wins'])} of {s['points']} simulated points: {wins}. "
        f"Wins by m: {by_m or 'none'}. Wins by network: {by_net or 'none'}. Fewer wins at the highest m than at the lowest: "
        f"{_yes_no_or_unknown(s['mainly_low_microbatches'], 'one m or no simulated point')}; at least as many on the fastest network as on the "
        f"slowest: {_yes_no_or_unknown(s['fast_networks_not_worse'], 'fewer than two network levels')}. Fastest of all swept "
        f"schedules (ppopt's additions included): {all_wins}."
    )


def _hanayo_text(c: dict) -> str:
    h = c["hanayo"]
    parts = []
    for v in h["variants"]:
        per = "; ".join(
            f"{r['system']}: {r['hanayo_s']:.3f} s, {r['ratio_to_best_other']:.3f}x the best other ({r['best_other']}), rank {r['rank']}/{r['of']}"
            for r in v["per_system"]
        ) or "no rival's row at this point yet (a partial sweep)"
        sens = ", ".join(f"compute {k}: {x['slow_network']:.3f}x on the slow network vs {x['fast_network']:.3f}x on the fast one"
                         for k, x in v["by_compute"].items())
        parts.append(f"`{v['schedule']}`: {per}. Step time relative to the best other schedule, by compute level: "
                     f"{sens or 'no slow/fast network pair in the grid'}; sensitive: {_verdict(v['holds'])}.")
    return (
        f"4. *Hanayo is good at its operating point but sensitive to slow networks*: at (S, m) = ({h['devices']}, {h['microbatches']}), "
        f"against GPipe, 1F1B and Chimera" + (" (each number of waves W swept, the paper does not state W)" if len(h["variants"]) > 1 else "")
        + ". " + " ".join(parts) + f" Sensitivity to slow networks: {_verdict(h['holds'])} "
        f"(test: the relative penalty is larger on the slow network than on the fast one at every compute level)."
    )


def _asymmetric_text(c: dict) -> str:
    a = c["asymmetric"]
    return (
        f"5. *The asymmetric placement does not lower the global peak memory*: {_verdict(a['holds'])}. Against symmetric Chimera "
        f"over {a['points']} points, the worst-device peak memory of chimera-asym (split 1:2) is "
        f"{a['global_peak_ratio_min']:.3f}x to {a['global_peak_ratio_max']:.3f}x, lower (by > 0.1 %) at {a['points_global_peak_lower']} points; "
        f"device 0 (the early stages it is meant to relieve) holds {a['device0_peak_ratio_min']:.3f}x to {a['device0_peak_ratio_max']:.3f}x."
    )


def _system_dependence_text(c: dict) -> str:
    d = c["system_dependence"]
    return (
        f"6. *Schedule quality only means something in the context of the modelled system*: {_verdict(d['holds'])}. At "
        f"{d['points_with_different_winners']} of {d['points']} (S, m) points the fastest schedule differs between systems"
        + (": " + "; ".join(f"S={x['devices']} m={x['microbatches']}: {', '.join(x['winners'])}" for x in d["differ"][:12]) if d["differ"] else "")
        + (" ..." if len(d["differ"]) > 12 else "") + "."
    )


#: The paragraph of each claim, in the report's order.
_CLAIM_TEXT = {
    "gpipe_vs_1f1b": _same_runtime_text,
    "1f1b_activation_peak": _activation_peak_text,
    "chimera": _chimera_text,
    "hanayo": _hanayo_text,
    "asymmetric": _asymmetric_text,
    "system_dependence": _system_dependence_text,
}


# --------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    return render_table(headers, list(rows), "markdown")


def _by_m_table(data: StudyData, system: str, devices: int, column: str, fmt, mark: str | None = None) -> str:
    """Schedules x m table of ``column``; a cell whose row has ``mark`` true gets :data:`OVER_MEMORY`."""
    def cell(m: int, schedule: str) -> str:
        row = data.rows.get((system, devices, m, schedule))
        if row is None:
            return "-"
        return fmt(row[column]) + (f" {OVER_MEMORY}" if mark is not None and row.get(mark) else "")

    rows = []
    for schedule in data.schedules:
        cells = [cell(m, schedule) for m in data.microbatches]
        if any(c != "-" for c in cells):
            rows.append([schedule] + cells)
    return _table(["schedule"] + [f"m = {m}" for m in data.microbatches], rows)


FOOTNOTE_ROWS = 12
"""Results over the memory named one by one in the footnote; the others are counted (all are marked)."""


def _over_memory(data: StudyData, system: str) -> list[str]:
    """``S = p, m = m, schedule device d: excess GiB`` for every row of ``system`` over its memory
    (d the worst device)."""
    out = []
    for (sys_, p, m, schedule), row in sorted(data.rows.items()):
        if sys_ == system and row.get("sim_over_memory"):
            peaks = row["sim_peak_memory_bytes"]
            device = peaks.index(max(peaks))
            out.append(f"S = {p}, m = {m}, {schedule} device {device}: {row['sim_memory_excess_bytes'] / GiB:,.1f} GiB")
    return out


def _figure_lines(figures, names: Sequence[str]) -> list[str]:
    if figures is None:
        return []
    return [f"![{caption}]({path})" for caption, path in figures if any(n in path for n in names)] + [""]


def _spread_across_systems(data: StudyData, column: str) -> float:
    """Largest relative spread of ``column`` across systems at one (S, m, schedule)."""
    groups = defaultdict(list)
    for (_system, p, m, s), row in data.rows.items():
        groups[(p, m, s)].append(row[column])
    return max((max(v) - min(v)) / max(v) for v in groups.values() if v and max(v) > 0) if groups else 0.0


def render(loaded: LoadedSpec, data: StudyData, found: dict, figures, result_note: str = "", no_figures_reason: str = "") -> str:
    spec = loaded.spec
    base = data.baseline
    out = [f"# Study report: {loaded.name}", ""]
    if spec.description:
        out += [spec.description, ""]
    out += [
        f"Model `{data.model}`; systems {', '.join(f'`{s}`' for s in data.systems)}; S (devices) in {data.devices}; "
        f"m (microbatches) in {data.microbatches}; global batch {spec.global_batch or 'the model default'}; table slots with B = {spec.backward} F.",
        f"Schedules: {', '.join(data.schedules)} (paper: {', '.join(s for s in data.schedules if is_paper(s))}; "
        f"ppopt's additions: {', '.join(s for s in data.schedules if not is_paper(s)) or 'none'}).",
        f"{len(data.rows)} evaluated points, {len(data.gaps)} solver rows, {len(data.skipped)} skipped points "
        f"(the generator, the job model or the solver refused them; reasons in rows.csv).",
        "",
    ]
    if spec.filters:
        out += ["Point filters: " + "; ".join(f"{n}: {', '.join(f'{k} = {v}' for k, v in f.model_dump(exclude_defaults=True).items())}" for n, f in spec.filters.items()) + ".", ""]
    if result_note:
        out += [result_note, ""]
    if figures is None:
        out += [f"*Figures were not drawn: {no_figures_reason}. The tables below carry the numbers.*", ""]
    elif not figures:
        out += ["*No figures: no point of the grid has a simulated row.*", ""]
    else:
        out += ["Figures are in `figures/`; every number is in `rows.csv`. Paper schedules are drawn solid, ppopt's additions dashed.", ""]

    out += ["## Step time vs m per system", ""]
    out += _figure_lines(figures, ["step_time_"])
    for p in data.devices:
        out += [f"Simulated step time (s) on `{base}`, S = {p}:", "", _by_m_table(data, base, p, "sim_step_time_s", lambda v: f"{v:.3f}"), ""]

    out += ["## Idle ratio vs m", "", "Idle ratio of the simulation: 1 − busy time / (devices × step time).", ""]
    out += _figure_lines(figures, ["idle_ratio_"])
    for p in data.devices:
        out += [f"Idle ratio on `{base}`, S = {p}:", "", _by_m_table(data, base, p, "sim_idle_ratio", lambda v: f"{v:.3f}"), ""]

    spread = _spread_across_systems(data, "sim_peak_memory_bytes_max")
    out += [
        "## Peak memory per device", "",
        "Worst-device peak memory (GiB): persistent weights, gradients and optimizer state plus live activations. "
        + ("It does not depend on the system (identical on every system of the grid)." if spread < 1e-12
           else f"It differs between systems by up to {percent(spread, 'markdown', decimals=2)}; the table shows `{base}`."),
        "",
    ]
    out += _figure_lines(figures, ["peak_memory"])
    for p in data.devices:
        out += [f"S = {p}:", "", _by_m_table(data, base, p, "sim_peak_memory_bytes_max", lambda v: f"{v / GiB:,.0f}",
                                             mark="sim_over_memory"), ""]
    over = _over_memory(data, base)
    if over:
        shown = over[:FOOTNOTE_ROWS]
        more = f"; and {len(over) - len(shown)} more (`sim_over_memory` in `rows.csv`)" if len(over) > len(shown) else ""
        out += [f"`{OVER_MEMORY}` marks a peak over the memory of a `{base}` device ({len(over)} of the table's results): the worst "
                "device's peak exceeds it by " + "; ".join(shown) + more + ".", ""]

    out += _ranking_section(data)
    out += _gap_section(data, loaded.spec.solver is not None)
    out += ["## Claims", "", "The paper's qualitative claims (Barley et al., ISPDC 2026), checked against the rows above. Numbers are also in `claims.json`.", ""]
    out += claims_text(found) + [""]
    return "\n".join(out)


def _ranking_section(data: StudyData) -> list[str]:
    out = [
        "## Rankings per layer and where they flip", "",
        "Best schedule per point in each layer: formula and table by bubble ratio, simulation by step time "
        "(ties joined with `=`). Formula and table do not depend on the system. "
        "*winner flips* marks a point whose best schedule differs between layers; *rank changes* counts schedules whose "
        "rank differs between any two layers.", "",
    ]
    rows, flips = [], {"formula→table": 0, "table→simulation": 0, "formula→simulation": 0}
    rank_changes = 0
    points = data.points()
    for p, m, system in points:
        best = {layer: data.best(system, p, m, col) for layer, col in
                (("formula", "formula_bubble_ratio"), ("table", "table_bubble_ratio"), ("simulation", "sim_step_time_s"))}
        marks = []
        for a, b in (("formula", "table"), ("table", "simulation"), ("formula", "simulation")):
            if set(best[a]) != set(best[b]):
                flips[f"{a}→{b}"] += 1
                marks.append(f"{a[0]}→{b[0]}")
        ranks = [data.ranks(system, p, m, c) for c in ("formula_bubble_ratio", "table_bubble_ratio", "sim_step_time_s")]
        changed = sum(len({r[s] for r in ranks}) > 1 for s in ranks[0])
        rank_changes += changed > 0
        rows.append([p, m, system, " = ".join(best["formula"]), " = ".join(best["table"]), " = ".join(best["simulation"]),
                     ", ".join(marks) or "-", changed])
    out += [
        f"Winner flips over {len(points)} (S, m, system) points: "
        + ", ".join(f"{k}: {v}" for k, v in flips.items())
        + f". Points where some schedule's rank changes between layers: {rank_changes} of {len(points)}.", "",
    ]
    out += [_table(["S", "m", "system", "best formula", "best table", "best simulation", "winner flips", "rank changes"], rows), ""]
    return out


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _gap_section(data: StudyData, has_solver: bool) -> list[str]:
    """The gaps table; ``has_solver``: the spec has a [solver] table (its points may all be missing)."""
    out = ["## Optimality gaps", ""]
    if not data.gaps:
        skipped = [r for r in data.skipped if r.get("kind") == "gap"]
        counted_skipped = f" ({len(skipped)} skipped)" if skipped else ""
        if not has_solver:
            return out + [f"No solver points in this spec{counted_skipped}.", ""]
        return out + [f"No solver point computed{counted_skipped}: the spec's solver points are computed without --no-solver "
                      "and within the --time-limit (a rerun of the same command resumes).", ""]
    first = data.gaps[0]
    weight = "" if first["unit_weight"] is None else f", W = {first['unit_weight']:g}"
    deterministic = f", deterministic limit {first['deterministic_time']:g}" if first["deterministic_time"] else ""
    out += [
        "Each handcrafted schedule against the CP-SAT bound of its family's relaxed space (same placement and kind of "
        "backward, per-device order free; Chimera's split between directions free). "
        f"Unit mode: F = {first['unit_forward']:g}, B = {first['unit_backward']:g}{weight} slots per 1/p model share, "
        f"communication delay {first['unit_comm']:g} slots; gap = (schedule − bound) / bound; one CP-SAT worker, "
        f"seed {first['seed']}, time limit {first['time_limit_s']:g} s{deterministic}.",
        "",
    ]
    rows = []
    for r in data.gaps:
        rows.append([
            data.label(r), r["devices"], r["microbatches"], "none" if r["memory_limit"] is None else f"{r['memory_limit']:g}",
            _fmt(r["solver_step"]), _fmt(r["solver_best"]), _fmt(r["solver_bound"]),
            "over the limit" if not r["solver_fits"] else percent(r["gap"], "markdown", decimals=2),
            r["solver_status"], f"`{r['solver_space']}`",
        ])
    out += [_table(["schedule", "p", "m", "memory limit", "step (slots)", "best found", "bound", "gap", "status", "space"], rows), ""]
    cut = [r for r in data.gaps if r.get("solver_cut")]
    if cut:  # their figures are the clock's: a rerun may differ, and nothing else says so
        out += [f"{counted(len(cut), 'row')} of this table {'was' if len(cut) == 1 else 'were'} cut by the wall clock "
                f"(rows.csv's solver_cut, e.g. {cut[0]['solver_cut']}): a rerun may give other figures there. {REPEAT_CUT}.", ""]
    semantics = sorted({r["solver_memory_semantics"] for r in data.gaps if r["memory_limit"] is not None})
    if semantics:
        out += ["Memory semantics: " + " / ".join(semantics) + ".", ""]
    skipped = [r for r in data.skipped if r.get("kind") == "gap"]
    if skipped:
        out += ["Skipped solver points: " + "; ".join(f"{r['schedule']} p={r['devices']} m={r['microbatches']} limit={r['memory_limit']}: {r['reason']}" for r in skipped) + ".", ""]
    return out


def write_report(loaded: LoadedSpec, rows: Iterable[dict], output: str | Path, figures: bool = True, note: str = "") -> Path:
    """Write ``report.md``, ``claims.json`` and (with matplotlib) ``figures/*.png`` into ``output``,
    all or none (:func:`ppopt.io.output_group`: a report that cannot be written leaves the figures
    and claims of an earlier run in place)."""
    output = Path(output)
    data = StudyData.from_rows(loaded, rows)
    found = claims(data)
    reason = "they were turned off (--no-figures)" if not figures else "matplotlib is not installed (`pip install 'matplotlib>=3.8'`)"
    path = output / "report.md"
    with output_group():
        drawn = write_figures(data, output / "figures") if figures else None
        write_json(found, output / "claims.json", pretty=True, sort_keys=True)
        atomic_write_text(path, render(loaded, data, found, drawn, note, reason) + "\n")
    return path
