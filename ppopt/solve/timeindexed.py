"""A lower bound by refutation: no schedule of a chain ends within a horizon T (time-indexed model).

For the linear placement with full backward (stage s alone on device s, a cap of K_s of its
activations, message delays between neighbours: :class:`ppopt.solve.relaxation.Chain`, in ticks),
"every op ends by T" is encoded with one Boolean ``started(o, t)`` per op o and tick t of its window:
o has started at or before t. Each op has a window [head, T - tail]: ``head`` is the longest path of
lags into it from the step's start, ``tail`` the longest path out of it to the step's end (its own
duration included), over the lags below, each raised by the work its device must run before it and
after it (:func:`_windows`). Then

- ``started(o, t)`` implies ``started(o, t + 1)`` (an op starts once);
- a lag of L ticks from a to b: ``started(b, t)`` implies ``started(a, t - L)``. The lags are the data
  dependencies (F_s(i) to F_{s+1}(i): F_s plus the message; F on the last device to its B; B_{s+1}(i)
  to B_s(i): B_{s+1} plus the message), the order of microbatches on every device (F_s(i) to
  F_s(i + 1), B_s(i) to B_s(i + 1): their durations) and the cap (B_s(i) to F_s(i + K_s): B_s);
- one op at a time per device: for every tick t, the ops running at t (started by t and not by
  t - d) number at most one.

**Validity.** By the relabelling argument of :mod:`ppopt.solve.model` (dominance rule) some optimal
schedule runs microbatches in order on every stage; in it at most K_s activations are live, so
F_s(i + K_s) waits for the end of B_s(i) (as in :mod:`ppopt.solve.heads`), and every lag above is met
(messages only add to them: a message that waits for a busy link arrives later still). If that
schedule ended by T, its start times would satisfy every constraint: so when CP-SAT proves the model
infeasible, every schedule of the space takes more than T ticks, and T + 1 is a lower bound. Durations
and delays in ticks are rounded down (:mod:`ppopt.solve.ticks`), so the bound holds for the real
durations too. A feasible model gives start times meeting every lag and the devices' one-at-a-time
rule: a schedule of at most T ticks.

Why it helps: the same question asked of the interval model (:mod:`ppopt.solve.model`) is harder for
CP-SAT. Measured at p = 16, m = 64, cap 16, one-slot messages (unit costs F = 1, B = 2; one worker):
the interval model with the block cuts of every size reaches a bound of 368 slots in 600 s, where
this model proves T = 367 infeasible in 2.4 s (26,240 ``started`` Booleans), and T = 368, 369 and
370 in 3.8, 8.0 and 24.8 s, so the 371-slot schedule ``search`` finds there is optimal (``benchmarks/refute_bench.py``;
with the longest paths of lags alone as windows, twice the Booleans, and one presolve pass, it took
17 to 31 s for 367 and 140 s for 370). At p = 32, m = 128 it refutes 737, 739 and 741 slots in 15,
27 and 85 s in one run (145,920 to 178,688 ``started`` Booleans), 737 and 738 in 18.3 and 28.5 s in
another (:func:`time_indexed_bound`): more than a one-minute search leaves it, so it is for chains of
a few thousand ops (:data:`MAX_LITERALS`).

**A search in the same model** (:func:`shorten`). With every op's window cut to a few ticks either
way of its start in a schedule, the model is a neighbourhood of that schedule (a large-neighbourhood
search: Shaw, CP 1998, as in :mod:`ppopt.solve.lns`), small enough to solve for the earliest end
at tens of thousands of ops. Each answer is the next schedule. Measured from 1F1B at p = 32,
m = 128 (one worker, windows of 6 ticks, ``benchmarks/radius_bench.py``): 785 slots to 755 in five
steps and 27 s, each step moving the end by its whole radius, where the window search and the whole-model solve reach 763 in
a minute.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from ppopt.ir import Kind
from ppopt.solve.lns import STEP_FLOOR_S
from ppopt.solve.options import SolveOptions
from ppopt.solve.relaxation import Chain

BUILD_S_PER_LITERAL = 5e-5
"""Seconds building the model takes per ``started`` Boolean, roughly: 25 to 32 us each, measured
at p = 32, m = 128 and 256 (the refutation's models and :func:`shorten`'s steps, hints included),
doubled at the low end. A horizon whose model would not be built before the
deadline is not tried: the build does not watch the clock."""

MAX_LITERALS = 170_000
"""Most ``started`` Booleans a refutation builds (the sum of the ops' windows): 26,240 at p = 16,
m = 64 take 2.4 s; 162,304 at p = 32, m = 256 (1,364 slots) 7.0 s; 178,688 at p = 32, m = 128
(741 slots) take 85 s."""


@dataclass(frozen=True)
class Graph:
    """A chain's ops for m microbatches (F_s(i) and B_s(i), ids in a topological order), each op's
    device, duration and lags (from, to, ticks), and each op's head and tail (ticks)."""

    ops: tuple[tuple[Kind, int, int], ...]  # (kind, microbatch, stage)
    device: tuple[int, ...]
    duration: tuple[int, ...]
    lags: tuple[tuple[int, int, int], ...]
    head: tuple[int, ...]
    tail: tuple[int, ...]

    @property
    def shortest(self) -> int:
        """No schedule ends sooner: the longest path from start to end (ticks)."""
        return max(h + t for h, t in zip(self.head, self.tail))

    def literals(self, horizon: int) -> int:
        """The ``started`` Booleans of the model for ``horizon`` (sum of the windows)."""
        return sum(max(0, horizon - t - h) for h, t in zip(self.head, self.tail))


def chain_graph(chain: Chain, microbatches: int) -> Graph:
    """The ops, lags, heads and tails of ``chain`` for ``microbatches`` (module docstring)."""
    p, last = chain.devices, chain.devices - 1
    ids: dict[tuple[Kind, int, int], int] = {}
    for i in range(microbatches):  # microbatch by microbatch, forwards up then backwards down: topological
        for s in range(p):
            ids[Kind.F, i, s] = len(ids)
        for s in reversed(range(p)):
            ids[Kind.B, i, s] = len(ids)
    ops = tuple(ids)
    duration = tuple(chain.duration(s, kind) for kind, _, s in ops)
    forward = [chain.duration(s, Kind.F) for s in range(p)]
    backward = [chain.duration(s, Kind.B) for s in range(p)]
    lags = []
    for i in range(microbatches):
        for s in range(last):
            lags.append((ids[Kind.F, i, s], ids[Kind.F, i, s + 1], forward[s] + chain.delay(s, s, s + 1)))
            lags.append((ids[Kind.B, i, s + 1], ids[Kind.B, i, s], backward[s + 1] + chain.delay(s + 1, s + 1, s)))
        lags.append((ids[Kind.F, i, last], ids[Kind.B, i, last], forward[last]))
        for s in range(p):
            if i + 1 < microbatches:
                lags.append((ids[Kind.F, i, s], ids[Kind.F, i + 1, s], forward[s]))
                lags.append((ids[Kind.B, i, s], ids[Kind.B, i + 1, s], backward[s]))
            cap = chain.caps[s]
            if cap is not None and i + cap < microbatches:
                lags.append((ids[Kind.B, i, s], ids[Kind.F, i + cap, s], backward[s]))
    head, tail = _windows(ops, duration, lags, microbatches, p)
    return Graph(ops, tuple(s for _, _, s in ops), duration, tuple(lags), tuple(head), tuple(tail))


def _windows(ops: Sequence[tuple[Kind, int, int]], duration: Sequence[int], lags: Sequence[tuple[int, int, int]],
             microbatches: int, devices: int) -> tuple[list[int], list[int]]:
    """Each op's head and tail (ticks): the longest paths of lags into it and out of it (its own
    duration in the tail), raised by what its device must run before it and after it.

    **Device bounds.** Every lag out of an op is at least its duration, so an op's ancestors in the
    graph of lags end before it starts, and its descendants start after it ends. On its device the
    ancestors are F(0..a) and B(0..b) for some a and b (the microbatch order makes them prefixes),
    run one at a time, each no earlier than its head: the op starts no earlier than the least time by
    which they can all have run (:func:`_busy_until`). Likewise its device's descendants, suffixes of
    F and B, run one at a time after it ends, each followed by its tail less its duration. At p = 16,
    m = 64, cap 16, one-slot messages, this raises the longest path from 342 to 357 slots and halves
    the model at 367 slots (26,240 Booleans instead of 53,120)."""
    outgoing: list[list[tuple[int, int]]] = [[] for _ in ops]
    incoming: list[list[tuple[int, int]]] = [[] for _ in ops]
    for a, b, lag in lags:
        assert a < b and lag >= duration[a]  # the ids are topological; an ancestor ends before its descendant starts
        outgoing[a].append((b, lag))
        incoming[b].append((a, lag))
    index = {(kind, i, s): o for o, (kind, i, s) in enumerate(ops)}
    kinds = (Kind.F, Kind.B)
    # latest[o][k, d]: the highest microbatch whose op of kind k on device d is an ancestor of o (-1: none)
    latest = np.full((len(ops), 2, devices), -1, dtype=np.int64)
    for b in range(len(ops)):
        for a, _ in incoming[b]:
            kind, i, s = ops[a]
            np.maximum(latest[b], latest[a], out=latest[b])
            latest[b, kinds.index(kind), s] = max(latest[b, kinds.index(kind), s], i)
    earliest = np.full((len(ops), 2, devices), microbatches, dtype=np.int64)  # the lowest descendant
    for a in reversed(range(len(ops))):
        for b, _ in outgoing[a]:
            kind, i, s = ops[b]
            np.minimum(earliest[a], earliest[b], out=earliest[a])
            earliest[a, kinds.index(kind), s] = min(earliest[a, kinds.index(kind), s], i)
    work = {(k, s): duration[index[kind, 0, s]] for k, kind in enumerate(kinds) for s in range(devices)}
    heads = np.zeros((2, devices, microbatches), dtype=np.int64)  # by kind, device, microbatch
    head = [0] * len(ops)
    for b, (kind, i, s) in enumerate(ops):
        reach = latest[b, :, s] + 1  # how many of each kind run before it on its device
        head[b] = max([_busy_until(heads[0, s, :reach[0]], heads[1, s, :reach[1]], work[0, s], work[1, s])]
                      + [head[a] + lag for a, lag in incoming[b]])
        heads[kinds.index(kind), s, i] = head[b]
    rests = np.zeros((2, devices, microbatches), dtype=np.int64)  # tail less duration, by kind, device, microbatch
    tail = list(duration)
    for a in reversed(range(len(ops))):
        kind, i, s = ops[a]
        since = earliest[a, :, s]  # the first of each kind to run after it on its device
        # the suffixes reversed, so that each is nondecreasing
        after = _busy_until(rests[0, s, since[0]:][::-1], rests[1, s, since[1]:][::-1], work[0, s], work[1, s])
        tail[a] = max([duration[a] + after] + [lag + tail[b] for b, lag in outgoing[a]])
        rests[kinds.index(kind), s, i] = tail[a] - duration[a]
    return head, tail


def _busy_until(first: np.ndarray, second: np.ndarray, first_each: int, second_each: int) -> int:
    """The least time (ticks) by which one device can have run two lists of ops, ``first_each`` and
    ``second_each`` ticks each, none before its release (``first`` and ``second``, each
    nondecreasing): the greatest r + the work released at r or later, over the releases r. This is
    the value of Jackson's schedule with no tails (:func:`ppopt.solve.heads.jackson`; Carlier, "The
    one-machine sequencing problem", 1982): the ops released at r or later all run after r, one at a
    time, and the schedule that runs them in release order with no needless idle time meets it."""
    best = 0
    for own, other, own_each, other_each in ((first, second, first_each, second_each),
                                             (second, first, second_each, first_each)):
        if len(own):
            later = own_each * (len(own) - np.searchsorted(own, own, "left")) \
                + other_each * (len(other) - np.searchsorted(other, own, "left"))
            best = max(best, int((own + later).max()))
    return best


@dataclass(frozen=True)
class Refutation:
    """What the model of one horizon gave: ``"infeasible"`` (no schedule ends by it), ``"feasible"``
    (``starts``, ticks, by op of :attr:`Graph.ops`, end by it) or ``"unknown"`` (out of time)."""

    status: str
    starts: dict[tuple[Kind, int, int], int] | None = None


def refute(graph: Graph, horizon: int, options: SolveOptions) -> Refutation:
    """Whether some schedule of ``graph`` ends by ``horizon`` ticks (module docstring), within
    ``options``' time and deterministic time."""
    if graph.shortest > horizon:
        return Refutation("infeasible")
    built = _build(graph, horizon, graph.head, [horizon - t for t in graph.tail])
    solver = _solver(options)
    code = options.run(solver, built.model)
    if code == cp_model.INFEASIBLE:
        return Refutation("infeasible")
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Refutation("unknown")
    return Refutation("feasible", built.starts(solver))


@dataclass(frozen=True)
class _Built:
    """A time-indexed model: ``started[o, t]`` for the ticks t of op o's window [first, after)
    (before it: false; from ``after[o]`` on: true)."""

    model: cp_model.CpModel
    graph: Graph
    first: Sequence[int]
    after: Sequence[int]
    started: dict[tuple[int, int], cp_model.IntVar]

    def starts(self, solver: cp_model.CpSolver) -> dict[tuple[Kind, int, int], int]:
        """Each op's start (ticks) in the solver's solution."""
        def start(o: int) -> int:
            return next((t for t in range(self.first[o], self.after[o]) if solver.value(self.started[o, t])), self.after[o])

        return {op: start(o) for o, op in enumerate(self.graph.ops)}


def _build(graph: Graph, horizon: int, first: Sequence[int], after: Sequence[int]) -> _Built:
    """The model of "every op of ``graph`` starts within [first, after] (ticks) and every lag and
    the devices' one-at-a-time rule hold" (module docstring); ``first`` at least the heads and
    ``after`` at most ``horizon`` less the tails, so that the lags' implications stay in range."""
    model = cp_model.CpModel()
    started: dict[tuple[int, int], cp_model.IntVar] = {}

    def literal(o: int, t: int):
        """started(o, t): a constant outside the window."""
        if t < first[o]:
            return False
        if t >= after[o]:
            return True
        if (o, t) not in started:
            started[o, t] = model.new_bool_var("")
        return started[o, t]

    for o in range(len(graph.ops)):
        for t in range(first[o] + 1, after[o]):
            model.add_implication(literal(o, t - 1), literal(o, t))
    for a, b, lag in graph.lags:
        for t in range(first[b], after[b]):
            earlier = literal(a, t - lag)
            if earlier is True:  # and at every later t
                break
            assert earlier is not False  # the windows hold every lag (first[b] >= first[a] + lag)
            model.add_implication(literal(b, t), earlier)
    _one_at_a_time(model, graph, horizon, first, after, literal)
    return _Built(model, graph, first, after, started)


def _solver(options: SolveOptions) -> cp_model.CpSolver:
    """A solver for a time-indexed model within ``options``: no linear relaxation (the model's LP is
    weak: HiGHS found it feasible at 365 slots at 16 x 64) and no presolve (it finds little in
    clauses this plain, at a high cost: 733 slots at 32 x 128 refuted in 4.8 s instead of 27.6 s with
    one presolve pass, 737 in 27 s instead of 56, 367 at 16 x 64 in 3.6 s instead of 6.9; one
    worker, one run each)."""
    solver = options.solver()
    solver.parameters.max_time_in_seconds = max(0.01, options.remaining_s())
    solver.parameters.linearization_level = 0
    solver.parameters.cp_model_presolve = False
    return solver


def _one_at_a_time(model: cp_model.CpModel, graph: Graph, horizon: int, first: Sequence[int], after: Sequence[int],
                   literal) -> None:
    """Per device and tick, at most one op running (``first`` and ``after``: each op's earliest and
    latest start). An op o
    runs at t when it has started by t and not by t - d: a Boolean ``running(o, t)`` is implied by
    that, and the device's ``running`` Booleans of t are at most one (a clique, which CP-SAT's SAT
    core propagates and learns from better than the linear row "started minus started earlier, summed,
    at most one" it replaces: at 16 x 64, 370 slots refuted in 24 s instead of 46; at 32 x 128, 741
    in 85 s, building included, where the linear row took 141 s without it; one worker). A real schedule sets ``running`` to whether the op runs, so
    no schedule is lost; a model that is feasible has at most one op running per device and tick."""
    ticks: dict[int, list[list[int]]] = {}  # device -> tick -> the ops that may run then, in id order
    for o, d in enumerate(graph.device):
        if graph.duration[o] > 0:
            if d not in ticks:
                ticks[d] = [[] for _ in range(horizon)]
            on = ticks[d]
            for t in range(first[o], min(horizon, after[o] + graph.duration[o])):
                on[t].append(o)
    for on in ticks.values():
        for t, ops in enumerate(on):
            running, surely = [], 0
            for o in ops:
                started, before = literal(o, t), literal(o, t - graph.duration[o])
                if started is False or before is True:
                    continue  # not started by t, or ended by then
                if started is True and before is False:
                    surely += 1  # running at t in every schedule of the windows
                    continue
                runs = model.new_bool_var("")
                model.add_bool_or([*([] if started is True else [started.Not()]), *([] if before is False else [before]), runs])
                running.append(runs)
            if surely > 1:  # ops whose windows are one tick each overlap: no schedule
                model.add_bool_or([])
            elif surely == 1:
                for runs in running:
                    model.add(runs == 0)
            elif len(running) > 1:
                model.add_at_most_one(running)


def time_indexed_bound(graph: Graph, horizons: Sequence[int], options: SolveOptions,
                       progress=None) -> tuple[int | None, Refutation | None]:
    """Refute ``horizons`` in turn (ascending), each with the time left: the highest refuted plus
    one (None if none was), and the first horizon's model that is feasible (its schedule), if one
    is. Stops at the first that is not refuted, or whose model could not be built in the time left
    (:data:`BUILD_S_PER_LITERAL`).

    A horizon whose model is over :data:`MAX_LITERALS` is told to ``progress`` as ``"too large"``;
    the ladder then goes on one tick at a time from the highest refuted, over the horizons below it
    whose models are within the limit (so that a rung out of reach does not leave the time of the
    rungs between unused). A horizon is not started when less time is left than the last refutation
    took (told as ``"no time"``): the nearer a horizon lies to the optimum, the longer its proof,
    so it would be cut short and prove nothing. Measured at p = 32, m = 128 (cap 32, one-slot
    messages, one worker, ``benchmarks/refute_bench.py``): 726, 729, 733, 734 and 735 slots refuted
    in 1.5, 3.5, 6.7, 10.3 and 13.9 s; 737 and 738 in 18.3 and 28.5 s."""
    proven, found, last_s = None, None, 0.0
    say = progress or (lambda horizon, status: None)
    queue = list(horizons)
    while queue:
        horizon = queue.pop(0)
        literals = graph.literals(horizon)
        if literals > MAX_LITERALS:
            say(horizon, "too large")
            if proven is None:
                break
            queue = [h for h in range(proven, horizon) if graph.literals(h) <= MAX_LITERALS]
            continue
        if not options.allows(BUILD_S_PER_LITERAL * literals, "a time-indexed refutation not built"):
            break
        if not options.allows(last_s, "a time-indexed refutation not started"):
            say(horizon, "no time")
            break
        began = time.monotonic()
        result = refute(graph, horizon, options)
        last_s = time.monotonic() - began
        say(horizon, result.status)
        if result.status != "infeasible":
            found = result if result.status == "feasible" else None
            break
        proven = horizon + 1
    return proven, found


STEP_RADIUS = 6
"""Most ticks an op may move either way from its place in the incumbent, in a step of
:func:`shorten` (fewer when the model would be over :data:`MAX_STEP_LITERALS`). Measured from 1F1B
at p = 32, m = 128 (cap 32, one-slot messages, one worker, 42 s each, ``benchmarks/radius_bench.py``):
a radius of 6 moves the end by its whole radius each step, to 755 slots in 26.7 s; one of 4 reaches
757 in 24.1 s; radii of 8 and 12 reach 761 in 18.0 and 17.8 s and then stall there (their steps
find nothing in 15 units of deterministic time)."""
MIN_RADIUS = 3
"""The least radius worth a step (:func:`step_radius`)."""
MAX_STEP_LITERALS = 125_000
"""Most ``started`` Booleans of a step's model (about 3.5 s to build). Steps whose end moves by their
whole radius take about as long per tick gained at any radius, but large models stall sooner:
measured from 1F1B at p = 32, m = 256 (one worker, 41 s each, ``benchmarks/radius_bench.py``),
windows of 4 ticks (121,126 Booleans) reach 1,402 slots in four steps and 31.5 s, windows of 6
(178,768) 1,405 in two and 24.2 s, and then nothing. At p = 16, m = 1,024 even
3 ticks are over the limit, and the window search runs instead (:func:`step_radius`)."""
RADIUS_GROWTH = 2
"""Ticks the radius grows by after a step that did not shorten the incumbent."""
STEP_DETERMINISTIC_S = 15.0
"""CP-SAT deterministic time per step of :func:`shorten`."""


@dataclass(frozen=True)
class Shortened:
    """What :func:`shorten` gave: the best starts (ticks, by op of :attr:`Graph.ops`), their end, the
    steps solved, how many shortened the incumbent and when the last did (seconds since ``since``)."""

    starts: dict[tuple[Kind, int, int], int]
    end: int
    steps: int
    improvements: int
    time_to_best_s: float | None


def lags_hold(graph: Graph, starts: dict[tuple[Kind, int, int], int]) -> bool:
    """Whether ``starts`` (ticks) meet every lag of ``graph`` and its devices run one op at a time:
    a schedule of the model, which :func:`shorten` can start from."""
    at = [starts[op] for op in graph.ops]
    if any(at[b] < at[a] + lag for a, b, lag in graph.lags) or any(t < h for t, h in zip(at, graph.head)):
        return False
    by_device: dict[int, list[tuple[int, int]]] = {}
    for o, d in enumerate(graph.device):
        by_device.setdefault(d, []).append((at[o], at[o] + graph.duration[o]))
    ordered = [sorted(spans) for spans in by_device.values()]
    return all(a[1] <= b[0] for spans in ordered for a, b in zip(spans, spans[1:]))


def _step_windows(graph: Graph, current: Sequence[int], end: int, radius: int) -> tuple[list[int], list[int]]:
    """Each op's earliest and latest start (ticks) in a step of :func:`shorten`: ``radius`` either
    way of ``current``, within the head and ``end`` less the tail."""
    first = [max(h, t - radius) for h, t in zip(graph.head, current)]
    after = [min(end - tail, t + radius) for tail, t in zip(graph.tail, current)]
    return first, after


def _size(first: Sequence[int], after: Sequence[int]) -> int:
    """The ``started`` Booleans of a model whose ops start within [first, after] (ticks)."""
    return sum(a - f for f, a in zip(first, after))


def step_radius(graph: Graph, starts: dict[tuple[Kind, int, int], int]) -> int | None:
    """The radius of :func:`shorten`'s first step from ``starts``: :data:`STEP_RADIUS`, or less so
    that the model holds at most :data:`MAX_STEP_LITERALS` Booleans; None under :data:`MIN_RADIUS`."""
    current = [starts[op] for op in graph.ops]
    end = max(t + d for t, d in zip(current, graph.duration))
    return next((radius for radius in range(STEP_RADIUS, MIN_RADIUS - 1, -1)
                 if _size(*_step_windows(graph, current, end, radius)) <= MAX_STEP_LITERALS), None)


def shorten(graph: Graph, starts: dict[tuple[Kind, int, int], int], radius: int, options: SolveOptions,
            lower: int = 0, shown=str, since: float | None = None) -> Shortened:
    """Shorten a schedule of ``graph`` (``starts``, ticks, meeting :func:`lags_hold`) step by step
    until ``options``' budget is spent: each step solves the time-indexed model (module docstring)
    of the incumbent's end, with every op's window cut to ``radius`` ticks either way of its
    incumbent start (:func:`step_radius`), for the earliest end (the start of the one op without
    successors), hinted with the incumbent. The answer becomes the incumbent, shorter or not (its
    windows differ next time); a step that does not shorten it widens the radius by
    :data:`RADIUS_GROWTH` while the model stays within :data:`MAX_STEP_LITERALS`. The steps use
    CP-SAT's core-based search (it proves the earliest end of a window by raising a lower bound)
    until one ends without an answer; from then on the default search, which reports the
    improvements it finds on the way. Measured from 1F1B with the radii of an earlier setting (one
    worker): at p = 32, m = 128, radius 12, the core-based steps reach 773 and 761 slots in 4.2 and
    5.3 s of solving, the default ones in 8.7 and 9.9 s; but the third core-based step found nothing
    in its 15 units, where the default one found 760. At 32 x 256, radius 6, the core-based steps
    reach 1,411 and 1,405 in 24 s, the default ones 1,411 and 1,409 in 32 s. Every answer meets
    the model's constraints, so it is a schedule of the chain. Reproducible: each step is limited by
    :data:`STEP_DETERMINISTIC_S` of CP-SAT's deterministic time (and charged at least
    :data:`ppopt.solve.lns.STEP_FLOOR_S`) and seeded with ``options.seed`` plus its number. It stops
    early when the end reaches ``lower`` (ticks, a lower bound), or when a step whose windows hold
    every start the graph allows is solved to optimality (then no schedule is shorter). ``shown`` writes a makespan in ticks for the progress lines, whose times
    count from ``since`` (``time.monotonic()``; None: this call's start)."""
    began = time.monotonic() if since is None else since
    sink = next(o for o in reversed(range(len(graph.ops))) if all(a != o for a, _, _ in graph.lags))
    current = [starts[op] for op in graph.ops]
    end = max(t + d for t, d in zip(current, graph.duration))
    steps, improvements, when, core = 0, 0, None, True
    while end > lower and (left := options.deterministic_left()) != 0:
        first, after = _step_windows(graph, current, end, radius)
        literals = _size(first, after)
        if not options.allows(BUILD_S_PER_LITERAL * literals, "the time-indexed search stopped"):
            break
        built = _build(graph, end, first, after)
        # the fewest ticks of its window before the last op has started: its earliest start
        built.model.minimize(sum(1 - built.started[sink, t] for t in range(first[sink], after[sink])))
        for (o, t), started in built.started.items():
            built.model.add_hint(started, t >= current[o])
        solver = _solver(options)
        solver.parameters.random_seed = options.seed + steps
        solver.parameters.max_deterministic_time = STEP_DETERMINISTIC_S if left is None else min(STEP_DETERMINISTIC_S, left)
        solver.parameters.optimize_with_core = core
        code = options.run(solver, built.model)
        options.charge(STEP_FLOOR_S - solver.deterministic_time)  # every step costs at least the floor
        steps += 1
        whole = all(f == h for f, h in zip(first, graph.head)) and all(a == end - t for a, t in zip(after, graph.tail))
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            found = built.starts(solver)
            current = [found[op] for op in graph.ops]
        if current[sink] + graph.duration[sink] < end:
            end, improvements, when = current[sink] + graph.duration[sink], improvements + 1, time.monotonic() - began
            options.note(f"[{when:7.2f}s] time-indexed step {steps}: makespan {shown(end)} ({literals:,} Booleans)")
        elif code == cp_model.OPTIMAL and whole:
            break  # no schedule ends sooner
        elif core and code != cp_model.OPTIMAL:
            core = False  # the core-based search stalled: the default one from now on
        else:
            if _size(*_step_windows(graph, current, end, radius + RADIUS_GROWTH)) <= MAX_STEP_LITERALS:
                radius += RADIUS_GROWTH
    return Shortened(dict(zip(graph.ops, current)), end, steps, improvements, when)
