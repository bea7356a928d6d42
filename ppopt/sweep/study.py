"""The study report: the rows of ``configs/studies/paper.toml`` (or quick.toml) as ``report.md``.

Sections: step time vs m per system, idle ratio vs m, worst-device peak memory per schedule, the
ranking in each layer and where it flips, the solver's optimality gaps, and the paper's qualitative
claims checked against the numbers. Every number in the text is computed from the rows; the claim
numbers are also written to ``claims.json`` so they can be checked against ``rows.csv``.

Figures need matplotlib (``pip install 'ppopt[plot]'``), imported lazily through matplotlib's object
API (no pyplot, no global backend); without it the report is written without figures and says so.

Ranking conventions (as :func:`ppopt.evaluate.rank_layers`): the formula and table layers rank by
bubble ratio (idle / total device time), the simulation by step time; values within a relative
1e-9 tie. "Best" is the set of schedules of rank 1.
"""

from __future__ import annotations

import io
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ppopt.io import atomic_write_bytes, atomic_write_text
from ppopt.report.text import render_table
from ppopt.sweep.spec import LoadedSpec

__all__ = ["PAPER_SCHEDULES", "StudyData", "claims", "write_report"]

#: The schedules of the paper; the others in the spec are ppopt's additions.
PAPER_SCHEDULES = ("gpipe", "1f1b", "chimera", "hanayo", "chimera-asym")
#: Chimera's competitors in the paper's claims (the asymmetric variant is judged on its own).
PAPER_RIVALS = ("gpipe", "1f1b", "hanayo")
LEVELS = ("slow", "mid", "fast")
GiB = 2**30
TIE = 1e-9
#: "GPipe and 1F1B take the same time" holds when they differ by less than this everywhere.
SAME_RUNTIME = 0.01


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------


@dataclass
class StudyData:
    """The ok evaluation rows of one model indexed by (system, devices, microbatches, schedule)."""

    model: str
    schedules: list[str]
    systems: list[str]
    devices: list[int]
    microbatches: list[int]
    rows: dict[tuple[str, int, int, str], dict]
    gaps: list[dict]
    skipped: list[dict]

    @classmethod
    def from_rows(cls, loaded: LoadedSpec, rows: Iterable[dict]) -> StudyData:
        spec = loaded.spec
        model = spec.models[0]
        index, gaps, skipped = {}, [], []
        for row in rows:
            if row.get("status") != "ok":
                skipped.append(row)
            elif row["kind"] == "gap":
                gaps.append(row)
            elif row["model"] == model:
                index[(row["system"], row["devices"], row["microbatches"], row["schedule"])] = row
        return cls(model, spec.schedule_names(), list(spec.systems), list(spec.devices), list(spec.microbatches), index, gaps, skipped)

    def get(self, system: str, devices: int, microbatches: int, schedule: str, column: str) -> float | None:
        row = self.rows.get((system, devices, microbatches, schedule))
        return None if row is None else row.get(column)

    def present(self, system: str, devices: int, microbatches: int, among: Sequence[str] | None = None) -> list[str]:
        return [s for s in (among or self.schedules) if (system, devices, microbatches, s) in self.rows]

    def points(self) -> list[tuple[int, int, str]]:
        """(devices, microbatches, system) with at least one row, in spec order."""
        return [(p, m, sy) for p in self.devices for m in self.microbatches for sy in self.systems if self.present(sy, p, m)]

    def best(self, system: str, devices: int, microbatches: int, column: str, among: Sequence[str] | None = None) -> list[str]:
        values = {s: self.get(system, devices, microbatches, s, column) for s in self.present(system, devices, microbatches, among)}
        values = {s: v for s, v in values.items() if v is not None}
        if not values:
            return []
        low = min(values.values())
        return [s for s, v in values.items() if v <= low + TIE * max(1.0, abs(low))]

    def ranks(self, system: str, devices: int, microbatches: int, column: str) -> dict[str, int]:
        values = {s: self.get(system, devices, microbatches, s, column) for s in self.present(system, devices, microbatches)}
        ordered = sorted(values.values())
        return {s: 1 + sum(v < value - TIE * max(1.0, abs(value)) for v in ordered) for s, value in values.items()}

    @property
    def baseline(self) -> str:
        """The system shown in the tables: mid-mid if swept, else the first."""
        return "mid-mid" if "mid-mid" in self.systems else self.systems[0]


