"""One schedule through the evaluation layers: formula, unit-slot table (and, given costs, simulation).

Pure functions returning plain dataclasses; the CLI and reports turn them into text or JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppopt.errors import ScheduleError
from ppopt.formula import Formula, formula
from ppopt.generators import generate, names
from ppopt.table import Table, TableMetrics, build_table, table_metrics
from ppopt.validate import validate


@dataclass(frozen=True)
class Evaluation:
    """A schedule's metrics in each layer."""

    schedule: str
    devices: int
    microbatches: int
    options: dict
    formula: Formula
    table: TableMetrics


def evaluate(name: str, devices: int, microbatches: int, backward: int = 1, **options: object) -> Evaluation:
    """Generate schedule ``name``, validate it, and evaluate it in the formula and table layers."""
    schedule = validate(generate(name, devices, microbatches, **options))
    table = build_table(schedule, backward)
    return Evaluation(
        schedule=name,
        devices=devices,
        microbatches=microbatches,
        options=dict(schedule.options),
        formula=formula(name, devices, microbatches, backward, **options),
        table=table_metrics(table),
    )


def evaluate_all(devices: int, microbatches: int, backward: int = 1, **options: object) -> tuple[list[Evaluation], dict[str, str]]:
    """Evaluate every registered schedule that applies to (p, m); also return why the others don't."""
    results, skipped = [], {}
    for name in names():
        try:
            results.append(evaluate(name, devices, microbatches, backward, **options))
        except ScheduleError as error:
            if devices < 1 or microbatches < 1:
                raise
            skipped[name] = str(error)
    return results, skipped


def table_of(name: str, devices: int, microbatches: int, backward: int = 1, **options: object) -> Table:
    """The validated unit-slot table of schedule ``name``."""
    return build_table(validate(generate(name, devices, microbatches, **options)), backward)
