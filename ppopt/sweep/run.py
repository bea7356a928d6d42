"""Running a sweep: evaluate every point once, append its row, regenerate the CSV.

``rows.jsonl`` is the record: one JSON object per line, written with one ``write`` and an ``fsync``
per line, in completion order. A rerun reads it, skips every point whose hash is already there and
computes the rest; a torn last line (the process was killed mid-write) is cut off and its point
computed again. ``rows.csv`` is derived: the rows of the spec's points in point order, rewritten
atomically at the end of every run (also an interrupted one), so an interrupted and resumed run ends
with the same CSV as an uninterrupted one. Rows in ``rows.jsonl`` that belong to no point of the
current spec (an edited spec or preset) stay in the file but are left out of the CSV.

One sweep at a time per output directory: a run holds an exclusive ``flock`` on ``sweep.lock`` in
it (released by the kernel when the process ends, however it ends; the file stays) and a second run
into the same directory refuses at once instead of computing every point again and appending
duplicate rows. On a platform without ``fcntl`` the lock is not taken.

Counts add up: ``points = computed + reused + skipped + missing``, where ``computed`` and ``reused``
count the rows with a result (this run's and earlier runs') and ``skipped`` the points the generator
or the solver refused (their rows say why), whichever run wrote them.

A deadline (``time.monotonic()`` value; the CLI's ``--time-limit``) bounds the whole run: a search
point starts only while its own time limit still fits before the deadline (its row must be the one
an unhurried run writes, so it is never given less), and at the deadline the executor stops
whatever still runs (:mod:`ppopt.sweep.executors`; a search running in this process, which cannot
be interrupted cleanly, is finished first): the rows finished so far stay in ``rows.jsonl``,
``rows.csv`` is written, and the points not computed count as missing, for the next run to resume.
A deadline too close to list the points and write rows.csv is refused before any work.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ppopt.errors import MemoryShortError, PpoptError, counted
from ppopt.evaluate import evaluation_seconds
from ppopt.io import atomic_write_text, broken_link, parse_data, read_bytes_bounded, write_json
from ppopt.report.text import span, time_left
from ppopt.sweep.executors import RAY_SHUTDOWN_S, Executor, LocalExecutor, TimeLimitReached, starting_s, uninterrupted
from ppopt.sweep.spec import MAX_SWEEP_POINTS, EvalItem, GapItem, JobSpec, LoadedSpec, check_sweep_size, expand

__all__ = ["COLUMNS", "LOCK_NAME", "Progress", "SweepResult", "read_rows", "run_item", "run_sweep", "rows_csv"]

#: The lock file a running sweep holds in its output directory.
LOCK_NAME = "sweep.lock"
#: Called after every finished work item with (rows done, rows to do) of this run.
Progress = Callable[[int, int], None]

#: The inputs of a spec's ``[job]`` (:class:`ppopt.sweep.spec.JobSpec`), in evaluation rows that have one.
JOB_COLUMNS = tuple(JobSpec.model_fields)
INPUT_COLUMNS = (
    "kind", "schedule", "devices", "microbatches", "chunks", "waves", "split",
    "model", "system", "global_batch", "backward", *JOB_COLUMNS,
    "memory_limit", "unit_forward", "unit_backward", "unit_weight", "unit_comm",
    "time_limit_s", "deterministic_time", "seed", "model_digest", "system_digest",
)
METRIC_COLUMNS = (
    "formula_bubble_ratio", "formula_length", "formula_peak_activations_max", "formula_weight_copies_max",
    "formula_outside", "table_length", "table_bubble_ratio", "table_peak_activations_max",
    "sim_step_time_s", "sim_idle_ratio", "sim_peak_activation_bytes_max", "sim_peak_memory_bytes_max",
    "sim_persistent_bytes_max", "sim_over_memory", "sim_memory_excess_bytes",
    "table_peak_activations", "sim_peak_activation_bytes", "sim_peak_memory_bytes", "sim_persistent_bytes",
    "solver_space", "solver_status", "solver_time_unit", "solver_step", "solver_best", "solver_bound", "gap",
    "solver_fits", "solver_peak_memory", "solver_memory_semantics", "solver_cut",
)
#: Every column of ``rows.csv``, in order (a fixed header whatever the spec holds).
COLUMNS = ("hash", "status", "reason") + INPUT_COLUMNS + METRIC_COLUMNS
COLUMN_DOCS: dict[str, str] = {
    "hash": "the point's digest over every input: a rerun reuses the row of the same hash",
    "status": "ok, or skipped (the point does not apply; why in reason)",
    "reason": "why a point was skipped",
    "kind": "evaluate (three layers of one schedule) or gap (a handcrafted schedule against its space's bound)",
    "schedule": "the family (`ppopt list`)",
    "devices": "pipeline devices p",
    "microbatches": "microbatches per step m",
    "chunks": "interleaved-1f1b's and looped-bfs's stages per device",
    "waves": "hanayo's waves W",
    "split": "chimera-asym's layer split A:B",
    "model": "the model preset or file (evaluate rows)",
    "system": "the system preset or file (evaluate rows)",
    "global_batch": "sequences per step (evaluate rows)",
    "backward": "the table layer's B, slots of a 1/p share (F = 1)",
    "tp": "tensor parallelism t ([job])",
    "dp": "data parallelism d ([job])",
    "micro_batch": "sequences per microbatch ([job])",
    "recompute": "none, selective or full ([job])",
    "sequence_parallel": "Megatron's sequence parallelism, true or false ([job])",
    "distributed_optimizer": "optimizer state sharded over d, true or false ([job])",
    "memory_limit": "gap rows: live activations of a 1/p share per device; empty: no limit",
    "unit_forward": "gap rows' unit model: F, slots",
    "unit_backward": "gap rows' unit model: B = I + W, slots",
    "unit_weight": "gap rows' unit model: W, slots",
    "unit_comm": "gap rows' unit model: a message, slots",
    "time_limit_s": "gap rows: the search's time limit, seconds",
    "deterministic_time": "gap rows: the search's CP-SAT deterministic time",
    "seed": "gap rows: CP-SAT's random seed",
    "model_digest": "digest of the model's fields (a changed file is a new point)",
    "system_digest": "digest of the system's fields",
    "formula_bubble_ratio": "the closed form's idle / total (empty where it does not hold)",
    "formula_length": "the closed form's step, slots of the unit model (F = 1, B = backward)",
    "formula_peak_activations_max": "the closed form's worst-device live activations, stage chunks",
    "formula_weight_copies_max": "the closed form's worst-device weights, copies of a 1/p share",
    "formula_outside": "why the closed form does not hold at these sizes",
    "table_length": "the unit-slot table's step, slots",
    "table_bubble_ratio": "the table's idle / total",
    "table_peak_activations_max": "the table's worst-device live activations, stage chunks",
    "sim_step_time_s": "the simulated pipeline step, seconds",
    "sim_idle_ratio": "the simulation's idle / total",
    "sim_peak_activation_bytes_max": "the worst device's simulated activations, bytes",
    "sim_peak_memory_bytes_max": "the worst device's simulated peak, persistent state included, bytes",
    "sim_persistent_bytes_max": "the worst device's weights, gradients and optimizer state, bytes",
    "sim_over_memory": "whether a device's peak exceeds the system's memory, true or false",
    "sim_memory_excess_bytes": "by how much, bytes (0 when it fits)",
    "table_peak_activations": "per device, stage chunks (a list: ';' in CSV)",
    "sim_peak_activation_bytes": "per device, bytes (a list)",
    "sim_peak_memory_bytes": "per device, bytes (a list)",
    "sim_persistent_bytes": "per device, bytes (a list)",
    "solver_space": "the relaxed space whose bound the schedule is measured against",
    "solver_status": "that space's search: optimal, feasible, or skipped (time limit)",
    "solver_time_unit": "the unit of the solver columns' times: slots",
    "solver_step": "the handcrafted schedule's simulated step",
    "solver_best": "the best step the search found in the space",
    "solver_bound": "a lower bound on every schedule of the space",
    "gap": "(solver_step - solver_bound) / solver_bound; empty when the schedule is over memory_limit "
           "(solver_fits false: it is no point of the space) or the space was not searched",
    "solver_fits": "whether the schedule's peak is within memory_limit, true or false",
    "solver_peak_memory": "the schedule's worst-device live activations (of a 1/p share)",
    "solver_memory_semantics": "what memory_limit counts",
    "solver_cut": "where the wall clock decided before the deterministic time, if it did: with deterministic_time "
                  "set, a rerun repeats the row exactly only when this is empty",
}
"""What each column of ``rows.csv`` (and key of ``rows.jsonl``) holds, with its unit (README,
"Sweeps of your own": :func:`columns_markdown`)."""


def columns_markdown() -> str:
    """The README's table of :data:`COLUMN_DOCS`, in column order."""
    return "\n".join(["| column | holds |", "|---|---|", *(f"| `{name}` | {COLUMN_DOCS[name]} |" for name in COLUMNS)])


