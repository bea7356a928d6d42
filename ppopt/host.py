"""The machine ppopt runs on: the memory it can give a command, checked before large work starts."""

from __future__ import annotations

import math
import os

from ppopt.errors import ConfigError, MemoryShortError

CHECKED_FROM_BYTES = 5e8
"""Requests that need less memory than this (bytes) are not checked against the machine's: every
machine ppopt runs on has it, and reading ``/proc/meminfo`` for each small schedule would be waste."""


def available_memory_bytes() -> int | None:
    """Memory this machine can give new work, bytes: ``MemAvailable`` of ``/proc/meminfo``
    (Linux), else the physical memory (``os.sysconf``), else None (unknown: not checked)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def gb(count: float) -> str:
    """Bytes in GB (10^9 bytes) for a message: 3 significant digits, in full below a million GB."""
    value = count / 1e9
    if not 1e-2 <= value < 1e6:
        return f"{value:.3g} GB"
    rounded = float(f"{value:.3g}")
    return f"{rounded:,.{max(0, 2 - math.floor(math.log10(rounded)))}f} GB"


def require_memory(needed_bytes: float, what: str, field: str | None = None) -> None:
    """Raise :class:`MemoryShortError` (naming ``field``) when ``what`` needs more than the memory this
    machine has available (:func:`available_memory_bytes`): refused in one line before the work,
    rather than swapping or killed by the out-of-memory killer minutes later. Needs under
    :data:`CHECKED_FROM_BYTES`, or a machine whose memory is unknown, pass."""
    if needed_bytes < CHECKED_FROM_BYTES:
        return
    available = available_memory_bytes()
    if available is not None and needed_bytes > available:
        raise MemoryShortError(f"not enough memory: {what}: about {gb(needed_bytes)} needed, more than the {gb(available)} "
                            "this machine has available", field=field)


LOCAL_CAP = "4 per CPU, 16 always allowed"
""":func:`max_local_jobs` in words, for the errors and the options' help."""


def max_local_jobs() -> int:
    """The most processes (or local Ray CPUs) ``--jobs`` may ask of this machine: 4 per CPU, at
    least 16. More only oversubscribes the CPUs, and a typo like ``-j 1000000`` would otherwise
    start a process per work item."""
    return max(16, 4 * (os.cpu_count() or 1))


def check_local_parallelism(count: int, field: str) -> None:
    """Refuse ``count`` parallel processes or threads (``field``: the option's name) beyond
    :func:`max_local_jobs`: more only oversubscribes the CPUs, and the time limit then overruns."""
    if count > max_local_jobs():
        raise ConfigError(f"{count} is more than this machine runs usefully: at most {max_local_jobs()} "
                          f"({LOCAL_CAP}; {os.cpu_count() or 1} CPUs here)", field=field)
