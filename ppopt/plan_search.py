"""Search the schedules of a planned job with CP-SAT, on the job's own per-stage durations.

:func:`search_job` runs :func:`ppopt.solve.search.search` for one :class:`ppopt.job.Job`: the
instance is built from :func:`ppopt.job.job_costs` (the job's real forward, backward and weight-
gradient times per stage, tensor parallelism and recomputation included) on the system the
pipeline sees (:func:`ppopt.job.pipeline_system`), not from the plain model costs of
:meth:`ppopt.solve.instance.InstanceSpec.instance`. The memory limit is the plan's per-GPU limit;
each stage's transient working set (recomputed block, logits) is added to its persistent bytes,
so the solver's peak is the job's peak (:func:`ppopt.plan.memory_of`).

Several or replicated stages per device: the instance has the job's S schedule stages (v·p for
interleaved-1F1B and looped-BFS, 2p for ZB-V and V-min, 2W·p for Hanayo, Chimera's p stages each
on two devices) in the placement of the family's space (``looped``, ``v``, ``zigzag``,
``bidirectional``: :mod:`ppopt.solve.space`), which is the job's own (:meth:`ppopt.job.Job.device_of`).
The solver adds up the persistent bytes of the stages a device holds; the job's transient working
set is the largest of its stages', not their sum, so it is added once per device, to the first
stage the device holds (:func:`job_spec`).

Spaces: the job's family space (:func:`ppopt.solve.space.family_space`: 1F1B and GPipe are points
of ``placement=linear``, ZB-H1 and ZB-H2 of ``placement=linear,backward=split``, interleaved-1F1B
and looped-BFS of ``placement=looped,chunks=v``, ZB-V and V-min of ``placement=v,backward=split``,
Hanayo of ``placement=zigzag,waves=W``, Chimera of ``placement=bidirectional,directions=free``)
and, when the family keeps the backward whole, the same placement with the backward split into
input and weight gradients (``backward=split``: it holds the family space, so its bound is at
least as low). Spaces with another stage count (another placement) would change the job's layer
split, so they are not searched here. The reported step adds
the job's gradient all-reduce and optimizer step (unchanged by the pipeline schedule) to the
searched pipeline, so it compares with the plan's step; the gap is the pipeline's,
``(best - bound) / bound`` of the searched part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ppopt.config import SystemConfig
from ppopt.costs import Costs
from ppopt.errors import InfeasibleError, PpoptError, ScheduleError
from ppopt.ir import Schedule
from ppopt.job import Job, job_costs, job_work, pipeline_system, with_working_sets
from ppopt.placement import stages_by_device
from ppopt.plan import PlanRow
from ppopt.solve.instance import Instance, InstanceSpec
from ppopt.solve.options import SolveOptions
from ppopt.solve.space import family_space

__all__ = ["JobInstanceSpec", "JobSearch", "first_after_search", "job_spec", "order_after_search", "ranking_changes", "search_job", "searched_steps"]


@dataclass(frozen=True)
class JobInstanceSpec(InstanceSpec):
    """An :class:`InstanceSpec` whose instance is a job's own costs (its S schedule stages)."""

    costs: Costs | None = None
    pipeline: SystemConfig | None = None

    def instance(self, stages: int, stage_weights: tuple[float, ...] | None = None,
                 placement: Sequence[Sequence[int]] | None = None) -> Instance:
        """The job's costs, whose working sets are held for the placement of its family space
        (:func:`job_spec`), the placement of every space searched for it."""
        assert self.costs is not None and self.pipeline is not None
        if stages != len(self.costs):
            raise ScheduleError(f"the job's pipeline has {len(self.costs)} stages; the space asks for {stages}")
        return Instance(self.devices, self.microbatches, self.costs, self.pipeline, self.memory_limit, "s", "bytes")


def job_spec(job: Job, memory_limit: float | None) -> JobInstanceSpec:
    """The solver spec of ``job`` under ``memory_limit`` bytes per GPU (see module doc)."""
    work = job_work(job)
    held = stages_by_device(job.stage_devices, job.pp)  # per device, the stages of the family space's placement
    system = pipeline_system(job)
    return JobInstanceSpec(devices=job.pp, microbatches=job.microbatches, model=job.model, system=system,
                           global_batch=job.global_batch, memory_limit=memory_limit,
                           costs=with_working_sets(job_costs(job, work), work, held), pipeline=system)


