"""Published throughput of large Megatron-LM runs, turned into step times ppopt can be checked against.

Source: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC '21), Table 1: GPT models of 1.7 to 1008 billion parameters trained on 32 to 3,072
A100 GPUs of DGX A100 nodes, with the teraFLOP/s each GPU achieved (``data/published``). A step
lasts the FLOPs of one step (the paper's Eq. 3, which counts full recomputation) divided by the GPUs'
achieved FLOP/s.

What the table leaves open, and how it is filled (data/published/README.md): the micro batch size
is not published, so a run is predicted with the fastest micro batch size of :data:`MICRO_BATCHES`
that fits in the GPUs' memory (the authors tuned their runs for throughput); the schedule is 1F1B
(the paper ran its interleaved schedule, whose chunk count is not given either); data parallelism
is GPUs / (t·p).
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path

from ppopt.config import SystemConfig
from ppopt.errors import ConfigError
from ppopt.io import read_text_bounded
from ppopt.io.measured import gpt_model
from ppopt.job import Job, JobResult, evaluate_job

__all__ = ["MICRO_BATCHES", "PublishedRun", "comparison_table", "fastest_fitting", "megatron_flops_per_step",
           "read_published", "relative_errors"]

SEQUENCE = 2048
"""Sequence length of every run of the table (the paper, §5.1)."""
VOCABULARY = 51200
"""Vocabulary size of every run of the table (the paper, §5.1)."""
MICRO_BATCHES = (1, 2, 4, 8)
"""Micro batch sizes tried for a run whose micro batch size is not published."""

COLUMNS = {
    "parameters (billion)": "parameters",
    "attention heads": "heads",
    "hidden size": "hidden",
    "layers": "layers",
    "tensor parallelism": "tp",
    "pipeline parallelism": "pp",
    "GPUs": "gpus",
    "global batch": "global_batch",
    "teraFLOP/s per GPU": "teraflops",
}


def megatron_flops_per_step(batch: int, seq: int, layers: int, hidden: int, vocabulary: int) -> float:
    """FLOPs of one training step of a GPT model with full recomputation, as Narayanan et al. 2021
    count them (Eq. 3, §5.1): ``96 B s l h² (1 + s/(6h) + V/(16 l h))``. 96 = 4 passes over the
    layers (forward, recomputed forward, and a backward of twice a forward) × 24 B s h² FLOPs of
    a layer's GEMMs per pass and sequence; the two terms add the attention scores and the logits."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocabulary / (16 * layers * hidden))


@dataclass(frozen=True)
class PublishedRun:
    """One row of the table: the model, the layout and the achieved throughput."""

    line: int
    parameters_billion: float
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    global_batch: int
    teraflops_per_gpu: float

    @property
    def dp(self) -> int:
        """Data-parallel degree: GPUs / (t·p)."""
        return self.gpus // (self.tp * self.pp)

    @property
    def step_time_s(self) -> float:
        """Seconds per step implied by the achieved throughput (:func:`megatron_flops_per_step`)."""
        flops = megatron_flops_per_step(self.global_batch, SEQUENCE, self.layers, self.hidden, VOCABULARY)
        return flops / (self.gpus * self.teraflops_per_gpu * 1e12)

    def job(self, system: SystemConfig, micro_batch: int) -> Job:
        """The run as a ppopt job on ``system``: full recomputation, 1F1B, ``micro_batch`` sequences."""
        model = gpt_model({"hidden": self.hidden, "heads": self.heads, "layers": self.layers, "seq": SEQUENCE,
                           "global_batch": self.global_batch, "vocabulary": VOCABULARY})
        return Job(model, system, tp=self.tp, pp=self.pp, dp=self.dp, micro_batch=micro_batch,
                   global_batch=self.global_batch, recompute="full")


