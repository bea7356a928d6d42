"""The study's data and claims: the rows of a study sweep indexed, and the paper's claims computed.

:class:`StudyData` indexes the ok evaluation rows of a study spec (``configs/studies/paper.toml`` or
quick.toml) by (system, devices, microbatches, schedule label): the schedule's name, followed by the
value of each option the spec sweeps over several values (``hanayo W=2``, see :data:`OPTION_SYMBOL`),
so every swept variant is a schedule of its own in the tables, figures and claims. :func:`claims` computes the numbers behind
the qualitative claims of Barley et al., "A Tabular Schedule Abstraction for Communication-Aware
Evaluation of Pipeline-Parallel LLM Training" (ISPDC 2026), from
those rows only. The report that states them is :mod:`ppopt.report.study`.

Ranking conventions (as :func:`ppopt.evaluate.rank_layers`): the formula and table layers rank by
bubble ratio (idle / total device time), the simulation by step time; values within a relative
:data:`ppopt.evaluate.TIE` (1e-9) tie. "Best" is the set of schedules of rank 1.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ppopt.evaluate import TIE, competition_ranks
from ppopt.sweep.spec import LoadedSpec

__all__ = ["LEVELS", "OPTION_SYMBOL", "PAPER_RIVALS", "PAPER_SCHEDULES", "SAME_RUNTIME", "TIE", "StudyData", "base_name", "claims",
           "grid_level", "is_paper"]

#: The schedules of the paper; the others in the spec are ppopt's additions.
PAPER_SCHEDULES = ("gpipe", "1f1b", "chimera", "hanayo", "chimera-asym")
#: Chimera's competitors in the paper's claims (the asymmetric variant is judged on its own).
PAPER_RIVALS = ("gpipe", "1f1b", "hanayo")
LEVELS = ("slow", "mid", "fast")
#: "GPipe and 1F1B take the same time" holds when they differ by less than this everywhere.
SAME_RUNTIME = 0.01
#: How a schedule option swept over several values is written in a schedule's label (``hanayo W=2``).
OPTION_SYMBOL = {"chunks": "v", "waves": "W", "split": "split"}


def base_name(label: str) -> str:
    """The schedule family of a label (``hanayo W=2`` -> ``hanayo``)."""
    return label.split(" ")[0]


def is_paper(label: str) -> bool:
    """Whether the labelled schedule is one of the paper's (any of its option values)."""
    return base_name(label) in PAPER_SCHEDULES


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------