def _level(system: str) -> tuple[str, str] | None:
    parts = system.split("-")
    if len(parts) == 2 and parts[0] in LEVELS and parts[1] in LEVELS:
        return parts[0], parts[1]
    return None


# --------------------------------------------------------------------------------------------------
# Claims
# --------------------------------------------------------------------------------------------------


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


def claims(data: StudyData) -> dict:
    """The numbers behind the paper's qualitative claims (reference §1), from the rows only."""
    out: dict = {}

    # 1. GPipe and 1F1B: same runtime, 1F1B lower activation peak
    diffs, peaks = [], []
    for p, m, system in data.points():
        g = data.rows.get((system, p, m, "gpipe"))
        o = data.rows.get((system, p, m, "1f1b"))
        if g and o:
            diffs.append((_rel(o["sim_step_time_s"], g["sim_step_time_s"]), system, p, m))
            peaks.append((o["sim_peak_activation_bytes_max"] / g["sim_peak_activation_bytes_max"], system, p, m))
    if diffs:
        worst = max(diffs)
        per_system = {}
        for d, system, _p, _m in diffs:
            per_system[system] = max(per_system.get(system, 0.0), d)
        out["gpipe_vs_1f1b"] = {
            "points": len(diffs),
            "max_relative_step_time_difference": worst[0],
            "at": {"system": worst[1], "devices": worst[2], "microbatches": worst[3]},
            "mean_relative_step_time_difference": statistics.fmean(d[0] for d in diffs),
            "max_by_system": per_system,
            "systems_within_threshold": [sy for sy, d in per_system.items() if d < SAME_RUNTIME],
            "points_within_threshold": sum(d[0] < SAME_RUNTIME for d in diffs),
            "threshold": SAME_RUNTIME,
            "holds": worst[0] < SAME_RUNTIME,
        }
        lower = [x for x in peaks if x[0] < 1 - TIE]
        out["1f1b_activation_peak"] = {
            "points": len(peaks),
            "points_lower": len(lower),
            "min_ratio": min(x[0] for x in peaks),
            "max_ratio": max(x[0] for x in peaks),
            "holds": len(lower) == len(peaks),
        }

    # 2. Chimera: bubbles in formula and table, speed in the simulation
    if "chimera" in data.schedules:
        layers = {}
        for layer, column in (("formula", "formula_bubble_ratio"), ("table", "table_bubble_ratio")):
            wins, losses, total = [], [], 0
            for p in data.devices:
                for m in data.microbatches:
                    system = next((sy for sy in data.systems if data.present(sy, p, m, ["chimera"])), None)
                    if system is None:
                        continue
                    rivals = [s for s in data.present(system, p, m, PAPER_RIVALS)]
                    if not rivals:
                        continue
                    total += 1
                    mine = data.get(system, p, m, "chimera", column)
                    best_rival = min(data.get(system, p, m, s, column) for s in rivals)
                    (wins if mine < best_rival - TIE else losses).append({"devices": p, "microbatches": m, "chimera": mine, "best_rival": best_rival})
            layers[layer] = {"points": total, "wins": len(wins), "not_won": losses}
        sim_wins, sim_total = [], 0
        all_wins = []
        for p, m, system in data.points():
            rivals = data.present(system, p, m, PAPER_RIVALS)
            if "chimera" not in data.present(system, p, m) or not rivals:
                continue
            sim_total += 1
            mine = data.get(system, p, m, "chimera", "sim_step_time_s")
            if mine < min(data.get(system, p, m, s, "sim_step_time_s") for s in rivals) * (1 - TIE):
                sim_wins.append({"system": system, "devices": p, "microbatches": m})
            if data.best(system, p, m, "sim_step_time_s") == ["chimera"]:
                all_wins.append({"system": system, "devices": p, "microbatches": m})
        by_m = {m: [sum(w["microbatches"] == m for w in sim_wins), sum(1 for p, mm, sy in data.points() if mm == m and "chimera" in data.present(sy, p, mm))] for m in data.microbatches}
        by_network = {}
        for level in LEVELS:
            n_points = sum(1 for p, m, sy in data.points() if _level(sy) and _level(sy)[1] == level and "chimera" in data.present(sy, p, m))
            if n_points:
                by_network[level] = [sum(1 for w in sim_wins if _level(w["system"]) and _level(w["system"])[1] == level), n_points]
        rate = lambda pair: pair[0] / pair[1] if pair[1] else 0.0  # noqa: E731
        low_m, high_m = data.microbatches[0], data.microbatches[-1]
        mainly_low_m = rate(by_m[low_m]) > rate(by_m[high_m])
        net_order = [lvl for lvl in LEVELS if lvl in by_network]
        fast_not_worse = len(net_order) < 2 or rate(by_network[net_order[-1]]) >= rate(by_network[net_order[0]])
        out["chimera"] = {
            "rivals": list(PAPER_RIVALS),
            "formula": layers["formula"],
            "table": layers["table"],
            "simulation": {
                "points": sim_total, "wins": sim_wins, "wins_by_microbatches": by_m, "wins_by_network": by_network,
                "fastest_of_all_schedules": all_wins,
                "mainly_low_microbatches": mainly_low_m, "fast_networks_not_worse": fast_not_worse,
            },
        }

    # 3. Hanayo at its operating point, against the network speed
    hanayo_points = sorted({(p, m) for (sy, p, m, s) in data.rows if s == "hanayo"})
    if hanayo_points:
        per_system, p, m = [], *hanayo_points[0]
        for system in data.systems:
            if not data.present(system, p, m, ["hanayo"]):
                continue
            others = [s for s in data.present(system, p, m, PAPER_SCHEDULES) if s not in ("hanayo", "chimera-asym")]
            mine = data.get(system, p, m, "hanayo", "sim_step_time_s")
            best_other = min(others, key=lambda s: data.get(system, p, m, s, "sim_step_time_s"))
            ranking = sorted(others + ["hanayo"], key=lambda s: data.get(system, p, m, s, "sim_step_time_s"))
            per_system.append({
                "system": system, "hanayo_s": mine, "best_other": best_other,
                "ratio_to_best_other": mine / data.get(system, p, m, best_other, "sim_step_time_s"),
                "ratio_to_1f1b": mine / data.get(system, p, m, "1f1b", "sim_step_time_s") if "1f1b" in others else None,
                "rank": ranking.index("hanayo") + 1, "of": len(ranking),
            })
        sensitivity = {}
        for compute in LEVELS:
            ratios = {(_level(r["system"]) or ("", ""))[1]: r["ratio_to_best_other"] for r in per_system if (_level(r["system"]) or ("",))[0] == compute}
            if "slow" in ratios and "fast" in ratios:
                sensitivity[compute] = {"slow_network": ratios["slow"], "fast_network": ratios["fast"]}
        out["hanayo"] = {
            "devices": p, "microbatches": m, "per_system": per_system, "by_compute": sensitivity,
            # None: the grid has no slow/fast network pair at one compute level, nothing to compare
            "holds": all(v["slow_network"] > v["fast_network"] for v in sensitivity.values()) if sensitivity else None,
        }

    # 4. Asymmetric placement and the global (worst-device) peak memory
    pairs = []
    for p, m, system in data.points():
        a = data.rows.get((system, p, m, "chimera-asym"))
        c = data.rows.get((system, p, m, "chimera"))
        if a and c:
            pairs.append((system, p, m, a, c))
    if pairs:
        ratio = [a["sim_peak_memory_bytes_max"] / c["sim_peak_memory_bytes_max"] for _, _, _, a, c in pairs]
        first = [a["sim_peak_memory_bytes"][0] / c["sim_peak_memory_bytes"][0] for _, _, _, a, c in pairs]
        lower = [(sy, p, m) for (sy, p, m, a, c), r in zip(pairs, ratio) if r < 1 - 1e-3]
        out["asymmetric"] = {
            "points": len(pairs),
            "points_global_peak_lower": len(lower),
            "lower_at": [{"system": sy, "devices": p, "microbatches": m} for sy, p, m in lower],
            "global_peak_ratio_min": min(ratio), "global_peak_ratio_max": max(ratio),
            "device0_peak_ratio_min": min(first), "device0_peak_ratio_max": max(first),
            "holds": not lower,
        }

    # 5. Schedule quality depends on the system
    differ, counted = [], 0
    for p in data.devices:
        for m in data.microbatches:
            winners = {}
            for system in data.systems:
                best = data.best(system, p, m, "sim_step_time_s")
                if best:
                    winners[system] = "=".join(best)
            if len(winners) < 2:
                continue
            counted += 1
            if len(set(winners.values())) > 1:
                differ.append({"devices": p, "microbatches": m, "winners": sorted(set(winners.values()))})
    out["system_dependence"] = {"points": counted, "points_with_different_winners": len(differ), "differ": differ, "holds": bool(differ)}
    return out


