"""How close predicted step times come to measured ones: per-row errors and summary figures.

Relative error of a row: ``(predicted - measured) / measured``. The summary gives the mean
absolute percentage error (MAPE), the median, 95th percentile and worst absolute error, and, per
model (rows grouped by model dimensions), the Spearman rank correlation of predicted vs measured
step times: 1 means ppopt orders that model's layouts exactly as the measurements do.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace

import numpy as np

from ppopt.config import SystemConfig, load_system
from ppopt.io import file_labels
from ppopt.io.measured import Measured, MeasuredDataError, Unmodelled, read_measured
from ppopt.ir import check_total_size
from ppopt.job import Job, evaluate_job

__all__ = ["GROUP_KEYS", "Accuracy", "Group", "RowResult", "check_rows_size", "group_errors", "predict_rows", "read_rows",
           "spearman", "summarize", "validate_file"]


@dataclass(frozen=True)
class RowResult:
    """One measured row and its prediction. Seconds, bytes."""

    line: int
    """The row's line in its file (the header is line 1)."""
    model: str
    """The model's key (the Spearman correlations are taken within it)."""
    job: str
    """The layout as ``validate`` prints it (``t2 p4 d8 b1 m16``)."""
    measured_s: float
    """The measured step, seconds."""
    predicted_s: float
    """ppopt's predicted step, seconds."""
    peak_memory_bytes: float
    """The predicted per-GPU peak, bytes."""
    source: str = ""
    """File name of the measurement."""
    pipeline_s: float = 0.0
    """The predicted step's parts (:class:`ppopt.job.JobResult`): the simulated pipeline, the
    gradient all-reduce after it and the optimizer step; they add up to ``predicted_s``."""
    gradient_sync_s: float = 0.0
    optimizer_s: float = 0.0
    tp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batch: int = 1
    fits_memory: bool = True
    """Whether the predicted peak fits the system's memory per GPU (:attr:`ppopt.job.JobResult.fits_memory`):
    the measured run did, so a row that does not is one the memory model over-predicts."""

    @property
    def error(self) -> float:
        """Signed relative error (predicted - measured) / measured."""
        return (self.predicted_s - self.measured_s) / self.measured_s


GROUP_KEYS = {
    "model": (lambda r: r.model, "{}"),
    "tp": (lambda r: r.tp, "t{}"),
    "pp": (lambda r: r.pp, "p{}"),
    "dp": (lambda r: r.dp, "d{}"),
    "micro-batch": (lambda r: r.micro_batch, "b{}"),
    "gpus": (lambda r: r.tp * r.pp * r.dp, "{} GPUs"),
}
"""What rows can be grouped by (``ppopt validate --by``): a row's value and the group label's format."""


@dataclass(frozen=True)
class Group:
    """The rows that share a label: their count, mean signed error (the bias: negative when ppopt
    predicts too fast), mean absolute error and worst absolute error (fractions)."""

    label: str
    rows: int
    mean_error: float
    mape: float
    worst: float


def group_errors(rows: tuple[RowResult, ...] | list[RowResult], keys: list[str]) -> list[Group]:
    """Rows grouped by ``keys`` (names of :data:`GROUP_KEYS`; the label joins theirs with a space),
    sorted by the first key's value, then the next (models in the order they first appear)."""
    groups: dict[tuple, list[float]] = {}
    for row in rows:
        groups.setdefault(tuple(GROUP_KEYS[key][0](row) for key in keys), []).append(row.error)
    models = list(dict.fromkeys(row.model for row in rows))

    def order(values: tuple) -> tuple:
        return tuple(models.index(v) if key == "model" else v for key, v in zip(keys, values))

    return [Group(" ".join(GROUP_KEYS[key][1].format(v) for key, v in zip(keys, values)), len(errors),
                  float(np.mean(errors)), float(np.mean(np.abs(errors))), float(np.max(np.abs(errors))))
            for values, errors in sorted(groups.items(), key=lambda item: order(item[0]))]


@dataclass(frozen=True)
class Accuracy:
    """Per-row results and the summary figures (fractions, not percent)."""

    rows: tuple[RowResult, ...]
    unmodelled: tuple[Unmodelled, ...] = ()
    spearman: dict[str, float | None] = field(default_factory=dict)
    """Per model: Spearman's rho of predicted vs measured (None below 3 rows)."""

    def _abs(self) -> np.ndarray:
        return np.abs([r.error for r in self.rows])

    @property
    def mape(self) -> float:
        """Mean absolute relative error, a fraction (0.07 is 7 %); NaN without rows."""
        return float(self._abs().mean()) if self.rows else float("nan")

    @property
    def median(self) -> float:
        """Median absolute relative error, a fraction; NaN without rows."""
        return float(np.median(self._abs())) if self.rows else float("nan")

    @property
    def p95(self) -> float:
        """95th percentile of the absolute relative errors, a fraction; NaN without rows."""
        return float(np.percentile(self._abs(), 95)) if self.rows else float("nan")

    @property
    def worst(self) -> RowResult | None:
        """The row of the largest absolute error; None without rows."""
        return max(self.rows, key=lambda r: abs(r.error), default=None)

    def summary(self) -> dict:
        """The figures as plain numbers (JSON-ready): a figure without rows to compute it from
        (no row modelled; Spearman's rho of constant values) is None."""
        worst = self.worst

        def number(value: float | None) -> float | None:
            return value if value is not None and math.isfinite(value) else None

        return {
            "rows": len(self.rows),
            "unmodelled": len(self.unmodelled),
            "mape": number(self.mape),
            "median": number(self.median),
            "p95": number(self.p95),
            "worst": abs(worst.error) if worst else None,
            "worst_line": worst.line if worst else None,
            "worst_file": worst.source if worst else None,
            "spearman": {model: number(rho) for model, rho in self.spearman.items()},
        }