#: The columns that hold text (or nothing); every other one holds a number, a yes/no, a list of
#: numbers or nothing.
TEXT_COLUMNS = frozenset({"hash", "status", "reason", "kind", "schedule", "split", "model", "system", "recompute",
                          "model_digest", "system_digest", "formula_outside", "solver_space", "solver_status",
                          "solver_time_unit", "solver_memory_semantics", "solver_cut"})


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


# --------------------------------------------------------------------------------------------------
# One work item (runs in a worker process or a Ray task: plain data in, plain data out)
# --------------------------------------------------------------------------------------------------


DEFERRED = "deferred"
"""Status of a row this machine lacked the memory for (:class:`ppopt.errors.MemoryShortError`): not
written to rows.jsonl, so the next run computes its point again; counted as missing."""


def run_item(item: EvalItem | GapItem) -> list[dict]:
    """The rows of one work item (one for an evaluation point, one per schedule for a gap group)."""
    if isinstance(item, GapItem):
        with uninterrupted():  # a CP-SAT solve in this process finishes (it honours its own time limit)
            return _run_gap(item)
    return [_run_eval(item)]


SEARCH_MARGIN = 1.05
"""A search point's run may exceed its own time limit by this factor (model building and read-back:
``gap`` returns within its limit plus 5 %)."""

