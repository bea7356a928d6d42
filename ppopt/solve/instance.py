"""A solver instance: per-stage costs, the system's links and the memory limit, as plain numbers.

Two kinds:

- **unit mode** (the idealized table world with communication added): a 1/p share of the model
  costs ``forward`` slots forward, ``backward`` slots backward (``weight`` of which is W when backward
  is split), and a point-to-point message costs ``comm`` slots. A space with S stages cuts the model
  into S chunks, so each chunk op costs ``p/S`` of those numbers and stores ``p/S`` of an activation:
  schedules with different chunk counts stay comparable. Memory is counted in live activations of a
  1/p share of the model; a limit of K allows K such activations per device.
- **modelled**: the cost model of a model on a system (seconds, bytes); the memory limit is bytes per
  device, persistent state (weights, gradients, optimizer) included.

In both, times are seconds-or-slots floats; the model builder converts them to integer ticks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ppopt.config import LinkConfig, ModelConfig, SystemConfig
from ppopt.costs import Costs, link_between, partition_layers, stage_costs, transfer_time_s, unit_costs
from ppopt.errors import ConfigError


@dataclass(frozen=True)
class Instance:
    """What the solver and the simulator need to time and size a schedule.

    Attributes:
        devices, microbatches: p and m.
        costs: per-stage durations and bytes (``len(costs)`` stages).
        system: links and memory of the devices (a synthetic one in unit mode).
        memory_limit: per device, in ``memory_unit`` (None: unlimited).
        time_unit: ``"slots"`` (unit mode) or ``"s"``.
        memory_unit: ``"activations"`` (unit mode) or ``"bytes"``.
    """

    devices: int
    microbatches: int
    costs: Costs
    system: SystemConfig
    memory_limit: float | None = None
    time_unit: str = "s"
    memory_unit: str = "bytes"

    @property
    def stages(self) -> int:
        return len(self.costs)

    def comm(self, stage: int, device_a: int, device_b: int) -> float:
        """Delay of the message leaving ``stage`` between two devices (0 on the same device)."""
        if device_a == device_b:
            return 0.0
        return transfer_time_s(self.costs[stage].send_bytes, link_between(self.system, device_a, device_b))

    def memory_semantics(self) -> str:
        """One sentence on what the memory limit counts, reported with every gap."""
        if self.memory_limit is None:
            return "no memory limit"
        if self.memory_unit == "activations":
            return (
                f"at most {self.memory_limit:g} live activations (of a 1/p model share) per device; "
                "an activation lives from the start of its F to the end of its B (W when backward is split)"
            )
        return (
            f"at most {self.memory_limit:.4g} bytes per device: persistent weights, gradients and optimizer state "
            "of the stages it holds, plus activations live from the start of F to the end of B (W when split)"
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


def unit_instance(
    devices: int,
    microbatches: int,
    stages: int,
    forward: float = 1.0,
    backward: float = 2.0,
    weight: float | None = None,
    comm: float = 0.0,
    memory_limit: float | None = None,
) -> Instance:
    """Unit-mode instance (see the module docstring); ``weight`` defaults to backward / 2."""
    for name, value in (("--forward", forward), ("--backward", backward), ("--comm", comm)):
        if not (value >= 0 and math.isfinite(value)):
            raise ConfigError(f"{name} must be a finite number >= 0, got {value}")
    if weight is not None and not 0 <= weight <= backward:
        raise ConfigError(f"--weight must lie between 0 and --backward ({backward:g}), got {weight:g}")
    if memory_limit is not None and memory_limit <= 0:
        raise ConfigError(f"--memory-limit must be positive, got {memory_limit:g}")
    share = devices / stages
    w = backward / 2 if weight is None else weight
    costs = unit_costs(
        stages,
        forward * share,
        backward * share,
        w * share,
        microbatches=microbatches,
        activation_bytes=share,
        send_bytes=1.0 if comm > 0 else 0.0,
    )
    return Instance(devices, microbatches, costs, unit_system(comm), memory_limit, "slots", "activations")


def modelled_instance(
    model: ModelConfig,
    system: SystemConfig,
    devices: int,
    microbatches: int,
    stages: int,
    stage_weights: tuple[float, ...] | None = None,
    global_batch: int | None = None,
    memory_limit_bytes: float | None = None,
) -> Instance:
    """Instance from the cost model: ``model`` cut into ``stages`` stages on ``system``."""
    if memory_limit_bytes is not None and memory_limit_bytes <= 0:
        raise ConfigError(f"--memory-limit must be positive, got {memory_limit_bytes:g}")
    layers = partition_layers(model.num_layers, stages, stage_weights)
    costs = stage_costs(model, system, layers, microbatches, global_batch)
    return Instance(devices, microbatches, costs, system, memory_limit_bytes, "s", "bytes")


def instance_factory(
    devices: int,
    microbatches: int,
    *,
    unit: bool,
    forward: float = 1.0,
    backward: float = 2.0,
    weight: float | None = None,
    comm: float = 0.0,
    model: str | ModelConfig | None = None,
    system: str | SystemConfig | None = None,
    global_batch: int | None = None,
    memory_limit: float | None = None,
):
    """A function ``(stages, stage_weights) -> Instance`` for unit mode or for a model on a system.

    Presets are loaded once, here, so a bad name fails before any solving starts.
    """
    from ppopt.config import load_model, load_system

    if unit:
        if model is not None or system is not None:
            raise ConfigError("give either --unit or --model and --system, not both")
        unit_instance(devices, microbatches, devices, forward, backward, weight, comm, memory_limit)  # checks the numbers
        return lambda stages, weights: unit_instance(devices, microbatches, stages, forward, backward, weight, comm, memory_limit)
    if model is None or system is None:
        raise ConfigError("give --unit, or both --model and --system")
    model_config, system_config = load_model(model), load_system(system)
    return lambda stages, weights: modelled_instance(
        model_config, system_config, devices, microbatches, stages, weights, global_batch, memory_limit
    )