def _pct(x: float, digits: int = 2) -> str:
    return f"{100 * x:.{digits}f} %"


def claims_text(c: dict, data: StudyData) -> list[str]:
    """Markdown paragraphs stating each claim, the numbers and the verdict."""
    lines = []
    verdict = lambda ok: "**cannot be checked on this grid**" if ok is None else ("**holds**" if ok else "**does not hold**")  # noqa: E731
    if "gpipe_vs_1f1b" in c:
        g = c["gpipe_vs_1f1b"]
        at = g["at"]
        lines.append(
            f"1. *GPipe and 1F1B have the same runtime*: {verdict(g['holds'])}. Over {g['points']} (S, m, system) points the "
            f"simulated step times differ by at most {_pct(g['max_relative_step_time_difference'])} "
            f"(at S = {at['devices']}, m = {at['microbatches']}, {at['system']}), {_pct(g['mean_relative_step_time_difference'], 3)} on average "
            f"(threshold {_pct(g['threshold'], 0)}); within the threshold at {g['points_within_threshold']} of {g['points']} points. "
            f"Largest difference per system: "
            + ", ".join(f"{sy} {_pct(d)}" for sy, d in g["max_by_system"].items())
            + f" (within {_pct(g['threshold'], 0)} on {len(g['systems_within_threshold'])} of {len(g['max_by_system'])} systems)."
        )
    if "1f1b_activation_peak" in c:
        a = c["1f1b_activation_peak"]
        lines.append(
            f"2. *1F1B has a lower activation peak*: {verdict(a['holds'])}. 1F1B's worst-device activation peak is lower than "
            f"GPipe's at {a['points_lower']} of {a['points']} points; it is {a['min_ratio']:.3f}x to {a['max_ratio']:.3f}x GPipe's."
        )
    if "chimera" in c:
        ch = c["chimera"]
        f, t, s = ch["formula"], ch["table"], ch["simulation"]
        not_won = ", ".join(f"(S = {x['devices']}, m = {x['microbatches']}: {x['chimera']:.3f} vs {x['best_rival']:.3f})" for x in t["not_won"]) or "none"
        rivals = ", ".join(ch["rivals"])
        wins = ", ".join(f"{w['system']} S={w['devices']} m={w['microbatches']}" for w in s["wins"]) or "none"
        by_m = ", ".join(f"m = {m}: {v[0]}/{v[1]}" for m, v in s["wins_by_microbatches"].items())
        by_net = ", ".join(f"{lvl} network: {v[0]}/{v[1]}" for lvl, v in s["wins_by_network"].items())
        all_wins = ", ".join(f"{w['system']} S={w['devices']} m={w['microbatches']}" for w in s["fastest_of_all_schedules"]) or "none"
        consistent = s["mainly_low_microbatches"] and s["fast_networks_not_worse"]
        lines.append(
            f"3. *Chimera wins on bubbles in the formula and table layers*: against {rivals}, Chimera has the lowest bubble "
            f"ratio at {f['wins']} of {f['points']} (S, m) points in the formula layer ({verdict(f['wins'] == f['points'])}) and at "
            f"{t['wins']} of {t['points']} in the table layer ({verdict(t['wins'] == t['points'])}; points it does not win, "
            f"bubble ratio Chimera vs best rival: {not_won}). "
            f"The direct concatenation of basic units keeps Chimera's table bubble ratio from falling with m as the closed form does.\n"
            f"   *...but wins in the simulation mainly at low microbatch counts on fast networks*: "
            f"{'**consistent with the data**' if consistent else '**not supported by the data**'}. Chimera is the fastest of "
            f"Chimera and {rivals} at {len(s['wins'])} of {s['points']} simulated points: {wins}. "
            f"Wins by m: {by_m}. Wins by network: {by_net}. Fewer wins at the highest m than at the lowest: "
            f"{'yes' if s['mainly_low_microbatches'] else 'no'}; at least as many on the fastest network as on the slowest: "
            f"{'yes' if s['fast_networks_not_worse'] else 'no'}. Fastest of all swept schedules (ppopt's additions included): {all_wins}."
        )
    if "hanayo" in c:
        h = c["hanayo"]
        per = "; ".join(
            f"{r['system']}: {r['hanayo_s']:.3f} s, {r['ratio_to_best_other']:.3f}x the best other ({r['best_other']}), rank {r['rank']}/{r['of']}"
            for r in h["per_system"]
        )
        sens = ", ".join(f"compute {k}: {v['slow_network']:.3f}x on the slow network vs {v['fast_network']:.3f}x on the fast one" for k, v in h["by_compute"].items())
        lines.append(
            f"4. *Hanayo is good at its operating point but sensitive to slow networks*: at (S, m) = ({h['devices']}, {h['microbatches']}), "
            f"against GPipe, 1F1B and Chimera: {per}. Step time relative to the best other schedule, by compute level: "
            f"{sens or 'no slow/fast network pair in the grid'}. Sensitivity to slow networks: {verdict(h['holds'])} "
            f"(test: the relative penalty is larger on the slow network than on the fast one at every compute level)."
        )
    if "asymmetric" in c:
        a = c["asymmetric"]
        lines.append(
            f"5. *The asymmetric placement does not lower the global peak memory*: {verdict(a['holds'])}. Against symmetric Chimera "
            f"over {a['points']} points, the worst-device peak memory of chimera-asym (split 1:2) is "
            f"{a['global_peak_ratio_min']:.3f}x to {a['global_peak_ratio_max']:.3f}x, lower (by > 0.1 %) at {a['points_global_peak_lower']} points; "
            f"device 0 (the early stages it is meant to relieve) holds {a['device0_peak_ratio_min']:.3f}x to {a['device0_peak_ratio_max']:.3f}x."
        )
    if "system_dependence" in c:
        d = c["system_dependence"]
        lines.append(
            f"6. *Schedule quality only means something in the context of the modelled system*: {verdict(d['holds'])}. At "
            f"{d['points_with_different_winners']} of {d['points']} (S, m) points the fastest schedule differs between systems"
            + (": " + "; ".join(f"S={x['devices']} m={x['microbatches']}: {', '.join(x['winners'])}" for x in d["differ"][:12]) if d["differ"] else "")
            + (" ..." if len(d["differ"]) > 12 else "") + "."
        )
    return lines


