"""A lower bound from a reduced problem: a few devices kept exactly, the others as time lags.

For the linear placement with full backward (stage s alone on device s, a cap of K_s of its
activations, message delays between neighbours), keep a subset D of the devices (always the first
and the last) and drop every other device's capacity: its ops become pure time lags. The reduced
problem, solved by CP-SAT, has for every kept device s and microbatch i a forward F_s(i) and a
backward B_s(i) with

- one op at a time on device s (no-overlap);
- microbatches in order per (stage, kind): F_s(i+1) after F_s(i), B_s(i+1) after B_s(i);
- the cap: F_s(i+K_s) after the end of B_s(i);
- between consecutive kept devices a < c: F_c(i) at least F_a + the forwards of the stages between
  and the c - a messages after F_a(i) starts, and B_a(i) the same way after B_c(i) (backwards);
- on the top kept device t: B_t(i) at least F_t + the round trip through the stages above (their
  forwards, backwards and messages both ways) after F_t(i) starts;
- heads and tails: F_s(i) no earlier than the forwards and messages below s; the step lasts at least
  the backwards and messages below s after the end of B_s(i);
- optionally, **meetings on a dropped device** s between consecutive kept devices a < s < c, for
  microbatches i < j less than ``pairs`` + 1 apart (and less than the caps of s and a apart):
  F_a(j) + λ(a→s) + F_s + μ(s→a) <= B_a(i), or B_c(i) + μ(c→s) + B_s + λ(s→c) <= F_c(j), where
  λ(x→y) is the forward lag from the start of F_x to the start of F_y (the forwards of x..y-1 and
  their messages) and μ(y→x) the backward lag from the start of B_y to the start of B_x (the
  backwards of y..x+1 and their messages).

**Validity.** By the relabelling argument of :mod:`ppopt.solve.model` (dominance rule) some optimal
schedule of the full problem runs microbatches in order on every stage; in it, at most K_s
activations are live, so F_s(i+K_s) waits for the end of B_s(i) (as in :mod:`ppopt.solve.heads`),
and every lag above is a sum of durations and message delays along a chain of data dependencies,
each of which that schedule meets. Restricted to the kept devices it is therefore a feasible point
of the reduced problem, whose optimum is at most the full optimum, hence at most every schedule's
step. The meetings hold in it too: device s runs F_s(j) and B_s(i) one after the other. If F_s(j)
comes first, F_a(j) + λ(a→s) <= F_s(j), F_s(j) + F_s <= B_s(i) and B_s(i) + μ(s→a) <= B_a(i) (each a
chain of data dependencies), which sums to the first alternative; if B_s(i) comes first, the same
chains through c give the second (when j >= i + K_s or j >= i + K_a, the caps order them already).
These capture the
waits a dropped device imposes when the forward of a new microbatch meets the backward of an older
one there, which the pure lags ignore: with F = B/2 and delays of one tick the lags' windows of
conflict tile the line, and no two microbatches can both run without waiting (measured on the
llama3-70b instance of ``benchmarks/solve_bench.py --acceptance``, the bound rises by about 0.2 %).

CP-SAT (in its core-based mode, which raises the lower bound step by step and, measured on the
instances of ``benchmarks/solve_bench.py --acceptance``, gets further than the default search in the same time) gives a *best bound* on
the reduced problem, which is at most the reduced optimum, so it is a valid bound even when the
solve stops early. With all devices kept this is the full problem (the search's
own model); with the two end devices only it is about the round-trip/one-machine bound; each device
added tightens it, since the queueing of the microbatches on the middle devices shifts the times at
which gradients come back to the first device (dropping machines of a shop problem relaxes it: every constraint of the reduced problem is one
of the full problem's).

**Block cuts.** A reduced model can also carry, for a few block sizes n, a lower bound L(n) on the
optimum of n microbatches alone: then B_0(i + n - 1) ends at least L(n) after F_0(i) starts, for
every i (:func:`add_block_cuts`; the proof is the block argument of :func:`tail_bound`). L(n) comes
from CP-SAT on the whole chain with n microbatches (:func:`block_cuts`), small enough to be proven
in seconds for n up to two rounds of device 0's cap. The round trips alone let every round of K
microbatches follow the previous one a round trip later; a block of two rounds proves the waits
where the forwards of a round meet the backwards of the one before, and the cuts carry those waits
to every pair of rounds of the larger model. Measured at p = 16, m = 64, cap 16, one-slot
messages (one worker, the same deterministic time each): the core-based solve of all 16 devices
reaches 363 slots without cuts and 365 with the cuts of 20, 24, 28 and 32 microbatches (26 and 31 s),
and with twice the time 364 and 365. With the cuts of every size up to 63 (each size's bound from a
10 s solve with the cuts of the smaller ones) it reaches 366 in 10 s, 367 in 70 s and 368 in 600 s;
the best known schedule takes 371, so that run proves the gap under 1 %.

Times are ticks (durations and delays rounded down, :mod:`ppopt.solve.ticks`), so the bound in
ticks times the tick is a valid bound of the real problem.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ppopt.ir import Kind
from ppopt.solve.options import SolveOptions

Duration = Callable[[int, Kind], int]  # (stage, kind) -> ticks
Delay = Callable[[int, int, int], int]  # (stage sending, device a, device b) -> ticks

MAX_KEPT_OPS = 20_000
"""Most ops (2 per kept device and microbatch) in one reduced model."""


def kept_sets(devices: int) -> list[tuple[int, ...]]:
    """The subsets solved one after another: n + 1 devices evenly spread along the chain for
    n = 2, 4, 8, ... (the last one all devices). The two ends alone are skipped (unless there are only
    two devices): measured on the instances of
    ``benchmarks/solve_bench.py --acceptance``, they give no more than the one-machine bound."""
    sets: list[tuple[int, ...]] = []
    if devices < 2:
        return sets
    n = 2
    while True:
        n = min(n, devices - 1)
        kept = tuple(sorted({round(j * (devices - 1) / n) for j in range(n + 1)}))
        if kept not in sets:
            sets.append(kept)
        if n >= devices - 1:
            return sets
        n *= 2


def reduced_model(
    microbatches: int,
    devices: int,
    kept: Sequence[int],
    duration: Duration,
    delay: Delay,
    caps: Sequence[int | None],
    lower: int = 0,
    pairs: int = 0,
    last_forward: bool = False,
    blocks: Mapping[int, int] | None = None,
) -> cp_model.CpModel:
    """The reduced problem of the module docstring over the ``kept`` devices (sorted), minimising the step,
    with the step at least ``lower`` (a known lower bound of the full problem: the optimum of the full
    problem restricted to the kept devices still meets it, so the bound stays valid), and with the
    meetings on the dropped devices of microbatches at most ``pairs`` apart (0: none)."""
    f = [duration(s, Kind.F) for s in range(devices)]
    b = [duration(s, Kind.B) for s in range(devices)]
    up = [delay(s, s, s + 1) for s in range(devices - 1)]  # F(s) -> F(s+1)
    down = [delay(s + 1, s + 1, s) for s in range(devices - 1)]  # B(s+1) -> B(s)
    head = [sum(f[t] + up[t] for t in range(s)) for s in range(devices)]
    tail = [sum(b[t] + down[t] for t in range(s)) for s in range(devices)]
    top = kept[-1]
    round_trip = sum(f[t] + b[t] for t in range(top + 1, devices)) + sum(up[t] + down[t] for t in range(top, devices - 1))
    # one microbatch at a time through the whole chain is a schedule: no optimum lies beyond it
    horizon = microbatches * (sum(f) + sum(b) + sum(up) + sum(down))
    model = cp_model.CpModel()
    step = model.new_int_var(min(lower, horizon), horizon, "step")
    fwd: dict[tuple[int, int], cp_model.IntVar] = {}
    bwd: dict[tuple[int, int], cp_model.IntVar] = {}
    for s in kept:
        intervals = []
        for i in range(microbatches):
            fwd[s, i] = model.new_int_var(head[s], horizon, "")
            bwd[s, i] = model.new_int_var(head[s], horizon, "")
            intervals.append(model.new_fixed_size_interval_var(fwd[s, i], f[s], ""))
            intervals.append(model.new_fixed_size_interval_var(bwd[s, i], b[s], ""))
            model.add(step >= bwd[s, i] + b[s] + tail[s])
            if i > 0:
                model.add(fwd[s, i] >= fwd[s, i - 1] + f[s])
                model.add(bwd[s, i] >= bwd[s, i - 1] + b[s])
            k = caps[s]
            if k is not None and i >= k:
                model.add(fwd[s, i] >= bwd[s, i - k] + b[s])
        model.add_no_overlap(intervals)
    def forward_lag(a: int, c: int) -> int:  # from the start of F_a to the start of F_c (a < c)
        return sum(f[t] + up[t] for t in range(a, c))

    def backward_lag(c: int, a: int) -> int:  # from the start of B_c to the start of B_a (a < c)
        return sum(b[t + 1] + down[t] for t in range(a, c))

    def reach(s: int, a: int) -> int:  # pairs i < j with j - i < reach can meet on device s
        return min([pairs + 1] + [k for k in (caps[s], caps[a]) if k is not None])

    for a, c in zip(kept, kept[1:]):
        for i in range(microbatches):
            model.add(fwd[c, i] >= fwd[a, i] + forward_lag(a, c))
            model.add(bwd[a, i] >= bwd[c, i] + backward_lag(c, a))
        for s in range(a + 1, c):
            _add_collisions(model, a, c, fwd, bwd, microbatches, reach(s, a),
                            forward_lag(a, s) + f[s] + backward_lag(s, a), backward_lag(c, s) + b[s] + forward_lag(s, c))
    for i in range(microbatches):
        model.add(bwd[top, i] >= fwd[top, i] + f[top] + round_trip)
    if blocks and kept[0] == 0:
        add_block_cuts(model, [fwd[0, i] for i in range(microbatches)], [bwd[0, i] for i in range(microbatches)], b[0], blocks)
    model.minimize(fwd[kept[0], microbatches - 1] if last_forward else step)
    return model


def add_block_cuts(model: cp_model.CpModel, forwards: Sequence, backwards: Sequence, backward: int,
                   blocks: Mapping[int, int]) -> None:
    """For every block of n consecutive microbatches i..i+n-1 with a lower bound L(n) in ``blocks``
    (ticks): the end of device 0's backward of microbatch i + n - 1 (its start + ``backward``) at least
    L(n) after the start of its forward of microbatch i (``forwards`` and ``backwards``: device 0's
    start variables in microbatch order). Valid for every schedule that runs microbatches in order
    when L(n) is at most the optimum of the n-microbatch problem (the block argument of
    :func:`tail_bound`)."""
    for n, least in blocks.items():
        for i in range(len(forwards) - n + 1):
            model.add(backwards[i + n - 1] + backward - forwards[i] >= least)


def _add_collisions(model: cp_model.CpModel, a: int, c: int, fwd, bwd, microbatches: int, reach: int, before: int,
                    after: int) -> None:
    """The dropped device between kept devices a < c runs F(j) before or after B(i) (i < j < i + reach),
    in terms of the kept devices (see the module docstring): F_a(j) + ``before`` <= B_a(i), or
    B_c(i) + ``after`` <= F_c(j)."""
    for i in range(microbatches):
        for j in range(i + 1, min(microbatches, i + reach)):
            first = model.new_bool_var("")
            model.add(fwd[a, j] + before <= bwd[a, i]).only_enforce_if(first)
            model.add(bwd[c, i] + after <= fwd[c, j]).only_enforce_if(~first)


def relaxation_bound(
    microbatches: int,
    devices: int,
    duration: Duration,
    delay: Delay,
    caps: Sequence[int | None],
    options: SolveOptions,
    lower: int = 0,
    pairs: int = 0,
    sets: Sequence[tuple[int, ...]] | None = None,
    core: bool = True,
    blocks: Mapping[int, int] | None = None,
) -> int:
    """The best CP-SAT bound (ticks) over the reduced problems of ``sets`` (default :func:`kept_sets`),
    solved one after another within ``options``' budget (and its deterministic time per solve, if set:
    then the bound does not depend on the machine's load), each starting from the best so far (``lower``
    at first: a known bound of the full problem, returned when nothing better is found), with the
    meetings of microbatches less than ``pairs`` + 1 apart on the dropped devices (0: none).

    ``core`` solves in CP-SAT's core-based mode, which raises the bound step by step and gets
    furthest on problems too large to prove; without it, CP-SAT's default search, which proves the
    small ones much sooner (the two ends of llama3-70b's chain, 31 microbatches, meetings two apart:
    optimal in 5 to 9 s, where the core-based mode reaches 88.16 of its 88.78 s in 20 s).
    ``blocks`` (block size -> least ticks, :func:`block_cuts`) go into every reduced model as cuts."""
    best = lower
    for kept in kept_sets(devices) if sets is None else sets:
        if 2 * len(kept) * microbatches > MAX_KEPT_OPS or options.expired:
            break
        model = reduced_model(microbatches, devices, kept, duration, delay, caps, best, pairs, blocks=blocks)
        solver = options.solver()  # the time that remains, and the deterministic limit per solve if any
        solver.parameters.max_time_in_seconds = max(0.01, options.remaining_s())
        solver.parameters.optimize_with_core = core
        code = options.run(solver, model)
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
            best = max(best, math.floor(solver.best_objective_bound + 1e-6))
        if code != cp_model.OPTIMAL:
            break
    return best


TAIL_ROUNDS = 8
"""The tail of :func:`tail_bound` holds this many times device 0's cap of microbatches. Measured at
p = 16, cap 16, one-slot messages (F = 1, B = 2): the reduced problem of 3 devices over the last 128
microbatches is proven optimal (676 slots) in about 3 s, and at m = 1024 the bound is then 5,044
slots; a tail of 64 gives 5,040 (3 devices) or 5,042 (5 devices, 1.5 s more). Each round of the cap
in the tail adds about one slot over the chain's round trip."""


