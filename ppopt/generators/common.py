"""Helpers shared by the generators: checks (each raises ScheduleError naming the rule that fails) and the
repetition of a building block."""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral

from ppopt.errors import ScheduleError
from ppopt.ir import Kind, Op
from ppopt.placement import Placement


def require_positive(devices: int, microbatches: int) -> None:
    """p and m as every generator takes them, checked as the schedule options (chunks, waves) are and
    as the solver's instances word it: an integer >= 1 (not True, not 4.0, which built a schedule
    or failed with a TypeError)."""
    for field, value in (("devices", devices), ("microbatches", microbatches)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:  # numpy's too
            raise ScheduleError(f"must be an integer >= 1, got {value!r}", field=field)


def require_even_devices(name: str, devices: int) -> None:
    """ScheduleError (field ``devices``) unless ``devices`` is even, as family ``name`` needs."""
    if devices % 2:
        raise ScheduleError(f"{name} needs an even number of devices, got {devices}", field="devices")


def require_multiple(name: str, microbatches: int, of: int, what: str) -> None:
    """ScheduleError (field ``microbatches``) unless ``microbatches`` is a multiple of ``of`` (``what``
    says what it counts)."""
    if microbatches % of:
        lower, upper = microbatches - microbatches % of, microbatches - microbatches % of + of
        nearest = f"{lower} or {upper}" if lower else f"{upper}"
        raise ScheduleError(f"{name} needs microbatches to be a multiple of {what} ({of}), got {microbatches}: {nearest} would do",
                            field="microbatches")


def repeat_block(offsets: Mapping[tuple[int, Kind], int], placement: Placement, microbatches: int,
                 interval: int) -> list[dict[int, Op]]:
    """Per device, the ops of a building block (``(stage, kind) -> slot``) repeated every ``interval``
    slots for each microbatch, keyed by slot (Qi et al., "Pipeline Parallelism with Controllable
    Memory", NeurIPS 2024, §3: a block whose ops have distinct slots mod ``interval`` on each device
    repeats without collision)."""
    timed: list[dict[int, Op]] = [{} for _ in range(max(d for holders in placement for d in holders) + 1)]
    for j in range(microbatches):
        for (stage, kind), slot in offsets.items():
            timed[placement[stage][0]][interval * j + slot] = Op(stage, kind, j)
    return timed
