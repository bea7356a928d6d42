"""Run ppopt schedules in PyTorch's runtime and summarise what the ranks measured (pure summary,
no torch in this process: the ranks import it).

:func:`run_schedules` checks everything before any process starts (one device count, no replicated
stage, a stage on every rank, the last stage's forwards in microbatch order (:func:`ppopt.io.torch_csv.loss_order_message`), model sizes, the ranks' memory against what this machine has available: :func:`check_memory`),
writes each schedule as a PyTorch CSV (:func:`ppopt.io.torch_csv.write_torch_csv`) in a temporary
folder, launches the ranks once for all schedules (:func:`ppopt.run.launcher.launch`) and returns
one :class:`JobResult` per schedule.

Step time: each step starts after a barrier; a step's time is the slowest rank's, the reported
figure the median over the timed steps (after the warm-up). Op times: the median over microbatches
and timed steps of each (stage, kind), measured around the stage's compute call.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ppopt import host
from ppopt.host import gb
from ppopt.io.torch_csv import runtime_problem, write_torch_csv
from ppopt.ir import Schedule
from ppopt.run import RunError, require_torch
from ppopt.run.spec import Job, RunSpec


@dataclass(frozen=True)
class JobResult:
    """What one schedule measured. Seconds."""

    name: str
    devices: int
    stages: int
    microbatches: int
    step_s: tuple[float, ...]
    """Each timed step: the slowest rank's time from the barrier to the end of ``step()``."""
    op_s: dict[tuple[int, str], float]
    """Median duration of each (stage, kind) op, kind F, B, I or W."""
    check: dict | None
    """Gradient check: ok, elements, max_abs_error, max_rel_error, rtol, atol, loss, reference_loss."""

    @property
    def median_step_s(self) -> float:
        """Median measured step time, seconds."""
        return statistics.median(self.step_s)

    def kind_s(self) -> dict[str, float]:
        """Median op time per kind over the stages."""
        kinds = sorted({k for _, k in self.op_s}, key="FBIW".index)
        return {k: statistics.median(v for (_, kk), v in self.op_s.items() if kk == k) for k in kinds}


def refuse_unrunnable(schedule: Schedule) -> None:
    """What PyTorch's runtime cannot run correctly, though ppopt's validator accepts it: a replicated
    stage (Chimera: it places each stage on one rank), a rank with no stage, and a last stage whose
    forwards do not run in microbatch order (:func:`ppopt.io.torch_csv.runtime_problem`)."""
    for s, holders in enumerate(schedule.placement):
        if len(set(holders)) > 1:
            raise RunError(f"{schedule.name}: PyTorch's runtime cannot run replicated stages "
                           f"(stage {s} is on ranks {', '.join(map(str, holders))}); it places each stage on one rank")
    problem = runtime_problem(schedule)
    if problem is not None:
        raise RunError(f"{schedule.name}: {problem}")


def check_memory(devices: int, microbatches: int, settings: RunSpec) -> None:
    """Refuse, before any process starts, a run whose ``devices`` ranks would together need more
    memory than this machine has available (:meth:`RunSpec.rank_memory_bytes`, ``microbatches``
    per step: the most of the run's schedules)."""
    per_rank = settings.rank_memory_bytes(microbatches)
    available = host.available_memory_bytes()
    if available is None or devices * per_rank <= available:
        return
    size = settings.model
    raise RunError(
        f"the run needs about {gb(devices * per_rank)} of memory ({devices} ranks x {gb(per_rank)}: the parameters and "
        f"gradients{' of the model and its reference copy' if settings.check else ''}, and the activations of "
        f"{microbatches} microbatches of {size.microbatch_size} x {size.sequence} tokens, layers {size.layers}, hidden "
        f"{size.hidden}, vocab {size.vocab}, {settings.dtype}), more than the {gb(available)} this machine has available")


def check_run(schedules: Sequence[Schedule], settings: RunSpec) -> RunSpec:
    """Everything that can refuse a run of ``schedules`` with ``settings`` before any process
    starts: one rank count, schedules the runtime can execute, a block per stage, the settings'
    values and this machine's memory (:func:`check_memory`). Returns the settings for that rank
    count (no jobs yet)."""
    devices = {s.devices for s in schedules}
    if len(devices) != 1:
        raise RunError(f"the schedules of one run must have the same number of ranks, got {sorted(devices)}")
    for schedule in schedules:
        refuse_unrunnable(schedule)
    spec = dataclasses.replace(settings, devices=devices.pop(), jobs=())
    check_sizes(spec, [s.stages for s in schedules], max(s.microbatches for s in schedules))
    return spec


def check_sizes(settings: RunSpec, stages: Sequence[int], microbatches: int) -> None:
    """The settings of a run of ``settings.devices`` ranks, schedules of ``stages`` stages and up to
    ``microbatches`` microbatches: a block per stage, the settings' values, this machine's memory."""
    settings.check_values()  # the rank count before the layers its stages need
    for count in stages:
        settings.model.check(count)
    check_memory(settings.devices, microbatches, settings)


def run_schedules(schedules: Sequence[Schedule], settings: RunSpec) -> tuple[list[JobResult], dict | None]:
    """Run ``schedules`` (same device count) with ``settings`` (its ``jobs`` and ``devices`` are
    ignored); the results per schedule, and the message timing of ranks 0 and 1 (when
    ``settings.p2p_repeats``)."""
    from ppopt.run.launcher import launch

    spec = check_run(schedules, settings)
    require_torch()
    with tempfile.TemporaryDirectory(prefix="ppopt-csv-") as tmp:
        jobs = []
        for i, schedule in enumerate(schedules):
            path = Path(tmp) / f"{i}.csv"
            write_torch_csv(schedule, path)
            jobs.append(Job(schedule.name, str(path), schedule.stages, schedule.microbatches))
        spec = dataclasses.replace(spec, jobs=tuple(jobs))
        ranks = launch(spec)
    return [_summary(spec, i, ranks) for i in range(len(spec.jobs))], ranks[0].get("p2p")


def _summary(spec: RunSpec, index: int, ranks: list[dict]) -> JobResult:
    job = spec.jobs[index]
    per_rank = [r["jobs"][index] for r in ranks]
    step_s = tuple(max(steps) for steps in zip(*(r["step_s"] for r in per_rank), strict=True))
    op_s = {(op["stage"], op["kind"]): op["median_s"] for r in per_rank for op in r["ops"]}
    checks = [r["check"] for r in per_rank if "check" in r]
    check = None
    if checks:
        check = {
            "ok": all(c["ok"] for c in checks),
            "elements": sum(c["elements"] for c in checks),
            "max_abs_error": max(c["max_abs_error"] for c in checks),
            "max_rel_error": max(c["max_rel_error"] for c in checks),
            "rtol": checks[0]["rtol"], "atol": checks[0]["atol"],
            "mismatches": [m for c in checks for m in c["mismatches"]],
        }
        check.update({k: v for c in checks for k, v in c.items() if k in ("loss", "reference_loss", "loss_error")})
    return JobResult(job.name, spec.devices, job.stages, job.microbatches, step_s, op_s, check)
