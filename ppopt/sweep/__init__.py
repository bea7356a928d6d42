"""Parameter sweeps over schedules, systems and models, resumable, on local processes or Ray.

``load_spec(path)`` reads and validates a spec (:mod:`ppopt.sweep.spec`), ``run_sweep(loaded, ...)``
computes its rows into ``rows.jsonl`` / ``rows.csv`` (:mod:`ppopt.sweep.run`) with an executor from
:mod:`ppopt.sweep.executors`; :mod:`ppopt.sweep.study` computes a study's claims from its rows, and
:mod:`ppopt.report.study` writes them as ``report.md``.
"""

from ppopt.sweep.executors import Executor, LocalExecutor, RayExecutor, make_executor
from ppopt.sweep.run import COLUMNS, SweepResult, read_rows, rows_csv, run_sweep
from ppopt.sweep.spec import LoadedSpec, SweepSpec, expand, load_spec, point_hash, resolve_spec

__all__ = [
    "COLUMNS",
    "Executor",
    "LoadedSpec",
    "LocalExecutor",
    "RayExecutor",
    "SweepResult",
    "SweepSpec",
    "expand",
    "load_spec",
    "make_executor",
    "point_hash",
    "read_rows",
    "resolve_spec",
    "rows_csv",
    "run_sweep",
]