# --------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------


def _matplotlib():
    """The Figure factory of :mod:`ppopt.report.plot`, or None without matplotlib."""
    from ppopt.errors import ScheduleError
    from ppopt.report.plot import new_figure

    try:
        return new_figure()
    except ScheduleError:
        return None


def _style(data: StudyData) -> dict[str, dict]:
    palette = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999", "#F0E442"]
    return {
        s: {"color": palette[i % len(palette)], "linestyle": "-" if s in PAPER_SCHEDULES else "--", "marker": "o", "markersize": 3}
        for i, s in enumerate(data.schedules)
    }


def _grid_layout(systems: Sequence[str]) -> tuple[int, int, dict[str, tuple[int, int]]]:
    levels = [_level(s) for s in systems]
    if all(levels):
        computes = [lvl for lvl in LEVELS if any(x[0] == lvl for x in levels)]
        networks = [lvl for lvl in LEVELS if any(x[1] == lvl for x in levels)]
        return len(computes), len(networks), {s: (computes.index(x[0]), networks.index(x[1])) for s, x in zip(systems, levels)}
    cols = math.ceil(math.sqrt(len(systems)))
    rows = math.ceil(len(systems) / cols)
    return rows, cols, {s: divmod(i, cols) for i, s in enumerate(systems)}