SEARCH_START_S = 1.0
"""Seconds a search point may take beyond that (a pool worker's imports)."""


CSV_S_PER_ROW = 1e-4
"""Seconds per row to write rows.csv at the end of a run, twice what was measured: 250,000 rows of
the paper study's points (142 MB) took 11.2 s on this project's 2-core machine, at load 1.5."""


def csv_seconds(rows: int) -> float:
    """Seconds a run keeps before its deadline for writing rows.csv."""
    return 0.05 + CSV_S_PER_ROW * rows


DETERMINISTIC_WALL_S = 4.0
"""Wall seconds one unit of CP-SAT deterministic time may take, for a search point's estimate:
about twice the 1.7 to 2.2 s measured on this project's 2-core machine (whole `search
--deterministic-time` 5 and 20 commands at 16 x 48: 11.2 and 33.5 s, load 0.9)."""


def item_seconds(item: EvalItem | GapItem) -> float:
    """Seconds to keep before the deadline to start ``item``: a search its time limit (or, when its
    deterministic time ends it sooner, :data:`DETERMINISTIC_WALL_S` per unit of that) with
    :data:`SEARCH_MARGIN` and :data:`SEARCH_START_S`; an evaluation its estimated time
    (:data:`ppopt.evaluate.EVALUATE_S_PER_OP` per op: a 4.8-million-op point started under an 8 s
    limit ran into the deadline on every rerun). The quick study's searches, 20 s with 2 units of
    deterministic time, took 0.1 s each, and every --time-limit under 32 s left them all out."""
    if isinstance(item, GapItem):
        if not item.cost:  # a row, no search
            return 0.0
        first = item.inputs[0]
        limit = first["time_limit_s"]
        if first.get("deterministic_time"):
            limit = min(limit, DETERMINISTIC_WALL_S * first["deterministic_time"])
        return SEARCH_START_S + SEARCH_MARGIN * limit
    return evaluation_seconds(int(item.cost))


