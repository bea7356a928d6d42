"""User-facing errors: the CLI prints str(error) on one line and exits with status 1.

A library error names the *field* it is about (``field="chunks"``), never a command-line flag: the
library does not know how it is called. The CLI maps the field to the flag the user typed
(:func:`ppopt.cli.flag_for`), so ``ScheduleError("must be >= 1, got 0", field="chunks")`` reads
``error: --chunks: must be >= 1, got 0`` on the command line and ``chunks: must be >= 1, got 0``
from Python.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable


class PpoptError(Exception):
    """Base class of every error the CLI reports as a one-line message.

    Attributes:
        reason: the message without the field.
        field: the input field the error is about (a config field, an option's parameter name), or None.
    """

    def __init__(self, reason: str, *, field: str | None = None):
        self.reason = reason
        self.field = field
        super().__init__(f"{field}: {reason}" if field else reason)


class ConfigError(PpoptError):
    """A preset or config file is malformed, incomplete, or unknown."""


class ScheduleError(PpoptError):
    """A schedule is invalid or a generator was asked for an unsupported combination."""


class MemoryShortError(ScheduleError):
    """A request needs more memory than this machine has available now (:func:`ppopt.host.require_memory`):
    not a property of the request, so a sweep leaves its point for a later run rather than recording it."""


class InfeasibleError(PpoptError):
    """A request no schedule can satisfy (e.g. a memory limit below the minimum).

    Attributes:
        minimum: for a memory limit below what every schedule needs, that minimum (the limit's
            unit), so that a caller trying several spaces can name the least of them; else None.
    """

    def __init__(self, reason: str, *, field: str | None = None, minimum: float | None = None):
        super().__init__(reason, field=field)
        self.minimum = minimum


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for the known name closest to ``name`` (case aside, then by
    :func:`difflib.get_close_matches`), or an empty string when none is close."""
    import difflib

    choices = list(known)
    same = [choice for choice in choices if choice.lower() == name.lower()]
    close = same or difflib.get_close_matches(name.lower(), choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun`` for a message, with thousands separators and the plural when the count
    is not 1 (es after ch, sh, s and x): ``1 sequence``, ``2 sequences``, ``1,024 microbatches``."""
    if count == 1:
        return f"1 {noun}"
    return f"{count:,} {noun}{'es' if noun.endswith(('ch', 'sh', 's', 'x')) else 's'}"


def require_bool(value: object, field: str) -> None:
    """ConfigError naming ``field`` unless ``value`` is True or False (the text "no" is a true
    value to Python, so an on/off field given text would switch on without a word)."""
    if not isinstance(value, bool):
        raise ConfigError(f"must be True or False, got {value!r}", field=field)


def is_positive_number(value: object) -> bool:
    """Whether ``value`` is a finite real number > 0 (not True, which is a number to Python): a time
    limit, a memory limit, a frontier's limits. Each caller words its own error (the unit differs)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value) and float(value) > 0


def require_positive_int(value: object, field: str) -> None:
    """ConfigError naming ``field`` unless ``value`` is an int >= 1 (not True, which is an int to
    Python, nor 4.0)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"must be a positive integer, got {value!r}", field=field)