def _save(fig, path: Path) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    atomic_write_bytes(path, buffer.getvalue())


def _per_system_figure(figure, data: StudyData, devices: int, column: str, label: str, scale: float, path: Path) -> None:
    rows, cols, where = _grid_layout(data.systems)
    fig = figure(figsize=(3.6 * cols, 2.9 * rows), constrained_layout=True)
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True)
    style = _style(data)
    used = set()
    for system, (r, c) in where.items():
        ax = axes[r][c]
        used.add((r, c))
        for schedule in data.schedules:
            xs = [m for m in data.microbatches if (system, devices, m, schedule) in data.rows]
            if not xs:
                continue
            ys = [data.rows[(system, devices, m, schedule)][column] * scale for m in xs]
            ax.plot(xs, ys, label=schedule, **style[schedule])
        ax.set_xscale("log", base=2)
        ax.set_title(system + (" (compute-network)" if (r, c) == (0, 0) and _level(system) else ""), fontsize=9)
        ax.tick_params(labelsize=7)
        if c == 0:
            ax.set_ylabel(label, fontsize=8)
        if r == rows - 1:
            ax.set_xlabel("microbatches m", fontsize=8)
    for r in range(rows):
        for c in range(cols):
            if (r, c) not in used:
                axes[r][c].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for r, c in used:
        h, lab = axes[r][c].get_legend_handles_labels()
        if len(lab) > len(labels):
            handles, labels = h, lab
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 8), fontsize=8)
    fig.suptitle(f"{label} vs m, S = {devices} stages, model {data.model}", fontsize=10)
    _save(fig, path)