def _run_eval(item: EvalItem) -> dict:
    from ppopt.evaluate import evaluate
    from ppopt.units import UnitCosts

    inputs = item.inputs
    options = {k: inputs[k] for k in ("chunks", "waves", "split") if inputs[k] is not None}
    row = {"hash": item.hash, "status": "ok", "reason": None, **inputs}
    parallel = JobSpec(**{k: inputs[k] for k in JOB_COLUMNS}).parallelism() if "tp" in inputs else None  # the spec's [job]
    try:
        result = evaluate(inputs["schedule"], inputs["devices"], inputs["microbatches"], UnitCosts(backward=inputs["backward"]),
                          item.model, item.system, inputs["global_batch"], parallel=parallel, **options)
    except MemoryShortError as error:  # this machine's state, not the point's: left for a later run
        row.update(status=DEFERRED, reason=" ".join(error.reason.split()))
        return row
    except PpoptError as error:
        row.update(status="skipped", reason=" ".join(error.reason.split()))
        return row
    f, t, s = result.formula, result.table, result.simulation
    assert s is not None  # a named schedule with a model and a system is simulated
    if f is not None and f.valid:  # closed forms outside their range are left empty (never ranked)
        row.update(
            formula_bubble_ratio=f.bubble_ratio,
            formula_length=f.length,
            formula_peak_activations_max=max(f.peak_activations, default=None),
            formula_weight_copies_max=max(f.weight_copies, default=None),
        )
    row.update(
        formula_outside=None if f is None else f.outside,
        table_length=t.length,
        table_bubble_ratio=t.bubble_ratio,
        table_peak_activations_max=max(t.peak_activations, default=None),
        sim_step_time_s=s.step_time_s,
        sim_idle_ratio=s.idle_ratio,
        sim_peak_activation_bytes_max=max(s.peak_activation_bytes),
        sim_peak_memory_bytes_max=max(s.peak_memory_bytes),
        sim_persistent_bytes_max=max(s.persistent_bytes),
        sim_over_memory=result.memory_over is not None,
        sim_memory_excess_bytes=0.0 if result.memory_over is None else result.memory_over.excess_bytes,
        table_peak_activations=list(t.peak_activations),
        sim_peak_activation_bytes=list(s.peak_activation_bytes),
        sim_peak_memory_bytes=list(s.peak_memory_bytes),
        sim_persistent_bytes=list(s.persistent_bytes),
    )
    return row


def _run_gap(item: GapItem) -> list[dict]:
    from ppopt.solve.gap import gap_report
    from ppopt.solve.instance import InstanceSpec
    from ppopt.solve.options import SolveOptions
    from ppopt.units import UnitCosts

    first = item.inputs[0]
    options: dict = {}
    for inputs in item.inputs:
        options.update({k: inputs[k] for k in ("chunks", "waves", "split") if inputs[k] is not None})
    rows = [{"hash": h, "status": "ok", "reason": None, **inputs} for h, inputs in zip(item.hashes, item.inputs)]
    if first.get("skip_reason"):  # over the spec's max_ops: a point, not a search
        for row in rows:
            row.update(status="skipped", reason=row.pop("skip_reason"))
        return rows
    try:
        units = UnitCosts(first["unit_forward"], first["unit_backward"], first["unit_weight"], first["unit_comm"])
        spec = InstanceSpec(first["devices"], first["microbatches"], units, memory_limit=first["memory_limit"])
        solve = SolveOptions(first["time_limit_s"], workers=1, seed=first["seed"],
                             deterministic_time=first["deterministic_time"]).start()  # started: its cuts are read below
        report = gap_report(spec, options, [i["schedule"] for i in item.inputs], solve)
    except MemoryShortError as error:  # as an evaluation point's: left for a later run
        for row in rows:
            row.update(status=DEFERRED, reason=" ".join(error.reason.split()))
        return rows
    except PpoptError as error:
        for row in rows:
            row.update(status="skipped", reason=" ".join(str(error).split()))
        return rows
    found = {r.schedule: r for r in report.rows}
    for row in rows:
        name = row["schedule"]
        if name in report.skipped or name not in found:
            row.update(status="skipped", reason=" ".join(report.skipped.get(name, "no result").split()))
            continue
        r = found[name]
        row.update(
            solver_space=r.space, solver_status=r.status, solver_time_unit=report.time_unit, solver_step=r.step_time,
            solver_best=r.best, solver_bound=_finite(r.bound), gap=r.gap, solver_fits=r.fits,
            solver_peak_memory=r.peak_memory, solver_memory_semantics=report.memory_semantics,
            # where the time limit decided first, if it did: a rerun reproduces the row only when empty
            solver_cut=solve.cuts[0] if solve.cuts else None,
        )
    return rows


