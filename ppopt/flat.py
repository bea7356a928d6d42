"""The flattened integer form of a schedule, shared by validation, the table layer and the simulator.

:func:`flatten` numbers the ops ``0..n-1``, device after device in each device's order, and keeps
per-op facts in plain lists indexed by that id (device, stage, kind code, microbatch). It checks the
schedule on the way with integer operations only, each linear in the number of ops: placement,
ops named outside the schedule, missing or duplicated ops, a (stage, microbatch) with both a full B
and a split I or W, ops on
the wrong device, a dependency placed after its dependent on the same device, and a deadlocking
order (by walking the devices as far as their inputs allow). On any problem it raises
:class:`Unflattenable` with a short reason; :func:`ppopt.validation.validate` then builds the detailed
message with the marked order grid. No op is hashed on the way; the checks run as numpy array
operations over the op ids (measured about 3x faster than the same checks over Python lists), the
results are handed on as plain lists, which the simulator's per-op loops index fastest, and as the
numpy arrays already built (``Flat.columns``), which the simulator's vectorised set-up reuses.

Why the walk suffices: an op has at most one data dependency on another device (F(s) needs
F(s-1); B/I(s) needs B/I(s+1); its other dependencies, F(s) for B/I(s) and I(s) for W(s), are on
its own device because a microbatch's ops of one stage run on one device). So each device can
advance through its order while that single input is done, and a device that stops is resumed
when the op it waits for runs. The ops visited, in visit order, form a topological order of the
dependency graph (data dependencies plus device order); the walk visits every op exactly when the
order does not deadlock (Kahn, "Topological sorting of large networks", CACM 1962, applied per
device queue).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from ppopt.ir import Kind, Op, Schedule

__all__ = ["KIND_CODE", "Columns", "Flat", "Unflattenable", "earliest_starts", "flatten", "paused_gc", "peak_per_device"]

F, B, I, W = 0, 1, 2, 3  # noqa: E741  (kind codes)
KIND_CODE = {Kind.F: F, Kind.B: B, Kind.I: I, Kind.W: W}
"""Integer code of each op kind, the index of per-kind tables."""
KINDS = (Kind.F, Kind.B, Kind.I, Kind.W)
"""Kind of each code."""


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while building millions of ops and int lists.

    Every container allocated counts towards a collection, and each collection of the older
    generations walks every live object: building a schedule of millions of ops would spend about
    half its time there. Ops, tuples and lists of ints form no reference cycles, so refcounting
    frees them all the same. Nested uses are fine; the collector's previous state is restored.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Unflattenable(Exception):
    """The schedule is invalid; the message is a short reason (the validator explains in detail)."""


@dataclass(frozen=True, eq=False)
class Flat:
    """A valid schedule as integer lists; build it with :func:`flatten`.

    Op ids run device after device in execution order; per-op lists are indexed by id.
    """

    def __repr__(self) -> str:
        return f"Flat({self.schedule!r})"

    schedule: Schedule
    ops: list[Op]
    dev: list[int]
    stage: list[int]
    kind: list[int]  # KIND_CODE of the op's kind
    microbatch: list[int]
    stage_kind: list[int]  # 4 * stage + kind: index into per-run tables of durations
    orders: list[range]  # ids of each device's ops
    split: bool  # some backward split into I and W (the kind is per (stage, microbatch))
    wait: list[int]  # the op's one data dependency on another device, or -1
    succ: list[int]  # the op on another device that needs this op's output, or -1
    order: list[int]  # a topological order of the ids (data dependencies and device order)
    overlapped: list[tuple[int, int]]  # ids of each overlapped (F, B) pair: consecutive on one device
    columns: Columns  # dev, stage, wait, succ and stage_kind again as numpy arrays, for vectorised consumers

    @property
    def size(self) -> int:
        return len(self.ops)

    @property
    def backward(self) -> str:
        """"full" (every backward one B), "split" (every one I then W) or "mixed" (some of each, as
        DualPipeV and ZB-H2 run them)."""
        if not self.split:
            return "full"
        return "mixed" if KIND_CODE[Kind.B] in self.kind else "split"


class Columns(NamedTuple):
    """Per-op facts of a :class:`Flat` as int64 numpy arrays indexed by op id (the lists' values)."""

    dev: np.ndarray
    stage: np.ndarray
    wait: np.ndarray
    succ: np.ndarray
    stage_kind: np.ndarray


def _check_placement(schedule: Schedule) -> tuple[int, ...]:
    """Check devices, placement and replicas; return each microbatch's replica index."""
    p, m = schedule.devices, schedule.microbatches
    if type(p) is not int or type(m) is not int:  # "2", 2.0, None: numbers the rest would compare or count with
        raise Unflattenable(f"devices and microbatches must be integers, got {p!r} and {m!r}")
    if any(type(d) is not int for holders in schedule.placement for d in holders):
        raise Unflattenable("the placement names a device that is not an integer")
    if p < 1 or len(schedule.orders) != p or not schedule.placement:
        raise Unflattenable("devices, device rows or placement do not fit together")
    replica = schedule.replica_of or (0,) * m
    if len(replica) != m:
        raise Unflattenable("replica_of needs one entry per microbatch")
    for holders in schedule.placement:
        if not holders or any(not 0 <= d < p for d in holders):
            raise Unflattenable("a stage is placed on no device or outside the devices")
        if len(holders) > 1 and any(not 0 <= r < len(holders) for r in replica):
            raise Unflattenable("a microbatch belongs to a replica that does not exist")
    return replica


def flatten(schedule: Schedule) -> Flat:
    """Check ``schedule`` and number its ops (module docstring); raise :class:`Unflattenable` if invalid."""
    with paused_gc():
        return _flatten(schedule)


def _flatten(schedule: Schedule) -> Flat:
    stages, m = schedule.stages, schedule.microbatches
    replica = _check_placement(schedule)
    ops: list[Op] = [op for order in schedule.orders for op in order]
    n = len(ops)
    lengths = [len(order) for order in schedule.orders]
    bounds = [0, *accumulate(lengths)]
    orders = [range(a, b) for a, b in zip(bounds, bounds[1:])]
    dev = np.repeat(np.arange(len(lengths)), lengths)
    try:
        stage_of = np.fromiter(map(attrgetter("stage"), ops), np.int64, n)
        mb_of = np.fromiter(map(attrgetter("microbatch"), ops), np.int64, n)
        kind_of = np.fromiter(map(KIND_CODE.__getitem__, map(attrgetter("kind"), ops)), np.int64, n)
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError):
        raise Unflattenable("an entry of an order is not an op, or names a stage or microbatch outside the schedule") from None
    # the arrays above take 1.9 as 1 and the string "I" as Kind.I; what the other layers read is ints and Kinds
    if not set(map(type, map(attrgetter("stage"), ops))) | set(map(type, map(attrgetter("microbatch"), ops))) <= {int}:
        raise Unflattenable("an op's stage or microbatch is not an integer (Op(stage, Kind, microbatch) takes ints)")
    if not set(map(type, map(attrgetter("kind"), ops))) <= {Kind}:
        raise Unflattenable("an op's kind is not a Kind (ppopt.Kind.F, B, I or W)")
    if n and (stage_of.min() < 0 or stage_of.max() >= stages or mb_of.min() < 0 or mb_of.max() >= m):
        raise Unflattenable("an op names a stage or microbatch outside the schedule")
    present = set(np.flatnonzero(np.bincount(kind_of, minlength=4)).tolist())
    split = I in present
    ids = np.arange(n)
    stage_kind = stage_of * 4 + kind_of
    keys = stage_kind * m + mb_of
    slot = np.full(stages * 4 * m, -1, np.int64)  # (4 * stage + kind) * m + microbatch -> op id
    slot[keys] = ids
    if np.count_nonzero(slot >= 0) != n:  # a duplicate overwrote a slot, so another stayed empty
        raise Unflattenable("an op is duplicated")
    # Per (stage, microbatch): F, and either B or both I and W (the backward kind is per op).
    has = slot.reshape(stages, 4, m) >= 0
    if not (has[:, F].all() and np.all(has[:, B] != has[:, I]) and np.array_equal(has[:, I], has[:, W])):
        raise Unflattenable("ops are missing, or a backward is both full and split")
    # Placement: the device of each op's (stage, microbatch).
    width = max(len(holders) for holders in schedule.placement)
    holder = np.array([holders + holders[-1:] * (width - len(holders)) for holders in schedule.placement], np.int64)
    copies = np.array([len(holders) for holders in schedule.placement], np.int64)
    choice = np.where(copies[stage_of] > 1, np.asarray(replica, np.int64)[mb_of], 0) if width > 1 else 0
    if not np.array_equal(holder[stage_of, choice], dev):
        raise Unflattenable("an op is not on the device its placement gives")
    # Dependencies, as offsets between keys: F(s) -> B/I(s) and I(s) -> W(s) on the same device (the
    # first must come earlier); F(s-1) -> F(s) and B/I(s+1) -> B/I(s), which may cross devices. The
    # gradient op of a (stage, microbatch) is its B or its I, whichever it has.
    grad_of = np.where(has[:, I], slot.reshape(stages, 4, m)[:, I], slot.reshape(stages, 4, m)[:, B]).ravel()
    pair = stage_of * m + mb_of  # (stage, microbatch) index into grad_of
    is_f = kind_of == F
    if np.any(grad_of[pair[is_f]] < ids[is_f]):
        raise Unflattenable("a backward runs before its forward on the same device")
    is_w = kind_of == W
    if split and np.any(slot[keys[is_w] - (W - I) * m] > ids[is_w]):
        raise Unflattenable("a W runs before its I on the same device")
    step = 4 * m
    down = is_f & (keys >= step)  # F(s) with s > 0
    up = ((kind_of == B) | (kind_of == I)) & (stage_of < stages - 1)  # B/I(s) with s < S - 1
    before = np.concatenate([slot[keys[down] - step], grad_of[pair[up] + m]])
    after = np.concatenate([ids[down], ids[up]])
    local = dev[before] == dev[after]
    if np.any(before[local] > after[local]):
        raise Unflattenable("an op runs before its dependency on the same device")
    cross = ~local
    wait_a = np.full(n, -1, np.int64)
    wait_a[after[cross]] = before[cross]
    succ_a = np.full(n, -1, np.int64)
    succ_a[before[cross]] = after[cross]
    dev_l, wait, succ = dev.tolist(), wait_a.tolist(), succ_a.tolist()
    order = _walk(orders, dev_l, wait, succ)
    if len(order) < n:
        raise Unflattenable("the order deadlocks")
    overlapped = _overlapped_ids(schedule, slot, dev_l)
    return Flat(schedule, ops, dev_l, stage_of.tolist(), kind_of.tolist(), mb_of.tolist(), stage_kind.tolist(), orders,
                split, wait, succ, order, overlapped, Columns(dev, stage_of, wait_a, succ_a, stage_kind))