@dataclass(frozen=True)
class Chain:
    """A chain of one-stage devices as the reduced problems see it (ticks): ``duration(stage, kind)``,
    ``delay(stage sending, device a, device b)`` and the cap of live activations per device (None:
    no cap)."""

    devices: int
    duration: Duration
    delay: Delay
    caps: Sequence[int | None]


def chain_with_blocks(microbatches: int, cap: int | None, forward: int, round_trip: int, block: int,
                      block_bound: int) -> int:
    """A lower bound on the step from device 0's memory chain and blocks of ``block`` consecutive
    microbatches, each of which lasts at least ``block_bound`` (ticks): the longest path through

    - F_0(i + 1) >= F_0(i) + ``forward`` (device 0 runs its forwards one at a time, in order);
    - F_0(i + K) >= F_0(i) + ``round_trip`` (the cap K of device 0: F_0(i + K) waits for the end of
      B_0(i), at least a round trip l_0 after F_0(i) starts);
    - F_0(i + n + K - 1) >= F_0(i) + ``block_bound`` (a block i..i+n-1, n = ``block``: B_0(i + n - 1)
      ends at least that long after F_0(i) starts, and the cap then holds F_0(i + n - 1 + K) back);
    - the step >= F_0(i) + the chain of the m - i microbatches from i on, and >= F_0(i) +
      ``block_bound`` when the block i..i+n-1 is the last (i + n = m);

    from F_0(0) >= 0 (the proof of each relation is in :func:`tail_bound`). Without a cap only the
    forwards and the last block count. With K = 3 and n = 31 at m = 64 two blocks tile the step, so a
    block that waits w more than its chain makes the bound 2w higher than the chain's."""
    step = [0] * (microbatches + 1)  # step[i]: a lower bound on F_0(i)
    best = 0
    for i in range(microbatches):
        rest = microbatches - i  # the chain of the last ``rest`` microbatches: up to F_0(m - 1), then its round trip
        if cap is None:
            best = max(best, step[i] + (rest - 1) * forward + round_trip)
        else:
            best = max(best, step[i] + ((rest - 1) // cap) * round_trip + ((rest - 1) % cap) * forward + round_trip)
        if i + block == microbatches:
            best = max(best, step[i] + block_bound)
        step[i + 1] = max(step[i + 1], step[i] + forward)
        if cap is not None:
            if i + cap < microbatches:
                step[i + cap] = max(step[i + cap], step[i] + round_trip)
            if i + block + cap - 1 < microbatches:
                step[i + block + cap - 1] = max(step[i + block + cap - 1], step[i] + block_bound)
    return best


def tail_bound(chain: Chain, microbatches: int, tail: int, options: SolveOptions, pairs: int = 0,
               sets: Sequence[tuple[int, ...]] | None = None, core: bool = True) -> int:
    """A lower bound (ticks) on the step: device 0's memory chain up to microbatch j, then the reduced
    problems (:func:`relaxation_bound`, with ``pairs``, ``sets`` and ``core``) of the last m - j microbatches
    alone; and the same reduced problem's bound for every earlier block of m - j microbatches
    (:func:`chain_with_blocks`). j = m - ``tail``, rounded down to a multiple of device 0's cap K when
    there is one, so the chain ends on a whole round: past a whole round the chain adds only
    (j mod K)·F_0, while those microbatches can add a whole round trip to the tail. Measured with
    K = 3 (llama3-70b on dgx-h100, p = 8, m = 128, 220 GiB, as in ``benchmarks/solve_bench.py``;
    20 s per tail): 345.05 s with j = 102, 339.16 s with j = 104.

    **Proof.** Take an optimal schedule with microbatches in order (one exists, :mod:`ppopt.solve.model`),
    with step T. (1) *The chain*: F_0(0) >= 0, F_0(i + 1) >= F_0(i) + F_0, and under a cap of K on
    device 0, F_0(i + K) starts after B_0(i) ends, at least l_0 = F_0 + the round trip above device 0
    (the forwards, backwards and messages of the stages above) + B_0 after F_0(i) starts. Hence
    F_0(j) >= floor(j/K)·l_0 + (j mod K)·F_0 (without a cap, j·F_0). (2) *A block*: keep only the ops
    of microbatches i..i+n-1, renumber them 0..n-1 and shift time by -F_0(i). Every constraint of the
    reduced problem over n microbatches holds for them: no-overlap, order, caps and lags are
    constraints among these ops that the schedule meets, and the heads hold because F_s(i + k) is at
    least F_0(i + k) >= F_0(i) plus the forwards and messages below s. Their step, the latest end of a
    kept op plus the backwards and messages below its device, is at most the end of B_0(i + n - 1)
    minus F_0(i): each such chain ends at the B_0 of its microbatch, and device 0 runs its backwards in
    order. So B_0(i + n - 1) ends at least the reduced problem's optimum after F_0(i), which is at
    least CP-SAT's best bound on it; T is at least that end, and with the cap so is F_0(i + n - 1 + K).
    With i = j and n = m - j, (1) and (2) bound T; :func:`chain_with_blocks` takes the best path
    through all of them. Unlike the reduced problem of all m microbatches, a block's is small enough
    to be proven optimal, or nearly, within seconds, so this bound does not depend on how far a
    time-limited solve gets."""
    cap = chain.caps[0]
    j = microbatches - tail
    if cap is not None and j >= cap:
        j -= j % cap
    if not 0 < j < microbatches:
        return 0
    return block_bound(chain, microbatches, microbatches - j, options, pairs, sets, core)


def block_bound(chain: Chain, microbatches: int, block: int, options: SolveOptions, pairs: int = 0,
                sets: Sequence[tuple[int, ...]] | None = None, core: bool = True) -> int:
    """:func:`chain_with_blocks` (ticks) with blocks of exactly ``block`` microbatches, bounded by the
    reduced problems of that many microbatches (:func:`relaxation_bound` with ``pairs``, ``sets`` and
    ``core``; the proof is :func:`tail_bound`'s)."""
    if not 0 < block <= microbatches:
        return 0
    devices, duration, delay = chain.devices, chain.duration, chain.delay
    f = [duration(s, Kind.F) for s in range(devices)]
    b = [duration(s, Kind.B) for s in range(devices)]
    messages = sum(delay(s, s, s + 1) + delay(s + 1, s + 1, s) for s in range(devices - 1))
    life = sum(f) + sum(b) + messages
    bound = relaxation_bound(block, devices, duration, delay, chain.caps, options, pairs=pairs, sets=sets, core=core)
    return chain_with_blocks(microbatches, chain.caps[0], f[0], life, block, bound)


def cut_sizes(cap: int) -> list[int]:
    """The block sizes :func:`block_cuts` solves under device 0's cap K: K plus a quarter, a half,
    three quarters and all of a round, each rounded up to at least one (K = 3: 4, 5, 6). Up to K
    microbatches the cap does not bind and a block's optimum is the one-machine bound the model
    already implies; past one round the meetings of two rounds make a block wait, which is what the
    cuts carry. Four sizes, because each costs a solve: at p = 16, K = 16, one-slot messages (F = 1,
    B = 2) blocks of 17 to 32 microbatches are proven optimal in 1 to 4.5 s each, and in one run of
    each (two at a time on the 2 cores) the core-based solve of all 64 microbatches reached 365 slots
    in 10.5 s with these four sizes' cuts, 366 in 22 s with all sixteen sizes' (see the module
    docstring for the solve without cuts)."""
    return sorted({cap + max(1, math.ceil(k * cap / 4)) for k in range(1, 5)})


def block_cuts(chain: Chain, sizes: Sequence[int], options: SolveOptions) -> dict[int, int]:
    """Lower bounds L(n) (ticks) on the optimum of n microbatches on the whole chain, for the block
    sizes n of ``sizes`` in increasing order: CP-SAT's default search over the reduced problem with
    every device kept (the full problem with microbatches in order), with the cuts of the sizes
    already solved (:func:`add_block_cuts`), each in an equal share of what remains of ``options``.
    L(n) is the solve's best bound, valid whether or not the solve ends proven; a size the budget
    does not reach is left out. By the block argument of :func:`tail_bound`, B_0(i + n - 1) ends at
    least L(n) after F_0(i) starts in every schedule with microbatches in order, so the cuts hold in
    every model of the same chain with more microbatches."""
    devices = chain.devices
    every = tuple(range(devices))
    cuts: dict[int, int] = {}
    for k, n in enumerate(sorted(sizes)):
        share = options.share(len(sizes) - k)
        if share.expired or 2 * devices * n > MAX_KEPT_OPS:
            break
        lower = max(cuts.values(), default=0)
        model = reduced_model(n, devices, every, chain.duration, chain.delay, chain.caps, lower, blocks=cuts)
        solver = share.solver()
        solver.parameters.max_time_in_seconds = max(0.01, share.remaining_s())
        code = share.run(solver, model)
        # the whole chain with valid cuts always has a schedule (one microbatch at a time)
        assert code in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN), solver.status_name(code)
        cuts[n] = max(lower, math.floor(solver.best_objective_bound + 1e-6))
    return cuts
