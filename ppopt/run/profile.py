"""Measured op costs of the tiny GPT on this machine, as ppopt :class:`~ppopt.costs.Costs`.

:func:`profile` runs two schedules over the same stages in PyTorch's runtime
(:func:`ppopt.run.execute.run_schedules`, one process start): one with a full backward B (1f1b,
or interleaved-1f1b for two stages per rank) and one with a split backward I + W (zb-h1, or zb-v),
and times a message between ranks 0 and 1. Per stage: F is the mean of the two runs' medians, B
from the first, I and W from the second. The link is a Hockney fit ``t = bytes / bandwidth +
latency`` (Hockney 1994, "The communication challenge for MPP: Intel Paragon and Meiko CS-2",
Parallel Computing 20(3)) through two one-way times: a one-element message gives the latency, one
microbatch's activations the bandwidth.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ppopt.config import FILE_MINIMA, LinkConfig
from ppopt.costs import Costs, StageCost, partition_layers, transfer_time_s
from ppopt.errors import ConfigError
from ppopt.generators import generate
from ppopt.ir import Schedule
from ppopt.run.execute import JobResult, check_memory, run_schedules
from ppopt.run.spec import ELEMENT_BYTES, MAX_DEVICES, RunSpec

_PAIRS: dict[int, tuple[tuple[str, dict[str, int]], ...]] = {1: (("1f1b", {}), ("zb-h1", {})), 2: (("interleaved-1f1b", {"chunks": 2}), ("zb-v", {}))}
NO_SIZE_COST = 1e15
"""Bandwidth (bytes/s) of the fitted link when the larger message was not slower than the small one,
or slower by more than a file's least bandwidth (:data:`ppopt.config.FILE_MINIMA`, 1 MB/s) allows:
on one machine that is timing noise (a fit of 0.14 MB/s was written, and every --costs reader then
refused the file)."""


@dataclass(frozen=True)
class Profile:
    """What `ppopt profile` measured: per-stage costs (seconds), the link, the runs, the p2p probe."""
    costs: Costs
    link: LinkConfig | None
    runs: tuple[JobResult, ...]
    p2p: dict | None


def check_profile(devices: int, chunks: int, settings: RunSpec, microbatches: int | None = None) -> None:
    """The sizes of a profile, before any process starts (with ``microbatches``, also its two
    schedules, :func:`_schedules`, and the ranks' memory: :func:`ppopt.run.execute.check_memory`)."""
    if chunks not in _PAIRS:
        raise ConfigError(f"must be 1 or 2 stages per rank, got {chunks}", field="chunks")
    if not 2 <= devices <= MAX_DEVICES:  # the range profile takes, in one message (1 named "1 to 64", 200 "at least 2")
        raise ConfigError(f"must be from 2 to {MAX_DEVICES} ranks (a message needs two; processes on this machine), "
                          f"got {devices}", field="devices")
    dataclasses.replace(settings, devices=devices).check_values()  # the rank count before the layers it needs
    settings.model.check(devices * chunks)
    if microbatches is not None:
        _schedules(devices, microbatches, chunks)
        check_memory(devices, microbatches, dataclasses.replace(settings, check=False))


def _schedules(devices: int, microbatches: int, chunks: int) -> list[Schedule]:
    """The two schedules a profile runs; ScheduleError (field ``microbatches``) for a count they
    cannot take: below 1, below ``devices`` (zb-h1, zb-v) or not a multiple of it (interleaved-1f1b)."""
    return [generate(name, devices, microbatches, **options) for name, options in _PAIRS[chunks]]


def profile(devices: int, microbatches: int, chunks: int, settings: RunSpec) -> Profile:
    """Measure F, B, I, W per stage and the message time with ``devices`` ranks holding ``chunks``
    stages each (1 or 2), ``microbatches`` per step."""
    check_profile(devices, chunks, settings, microbatches)
    schedules = _schedules(devices, microbatches, chunks)
    (full, split), p2p = run_schedules(schedules, dataclasses.replace(settings, check=False, p2p_repeats=max(settings.p2p_repeats, 20)))
    costs = costs_from_ops(settings, devices * chunks, microbatches, full.op_s, split.op_s)
    return Profile(costs, _link(p2p), (full, split), p2p)


def costs_from_ops(settings: RunSpec, stages: int, microbatches: int, *measured: dict[tuple[int, str], float]) -> Costs:
    """Costs per stage from measured op medians ((stage, kind) -> seconds, one dict per run): F the
    mean over the runs that have it, B the measured full backward (else I + W), I and W the measured
    split backward (else half of B each)."""
    size, element = settings.model, ELEMENT_BYTES[settings.dtype]
    message = size.microbatch_size * size.sequence * size.hidden * element
    layers = partition_layers(size.layers, stages)
    params = size.stage_parameters(stages)

    def mean(s: int, kind: str) -> float | None:
        values = [ops[s, kind] for ops in measured if (s, kind) in ops]
        return sum(values) / len(values) if values else None

    out = []
    for s in range(stages):
        forward, full, i, w = mean(s, "F"), mean(s, "B"), mean(s, "I"), mean(s, "W")
        if forward is None or (full is None and (i is None or w is None)):
            raise ConfigError(f"stage {s}: F and a backward were not measured", field="costs")
        backward = full if full is not None else i + w  # type: ignore[operator]
        out.append(StageCost(
            layers=layers[s], forward_s=forward, backward_s=backward,
            input_grad_s=i if i is not None else backward / 2, weight_grad_s=w if w is not None else backward / 2,
            activation_bytes=0.0,  # not measured: a timing profile
            persistent_bytes=2.0 * params[s] * element,  # weights and gradients (SGD keeps no state)
            param_count=float(params[s]), send_bytes=float(message), gradient_bytes=float(params[s] * element),
        ))
    return Costs(tuple(out), size.microbatch_size, microbatches)


def slot_s(costs: Costs) -> float:
    """Seconds of one slot of the unit model a profile enters as (:func:`unit_flags`): the mean
    measured forward over the stages."""
    return sum(c.forward_s for c in costs.stages) / len(costs.stages)


def unit_flags(costs: Costs, link: LinkConfig | None, devices: int | None = None) -> dict[str, float]:
    """The profile in the unit model (:class:`ppopt.units.UnitCosts`, one slot = the mean measured F),
    averaged over the stages, rounded to 2 decimals: the ``--forward --backward --weight --comm``
    flags that let unit-mode commands (``search``, ``table``) use this machine's ratios. The unit
    model has one backward, B = I + W; the split run's I + W is used, since that is what split
    schedules execute. ConfigError (field ``costs``) when every F is 0: the slot would be empty.

    A unit slot is the forward of a 1/p share of the model, so with ``devices`` p other than the
    profile's S stages a slot lasts S/p measured stage forwards: the ratios stay, and the message,
    a time of its own, becomes ``comm`` = message / (S/p · mean F) slots (at p = 2 with a 4-stage
    profile it was twice the measured message)."""
    n = len(costs.stages)
    forward = slot_s(costs)
    if forward <= 0:
        raise ConfigError("every forward_s is 0: the unit model needs a positive forward (its slot)", field="costs")
    split = sum(c.input_grad_s + c.weight_grad_s for c in costs.stages) / n
    weight = sum(c.weight_grad_s for c in costs.stages) / n
    message = 0.0 if link is None else transfer_time_s(costs.stages[0].send_bytes, link)
    slot = forward * (n / devices if devices else 1)
    return {"forward": 1.0, "backward": round(split / forward, 2), "weight": round(weight / forward, 2),
            "comm": round(message / slot, 2)}


def _link(p2p: dict | None) -> LinkConfig | None:
    if not p2p:
        return None
    small, big = p2p["small"], p2p["activation"]
    latency = small["one_way_s"]
    extra = big["one_way_s"] - latency
    bandwidth = (big["bytes"] - small["bytes"]) / extra if extra > 0 else NO_SIZE_COST
    if bandwidth < FILE_MINIMA["bandwidth_bytes_per_s"][0]:
        bandwidth = NO_SIZE_COST
    return LinkConfig(bandwidth_bytes_per_s=bandwidth, latency_s=latency)
