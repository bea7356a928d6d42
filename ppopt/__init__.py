"""ppopt: pipeline-parallel schedules as tables, evaluated in three layers and searched with CP-SAT."""

from ppopt.generators import generate
from ppopt.ir import Kind, Op, Schedule
from ppopt.validate import validate

__all__ = ["Kind", "Op", "Schedule", "generate", "validate"]
__version__ = "0.1.0"
