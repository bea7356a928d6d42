"""How to solve: time budget, CP-SAT workers and seed, progress, and the one deadline of a command.

``time_limit_s`` is the budget of a whole request (a search, a gap report, a frontier): model
building, hint generation and simulation, every CP-SAT call and the read-back. :meth:`SolveOptions.start`
fixes the deadline once (``time.monotonic() + time_limit_s``); every CP-SAT call then gets only the
time that remains, and a request whose budget is spent stops building further steps and reports what
it has (the hint, with its status).

A wall-clock budget makes a search depend on the machine and its load: where CP-SAT stops, how many
neighbourhoods run, which phase is skipped. With ``deterministic_time`` set, the request also has a
budget of CP-SAT's deterministic time (its count of work, machine-independent), shared out like the
wall-clock one (:meth:`SolveOptions.share` divides what is left of it); every CP-SAT call stops at what
is left of its share, and the work each call did is counted once for all (:class:`SpentWork`). With one
worker the same seed then gives the same result, as long as the wall-clock budget never decides
first. Every place where it does is recorded in :attr:`SolveOptions.cuts` (:meth:`SolveOptions.allows`,
:attr:`SolveOptions.expired`, :meth:`SolveOptions.run`), so a command can say whether its result is
reproducible.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ppopt.errors import ConfigError, PpoptError, is_positive_number, require_bool

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

Progress = Callable[[str], None]

HEARTBEAT_S = 10.0
"""Seconds between the "still solving" lines of a CP-SAT solve (:meth:`SolveOptions.run`)."""
LEAST_DETERMINISTIC_SHARE = 1e-3
"""The least deterministic time a step's share gets (:meth:`SolveOptions.share`), once the budget is spent."""

PROGRESS_AFTER_S = 1.0
"""Work that is long only at large sizes reports progress once it has run this long (seconds), so
quick runs print none: the CLI's bars and phase lines (:mod:`ppopt.cli.options`) and ``gap``'s
simulation of its schedules (:mod:`ppopt.solve.gap`). Read at call time, so tests can lower it."""

MAX_WORKERS = 64
"""Most CP-SAT workers one solve may use: CP-SAT's portfolio gains little beyond a few dozen
workers, and each worker holds a copy of the model, so more only costs memory."""


METHODS = ("auto", "cp", "lns")
"""How a search looks for schedules: ``cp`` one CP-SAT solve of the whole space; ``lns`` the
large-neighbourhood search from the best hint (:mod:`ppopt.solve.lns`); ``auto`` picks by size: one
CP-SAT solve up to :data:`AUTO_CP_OPS` ops, a CP-SAT solve with half the budget then the
large-neighbourhood search from the best schedule so far up to :data:`AUTO_LNS_OPS` ops (or, on a
chain where block cuts apply, their bound in its time: :func:`ppopt.solve.search._block_cut_chain`),
and the large-neighbourhood search above, where it is the window search: it gets a third of the
time left, followed by one CP-SAT solve of the whole model when it found nothing shorter than the
hint (:func:`ppopt.solve.search._windows_then_cp`)."""

AUTO_CP_OPS = 1500
AUTO_LNS_OPS = 4096


NO_LP_OPS = 32768
"""Models of at least this many ops are solved without CP-SAT's linear relaxation
(``linearization_level = 0``): loading it into CP-SAT's one worker does not watch the time limit,
and its cost grows faster than the model. Measured with a 30 s limit and one worker (ortools 9.15):
32 x 1024 (65,536 ops) returned after 109.5 s with the relaxation and the hint's 5,209 slots, after
30.0 s without it (59.7 s for 60 s); 32 x 512 (32,768 ops) 34.6 s (2,681 slots) against 30.0 s
(2,680 slots); 16 x 1024 5,065 slots both ways, within the limit."""

LP_S_PER_OP = 1.5e-3
"""Least time per op (seconds) a CP-SAT solve must have to get its linear relaxation: with less,
the relaxation is left out (``linearization_level = 0``), since its one worker does not watch the
time limit while the relaxation is built and first solved. Measured (ortools 9.15, one worker, the
whole model of p = 32 with its hint, 2 cores): 4,096 ops stopped 6.3 s into a solve limited to
1.9 s, 8,192 ops 10.1 s into 2.5 s, 16,384 ops 20.9 s into 10.5 s and 22.9 s into 16.4 s; without
the relaxation each stopped at its limit. (At p = 16 the overrun was at most 0.3 s.)"""

