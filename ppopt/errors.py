"""User-facing errors: the CLI prints str(error) on one line and exits with status 1."""


class PpoptError(Exception):
    """Base class of every error the CLI reports as a one-line message."""


class ConfigError(PpoptError):
    """A preset or config file is malformed, incomplete, or unknown."""


class ScheduleError(PpoptError):
    """A schedule is invalid or a generator was asked for an unsupported combination."""


class InfeasibleError(PpoptError):
    """A request no schedule can satisfy (e.g. a memory limit below the minimum)."""
