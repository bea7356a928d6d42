"""ppopt: pipeline-parallel schedules as tables, evaluated in three layers and searched with CP-SAT."""

import time

IMPORTED_AT = time.monotonic()
"""When this package was first imported (``time.monotonic()`` seconds): the start of a command's
budget, so that ``--time-limit`` covers the imports too (:func:`ppopt.cli.startup_s`)."""

from typing import TYPE_CHECKING, Any  # noqa: E402  (after IMPORTED_AT, which must come first)

if TYPE_CHECKING:
    from ppopt.generators import generate
    from ppopt.ir import Kind, Op, Schedule
    from ppopt.validation import ScheduleValidationError, validate

__all__ = ["Kind", "Op", "Schedule", "ScheduleValidationError", "generate", "validate"]
__version__ = "0.1.0"

_HOMES = {"Kind": "ppopt.ir", "Op": "ppopt.ir", "Schedule": "ppopt.ir", "generate": "ppopt.generators",
          "validate": "ppopt.validation", "ScheduleValidationError": "ppopt.validation"}
"""The module of each name above. They are imported on first use, so that ``import ppopt`` (which
every ``ppopt.x`` import runs first) is quick: the command line's entry point and the run's fork
server need the package before they can install their Ctrl-C handling (:mod:`ppopt.entry`)."""


def __dir__() -> list[str]:
    """The module's names with ``__all__``'s, which are imported on first use (for ``dir``, ``help``
    and completion in a notebook)."""
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    """``ppopt.generate`` and the rest of ``__all__``, imported from their modules when first used."""
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'ppopt' has no attribute {name!r}")