NO_LP_SUBSOLVERS = ("no_lp", "quick_restart_no_lp")
"""CP-SAT's full-problem workers without the linear relaxation, the only ones a solve of at least
:data:`NO_LP_OPS` ops runs with more than one worker: the portfolio's ``default_lp`` worker sets its
own linearization level, and at 32 x 1024 with two workers it spent 69 s loading the relaxation (a
30 s solve returned after 85.8 s; with these two workers, after 30.2 s)."""

CP_MAX_OPS = 65536
"""Largest model one CP-SAT solve of the whole space is given: above it, CP-SAT's presolve and the
loading of its hint (one worker) run past the time limit. Measured (ortools 9.15, one worker):
32 x 1024 (65,536 ops) within a 120 s `search` (114 s, the relaxation off: :data:`NO_LP_OPS`),
32 x 4096 (262,144 ops) still in its solve 270 s after it began with 140 s left. ``--method cp``
and ``--minimize-memory`` are refused above it; ``auto`` keeps to the large-neighbourhood search
there, or reports the best hint where that search does not apply."""

READBACK_SHARE = 0.1
"""Share of the remaining time a CP-SAT call leaves for what follows it: stopping CP-SAT, reading
its answer back, validating and simulating it, and printing the report."""


@dataclass
class SpentWork:
    """CP-SAT deterministic time spent by a request so far, and its solves (one object shared by its
    options)."""

    spent: float = 0.0
    solves: int = 0
    """CP-SAT calls made (0: every answer was settled without one, so a deterministic time decided nothing)."""


def check_time_limit(seconds: float, field: str) -> None:
    """ConfigError on ``field`` unless ``seconds`` is a finite number > 0: every command's time limit."""
    if not is_positive_number(seconds):
        shown = ("a number too large to represent (inf)" if seconds == math.inf
                 else f"{seconds}" if isinstance(seconds, numbers.Real) else repr(seconds))
        raise ConfigError(f"must be a finite number of seconds > 0, got {shown}", field=field)