@dataclass
class StudyData:
    """The ok evaluation rows of one model indexed by (system, devices, microbatches, schedule label);
    ``schedules`` lists the labels in spec order, each family's variants by option value."""

    model: str
    schedules: list[str]
    systems: list[str]
    devices: list[int]
    microbatches: list[int]
    rows: dict[tuple[str, int, int, str], dict]
    gaps: list[dict]
    skipped: list[dict]
    varied: tuple[str, ...] = ()  # the options swept over several values, shown in the labels

    def label(self, row: dict) -> str:
        """The schedule label of a row: its name and the value of each varied option it takes."""
        return " ".join([row["schedule"], *(f"{OPTION_SYMBOL[o]}={row[o]}" for o in self.varied if row.get(o) is not None)])

    def labels(self, names: Sequence[str]) -> list[str]:
        """The labels of the families ``names``, in the order of :attr:`schedules`."""
        return [s for s in self.schedules if base_name(s) in names]

    @classmethod
    def from_rows(cls, loaded: LoadedSpec, rows: Iterable[dict]) -> StudyData:
        spec = loaded.spec
        model = spec.models[0]
        varied = tuple(o for o in OPTION_SYMBOL if len(spec.options.values(o)) > 1)
        data = cls(model, [], list(spec.systems), list(spec.devices), list(spec.microbatches), {}, [], [], varied)
        variants: dict[str, dict[str, tuple]] = {}  # family -> label -> its option values (the sort key)
        for row in rows:
            if row.get("status") != "ok":
                data.skipped.append(row)
            elif row["kind"] == "gap":
                data.gaps.append(row)
            elif row["model"] == model:
                label = data.label(row)
                data.rows[(row["system"], row["devices"], row["microbatches"], label)] = row
                variants.setdefault(row["schedule"], {})[label] = tuple(row.get(o) for o in varied)
        for name in spec.schedule_names():
            found = variants.get(name, {name: ()})
            data.schedules += sorted(found, key=lambda label: found[label])
        return data

    def get(self, system: str, devices: int, microbatches: int, schedule: str, column: str) -> float | None:
        """The value of ``column`` at a point, None if the point has no row (or no such value)."""
        row = self.rows.get((system, devices, microbatches, schedule))
        return None if row is None else row.get(column)

    def value(self, system: str, devices: int, microbatches: int, schedule: str, column: str) -> float:
        """The value of ``column`` at a point that has a row (see :meth:`present`)."""
        return float(self.rows[(system, devices, microbatches, schedule)][column])

    def present(self, system: str, devices: int, microbatches: int, among: Sequence[str] | None = None) -> list[str]:
        return [s for s in (among or self.schedules) if (system, devices, microbatches, s) in self.rows]

    def points(self) -> list[tuple[int, int, str]]:
        """(devices, microbatches, system) with at least one row, in spec order."""
        return [(p, m, sy) for p in self.devices for m in self.microbatches for sy in self.systems if self.present(sy, p, m)]

    def _values(self, system: str, devices: int, microbatches: int, column: str, among: Sequence[str] | None = None) -> dict[str, float]:
        found = {s: self.get(system, devices, microbatches, s, column) for s in self.present(system, devices, microbatches, among)}
        return {s: float(v) for s, v in found.items() if v is not None}

    def best(self, system: str, devices: int, microbatches: int, column: str, among: Sequence[str] | None = None) -> list[str]:
        values = self._values(system, devices, microbatches, column, among)
        if not values:
            return []
        low = min(values.values())
        return [s for s, v in values.items() if v <= low + TIE * max(1.0, abs(low))]

    def ranks(self, system: str, devices: int, microbatches: int, column: str) -> dict[str, int]:
        values = self._values(system, devices, microbatches, column)
        return competition_ranks(values)

    @property
    def baseline(self) -> str:
        """The system shown in the tables: mid-mid if swept, else the first."""
        return "mid-mid" if "mid-mid" in self.systems else self.systems[0]


def grid_level(system: str) -> tuple[str, str] | None:
    """(compute, network) of a grid system named like ``mid-slow``; None for any other name."""
    parts = system.split("-")
    if len(parts) == 2 and parts[0] in LEVELS and parts[1] in LEVELS:
        return parts[0], parts[1]
    return None


def _network(system: str) -> str | None:
    found = grid_level(system)
    return None if found is None else found[1]


# --------------------------------------------------------------------------------------------------
# Claims
# --------------------------------------------------------------------------------------------------


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


def claims(data: StudyData) -> dict:
    """The numbers behind the paper's qualitative claims (Barley et al., ISPDC 2026), from the rows
    only: a dict of claim name -> its numbers and ``holds`` (absent when the grid lacks the schedules)."""
    out: dict[str, Any] = {}
    out.update(_gpipe_vs_1f1b(data))
    if "chimera" in data.schedules:
        out["chimera"] = _chimera(data)
    hanayo = _hanayo(data)
    if hanayo is not None:
        out["hanayo"] = hanayo
    asymmetric = _asymmetric(data)
    if asymmetric is not None:
        out["asymmetric"] = asymmetric
    out["system_dependence"] = _system_dependence(data)
    return out