# --------------------------------------------------------------------------------------------------
# The deadline
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM for the block (main thread only, the one that runs Python's signal
    handlers): one that arrives meanwhile is handled as it would have been, right after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[signal.Signals] = []
    previous = {number: signal.signal(number, lambda signum, frame: caught.append(signal.Signals(signum)))
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if caught:
            handler = previous[caught[0]]
            if callable(handler):
                handler(caught[0], None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), caught[0])


def _due(items: list[EvalItem | GapItem], deadline: float | None, left: list[EvalItem | GapItem]) -> Iterator[EvalItem | GapItem]:
    """``items`` drawn one by one as workers free up; those that cannot finish before ``deadline``
    (:func:`item_seconds`) go to ``left`` instead."""
    for item in items:
        if deadline is not None and time.monotonic() + item_seconds(item) > deadline:
            left.append(item)
            continue
        yield item


# --------------------------------------------------------------------------------------------------
# rows.jsonl
# --------------------------------------------------------------------------------------------------


ROW_BYTES = 4096
"""Bytes a line of ``rows.jsonl`` may take on average (a row is about 1 kB), for :data:`ROWS_BYTES`."""
ROWS_BYTES = ROW_BYTES * MAX_SWEEP_POINTS
"""The largest ``rows.jsonl`` read back: the rows of the largest sweep, with room (1 GiB; a file
linked to a device, or grown by hand, was read whole, 24 GB before the kernel stopped it)."""


def read_rows(path: Path, repair: bool = False, unreadable: list[int] | None = None) -> dict[str, dict]:
    """Rows of ``rows.jsonl`` by hash (first occurrence wins). A last line without its newline (a
    torn write) is ignored, and with ``repair`` cut off the file so appending starts on a clean line;
    any other unreadable line is ignored, and its number (1-based) appended to ``unreadable``."""
    rows: dict[str, dict] = {}
    try:
        data = read_bytes_bounded(path, ROWS_BYTES, f"{ROW_BYTES:,} per point of the largest sweep")
    except FileNotFoundError:
        return rows
    except OSError as error:  # a directory in its place, no permission: one line, not a traceback
        raise PpoptError(f"cannot read {path}: {error.strerror or error}") from None
    end = data.rfind(b"\n") + 1
    if repair and end < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(end)
            handle.flush()
            os.fsync(handle.fileno())
    for number, line in enumerate(data[:end].splitlines(), 1):
        try:
            row = parse_data(line.decode())
        except ValueError:  # not JSON (a torn or foreign line), not UTF-8
            row = None
        if _whole_row(row):
            rows.setdefault(row["hash"], row)
        elif unreadable is not None and line.strip():
            unreadable.append(number)
    return rows


def _whole_row(row: object) -> bool:
    """Whether a line of ``rows.jsonl`` is a row this module wrote: a hash, a status and the inputs
    every point has (a line cut down by hand, ``{"hash": ..., "status": "ok"}``, made a blank row of rows.csv)."""
    return (isinstance(row, dict) and isinstance(row.get("hash"), str) and row.get("status") in ("ok", "skipped")
            and all(column in row for column in ("kind", "schedule", "devices", "microbatches"))
            and all(_fits_column(column, row[column]) for column in COLUMNS if column in row))


def _fits_column(column: str, value: object) -> bool:
    """Whether ``value`` has a type ``column`` can hold: a line edited by hand with ``"abc"`` for a
    step time was taken as a computed row, written into rows.csv, and failed the study's report."""
    if value is None:
        return True
    if column in TEXT_COLUMNS:
        return isinstance(value, str)
    if isinstance(value, list):
        return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
    return isinstance(value, (int, float))  # bool is an int: the yes/no columns


def _row_line(row: dict) -> bytes:
    clean = {k: (_finite(v) if isinstance(v, float) else v) for k, v in row.items()}
    return (json.dumps(clean, sort_keys=False, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")


class _Appender:
    """Appends whole lines: one ``os.write`` and one ``fsync`` per row. A line that cannot be
    written whole (a full disk) is cut off again, and the error names the file."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, row: dict) -> None:
        data = _row_line(row)
        size = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            written = os.write(self.fd, data)
            while written < len(data):  # rare partial write (signal, full pipe): finish the line
                written += os.write(self.fd, data[written:])
            os.fsync(self.fd)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, size)  # no torn line left (the next run would cut it off anyway)
            raise PpoptError(f"cannot write {self.path}: {error.strerror or error}") from None

    def close(self) -> None:
        os.close(self.fd)


# --------------------------------------------------------------------------------------------------
# rows.csv
# --------------------------------------------------------------------------------------------------


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ";".join(_cell(v) for v in value)
    return str(value)


def rows_csv(rows: Iterable[dict]) -> str:
    """The CSV text of ``rows`` with the fixed :data:`COLUMNS` header (lists joined with ``;``)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in COLUMNS])
    return buffer.getvalue()