@dataclass(frozen=True)
class SolveOptions:
    """Solver settings shared by search, gap and frontier (validated on construction).

    Attributes:
        time_limit_s: wall-clock budget of the whole request, seconds (finite, > 0).
        workers: CP-SAT workers, 1..MAX_WORKERS (1 is reproducible with ``deterministic_time``).
        seed: CP-SAT random seed.
        progress: called with one line per incumbent and step, or None.
        deterministic_time: CP-SAT deterministic time of the whole request (reproducible runs), or
            None; derived options (:meth:`share`) hold their share of what is left.
        dominance: add the microbatch-order dominance rule (:mod:`ppopt.solve.model`).
        deadline: ``time.monotonic()`` value at which the budget ends; set by :meth:`start`.
        method: one of :data:`METHODS`.
        every_hint: build every handcrafted schedule of the space as a hint, even after one is proven
            optimal by the analytic bound (``frontier`` lists them all; ``search`` stops there).
        cuts: where the wall-clock budget decided (a phase skipped, a loop or a CP-SAT call stopped
            before its deterministic limit), one short description each; shared by every options
            derived from these (:meth:`start`, :meth:`share`, :meth:`reserve`).
        work: the deterministic time spent so far by every CP-SAT call of the request (shared
            likewise), and ``work_from`` its value when these options' budget began.
    """

    time_limit_s: float = 60.0
    workers: int = 1
    seed: int = 0
    progress: Progress | None = None
    deterministic_time: float | None = None
    dominance: bool = True
    deadline: float | None = None
    method: str = "auto"
    every_hint: bool = False
    cuts: list[str] = field(default_factory=list, compare=False, repr=False)
    work: SpentWork = field(default_factory=SpentWork, compare=False, repr=False)
    work_from: float = 0.0

    def __post_init__(self) -> None:
        check_time_limit(self.time_limit_s, "time_limit_s")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or not 1 <= self.workers <= MAX_WORKERS:
            raise ConfigError(f"must be an integer from 1 to {MAX_WORKERS}, got {self.workers!r}", field="workers")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**31:
            raise ConfigError(f"must be an integer from 0 to 2^31 - 1, got {self.seed!r}", field="seed")
        if self.method not in METHODS:
            raise ConfigError(f"must be one of {', '.join(METHODS)}, got {self.method!r}", field="method")
        dt = self.deterministic_time
        if dt is not None and (isinstance(dt, bool) or not isinstance(dt, (int, float)) or not (math.isfinite(dt) and dt > 0)):
            raise ConfigError(f"must be a finite number > 0, got {dt!r}", field="deterministic_time")
        for flag in ("dominance", "every_hint"):  # the text "no" would switch them on
            require_bool(getattr(self, flag), flag)
        if self.progress is not None and not callable(self.progress):
            raise ConfigError(f"must be a function taking a line, or None, got {self.progress!r}", field="progress")
        if self.deadline is not None and (isinstance(self.deadline, bool) or not isinstance(self.deadline, (int, float))
                                          or not math.isfinite(self.deadline)):
            raise ConfigError(f"must be a time.monotonic() value (start() sets it), got {self.deadline!r}", field="deadline")

    def start(self, spent_s: float = 0.0) -> SolveOptions:
        """These options with the deadline fixed now, less ``spent_s`` seconds of the budget already
        spent (e.g. a command's start-up); unchanged when already started. Starting begins a request:
        its own record of cuts and of deterministic time spent, so that options used as a template
        for several requests give each the whole budget."""
        if self.deadline is not None:
            return self
        return replace(self, deadline=time.monotonic() + self.time_limit_s - spent_s, cuts=[], work=SpentWork(), work_from=0.0)

    def remaining_s(self) -> float:
        """Seconds left before the deadline (the whole budget when not started), never negative."""
        if self.deadline is None:
            return self.time_limit_s
        return max(0.0, self.deadline - time.monotonic())

    @property
    def expired(self) -> bool:
        """Whether the budget is spent; a spent budget is recorded as a cut (:attr:`cuts`)."""
        return not self.allows(0.0, "the time limit was reached")

    def allows(self, seconds: float, what: str) -> bool:
        """Whether more than ``seconds`` remain before the deadline; when not, ``what`` (the work the
        answer skips or stops) is recorded as a cut (:attr:`cuts`)."""
        if self.remaining_s() > seconds:
            return True
        self.cut(what)
        return False

    def cut(self, what: str) -> None:
        """Record that the wall-clock budget decided: ``what`` was skipped or stopped (:attr:`cuts`)."""
        self.cuts.append(what)

    def run(self, solver: cp_model.CpSolver, model: cp_model.CpModel,
            callback: cp_model.CpSolverSolutionCallback | None = None) -> cp_model.CpSolverStatus:
        """``solver.solve(model, callback)``, recording a cut when the solve ended on its wall-clock
        limit: unproven, before its deterministic limit (CP-SAT's status code is returned)."""
        from ortools.sat.python import cp_model

        from ppopt.solve.interrupt import stoppable

        with stoppable(solver), self._heartbeat():  # Ctrl-C ends the command, not only this solve
            code = solver.solve(model, callback)
        self.work.spent += solver.deterministic_time
        self.work.solves += 1
        if code == cp_model.MODEL_INVALID:  # ppopt's bug, never a result: a search reported 'invalid' and exited 0
            reason = " ".join(model.validate().split())[:300]
            raise PpoptError(f"internal error: CP-SAT rejected ppopt's model ({reason}); please report it with the command")
        settled = code in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
        if not settled and solver.deterministic_time < solver.parameters.max_deterministic_time:
            before = ", before its deterministic one" if self.deterministic_time is not None else ""
            self.cut(f"a CP-SAT solve stopped at its wall-clock time limit{before}")  # no seconds: a sweep row keeps it, and must not vary
        return code

    @contextlib.contextmanager
    def _heartbeat(self) -> Iterator[None]:
        """Inside the block, a progress line every :data:`HEARTBEAT_S` seconds: CP-SAT reports
        nothing until it finds a solution, and a long solve without one would look like a hang. (A
        thread: it beats while the solve releases Python's lock, which CP-SAT does for most of a
        solve but not all of it, so a beat may come late.)"""
        progress = self.progress
        if progress is None:
            yield
            return
        with heartbeat(lambda elapsed: progress(f"[{elapsed:7.2f}s] still solving"), HEARTBEAT_S):
            yield

    def share(self, parts: int) -> SolveOptions:
        """Options for the next of ``parts`` steps run one after another: an equal share of what
        remains (and of the deterministic time), ending no later than this deadline. With a
        deterministic budget the step's wall clock ends only at this deadline: its share of the
        deterministic time bounds it, and a wall-clock slice would decide results the time limit
        does not (a frontier 100 s inside a 300 s limit said "not reproducible": tail-bound solves
        ended on 0.52 s slices having used 5 % of their deterministic time)."""
        started = self.start()
        assert started.deadline is not None
        slice_end = time.monotonic() + started.remaining_s() / max(parts, 1)
        left = started.deterministic_left()
        # a deterministic budget spent (the steps before overran their shares) leaves the next steps a
        # sliver, as a spent wall-clock budget leaves them their hints: an option of 0 was refused,
        # and `frontier --deterministic-time 0.5` ended in an error on its own --deterministic-time
        dt = None if left is None else max(left / max(parts, 1), LEAST_DETERMINISTIC_SHARE)
        deadline = started.deadline if dt is not None else min(slice_end, started.deadline)
        return replace(started, deadline=deadline, deterministic_time=dt, work_from=started.work.spent)

    def deterministic_left(self) -> float | None:
        """What is left of these options' deterministic time (None without one), never negative."""
        if self.deterministic_time is None:
            return None
        return max(0.0, self.deterministic_time - (self.work.spent - self.work_from))

    def charge(self, units: float) -> None:
        """Count ``units`` of deterministic time as spent (work a solve does not count itself)."""
        self.work.spent += max(0.0, units)

    def reserve(self, seconds: float) -> SolveOptions:
        """These options (started) ending ``seconds`` earlier, never before now: the budget of a step
        that must leave time for work after it (e.g. printing a large schedule)."""
        started = self.start()
        assert started.deadline is not None
        return replace(started, deadline=max(time.monotonic(), started.deadline - seconds))

    def note(self, line: str) -> None:
        """Report one progress line (when progress is wanted)."""
        if self.progress is not None:
            self.progress(line)

    def solver(self, ops: int = 0):
        """A CP-SAT solver limited to the time that remains (call only when not expired), less
        :data:`READBACK_SHARE` of it for reading the answer back and reporting; for a model of
        ``ops`` ops, without the linear relaxation from :data:`NO_LP_OPS` ops on, or when the time
        is below :data:`LP_S_PER_OP` per op."""
        from ortools.sat.python import cp_model

        solver = cp_model.CpSolver()
        budget = (1 - READBACK_SHARE) * self.remaining_s()
        solver.parameters.max_time_in_seconds = budget
        solver.parameters.num_workers = self.workers
        short = budget < LP_S_PER_OP * ops
        if short and ops < NO_LP_OPS:  # the clock decided: a run with more time may differ
            self.cut(f"a CP-SAT solve of {ops:,} ops without its linear relaxation, the time left being short")  # no seconds, as below
        if short or ops >= NO_LP_OPS:
            solver.parameters.linearization_level = 0
            if self.workers > 1:  # the portfolio's LP workers set their own level: full solvers without LP only
                solver.parameters.subsolvers.extend(NO_LP_SUBSOLVERS)
        solver.parameters.random_seed = self.seed
        left = self.deterministic_left()
        if left is not None:
            solver.parameters.max_deterministic_time = left
        return solver


@contextlib.contextmanager
def heartbeat(say: Callable[[float], None], every_s: float, first_s: float | None = None) -> Iterator[None]:
    """While the block runs, ``say(seconds since it began)`` after ``first_s`` (default ``every_s``)
    and then every ``every_s``, from a daemon thread that ends with the block: progress for one step
    that reports nothing itself (a CP-SAT solve, one long simulation)."""
    began, stop = time.monotonic(), threading.Event()

    def beat() -> None:
        wait = every_s if first_s is None else first_s
        while not stop.wait(wait):
            say(time.monotonic() - began)
            wait = every_s

    thread = threading.Thread(target=beat, name="ppopt-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