def _overlapped_ids(schedule: Schedule, slot: np.ndarray, dev: list[int]) -> list[tuple[int, int]]:
    """Ids of the overlapped (F, B) pairs; each must be an F then a B of another microbatch, consecutive on
    one device, and no op in two pairs. Checked on arrays; when that finds a fault, pair by pair, to name it."""
    fast = _overlapped_ids_at_once(schedule, slot, np.asarray(dev, np.int64))
    return fast if fast is not None else _overlapped_ids_one_by_one(schedule, slot, dev)


def _overlapped_ids_at_once(schedule: Schedule, slot: np.ndarray, dev: np.ndarray) -> list[tuple[int, int]] | None:
    """The ids of :func:`_overlapped_ids` from arrays of every pair's fields (DualPipeV at 32 x 1,024 has
    62,991 pairs: 0.19 s, against 0.79 s one pair at a time), or None when a check fails or a pair is
    malformed."""
    pairs = schedule.overlapped
    if not pairs:
        return []
    n, m = len(pairs), schedule.microbatches
    try:
        if any(len(pair) != 2 for pair in pairs):
            return None
        ops = [op for pair in pairs for op in pair]  # F, B, F, B, ...
        stage = np.fromiter(map(attrgetter("stage"), ops), np.int64, 2 * n)
        microbatch = np.fromiter(map(attrgetter("microbatch"), ops), np.int64, 2 * n)
        kinds = list(map(attrgetter("kind"), ops))
    except (AttributeError, TypeError, ValueError, OverflowError):
        return None
    if kinds[0::2].count(Kind.F) != n or kinds[1::2].count(Kind.B) != n:
        return None
    if stage.min() < 0 or stage.max() >= schedule.stages or microbatch.min() < 0 or microbatch.max() >= m:
        return None
    code = np.tile(np.array([KIND_CODE[Kind.F], KIND_CODE[Kind.B]], np.int64), n)
    ids = slot[(4 * stage + code) * m + microbatch]
    first, second = ids[0::2], ids[1::2]
    if (ids < 0).any() or (microbatch[0::2] == microbatch[1::2]).any() or (second != first + 1).any() \
            or (dev[first] != dev[second]).any() or np.unique(ids).size != 2 * n:
        return None
    return list(zip(first.tolist(), second.tolist()))