def _gpipe_vs_1f1b(data: StudyData) -> dict[str, Any]:
    """1. GPipe and 1F1B: the same runtime, and 1F1B a lower activation peak."""
    diffs: list[tuple[float, str, int, int]] = []
    peaks: list[float] = []
    for p, m, system in data.points():
        g = data.rows.get((system, p, m, "gpipe"))
        o = data.rows.get((system, p, m, "1f1b"))
        if g and o:
            diffs.append((_rel(o["sim_step_time_s"], g["sim_step_time_s"]), system, p, m))
            peaks.append(o["sim_peak_activation_bytes_max"] / g["sim_peak_activation_bytes_max"])
    if not diffs:
        return {}
    worst = max(diffs)
    per_system: dict[str, float] = {}
    for d, system, _p, _m in diffs:
        per_system[system] = max(per_system.get(system, 0.0), d)
    lower = [x for x in peaks if x < 1 - TIE]
    return {
        "gpipe_vs_1f1b": {
            "points": len(diffs),
            "max_relative_step_time_difference": worst[0],
            "at": {"system": worst[1], "devices": worst[2], "microbatches": worst[3]},
            "mean_relative_step_time_difference": statistics.fmean(d[0] for d in diffs),
            "max_by_system": per_system,
            "systems_within_threshold": [sy for sy, d in per_system.items() if d < SAME_RUNTIME],
            "points_within_threshold": sum(d[0] < SAME_RUNTIME for d in diffs),
            "threshold": SAME_RUNTIME,
            "holds": worst[0] < SAME_RUNTIME,
        },
        "1f1b_activation_peak": {
            "points": len(peaks),
            "points_lower": len(lower),
            "min_ratio": min(peaks),
            "max_ratio": max(peaks),
            "holds": len(lower) == len(peaks),
        },
    }


def _chimera_layer(data: StudyData, column: str) -> dict[str, Any]:
    """Chimera's bubble ratio against its best rival at each (S, m), on the first system with it
    (formula and table do not depend on the system)."""
    wins: list[dict] = []
    losses: list[dict] = []
    total = 0
    for p in data.devices:
        for m in data.microbatches:
            system = next((sy for sy in data.systems if data.present(sy, p, m, ["chimera"])), None)
            if system is None:
                continue
            rivals = data.present(system, p, m, data.labels(PAPER_RIVALS))
            if not rivals:
                continue
            total += 1
            mine = data.value(system, p, m, "chimera", column)
            best_rival = min(data.value(system, p, m, s, column) for s in rivals)
            (wins if mine < best_rival - TIE else losses).append({"devices": p, "microbatches": m, "chimera": mine, "best_rival": best_rival})
    return {"points": total, "wins": len(wins), "not_won": losses}


def _rate(pair: list[int]) -> float:
    return pair[0] / pair[1] if pair[1] else 0.0


def _chimera(data: StudyData) -> dict[str, Any]:
    """2. Chimera: fewer bubbles in formula and table; faster in the simulation mainly at low m."""
    sim_wins: list[dict] = []
    all_wins: list[dict] = []
    sim_total = 0
    for p, m, system in data.points():
        rivals = data.present(system, p, m, data.labels(PAPER_RIVALS))
        if "chimera" not in data.present(system, p, m) or not rivals:
            continue
        sim_total += 1
        mine = data.value(system, p, m, "chimera", "sim_step_time_s")
        if mine < min(data.value(system, p, m, s, "sim_step_time_s") for s in rivals) * (1 - TIE):
            sim_wins.append({"system": system, "devices": p, "microbatches": m})
        if data.best(system, p, m, "sim_step_time_s") == ["chimera"]:
            all_wins.append({"system": system, "devices": p, "microbatches": m})
    with_chimera = [(p, m, sy) for p, m, sy in data.points() if "chimera" in data.present(sy, p, m)]
    by_m = {m: [sum(w["microbatches"] == m for w in sim_wins), sum(mm == m for _, mm, _ in with_chimera)] for m in data.microbatches}
    by_network: dict[str, list[int]] = {}
    for network in LEVELS:
        n_points = sum(_network(sy) == network for _, _, sy in with_chimera)
        if n_points:
            by_network[network] = [sum(_network(w["system"]) == network for w in sim_wins), n_points]
    low_m, high_m = min(data.microbatches), max(data.microbatches)  # whatever order the spec lists them in
    net_order = [lvl for lvl in LEVELS if lvl in by_network]
    return {
        "rivals": list(PAPER_RIVALS),
        "formula": _chimera_layer(data, "formula_bubble_ratio"),
        "table": _chimera_layer(data, "table_bubble_ratio"),
        "simulation": {
            "points": sim_total, "wins": sim_wins, "wins_by_microbatches": by_m, "wins_by_network": by_network,
            "fastest_of_all_schedules": all_wins,
            # None: the grid cannot compare (one m, or no simulated point; fewer than two network levels)
            "mainly_low_microbatches": _rate(by_m[low_m]) > _rate(by_m[high_m]) if low_m != high_m and sim_total else None,
            "fast_networks_not_worse": _rate(by_network[net_order[-1]]) >= _rate(by_network[net_order[0]])
            if len(net_order) >= 2 else None,
        },
    }