# --------------------------------------------------------------------------------------------------
# The output directory's lock
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` (see the module docstring); a :class:`PpoptError`
    naming it when another process holds it."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise PpoptError(f"cannot create {directory / LOCK_NAME}: {error.strerror or error}", field="output") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PpoptError(f"{directory}: another sweep is writing to this directory (wait for it, or give another --output)") from None
        yield
    finally:
        os.close(fd)  # releases the lock


# --------------------------------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------------------------------


REPEAT_CUT = (f"A deterministic_time in [solver], with a time_limit_s that leaves it room (about {DETERMINISTIC_WALL_S:g} s "
              "a unit), makes such rows repeat")
"""What makes a sweep's solver rows that the wall clock cut repeat in a rerun (said where they are counted)."""


@dataclass(frozen=True)
class SweepResult:
    """What :func:`run_sweep` did: point counts by outcome, the rows, and its wall time (seconds)."""
    output: Path
    points: int
    """Rows the spec defines."""
    computed: int
    """Rows with a result computed by this run."""
    reused: int
    """Rows with a result found in rows.jsonl (resumed)."""
    skipped: int
    """Rows with status "skipped" (the generator or the solver refused the point), of any run."""
    missing: int
    """Rows still to compute (an interrupted or limited run)."""
    wall_time_s: float
    rows: tuple[dict, ...]
    """The spec's rows present so far, in point order."""
    unreadable: tuple[int, ...] = ()
    """Lines of rows.jsonl that are not a row (edited by hand, say): ignored, their points run again."""
    time_limit_reached: bool = False
    """Whether the deadline left points missing (not started, or stopped)."""
    search_s: float = 0.0
    """Seconds from the run's start a deadline must leave for a search left out to run (listing the
    points, the search with its margin, rows.csv and closing), 0 if none was left out."""
    other_rows: int = 0
    """Rows of rows.jsonl that are no point of this spec (an earlier spec's, written to the same
    directory): kept there, and reused if a spec names their points again, but not in rows.csv."""
    deferred: tuple[str, ...] = ()
    """Why each point this machine lacked the memory for was left missing (:data:`DEFERRED`)."""

    @property
    def cut_rows(self) -> int:
        """The spec's rows whose search the wall clock cut (``solver_cut``): a rerun may differ there."""
        return sum(1 for row in self.rows if row.get("solver_cut"))

    def summary(self) -> dict:
        """The counts and times `ppopt sweep --json` prints."""
        return {
            "output": str(self.output), "points": self.points, "computed": self.computed, "reused": self.reused,
            "skipped": self.skipped, "missing": self.missing, "wall_time_s": self.wall_time_s,
            "unreadable_lines": list(self.unreadable), "time_limit_reached": self.time_limit_reached,
            "other_rows": self.other_rows, "deferred": len(self.deferred), "solver_cut_rows": self.cut_rows,
        }


def default_output(loaded: LoadedSpec) -> Path:
    """``out/<spec name>``, where a sweep writes when no output directory is given."""
    return Path("out") / loaded.name


def run_sweep(
    loaded: LoadedSpec,
    output: str | os.PathLike | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
    max_items: int | None = None,
    kinds: tuple[str, ...] = ("evaluate", "gap"),
    deadline: float | None = None,
    also_files: tuple[str, ...] = (),
    also_dirs: tuple[str, ...] = (),
) -> SweepResult:
    """Run (or resume) the sweep of ``loaded`` into ``output`` (default ``out/<spec stem>``).

    ``progress(done, total)`` is called after every finished work item with the rows done and to do
    in this run (the CLI draws it as a bar on stderr); ``max_items`` stops after that many work items
    (tests use it to simulate an interruption); ``kinds`` restricts the points to evaluation
    (``"evaluate"``) or solver (``"gap"``) points; ``deadline`` (a ``time.monotonic()`` value) ends
    the run then, the points not computed left missing (see the module docstring); ``also_files``
    and ``also_dirs`` name what the caller writes into ``output`` after the run (``study``'s report
    and figures), checked with the sweep's own files before any point runs. Raises
    :class:`PpoptError` if another sweep holds the output directory.
    """
    began = time.monotonic()
    points = check_sweep_size(loaded.spec, "gap" in kinds)  # before the output directory is made
    executor = executor or LocalExecutor(1)
    if deadline is not None:
        _check_deadline(points, deadline, executor.closing_s)
    out = Path(output) if output is not None else default_output(loaded)
    created = not out.exists()
    for part in (out, *out.parents):  # out/NAME by default: `out` may be the broken link
        if (problem := broken_link(part)) is not None:  # mkdir said only "File exists"
            raise PpoptError(f"cannot create {out}: {'' if part == out else f'{part}: '}{problem}", field="output")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PpoptError(f"cannot create {out}: {error.strerror or error}", field="output") from None
    for name in (*OUTPUT_FILES, *also_files):  # one written only after every point (rows.csv) failed after all the work
        if (out / name).is_dir():
            raise PpoptError(f"cannot write {out / name}: it is a directory", field="output")
        if (problem := broken_link(out / name)) is not None:  # rows.jsonl, appended to, wrote where the link led
            raise PpoptError(f"cannot write {out / name}: {problem}", field="output")
    for name in also_dirs:
        if (out / name).exists() and not (out / name).is_dir():
            raise PpoptError(f"cannot write into {out / name}: it is a file, not a directory", field="output")
    try:
        with locked(out):
            return _run_locked(loaded, out, executor, progress, max_items, kinds, began, deadline)
    except PpoptError:
        if created:  # refused before any row (a time limit no point fits): no directory left behind
            with contextlib.suppress(OSError):
                (out / LOCK_NAME).unlink()
                out.rmdir()  # only if nothing else is in it
        raise


OUTPUT_FILES = ("rows.jsonl", "rows.csv", "spec.json")
"""The files a sweep writes into its output directory."""

LIST_S_PER_POINT = 6e-5
"""Seconds per evaluation point to list the points and read the rows of an earlier run: listing a
spec of 246,960 points took 4.4 s on this project's 2-core machine (1.8e-5 s each), and reading
rows takes about as long again; kept with a margin."""


def kept_seconds(points: int, closing_s: float) -> float:
    """Seconds a run with a deadline needs besides its points: listing them, writing rows.csv and
    closing the executor."""
    return LIST_S_PER_POINT * points + csv_seconds(points) + closing_s


def _check_deadline(points: int, deadline: float, closing_s: float, starting_s: float = 0.0) -> None:
    """Refuse a deadline that leaves no time for any point (a rerun would make no progress either);
    ``starting_s``: what starting the executor will take first (:func:`ppopt.sweep.executors.starting_s`)."""
    left, kept = deadline - time.monotonic(), kept_seconds(points, closing_s)
    if left <= kept + starting_s:
        start = f"starting Ray (at least {starting_s:.0f} s), " if starting_s else ""
        raise PpoptError(f"{time_left(left)}, which cannot cover {start}listing the sweep's {counted(points, 'evaluation point')} and writing "
                         f"rows.csv (about {kept:.1f} s kept for them), and no point would run: give more, or split the spec",
                         field="time_limit")


def check_deadline_before_start(loaded: LoadedSpec, kinds: tuple[str, ...], deadline: float, kind: str, address: str | None) -> None:
    """:func:`run_sweep`'s deadline check, made before the executor ``kind`` starts (a local Ray
    takes seconds to start, which a short limit refused only afterwards)."""
    points = check_sweep_size(loaded.spec, "gap" in kinds)
    closing = RAY_SHUTDOWN_S if kind == "ray" else 0.0  # as RayExecutor sets its closing_s once it starts Ray
    _check_deadline(points, deadline, closing, starting_s(kind, address))


def _check_any_fits(pending: list[EvalItem | GapItem], points: int, stop_at: float) -> None:
    """Refuse a run (a first one or a rerun) whose every item left (``points`` rows: a search gives
    one per schedule of its space) needs more than the time left (:func:`item_seconds`): it would
    compute nothing, and so would every rerun under the same limit."""
    shortest = min(map(item_seconds, pending))
    left = stop_at - time.monotonic()
    if shortest > left:
        raise PpoptError(f"{time_left(left)}, which cannot cover any of the {counted(points, 'point')}: the shortest "
                         f"needs about {span(shortest)}; give more, or make the points smaller", field="time_limit")


def _run_locked(loaded: LoadedSpec, out: Path, executor: Executor, progress: Progress | None, max_items: int | None,
                kinds: tuple[str, ...], began: float, deadline: float | None) -> SweepResult:
    items = expand(loaded, kinds)
    order = {h: n for n, h in enumerate(h for item in items for h in item.hashes)}
    # rows of this spec's other kind of point (study --no-solver's searches) are no earlier spec's:
    # they stay in rows.csv and the result's rows, though this run neither computes nor counts them
    spec_order = order if set(kinds) >= {"evaluate", "gap"} else \
        {h: n for n, h in enumerate(h for item in expand(loaded) for h in item.hashes)}
    rows_path = out / "rows.jsonl"
    unreadable: list[int] = []
    existing = read_rows(rows_path, repair=True, unreadable=unreadable)
    before = {h for h in order if h in existing}
    pending = [item for item in items if not all(h in existing for h in item.hashes)]
    # longest first keeps a pool's workers busy to the end (the order of rows.jsonl does not matter)
    pending.sort(key=lambda item: -item.cost)
    if max_items is not None:
        pending = pending[:max_items]
    total = sum(len(i.hashes) for i in pending)
    # what follows the last item (stopping the workers, rows.csv) is kept out of the budget
    after_s = executor.closing_s + csv_seconds(len(order))
    stop_at = None if deadline is None else deadline - after_s
    if stop_at is not None and pending:
        _check_any_fits(pending, total, stop_at)
    write_json(loaded.spec.model_dump(mode="json"), out / "spec.json", pretty=True, sort_keys=True)

    done = 0
    deferred: list[str] = []  # the reasons of the rows this machine lacked the memory for
    appender = _Appender(rows_path)
    failed = False
    present: list[dict] = []
    left: list[EvalItem | GapItem] = []
    stopped = False
    started = time.monotonic()
    try:
        for rows in executor.map_unordered(run_item, _due(pending, stop_at, left), stop_at):
            for row in rows:
                if row["status"] == DEFERRED:
                    deferred.append(row["reason"])
                elif row["hash"] not in existing:
                    # a Ctrl-C or the deadline's alarm between the two left a row in rows.jsonl and not in rows.csv
                    with _signals_held(), uninterrupted():
                        appender.write(row)
                        existing[row["hash"]] = row
            done += len(rows)
            if progress is not None:
                progress(done, total)
    except TimeLimitReached:
        stopped = True
        executor.abort()  # the items still running: their rows would come after the deadline
    except BaseException:
        failed = True  # rows.csv is still written below; if that fails too, this error is the one said
        raise
    finally:
        appender.close()
        present = sorted((r for h, r in existing.items() if h in spec_order), key=lambda r: spec_order[r["hash"]])
        with _signals_held():  # a Ctrl-C or SIGTERM now (at the deadline, say) acts once rows.csv is written
            try:
                atomic_write_text(out / "rows.csv", rows_csv(present))
            except (OSError, PpoptError):
                if not failed:  # a full disk failed rows.jsonl's append first: name that file, not this one
                    raise
    counted_rows = [r for r in present if r["hash"] in order]  # this run's kinds of point
    ok = [r["hash"] for r in counted_rows if r.get("status") != "skipped"]
    longest_left = max(map(item_seconds, left), default=0.0)  # the longest point not started
    return SweepResult(
        output=out,
        points=len(order),
        computed=sum(h not in before for h in ok),
        reused=sum(h in before for h in ok),
        skipped=len(counted_rows) - len(ok),
        missing=len(order) - len(counted_rows),
        wall_time_s=time.monotonic() - began,
        rows=tuple(present),
        unreadable=tuple(unreadable),
        time_limit_reached=(stopped or bool(left)) and len(counted_rows) < len(order),
        # from the run's start: listing and rows.jsonl so far, the search, then rows.csv and closing
        search_s=(started - began) + longest_left + after_s if longest_left else 0.0,
        other_rows=sum(h not in spec_order for h in existing),
        deferred=tuple(deferred),
    )
