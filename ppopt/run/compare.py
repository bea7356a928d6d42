"""Measured step time next to ppopt's prediction from measured op costs (pure).

The prediction is :func:`ppopt.simulate.simulate` of the same schedule with a profile's per-stage
durations and link (:mod:`ppopt.run.profile`, or a cost preset file); the relative error is
``(predicted - measured) / measured``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppopt.config import LinkConfig
from ppopt.costs import Costs
from ppopt.errors import ConfigError, counted
from ppopt.ir import Schedule
from ppopt.run.execute import JobResult
from ppopt.simulate import simulate


@dataclass(frozen=True)
class Comparison:
    """A measured run beside ppopt's prediction and its replay of the measured op times (seconds)."""
    name: str
    measured_s: float
    predicted_s: float
    """From the profile's (or the preset's) op durations."""
    replayed_s: float
    """From this run's own op medians (and the same link): what is left of the error once the op
    durations are exact, i.e. what the runtime adds beyond the ops and messages ppopt models."""

    @property
    def relative_error(self) -> float:
        """(predicted - measured) / measured, a fraction."""
        return (self.predicted_s - self.measured_s) / self.measured_s

    @property
    def replay_error(self) -> float:
        """(replayed - measured) / measured, a fraction."""
        return (self.replayed_s - self.measured_s) / self.measured_s


def check_stages(schedule: Schedule, costs: Costs) -> None:
    """ConfigError (field ``costs``) unless the cost preset has the schedule's stage count."""
    if costs.num_stages != schedule.stages:
        raise ConfigError(f"the cost preset describes {counted(costs.num_stages, 'stage')}, {schedule.name} has {schedule.stages}", field="costs")


def predict(schedule: Schedule, costs: Costs, link: LinkConfig | None) -> float:
    """Simulated step time of ``schedule`` with measured ``costs`` (seconds)."""
    check_stages(schedule, costs)
    return simulate(schedule, costs, link=link).step_time_s


def compare(schedule: Schedule, result: JobResult, costs: Costs, link: LinkConfig | None, own: Costs) -> Comparison:
    """``costs``: the profile's; ``own``: this run's op medians (:func:`ppopt.run.profile.costs_from_ops`)."""
    return Comparison(schedule.name, result.median_step_s, predict(schedule, costs, link), predict(schedule, own, link))