def _hanayo(data: StudyData) -> dict[str, Any] | None:
    """3. Hanayo at its operating point (the first (S, m) it has rows at), against the network speed;
    each swept variant (``hanayo W=1``, ``hanayo W=2``: the paper does not state W) on its own."""
    hanayo = data.labels(["hanayo"])
    hanayo_points = sorted({(p, m) for (sy, p, m, s) in data.rows if s in hanayo})
    if not hanayo_points:
        return None
    p, m = hanayo_points[0]
    variants = [_hanayo_variant(data, label, p, m) for label in hanayo]
    verdicts = [v["holds"] for v in variants if v["holds"] is not None]
    return {
        "devices": p, "microbatches": m, "variants": variants,
        # None: no variant has a slow/fast network pair at one compute level, nothing to compare
        "holds": all(verdicts) if verdicts else None,
    }


def _hanayo_variant(data: StudyData, label: str, p: int, m: int) -> dict[str, Any]:
    """One Hanayo variant at (p, m) against the paper's other schedules (not Hanayo, not chimera-asym)."""
    per_system: list[dict[str, Any]] = []
    for system in data.systems:
        if not data.present(system, p, m, [label]):
            continue

        def step(schedule: str, system: str = system) -> float:
            return data.value(system, p, m, schedule, "sim_step_time_s")

        others = [s for s in data.present(system, p, m, data.labels(PAPER_SCHEDULES)) if base_name(s) not in ("hanayo", "chimera-asym")]
        if not others:  # a partial sweep (a time limit) may hold Hanayo's row before its rivals'
            continue
        mine = step(label)
        best_other = min(others, key=step)
        ranking = sorted(others + [label], key=step)
        per_system.append({
            "system": system, "hanayo_s": mine, "best_other": best_other,
            "ratio_to_best_other": mine / step(best_other),
            "ratio_to_1f1b": mine / step("1f1b") if "1f1b" in others else None,
            "rank": ranking.index(label) + 1, "of": len(ranking),
        })
    sensitivity = {}
    for compute in LEVELS:
        ratios = {}
        for r in per_system:
            found = grid_level(r["system"])
            if found is not None and found[0] == compute:
                ratios[found[1]] = r["ratio_to_best_other"]
        if "slow" in ratios and "fast" in ratios:
            sensitivity[compute] = {"slow_network": ratios["slow"], "fast_network": ratios["fast"]}
    return {
        "schedule": label, "per_system": per_system, "by_compute": sensitivity,
        "holds": all(v["slow_network"] > v["fast_network"] for v in sensitivity.values()) if sensitivity else None,
    }


def _asymmetric(data: StudyData) -> dict[str, Any] | None:
    """4. The asymmetric placement and the global (worst-device) peak memory."""
    pairs = []
    for p, m, system in data.points():
        a = data.rows.get((system, p, m, "chimera-asym"))
        c = data.rows.get((system, p, m, "chimera"))
        if a and c:
            pairs.append((system, p, m, a, c))
    if not pairs:
        return None
    ratio = [a["sim_peak_memory_bytes_max"] / c["sim_peak_memory_bytes_max"] for _, _, _, a, c in pairs]
    first = [a["sim_peak_memory_bytes"][0] / c["sim_peak_memory_bytes"][0] for _, _, _, a, c in pairs]
    lower = [(sy, p, m) for (sy, p, m, _a, _c), r in zip(pairs, ratio) if r < 1 - 1e-3]
    return {
        "points": len(pairs),
        "points_global_peak_lower": len(lower),
        "lower_at": [{"system": sy, "devices": p, "microbatches": m} for sy, p, m in lower],
        "global_peak_ratio_min": min(ratio), "global_peak_ratio_max": max(ratio),
        "device0_peak_ratio_min": min(first), "device0_peak_ratio_max": max(first),
        "holds": not lower,
    }


def _system_dependence(data: StudyData) -> dict[str, Any]:
    """5. Schedule quality depends on the system: the fastest schedule differs between systems."""
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
    # None: no (S, m) point has winners on two systems, so nothing can differ
    return {"points": counted, "points_with_different_winners": len(differ), "differ": differ,
            "holds": bool(differ) if counted else None}