def _overlapped_ids_one_by_one(schedule: Schedule, slot: np.ndarray, dev: list[int]) -> list[tuple[int, int]]:
    """:func:`_overlapped_ids` pair by pair: the first fault raises :class:`Unflattenable` naming it."""
    m = schedule.microbatches
    seen: set[int] = set()
    out: list[tuple[int, int]] = []
    for pair in schedule.overlapped:
        try:
            f, b = pair
            ids = [int(slot[(4 * op.stage + KIND_CODE[op.kind]) * m + op.microbatch])
                   if 0 <= op.stage < schedule.stages and 0 <= op.microbatch < m else -1 for op in (f, b)]
        except (AttributeError, KeyError, TypeError, ValueError):
            raise Unflattenable(f"overlapped pair {pair!r} is not two ops") from None
        where = f"overlapped pair ({f};{b})"
        if -1 in ids:
            raise Unflattenable(f"{where} names an op the schedule does not run")
        if f.kind is not Kind.F or b.kind is not Kind.B or f.microbatch == b.microbatch:
            raise Unflattenable(f"{where} must be a forward F and a full backward B of another microbatch")
        if ids[1] != ids[0] + 1 or dev[ids[0]] != dev[ids[1]]:
            raise Unflattenable(f"{where} must be consecutive in one device's order, the F first")
        if seen & set(ids):
            raise Unflattenable(f"{where} shares an op with another overlapped pair")
        seen.update(ids)
        out.append((ids[0], ids[1]))
    return out