@dataclass(frozen=True)
class JobSearch:
    """The best schedule found for one job. Seconds; ``*_step_s`` are whole steps (pipeline +
    gradient all-reduce + optimizer), ``gap`` is the pipeline's. ``best_step_s`` is never above
    ``handcrafted_step_s`` (the handcrafted schedule is a point of the space); ``schedule`` is None
    when the handcrafted one is the best known."""

    job: Job
    space: str
    handcrafted_step_s: float
    best_step_s: float | None
    bound_step_s: float
    gap: float | None
    status: str
    schedule: Schedule | None
    note: str = ""


def search_job(row: PlanRow, memory_limit: float | None, options: SolveOptions) -> list[JobSearch]:
    """Search the planned job's family space and, when wider, the split-backward space (module doc), each
    with an equal share of ``options``' remaining time. A space the budget does not reach, or whose
    search fails, is reported with its status and no bound."""
    from ppopt.solve.search import (  # CP-SAT's imports (0.4 s) only for a search: a plan ranks without them
        relative_gap,
        search,
        with_known_step,
    )

    job, handcrafted_step_s = row.job, row.step_time_s
    spec = job_spec(job, memory_limit)
    fixed = row.step_time_s - row.pipeline_s
    family = family_space(job.schedule, job.schedule_options)
    spaces = [family] + ([replace(family, backward="split")] if not family.split_backward else [])
    out = []
    for k, space in enumerate(spaces):
        if options.expired:
            out.append(JobSearch(job, space.describe(), handcrafted_step_s, None, 0.0, None, "skipped (time limit)", None))
            continue
        options.note(f"{job.describe()} {job.schedule_label}, {space.describe()}: the times below are the pipeline's "
                     f"(the step adds {fixed:.6g} s of gradient all-reduce and optimizer)")
        try:
            result = search(spec, space, options.share(len(spaces) - k))
        except (InfeasibleError, ScheduleError) as error:
            out.append(JobSearch(job, space.describe(), handcrafted_step_s, None, 0.0, None, "skipped", None, str(error)))
            continue
        except PpoptError as error:  # pragma: no cover - a size the solver refuses
            out.append(JobSearch(job, space.describe(), handcrafted_step_s, None, 0.0, None, "skipped", None, str(error)))
            continue
        # the handcrafted schedule is a point of both spaces: the best known is never slower than it
        # (a search short of time, no handcrafted hint tried, found nothing or only a slower one)
        best, bound, status = with_known_step(result, row.pipeline_s)
        searched = result.step_time is not None and result.step_time <= row.pipeline_s
        out.append(JobSearch(job, result.space, handcrafted_step_s, None if best is None else best + fixed, bound + fixed,
                             relative_gap(best, bound), status, result.schedule if searched else None, result.note or ""))
    return out



def searched_steps(steps: list[float], searches: list[list[JobSearch]]) -> tuple[list[float], list[JobSearch | None]]:
    """Each job's step (``steps``, fastest first) once the first ``len(searches)`` jobs take their
    best searched schedule where it is faster, and that search (None: the handcrafted schedule stays)."""
    new = list(steps)
    chosen: list[JobSearch | None] = [None] * len(steps)
    for k, found in enumerate(searches):
        for tried in found:
            if tried.best_step_s is not None and tried.best_step_s < new[k] * (1 - 1e-9):  # faster, not float noise
                new[k], chosen[k] = tried.best_step_s, tried
    return new, chosen


def order_after_search(steps: list[float], searches: list[list[JobSearch]]) -> tuple[list[int], list[JobSearch | None]]:
    """The jobs' indices, fastest first, once the searched schedules count (ties keep the old order),
    and each job's search whose schedule it runs (None: its handcrafted one), as :func:`searched_steps`."""
    new, chosen = searched_steps(steps, searches)
    return sorted(range(len(new)), key=lambda k: (new[k], k)), chosen


def ranking_changes(steps: list[float], searches: list[list[JobSearch]]) -> list[tuple[int, int]]:
    """(old rank, new rank), 1-based, of the jobs whose rank changes when the first
    ``len(searches)`` jobs (of ``steps``, fastest first) take their best searched step."""
    order, _ = order_after_search(steps, searches)
    return [(old + 1, rank + 1) for rank, old in enumerate(order) if old != rank]


def first_after_search(steps: list[float], searches: list[list[JobSearch]]) -> tuple[int, JobSearch | None]:
    """The index of the fastest job once the searched schedules count (the new #1 of
    :func:`ranking_changes`), and the search whose schedule it runs (None: its handcrafted one)."""
    order, chosen = order_after_search(steps, searches)
    return order[0], chosen[order[0]]
