"""A lower bound by refutation: no schedule of a chain ends within a horizon T (time-indexed model).

For the linear placement with full backward (stage s alone on device s, a cap of K_s of its
activations, message delays between neighbours: :class:`ppopt.solve.relaxation.Chain`, in ticks),
"every op ends by T" is encoded with one Boolean ``started(o, t)`` per op o and tick t of its window:
o has started at or before t. Each op has a window [head, T - tail]: ``head`` is the longest path of
lags into it from the step's start, ``tail`` the longest path out of it to the step's end (its own
duration included), over the lags below. Then

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
this model proves T = 367 infeasible in 17 to 31 s (53,120 Booleans), and T = 368, 369 and 370 in
40, 63 and 140 s, so the 371-slot schedule ``search`` finds there is optimal
(``benchmarks/refute_bench.py``).
At p = 32, m = 128 it holds 335,360 Booleans and proves nothing in 200 s: it is for chains of a few
thousand ops (:data:`MAX_LITERALS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ppopt.ir import Kind
from ppopt.solve.options import SolveOptions
from ppopt.solve.relaxation import Chain

BUILD_S_PER_LITERAL = 5e-5
"""Seconds building the model takes per ``started`` Boolean, roughly: 1.6 s for 59,264 at p = 16,
m = 64 on a loaded core (27 us each), doubled. A horizon whose model would not be built before the
deadline is not tried: the build does not watch the clock."""

MAX_LITERALS = 150_000
"""Most ``started`` Booleans a refutation builds (the sum of the ops' windows): 53,120 at p = 16,
m = 64 take half a minute; 335,360 at p = 32, m = 128 prove nothing in 200 s."""


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
    outgoing: list[list[tuple[int, int]]] = [[] for _ in ops]
    for a, b, lag in lags:
        assert a < b  # the ids are topological
        outgoing[a].append((b, lag))
    head = [0] * len(ops)
    for a in range(len(ops)):
        for b, lag in outgoing[a]:
            head[b] = max(head[b], head[a] + lag)
    tail = list(duration)
    for a in reversed(range(len(ops))):
        for b, lag in outgoing[a]:
            tail[a] = max(tail[a], lag + tail[b])
    return Graph(ops, tuple(s for _, _, s in ops), duration, tuple(lags), tuple(head), tuple(tail))


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
    model = cp_model.CpModel()
    first = graph.head  # started then at the earliest
    after = [horizon - t for t in graph.tail]  # started by then at the latest
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
            assert earlier is not False  # the heads hold every lag
            model.add_implication(literal(b, t), earlier)
    _one_at_a_time(model, graph, horizon, after, literal)
    solver = options.solver()
    solver.parameters.max_time_in_seconds = max(0.01, options.remaining_s())
    # no linear relaxation (the model's LP is weak: HiGHS found it feasible at 365 slots at 16 x 64)
    # and one presolve pass: 367 refuted there in 17 to 28 s against 26 to 44 s with the defaults
    solver.parameters.linearization_level = 0
    solver.parameters.max_presolve_iterations = 1
    code = options.run(solver, model)
    if code == cp_model.INFEASIBLE:
        return Refutation("infeasible")
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Refutation("unknown")

    def start(o: int) -> int:
        return next((t for t in range(first[o], after[o]) if (o, t) in started and solver.value(started[o, t])), after[o])

    return Refutation("feasible", {op: start(o) for o, op in enumerate(graph.ops)})


def _one_at_a_time(model: cp_model.CpModel, graph: Graph, horizon: int, after: Sequence[int], literal) -> None:
    """Per device and tick, at most one op running: started by t and not by t - d (``after``: each
    op's latest start)."""
    by_device: dict[int, list[int]] = {}
    for o, d in enumerate(graph.device):
        if graph.duration[o] > 0:
            by_device.setdefault(d, []).append(o)
    for ops in by_device.values():
        for t in range(horizon):
            terms, constant = [], 0
            for o in ops:
                if t < graph.head[o] or t - graph.duration[o] >= after[o]:
                    continue  # not running at t in any schedule of the windows
                for value, sign in ((literal(o, t), 1), (literal(o, t - graph.duration[o]), -1)):
                    if isinstance(value, bool):
                        constant += sign * value
                    else:
                        terms.append(sign * value)
            if terms:
                model.add(sum(terms) <= 1 - constant)


def time_indexed_bound(graph: Graph, horizons: Sequence[int], options: SolveOptions,
                       progress=None) -> tuple[int | None, Refutation | None]:
    """Refute ``horizons`` in turn (ascending), each with the time left: the highest refuted plus
    one (None if none was), and the first horizon's model that is feasible (its schedule), if one
    is. Stops at the first that is not refuted, or whose model could not be built in the time left
    (:data:`BUILD_S_PER_LITERAL`)."""
    proven, found = None, None
    for horizon in horizons:
        if not options.allows(BUILD_S_PER_LITERAL * graph.literals(horizon), "a time-indexed refutation not built"):
            break
        result = refute(graph, horizon, options)
        if progress is not None:
            progress(horizon, result.status)
        if result.status != "infeasible":
            found = result if result.status == "feasible" else None
            break
        proven = horizon + 1
    return proven, found