def _walk(orders: list[range], dev: list[int], wait: list[int], succ: list[int]) -> list[int]:
    """Ids in a topological order; shorter than the schedule when the order deadlocks (module doc)."""
    nxt = [o.start for o in orders]
    stop = [o.stop for o in orders]
    order: list[int] = []
    resume = list(range(len(orders) - 1, -1, -1))
    while resume:
        d = resume.pop()
        first = i = nxt[d]
        last = stop[d]
        while i < last:
            w = wait[i]
            if w >= 0 and w >= nxt[dev[w]]:  # its input's device has not run it yet
                break
            j = succ[i]
            if j >= 0 and nxt[dev[j]] == j:  # that device waits for this op: resume it afterwards
                resume.append(dev[j])
            i += 1
        nxt[d] = i
        order.extend(range(first, i))
    return order


def earliest_starts(flat: Flat, duration: Sequence[Any], delay: Sequence[Any] | None = None) -> list[Any]:
    """Start of every op (by id) when each starts as soon as its device and its inputs allow.

    ``duration[i]`` is op i's length; ``delay[i]`` (optional) the extra wait between op i's
    cross-device input ending and op i starting. Integer durations give integer starts.
    """
    start: list[Any] = [0] * flat.size
    end: list[Any] = [0] * flat.size
    free: list[Any] = [0] * len(flat.orders)
    dev, wait = flat.dev, flat.wait
    for i in flat.order:
        d = dev[i]
        t = free[d]
        w = wait[i]
        if w >= 0:
            ready = end[w] + delay[i] if delay is not None else end[w]
            if ready > t:
                t = ready
        start[i] = t
        free[d] = end[i] = t + duration[i]
    return start


def peak_per_device(flat: Flat, size: Sequence[float], early: Sequence[float] | None = None) -> list[float]:
    """Per device, the peak of stored activations: ``size[stage]`` from the start of each F to the end
    of the op that frees it (B, or W where that microbatch's backward is split; a valid schedule has
    one of them per stage and microbatch), of which a split backward frees ``early[stage]`` already
    at the end of I (:attr:`ppopt.costs.StageCost.input_grad_release_bytes`); a release counts before an
    allocation at the same instant.

    A device runs one op at a time in its order, so walking the order visits allocations and releases
    in time order (needs positive forward durations), a release before a later op's allocation.
    """
    stored = np.asarray(size, dtype=float)
    first = np.zeros(len(stored)) if early is None else np.asarray(early, dtype=float)
    change = np.zeros(4 * len(stored))  # indexed by 4 * stage + kind
    change[4 * np.arange(len(stored)) + F] = stored
    change[4 * np.arange(len(stored)) + B] = np.negative(stored)
    change[4 * np.arange(len(stored)) + I] = np.negative(first)
    change[4 * np.arange(len(stored)) + W] = first - stored
    steps = change[flat.columns.stage_kind]
    # cumsum adds in sequence, as a running total along the order would
    return [max(0.0, float(np.cumsum(steps[o.start : o.stop]).max())) if o else 0.0 for o in flat.orders]
