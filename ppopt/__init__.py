"""ppopt: pipeline-parallel schedules as tables, evaluated in three layers and searched with CP-SAT."""

import time

IMPORTED_AT = time.monotonic()
"""When this package was first imported (``time.monotonic()`` seconds): the start of a command's
budget, so that ``--time-limit`` covers the imports too (:func:`ppopt.cli.startup_s`)."""

from ppopt.generators import generate  # noqa: E402  (after IMPORTED_AT, which must come first)
from ppopt.ir import Kind, Op, Schedule  # noqa: E402  (after IMPORTED_AT, which must come first)
from ppopt.validate import validate  # noqa: E402  (after IMPORTED_AT, which must come first)

__all__ = ["Kind", "Op", "Schedule", "generate", "validate"]
__version__ = "0.1.0"