def read_published(source: str | os.PathLike[str]) -> list[PublishedRun]:
    """Read the table (``data/published/megatron-lm-2021.csv``). Raises ConfigError naming the line
    and column of a missing or bad cell, or of a layout whose t·p does not divide the GPUs."""
    name = str(source)
    try:
        text = read_text_bounded(Path(source), 2**20, "utf-8-sig")
    except OSError as error:
        raise ConfigError(f"{name}: cannot read file ({error.strerror or error})") from error
    reader = csv.DictReader(io.StringIO(text))
    missing = [column for column in COLUMNS if column not in (reader.fieldnames or [])]
    if missing:
        raise ConfigError(f"{name}: missing column '{missing[0]}'")
    runs = []
    for line, row in enumerate(reader, start=2):
        values: dict[str, float] = {}
        for column, short in COLUMNS.items():
            try:
                values[short] = float(row[column])
            except (TypeError, ValueError):
                raise ConfigError(f"{name}: line {line}, column '{column}': not a number: {row[column]!r}") from None
            if not values[short] > 0:
                raise ConfigError(f"{name}: line {line}, column '{column}': must be positive")
        counts = {key: int(values[key]) for key in ("heads", "hidden", "layers", "tp", "pp", "gpus", "global_batch")}
        for column, short in COLUMNS.items():
            if short in counts and counts[short] != values[short]:
                raise ConfigError(f"{name}: line {line}, column '{column}': not an integer: {row[column]!r}")
        run = PublishedRun(line, parameters_billion=values["parameters"], teraflops_per_gpu=values["teraflops"],
                           **counts)
        if run.gpus % (run.tp * run.pp):
            raise ConfigError(f"{name}: line {line}, column 'GPUs': {run.gpus} is not a multiple of "
                              f"t x p = {run.tp * run.pp}")
        runs.append(run)
    return runs


def fastest_fitting(run: PublishedRun, system: SystemConfig,
                    micro_batches: tuple[int, ...] = MICRO_BATCHES) -> JobResult | None:
    """The fastest predicted step of ``run`` over the micro batch sizes that divide its batch per
    replica and whose per-GPU peak fits in the system's memory; None if none fits."""
    best = None
    for micro_batch in micro_batches:
        if (run.global_batch // run.dp) % micro_batch:
            continue
        result = evaluate_job(run.job(system, micro_batch))
        if result.peak_memory_bytes <= system.memory_capacity_bytes and (
                best is None or result.step_time_s < best.step_time_s):
            best = result
    return best


def relative_errors(runs: list[PublishedRun], system: SystemConfig) -> list[float | None]:
    """(predicted - published) / published step time of every run on ``system``
    (:func:`fastest_fitting`); None for a run no micro batch size fits."""
    errors: list[float | None] = []
    for run in runs:
        result = fastest_fitting(run, system)
        errors.append(None if result is None else result.step_time_s / run.step_time_s - 1)
    return errors


def comparison_table(runs: list[PublishedRun], systems: list[SystemConfig]) -> str:
    """The README's table: each run's published step time beside ppopt's prediction on every system
    (seconds, relative error, the micro batch chosen), then the MAPE and worst error per system."""
    header = ["model", "GPUs (t × p × d)", "published step", *(system.name for system in systems)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    errors: list[list[float]] = [[] for _ in systems]
    for run in runs:
        cells = [f"{run.parameters_billion:g}B", f"{run.gpus:,} ({run.tp} × {run.pp} × {run.dp})", f"{run.step_time_s:.1f} s"]
        for k, system in enumerate(systems):
            result = fastest_fitting(run, system)
            if result is None:
                cells.append("does not fit")
                continue
            error = result.step_time_s / run.step_time_s - 1
            errors[k].append(abs(error))
            cells.append(f"{result.step_time_s:.1f} s ({error:+.1%}, b = {result.job.micro_batch})")
        lines.append("| " + " | ".join(cells) + " |")
    summary = [f"{sum(e) / len(e):.1%} ({max(e):.1%})" if e else "-" for e in errors]
    lines.append("| MAPE (worst) | | | " + " | ".join(summary) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m ppopt.published SYSTEM...``: the comparison table on the given system presets or
    files (default dgx-a100 and a100-vtrain-calibrated). One line and exit status 1 on a bad name."""
    import sys

    from ppopt.config import load_system

    names = (sys.argv[1:] if argv is None else argv) or ["dgx-a100", "a100-vtrain-calibrated"]
    table = Path(__file__).resolve().parent.parent / "data" / "published" / "megatron-lm-2021.csv"
    try:
        systems = [load_system(name) for name in names]
        print(comparison_table(read_published(table), systems))
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