def spearman(x: list[float] | np.ndarray, y: list[float] | np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's correlation of the ranks (ties get their mean rank)."""
    rx, ry = _ranks(np.asarray(x, dtype=float)), _ranks(np.asarray(y, dtype=float))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / denominator) if denominator > 0 else float("nan")


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype=float)
    for value in np.unique(values):  # ties: mean rank
        tied = values == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def check_rows_size(rows: list[Measured]) -> None:
    """Refuse, before any simulation, rows whose 1F1B pipelines (stages x microbatches x F and B)
    add up to more than :data:`ppopt.ir.MAX_TOTAL_OPS`."""
    check_total_size(sum(row.job.stages * row.job.microbatches * 2 for row in rows), f"{len(rows)} measured rows")


def predict_rows(rows: list[Measured]) -> list[RowResult]:
    """Predict every row's step time with :func:`ppopt.job.evaluate_job` (rows from :func:`read_rows`,
    whose sizes are checked)."""
    results = []
    for row in rows:
        result = evaluate_job(row.job)
        job = row.job
        results.append(RowResult(row.line, row.model_key, row_job(job), row.measured_s,
                                 result.step_time_s, result.peak_memory_bytes, row.source,
                                 result.pipeline_s, result.gradient_sync_s, result.optimizer_s,
                                 job.tp, job.pp, job.dp, job.micro_batch, result.fits_memory))
    return results


def row_job(job: Job) -> str:
    """A measured row's job as the reports show it: its layout (``t2 p4 d8 b1 m16``), then what
    departs from the data's assumptions (1F1B, full recomputation, no sequence parallelism or
    distributed optimizer; :data:`ppopt.io.measured.ASSUMED`), e.g. ``... interleaved-1f1b v2
    recompute none``."""
    extra = [job.schedule_label if job.schedule != "1f1b" else "", f"recompute {job.recompute}" if job.recompute != "full" else "",
             "sequence parallel" if job.sequence_parallel else "", "distributed optimizer" if job.distributed_optimizer else ""]
    return " ".join([job.describe(), *filter(None, extra)])


def summarize(results: list[RowResult], unmodelled: list[Unmodelled] = ()) -> Accuracy:  # type: ignore[assignment]
    """Summary figures of ``results``, with Spearman's rho per model."""
    groups: dict[str, list[RowResult]] = {}
    for r in results:
        groups.setdefault(r.model, []).append(r)
    rho = {model: (spearman([r.predicted_s for r in rs], [r.measured_s for r in rs]) if len(rs) >= 3 else None)
           for model, rs in groups.items()}
    return Accuracy(tuple(results), tuple(unmodelled), rho)


def read_rows(paths: list[str | os.PathLike[str]] | str | os.PathLike[str],
              system: SystemConfig | str | os.PathLike[str]) -> tuple[list[Measured], list[Unmodelled]]:
    """The measured rows of one or more files on ``system`` (a SystemConfig, a preset name or a
    file), and those outside the model
    (:func:`ppopt.io.measured.read_measured`), sizes checked (:func:`check_rows_size`)."""
    system = load_system(system)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    seen: dict[str, int] = {}
    for index, path in enumerate(paths):  # a file given twice would weigh every row of it twice in the statistics
        first = seen.setdefault(os.path.realpath(path), index)
        if first != index:
            raise MeasuredDataError(f"{path} is given twice (as {paths[first]}): give each data file once")
    rows: list[Measured] = []
    unmodelled: list[Unmodelled] = []
    for path, label in zip(paths, file_labels(paths)):  # a/x.csv and b/x.csv: not x.csv:2 twice
        got, skipped = read_measured(path, system)
        got = [replace(r, source=label) for r in got]
        skipped = [replace(u, source=label) for u in skipped]
        rows += got
        unmodelled += skipped
    _refuse_repeated_rows(rows, several_files=len(paths) > 1)
    check_rows_size(rows)
    return rows, unmodelled


def _refuse_repeated_rows(rows: list[Measured], several_files: bool) -> None:
    """Refuse a row that repeats an earlier one: the same job and the same step time, a copied line
    or a file given twice under two names, which would weigh that measurement twice in the
    statistics and the fit. A repeated run of a job (another measured time) is data, and kept."""
    first: dict[tuple, Measured] = {}
    for row in rows:
        earlier = first.setdefault((row.job, row.measured_s), row)  # every field of the job: model, layout, schedule
        if earlier is not row:
            repeats = (f"{row.source}:{row.line} repeats {earlier.source}:{earlier.line}" if several_files else
                       f"{row.source}: line {row.line} repeats line {earlier.line}")
            raise MeasuredDataError(f"{repeats} (the same job and step time): give each measurement once")


def validate_file(paths: list[str | os.PathLike[str]] | str | os.PathLike[str],
                  system: SystemConfig | str | os.PathLike[str]) -> Accuracy:
    """Read measured rows from one or more files and compare ppopt's predictions with them
    (``system``: a SystemConfig, a preset name or a file)."""
    rows, unmodelled = read_rows(paths, system)
    return summarize(predict_rows(rows), unmodelled)
