"""A solver instance: per-stage costs, the system's links and the memory limit, as plain numbers.

Two kinds:

- **unit mode** (the idealized table world with communication added): durations from
  :class:`ppopt.units.UnitCosts` (a 1/p share of the model costs F = ``forward`` slots forward,
  B = ``backward`` slots backward, W = ``weight`` of it when backward is split, and a point-to-point
  message costs ``comm`` slots). A space with S stages cuts the model into S chunks, so each chunk op
  costs ``p/S`` of those numbers and stores ``p/S`` of an activation: schedules with different chunk
  counts stay comparable. Memory is counted in live activations of a 1/p share of the model; a limit
  of K allows K such activations per device. K may be fractional (2.5 admits five half-share chunk
  activations of a schedule with 2 chunks per device), since chunk activations are fractions.
- **modelled**: the cost model of a model on a system (seconds, bytes); the memory limit is bytes per
  device, persistent state (weights, gradients, optimizer) included.

In both, times are seconds-or-slots floats; the model builder converts them to integer ticks.
:class:`InstanceSpec` holds what a request fixes (mode, costs, memory limit); its :meth:`InstanceSpec.instance`
builds the instance of a space with a given number of stages.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ppopt.config import LinkConfig, ModelConfig, SystemConfig, short_repr
from ppopt.costs import Costs, check_global_batch, link_between, microbatch_size, partition_layers, transfer_time_s, unit_costs
from ppopt.errors import ConfigError, is_positive_number
from ppopt.job import NEEDS_A_MODEL, Parallelism, job_costs, job_work, pipeline_system, with_working_sets
from ppopt.placement import stages_by_device
from ppopt.units import UnitCosts

FIT_TOLERANCE = 1e-12
"""Relative slack of the memory fit (:meth:`Instance.fits`): float sums of byte counts land a
hair either side of a limit set exactly at them."""


@dataclass(frozen=True)
class Instance:
    """What the solver and the simulator need to time and size a schedule.

    Attributes:
        devices, microbatches: p and m.
        costs: per-stage durations and bytes (``len(costs)`` stages).
        system: links and memory of the devices (a synthetic one in unit mode).
        memory_limit: per device, in ``memory_unit`` (None: unlimited). A limit of at least
            :attr:`most_held` limits nothing and becomes None, kept in ``unbinding_limit``: the
            solvers then build no memory constraint, whose capacity (in CP-SAT's 64-bit integers)
            a limit such as 1e19 would overflow.
        time_unit: ``"slots"`` (unit mode) or ``"s"``.
        memory_unit: ``"activations"`` (unit mode) or ``"bytes"``.
        unbinding_limit: the limit given when it limits nothing (set on construction), else None.
    """

    devices: int
    microbatches: int
    costs: Costs
    system: SystemConfig
    memory_limit: float | None = None
    time_unit: str = "s"
    memory_unit: str = "bytes"
    unbinding_limit: float | None = None

    def __post_init__(self) -> None:
        if self.memory_limit is not None and self.memory_limit >= self.most_held:
            object.__setattr__(self, "unbinding_limit", self.memory_limit)
            object.__setattr__(self, "memory_limit", None)

    @property
    def stages(self) -> int:
        return len(self.costs)

    def memory_counts(self, relaxed: bool = False) -> tuple[list[float], list[float]]:
        """Each stage's activation size and persistent state, in ``memory_unit``: in bytes rounded to
        whole bytes (the distributed optimizer's state over d = 200 replicas is fractional, and the
        common denominator of several such counts overflowed CP-SAT's 64-bit integers), up, as a
        device holds them, for the hints that must fit, or down with ``relaxed``, for the solver's
        model, which must never count more than the simulator (it then admits every schedule that
        fits, so its bounds hold; what it finds is simulated and checked); persistent state is 0 in
        unit mode (it counts activations only)."""
        stages = self.costs.stages
        if self.memory_unit != "bytes":
            return [c.activation_bytes for c in stages], [0.0] * len(stages)
        whole = math.floor if relaxed else math.ceil
        return [float(whole(c.activation_bytes)) for c in stages], [float(whole(c.persistent_bytes)) for c in stages]

    def input_grad_releases(self, relaxed: bool = False) -> list[float]:
        """Each stage's part of :meth:`memory_counts`' activation size (the same ``relaxed``) that a
        split backward frees at the end of I (:attr:`ppopt.costs.StageCost.input_grad_release_bytes`),
        in whole bytes rounded so that neither part is ever under the simulator's (hints), or over
        it (``relaxed``): down, so that W frees the rest of the rounded-up size, or up (at most the
        rounded-down size)."""
        stages = self.costs.stages
        if self.memory_unit != "bytes":
            return [c.input_grad_release_bytes for c in stages]
        if relaxed:
            return [float(min(math.ceil(c.input_grad_release_bytes), math.floor(c.activation_bytes))) for c in stages]
        return [float(math.floor(c.input_grad_release_bytes)) for c in stages]

    def fits(self, peak: float) -> bool:
        """Whether a device's peak (``memory_unit``) is within the memory limit, with its relative
        slack :data:`FIT_TOLERANCE`: the one fit rule of the solver, its hints and its reports."""
        return self.memory_limit is None or peak <= self.memory_limit * (1 + FIT_TOLERANCE)

    def room(self, held: Sequence[int]) -> float:
        """What the activations may take on a device holding stages ``held`` (``memory_unit``): the
        limit with its slack (:meth:`fits`) less their persistent state as the simulator counts it
        (not rounded: a distributed optimizer's state is fractional in bytes); inf without a limit."""
        if self.memory_limit is None:
            return math.inf
        state = self.persistent_state()
        return self.memory_limit * (1 + FIT_TOLERANCE) - sum(state[s] for s in held)

    def persistent_state(self) -> list[float]:
        """Each stage's persistent state as the simulator counts it (``memory_unit``; 0 in unit mode,
        fractional bytes with a distributed optimizer); :meth:`memory_counts` rounds it up."""
        if self.memory_unit != "bytes":
            return [0.0] * self.stages
        return [c.persistent_bytes for c in self.costs.stages]

    @property
    def most_held(self) -> float:
        """The most memory one device can ever hold, in ``memory_unit``: every stage's persistent
        state (bytes mode) and every stage's activation of every microbatch at once."""
        sizes, persistent = self.memory_counts()
        return sum(persistent) + self.microbatches * sum(sizes)

    def most_held_on(self, placement: Sequence[Sequence[int]] | None) -> float:
        """:attr:`most_held` on the device of ``placement`` (per stage, its devices) that can hold the
        most: its stages' persistent state and their activations of every microbatch (a linear
        placement's device holds one stage's, m activations, not every stage's); every stage's
        when the placement is free (None)."""
        if placement is None:
            return self.most_held
        sizes, persistent = self.memory_counts()
        return max(sum(persistent[s] + self.microbatches * sizes[s] for s in held)
                   for held in stages_by_device(placement, self.devices))

    def comm(self, stage: int, device_a: int, device_b: int) -> float:
        """Delay of the message leaving ``stage`` between two devices, in ``time_unit`` (seconds, or
        slots in unit mode; 0 on the same device)."""
        if device_a == device_b:
            return 0.0
        return transfer_time_s(self.costs[stage].send_bytes, link_between(self.system, device_a, device_b))

    def link_pairs(self) -> list[tuple[int, int]]:
        """One pair of distinct devices per kind of link between the devices: two on one node, and
        two on different nodes (:func:`ppopt.costs.link_between`), where the system has them. Every
        pair's delays (:meth:`comm`) are those of one of these."""
        p, per_node = self.devices, self.system.devices_per_node
        pairs = [(0, 1)] if p > 1 and per_node > 1 else []
        return pairs + ([(0, per_node)] if p > per_node else [])

    def memory_semantics(self) -> str:
        """One sentence on what the memory limit counts, reported with every gap."""
        if self.memory_limit is None and self.unbinding_limit is not None:
            unit = "live activations" if self.memory_unit == "activations" else "bytes"
            return (f"no memory limit: the limit of {self.unbinding_limit:.4g} {unit} per device is at least the most a "
                    f"device can hold here ({self.most_held:.4g} {unit})")
        if self.memory_limit is None:
            return "no memory limit"
        if self.memory_unit == "activations":
            return (
                f"at most {self.memory_limit:.15g} live activation{'' if self.memory_limit == 1 else 's'} (of a 1/p model share) per device; "
                "an activation lives from the start of its F to the end of its B (W when backward is split)"
            )
        early = any(c.input_grad_release_bytes > 0 for c in self.costs.stages)
        return (
            f"at most {self.memory_limit / 2**30:.4g} GiB ({self.memory_limit:.15g} bytes) per device: persistent weights, "
            "gradients and optimizer state "
            "of the stages it holds, plus activations live from the start of F to the end of B (W when split"
            + ("; the last stage's loss softmax, less the logits' gradient W keeps, only to the end of I)" if early else ")")
        )


def unit_system(comm: float) -> SystemConfig:
    """A synthetic system whose every device pair has latency ``comm`` and unlimited bandwidth."""
    link = LinkConfig(bandwidth_bytes_per_s=math.inf, latency_s=comm)
    return SystemConfig(
        name="unit",
        peak_flops=1.0,
        memory_bandwidth_bytes_per_s=1.0,
        memory_capacity_bytes=math.inf,
        devices_per_node=1,
        intra_node=link,
        inter_node=link,
    )


def unit_instance(devices: int, microbatches: int, stages: int, units: UnitCosts | None = None,
                  memory_limit: float | None = None) -> Instance:
    """Unit-mode instance (see the module docstring): ``stages`` chunks of ``units`` (default
    :class:`UnitCosts`) on ``devices`` devices."""
    units = units or UnitCosts()
    costs = unit_costs(stages, units, devices=devices, microbatches=microbatches, send_bytes=1.0 if units.comm > 0 else 0.0)
    return Instance(devices, microbatches, costs, unit_system(units.comm), memory_limit, "slots", "activations")


@dataclass(frozen=True)
class InstanceSpec:
    """What a solver request fixes about its instances: size, cost mode and memory limit.

    Exactly one mode: ``units`` (unit mode, slots and activations) or ``model`` and ``system``
    (seconds and bytes, ``global_batch`` sequences per step, None for the model's). ``memory_limit``
    is per device, in the mode's memory unit (a positive finite number, fractions allowed; see the
    module docstring), or None. ``model`` and ``system`` may be given as preset names or files:
    they are loaded here, so a bad name fails before any solving starts.
    """

    devices: int
    microbatches: int
    units: UnitCosts | None = None
    model: ModelConfig | str | os.PathLike[str] | None = None  # a preset name or file is loaded on construction
    system: SystemConfig | str | os.PathLike[str] | None = None
    global_batch: int | None = None
    memory_limit: float | None = None
    parallel: Parallelism | None = None
    """Tensor/data parallelism and recomputation (modelled mode only): the stages are costed by the
    job model, one GPU of each stage (:meth:`ppopt.job.Parallelism.job`); None or the defaults keep
    the pipeline cost model."""

    def __repr__(self) -> str:
        """Short: the model and system by name (:func:`ppopt.config.short_repr`)."""
        return short_repr(self)

    def __post_init__(self) -> None:
        from ppopt.config import load_model, load_system

        if self.model is not None:  # a name or a path (str or os.PathLike) loaded, anything else refused
            object.__setattr__(self, "model", load_model(self.model))
        if self.system is not None:
            object.__setattr__(self, "system", load_system(self.system))
        for name in ("devices", "microbatches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"must be an integer >= 1, got {value!r}", field=name)
        if self.units is not None and (self.model is not None or self.system is not None):
            raise ConfigError("give either unit mode or a model and a system, not both", field="units")
        if self.units is None and (self.model is None or self.system is None):
            raise ConfigError("give unit mode (units=ppopt.units.UnitCosts()), or both a model and a system", field="units")
        if self.units is not None and not isinstance(self.units, UnitCosts):
            raise ConfigError(f"must be a ppopt.units.UnitCosts, got {self.units!r}", field="units")
        limit = self.memory_limit
        if limit is not None and not is_positive_number(limit):
            unit = "live activations" if self.units is not None else "bytes, e.g. 60 * 2**30"
            raise ConfigError(f"must be a finite number > 0 ({unit}), got {limit!r}", field="memory_limit")
        check_global_batch(self.global_batch)
        if self.units is not None and self.parallel is not None and not self.parallel.is_default:
            raise ConfigError(NEEDS_A_MODEL, field=self.parallel.first_set)
        if isinstance(self.model, ModelConfig):  # the batch split now, before sizes and time are weighed
            if self.parallel is None or self.parallel.is_default:
                microbatch_size(self.model, self.microbatches, self.global_batch)
            else:
                self.parallel.batch_split(self.model, self.microbatches, self.global_batch)

    @property
    def unit_mode(self) -> bool:
        return self.units is not None

    def with_limit(self, memory_limit: float | None) -> InstanceSpec:
        """The same spec under another memory limit."""
        return replace(self, memory_limit=memory_limit)

    def instance(self, stages: int, stage_weights: tuple[float, ...] | None = None,
                 placement: Sequence[Sequence[int]] | None = None) -> Instance:
        """The instance of a space with ``stages`` stages (layer shares ``stage_weights`` when modelled)
        in ``placement`` (each stage's devices; None: the solver chooses it). A job beyond a pure
        pipeline holds each device's transient working set with its persistent state
        (:func:`ppopt.job.with_working_sets`): once per device when the placement is known, else
        once per stage (never less than the job's peak)."""
        if self.units is not None:
            return unit_instance(self.devices, self.microbatches, stages, self.units, self.memory_limit)
        assert isinstance(self.model, ModelConfig) and isinstance(self.system, SystemConfig)
        layers = partition_layers(self.model.num_layers, stages, stage_weights)
        parallel = self.parallel or Parallelism()
        pipeline = parallel.pipeline_costs(self.model, self.system, layers, self.microbatches, self.global_batch)
        if pipeline is not None:
            return Instance(self.devices, self.microbatches, pipeline, self.system, self.memory_limit, "s", "bytes")
        job = parallel.job(self.model, self.system, layers, self.microbatches, self.global_batch)
        work = job_work(job)
        held = None if placement is None else stages_by_device(placement, self.devices)
        return Instance(self.devices, self.microbatches, with_working_sets(job_costs(job, work), work, held), pipeline_system(job),
                        self.memory_limit, "s", "bytes")