def _memory_figure(figure, data: StudyData, path: Path) -> None:
    system = data.baseline
    style = _style(data)
    fig = figure(figsize=(5.0 * len(data.devices), 3.6), constrained_layout=True)
    axes = fig.subplots(1, len(data.devices), squeeze=False)[0]
    for ax, p in zip(axes, data.devices):
        for schedule in data.schedules:
            xs = [m for m in data.microbatches if (system, p, m, schedule) in data.rows]
            if xs:
                ax.plot(xs, [data.rows[(system, p, m, schedule)]["sim_peak_memory_bytes_max"] / GiB for m in xs], label=schedule, **style[schedule])
        ax.set_xscale("log", base=2)
        ax.set_title(f"S = {p}", fontsize=9)
        ax.set_xlabel("microbatches m", fontsize=8)
        ax.set_ylabel("peak memory, worst device (GiB)", fontsize=8)
        ax.tick_params(labelsize=7)
    max(axes, key=lambda a: len(a.get_legend_handles_labels()[1])).legend(fontsize=7)
    fig.suptitle(f"Peak memory per device (worst device), {system}", fontsize=10)
    _save(fig, path)


def _per_device_figure(figure, data: StudyData, path: Path) -> None:
    system, m = data.baseline, data.microbatches[0]
    style = _style(data)
    fig = figure(figsize=(5.5 * len(data.devices), 3.6), constrained_layout=True)
    axes = fig.subplots(1, len(data.devices), squeeze=False)[0]
    for ax, p in zip(axes, data.devices):
        present = data.present(system, p, m)
        width = 0.8 / max(1, len(present))
        for k, schedule in enumerate(present):
            values = [v / GiB for v in data.rows[(system, p, m, schedule)]["sim_peak_memory_bytes"]]
            ax.bar([d + (k - (len(present) - 1) / 2) * width for d in range(len(values))], values, width, label=schedule, color=style[schedule]["color"])
        ax.set_title(f"S = {p}, m = {m}", fontsize=9)
        ax.set_xticks(range(p))
        ax.set_xlabel("device", fontsize=8)
        ax.set_ylabel("peak memory (GiB)", fontsize=8)
        ax.tick_params(labelsize=7)
    max(axes, key=lambda a: len(a.get_legend_handles_labels()[1])).legend(fontsize=7)
    fig.suptitle(f"Peak memory on every device, {system}", fontsize=10)
    _save(fig, path)


def _figures(data: StudyData, directory: Path) -> list[tuple[str, str]] | None:
    """Draw the figures; ``None`` when matplotlib is missing. Returns (caption, relative path)."""
    figure = _matplotlib()
    if figure is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    made = []
    for p in data.devices:
        _per_system_figure(figure, data, p, "sim_step_time_s", "step time (s)", 1.0, directory / f"step_time_S{p}.png")
        made.append((f"step time, S = {p}", f"figures/step_time_S{p}.png"))
    for p in data.devices:
        _per_system_figure(figure, data, p, "sim_idle_ratio", "idle ratio", 1.0, directory / f"idle_ratio_S{p}.png")
        made.append((f"idle ratio, S = {p}", f"figures/idle_ratio_S{p}.png"))
    _memory_figure(figure, data, directory / "peak_memory.png")
    made.append(("peak memory", "figures/peak_memory.png"))
    _per_device_figure(figure, data, directory / "peak_memory_per_device.png")
    made.append(("peak memory per device", "figures/peak_memory_per_device.png"))
    return made


