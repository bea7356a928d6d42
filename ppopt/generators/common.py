"""Checks shared by the generators; each raises ScheduleError naming the rule that fails."""

from __future__ import annotations

from ppopt.errors import ScheduleError


def require_positive(devices: int, microbatches: int) -> None:
    if devices < 1:
        raise ScheduleError(f"devices must be >= 1, got {devices}")
    if microbatches < 1:
        raise ScheduleError(f"microbatches must be >= 1, got {microbatches}")


def require_even_devices(name: str, devices: int) -> None:
    if devices % 2:
        raise ScheduleError(f"{name} needs an even number of devices, got {devices}")


def require_multiple(name: str, microbatches: int, of: int, what: str) -> None:
    if microbatches % of:
        raise ScheduleError(f"{name} needs microbatches to be a multiple of {what} ({of}), got {microbatches}")
