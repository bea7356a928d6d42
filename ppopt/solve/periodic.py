"""Steady-state (periodic) search: the best repeating pattern, and the full schedule it gives for any m.

Pipeline schedules repeat a pattern in their steady state: Tessel searches such a *repetend* and
composes warm-up, repetitions and cool-down around it (Lin et al., "Tessel: Boosting Distributed
Execution of Large DNN Models via Flexible Schedule Search", HPCA 2024, section 4), and the zero-bubble
schedules are built from their steady state (Qi et al., "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024,
section 3). Here, for the linear placement with full backward (one stage per device):

**The pattern.** k microbatches enter device 0 at offsets 0 = t_0 < t_1 < ... < t_{k-1} < P, and
microbatch j + n·k enters at t_j + n·P. Every microbatch then runs *without waiting*: its forward on
stage s starts a_s after it entered (the forwards and messages below s), its backward on stage s
starts b_s after (up to the top and back). So device s runs the ops of the pattern at the times
t_j + a_s and t_j + b_s modulo P, each period. CP-SAT finds offsets such that

- no two ops of a device overlap modulo P: the ops of microbatches entering d apart meet exactly
  when d falls on a few residues modulo P (:func:`_clashes`), so each pair of offsets has its
  difference kept off them (exact when every op is shorter than P);
- at most K_s activations are live on device s: microbatch j's activation lives
  l_s = b_s + B_s - a_s, that is q_s = floor(l_s / P) whole periods plus a remainder r_s, so at any time
  k·q_s of them are live plus those whose remainder covers the time (a circular cumulative of capacity
  K_s - k·q_s over intervals of length r_s, each with its copy shifted by P; only where that
  capacity is under k, since otherwise it cannot bind).

The least period P for which offsets exist is searched upward from the **rate bound**
P >= max_s max(k (F_s + B_s), k l_s / K_s): any schedule keeps device s busy F_s + B_s per microbatch,
and each activation lives at least l_s with at most K_s live (the memory-lifetime bound of
:mod:`ppopt.solve.bounds` per microbatch). When the pattern meets that bound its period is optimal among
*all* schedules, not only periodic or no-wait ones; the rate bound holds for any m.

**Any m.** Taking the first m microbatches of the repeating pattern is itself a schedule (warm-up
and cool-down are the pattern with microbatches missing: no new overlap, no more live activations,
and every dependency met without waiting). Its step is t_{(m-1) mod k} + floor((m-1)/k)·P + l_0, and
the offsets are chosen to minimise it for the requested m.

Times are ticks (:mod:`ppopt.solve.ticks`); the schedule is re-timed by the simulator like any other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from ppopt.ir import Kind, Op, Schedule
from ppopt.solve.options import SolveOptions

PERIODIC = "periodic"
"""Name of the composed periodic schedule (a hint of ppopt's own, like the greedy one)."""

MAX_PATTERN = 64
"""Most microbatches in one pattern (the model has k·(k - 1)/2 difference constraints, and up to
2·k·p intervals for the memory caps)."""
MAX_TRIES = 12
"""Periods tried above the rate bound before giving up."""


@dataclass(frozen=True)
class Pattern:
    """A repeating pattern (ticks): ``k`` microbatches every ``period``, entering at ``offsets``."""

    k: int
    period: int
    offsets: tuple[int, ...]
    rate_bound: float  # least period for k microbatches any schedule allows (ticks)
    step: int  # of the composed schedule for the requested m at the pattern's no-wait timing (ticks): at least its simulated step

    @property
    def optimal(self) -> bool:
        """Whether the period meets the rate bound: no pattern runs microbatches faster. A period of
        the bound rounded up to a tick is the least for ``k`` microbatches, but not optimal: where
        the bound is fractional (m < K, or caps that differ per device) a pattern of more
        microbatches can run faster (3 every 14 slots against a bound of 13.5, when 4 run every 18)."""
        return self.period <= self.rate_bound + 1e-9


def _offsets(stages: int, forward: list[int], backward: list[int], up: list[int], down: list[int]) -> tuple[list[int], list[int]]:
    """a_s and b_s: when microbatch's forward and backward start on stage s, after it entered."""
    a = [0] * stages
    for s in range(1, stages):
        a[s] = a[s - 1] + forward[s - 1] + up[s - 1]
    b = [0] * stages
    b[-1] = a[-1] + forward[-1]
    for s in range(stages - 2, -1, -1):
        b[s] = b[s + 1] + backward[s + 1] + down[s + 1]
    return a, b


def _clashes(period: int, a, b, forward, backward) -> set[int] | None:
    """The residues modulo ``period`` of t_j - t_i at which microbatch j's ops meet microbatch i's on
    some device (ticks), or None when one microbatch's own forward and backward meet modulo the period.

    On device s a microbatch entering at t runs [t + x, t + x + l) for its ops (x, l) = (a_s, F_s) and
    (b_s, B_s). Two intervals [x, x + l1) and [y, y + l2) meet on a circle of length P (each shorter
    than P) when (y - x) mod P lies in (-l2, l1); with y shifted by d = t_j - t_i, when d is congruent
    to x - y + r for an integer r in (-l2, l1)."""
    clash: set[int] = set()
    for s in range(len(a)):
        ops = [(x, length) for x, length in ((a[s], forward[s]), (b[s], backward[s])) if length > 0]
        for n, (x, l1) in enumerate(ops):
            for m, (y, l2) in enumerate(ops):
                residues = {(x - y + r) % period for r in range(1 - l2, l1)}
                if n != m and 0 in residues:
                    return None
                clash |= residues
    return clash


def _solve_period(k: int, period: int, a, b, forward, backward, caps, last: int, options: SolveOptions) -> list[int] | None:
    """Offsets for a pattern of k microbatches with this period, minimising offset ``last``, or None.

    The offsets increase within [0, period), so each difference t_j - t_i (i < j) lies in
    [1, period) and must avoid the clashing residues (:func:`_clashes`): one constraint per pair,
    which CP-SAT propagates on the differences themselves. An earlier model placed every op as an
    interval in a circular no-overlap per device (4·k·p intervals): at p = 32, k = 32, given 7 s, it
    found 160 slots in 5.2 s where this one finds the optimal 158 in 0.10 s
    (``benchmarks/periodic_bench.py``, which keeps that model as its baseline).
    The memory cap keeps the circular cumulative of lifetimes, on the devices where it can bind."""
    clash = _clashes(period, a, b, forward, backward)
    if clash is None:
        return None
    allowed = cp_model.Domain.from_values([d for d in range(1, period) if d not in clash])
    model = cp_model.CpModel()
    t = [model.new_int_var(0, period - 1, f"t{j}") for j in range(k)]
    model.add(t[0] == 0)
    for j in range(k - 1):
        model.add(t[j] < t[j + 1])
    for i in range(k):
        for j in range(i + 1, k):
            model.add_linear_expression_in_domain(t[j] - t[i], allowed)
    for s in range(len(a)):
        life = b[s] + backward[s] - a[s]
        whole, rest = divmod(life, period)
        room = None if caps[s] is None else caps[s] - k * whole
        if room is not None and (room < 0 or (room == 0 and rest > 0)):
            return None  # more whole lifetimes than the cap, or no room for any remainder
        if room is None or rest == 0 or room >= k:
            continue  # at most k of the lifetimes' remainders can overlap: no constraint
        lives = []
        for j in range(k):
            x = model.new_int_var(0, period - 1, "")  # the forward's start modulo the period
            wraps = model.new_int_var(0, (a[s] + period) // period + 1, "")
            model.add(x == t[j] + a[s] - period * wraps)
            lives.append(model.new_fixed_size_interval_var(x, rest, ""))
            lives.append(model.new_fixed_size_interval_var(x + period, rest, ""))
        model.add_cumulative(lives, [1] * len(lives), room)
    model.minimize(t[last])
    solver = options.solver()
    solver.parameters.max_time_in_seconds = min(solver.parameters.max_time_in_seconds, max(0.1, options.remaining_s() / 2))
    code = options.run(solver, model)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return [solver.value(v) for v in t]


def _stage_offsets(devices: int, duration: Callable[[int, Kind], int], delay: Callable[[int, int, int], int]):
    """Forward and backward durations per stage, and a_s, b_s (:func:`_offsets`), in ticks."""
    p = devices
    forward = [duration(s, Kind.F) for s in range(p)]
    backward = [duration(s, Kind.B) for s in range(p)]
    up = [delay(s, s, s + 1) for s in range(p - 1)]
    down = [0] + [delay(s, s, s - 1) for s in range(1, p)]
    a, b = _offsets(p, forward, backward, up, down)
    return forward, backward, a, b


def periodic_pattern(
    devices: int,
    microbatches: int,
    duration: Callable[[int, Kind], int],
    delay: Callable[[int, int, int], int],
    caps: list[int | None],
    options: SolveOptions,
) -> Pattern | None:
    """The best periodic no-wait pattern for the linear placement with full backward (see the module
    docstring); None when no period within :data:`MAX_TRIES` of the rate bound admits one, or the
    budget runs out. ``duration``/``delay`` in ticks (stage, kind) and (stage sending, device a,
    device b); ``caps[s]`` activations of stage s fit on device s. :func:`composed` builds its
    schedule for m microbatches: a search whose hint is already optimal reports the pattern only."""
    p, m = devices, microbatches
    forward, backward, a, b = _stage_offsets(p, duration, delay)
    known = [c for c in caps if c is not None]
    k = min(min(known, default=p), MAX_PATTERN, m)
    if k < 1:
        return None
    lives = [b[s] + backward[s] - a[s] for s in range(p)]
    rate = max(max(k * (forward[s] + backward[s]) for s in range(p)),
               max((k * lives[s] / cap for s, cap in enumerate(caps) if cap), default=0.0))
    last = (m - 1) % k
    period = max(math.ceil(rate - 1e-9), max(forward + backward) + 1)
    for _ in range(MAX_TRIES):
        if options.expired:
            return None
        offsets = _solve_period(k, period, a, b, forward, backward, caps, last, options)
        if offsets is not None:
            break
        period += 1
    else:
        return None
    if offsets is None:
        return None
    step = offsets[last] + (m - 1) // k * period + lives[0]
    return Pattern(k, period, tuple(offsets), rate, step)


def composed(pattern: Pattern, devices: int, microbatches: int, duration: Callable[[int, Kind], int],
             delay: Callable[[int, int, int], int]) -> Schedule:
    """The schedule of ``pattern`` for ``microbatches``: microbatch i enters at offset i mod k plus
    i // k periods, and each device runs its ops in the order of their no-wait start times."""
    p, m, k = devices, microbatches, pattern.k
    _, _, a, b = _stage_offsets(p, duration, delay)
    entry = [pattern.offsets[i % k] + (i // k) * pattern.period for i in range(m)]
    timed: list[list[tuple[int, int, Op]]] = [[] for _ in range(p)]
    for i in range(m):  # F before B at one tick: ops shorter than a tick last 0 ticks
        for s in range(p):
            timed[s].append((entry[i] + a[s], 0, Op(s, Kind.F, i)))
            timed[s].append((entry[i] + b[s], 1, Op(s, Kind.B, i)))
    orders = tuple(tuple(op for *_, op in sorted(ops)) for ops in timed)
    return Schedule(PERIODIC, p, m, tuple((s,) for s in range(p)), orders)


def period_bound(microbatches: int, duration: Callable[[int, Kind], float], delay: Callable[[int, int, int], float],
                 caps: list[float | None]) -> float:
    """A lower bound on the step for m microbatches from the period of the memory chain and the work
    that must follow it (linear placement, full backward), in the unit of ``duration``/``delay``.

    Proof, for a schedule with microbatches in order (some optimal schedule is one,
    :mod:`ppopt.solve.model`). Let a_t and b_t be the no-wait offsets of F_t and B_t after F_0
    (:func:`_offsets`), l_s = b_s + B_s - a_s the least lifetime of an activation on device s, and
    c_t = b_0 + B_0 - b_t - B_t the backwards and messages below t (the cool-down).

    - **The chain to microbatch j.** With K_s = floor(caps[s]) activations on device s, F_s(i + K_s)
      starts after B_s(i) ends, at least l_s after F_s(i) started; and F_s(i + 1) at least F_s after
      F_s(i). F_s(0) starts at least a_s after time 0. So F_s(j) >= a_s + floor(j/K_s)·l_s +
      (j mod K_s)·F_s.
    - **What follows it.** From F_s(j) on, (1) microbatch m - 1 starts F_s at least (m - 1 - j)·F_s
      later and then needs l_s + c_s; (2) for t >= s, device t runs F_t and B_t of microbatches j..m-1,
      each starting at least a_t - a_s after F_s(j), one at a time, and its last B_t is followed by
      c_t; (3) for t < s, device t runs B_t of those microbatches, each starting at least b_t - a_s
      after F_s(j), then c_t.

    The step is at least the chain plus the largest of these, for every device s with a cap and
    every j. With j = m - 1 and (1) this is the memory chain repeated: a_s + ((m-1) mod K_s)·F_s +
    (floor((m-1)/K_s) + 1)·l_s + c_s; smaller j count the last microbatches' work on the busiest
    device (with a cap of p and m a multiple of it, the last p microbatches pass the top device one
    after another) instead of one round trip.

    Returns 0 when no device has a cap of at least one activation (then the chain says nothing)."""
    stages = len(caps)
    forward = [duration(s, Kind.F) for s in range(stages)]
    backward = [duration(s, Kind.B) for s in range(stages)]
    up = [delay(s, s, s + 1) for s in range(stages - 1)]
    down = [0.0] + [delay(s, s, s - 1) for s in range(1, stages)]
    a, b = _offsets(stages, forward, backward, up, down)  # type: ignore[arg-type]
    cool = [b[0] + backward[0] - b[t] - backward[t] for t in range(stages)]
    m = microbatches
    best = 0.0
    j = np.arange(m)
    rest = (m - j).astype(float)  # microbatches j..m-1
    for s in range(stages):
        cap = caps[s]
        if cap is None or cap < 1:
            continue
        k = math.floor(cap + 1e-9)
        life = b[s] + backward[s] - a[s]
        chain = a[s] + (j // k) * life + (j % k) * forward[s]
        after = (rest - 1) * forward[s] + life + cool[s]
        # (2) and (3) for every device t at once: a matrix of m x stages (numpy: at p = 64, m = 1,500
        # the loops in Python took 2 s)
        work = np.array([(forward[t] + backward[t]) if t >= s else backward[t] for t in range(stages)])
        lag = np.array([(a[t] if t >= s else b[t]) - a[s] for t in range(stages)])
        devices = (lag[None, :] + rest[:, None] * work[None, :] + np.array(cool)[None, :]).max(axis=1)
        best = max(best, float((chain + np.maximum(after, devices)).max()))
    return best