# --------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    return render_table(headers, list(rows), "markdown")


def _by_m_table(data: StudyData, system: str, devices: int, column: str, fmt) -> str:
    rows = []
    for schedule in data.schedules:
        cells = [fmt(data.get(system, devices, m, schedule, column)) if (system, devices, m, schedule) in data.rows else "-" for m in data.microbatches]
        if any(c != "-" for c in cells):
            rows.append([schedule] + cells)
    return _table(["schedule"] + [f"m = {m}" for m in data.microbatches], rows)


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
        f"Schedules: {', '.join(data.schedules)} (paper: {', '.join(s for s in data.schedules if s in PAPER_SCHEDULES)}; "
        f"ppopt's additions: {', '.join(s for s in data.schedules if s not in PAPER_SCHEDULES) or 'none'}).",
        f"{len(data.rows)} evaluated points, {len(data.gaps)} solver rows, {len(data.skipped)} skipped points "
        f"(the generator or solver refused them; reasons in rows.csv).",
        "",
    ]
    if spec.filters:
        out += ["Point filters: " + "; ".join(f"{n}: {', '.join(f'{k} = {v}' for k, v in f.model_dump(exclude_defaults=True).items())}" for n, f in spec.filters.items()) + ".", ""]
    if result_note:
        out += [result_note, ""]
    if figures is None:
        out += [f"*Figures were not drawn: {no_figures_reason}. The tables below carry the numbers.*", ""]
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
           else f"It differs between systems by up to {_pct(spread)}; the table shows `{base}`."),
        "",
    ]
    out += _figure_lines(figures, ["peak_memory"])
    for p in data.devices:
        out += [f"S = {p}:", "", _by_m_table(data, base, p, "sim_peak_memory_bytes_max", lambda v: f"{v / GiB:,.0f}"), ""]

    out += _ranking_section(data)
    out += _gap_section(data)
    out += ["## Claims", "", "The paper's qualitative claims (reference §1), checked against the rows above. Numbers are also in `claims.json`.", ""]
    out += claims_text(found, data) + [""]
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


def _gap_section(data: StudyData) -> list[str]:
    out = ["## Optimality gaps", ""]
    if not data.gaps:
        skipped = [r for r in data.skipped if r.get("kind") == "gap"]
        return out + ["No solver points in this spec" + (f" ({len(skipped)} skipped)" if skipped else "") + ".", ""]
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
            r["schedule"], r["devices"], r["microbatches"], "none" if r["memory_limit"] is None else f"{r['memory_limit']:g}",
            _fmt(r["solver_step"]), _fmt(r["solver_best"]), _fmt(r["solver_bound"]),
            "over the limit" if not r["solver_fits"] else ("-" if r["gap"] is None else _pct(r["gap"])),
            r["solver_status"], f"`{r['solver_space']}`",
        ])
    out += [_table(["schedule", "p", "m", "memory limit", "step (slots)", "best found", "bound", "gap", "status", "space"], rows), ""]
    semantics = sorted({r["solver_memory_semantics"] for r in data.gaps if r["memory_limit"] is not None})
    if semantics:
        out += ["Memory semantics: " + " / ".join(semantics) + ".", ""]
    skipped = [r for r in data.skipped if r.get("kind") == "gap"]
    if skipped:
        out += ["Skipped solver points: " + "; ".join(f"{r['schedule']} p={r['devices']} m={r['microbatches']} limit={r['memory_limit']}: {r['reason']}" for r in skipped) + ".", ""]
    return out


def write_report(loaded: LoadedSpec, rows: Iterable[dict], output: str | Path, figures: bool = True, note: str = "") -> Path:
    """Write ``report.md``, ``claims.json`` and (with matplotlib) ``figures/*.png`` into ``output``."""
    output = Path(output)
    data = StudyData.from_rows(loaded, rows)
    found = claims(data)
    drawn = _figures(data, output / "figures") if figures else None
    reason = "they were turned off (--no-figures)" if not figures else "matplotlib is not installed (`pip install 'ppopt[plot]'`)"
    atomic_write_text(output / "claims.json", json.dumps(found, indent=2, sort_keys=True) + "\n")
    path = output / "report.md"
    atomic_write_text(path, render(loaded, data, found, drawn, note, reason) + "\n")
    return path
