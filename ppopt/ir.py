"""The schedule IR: ops, placement, and per-device order.

An op is one unit of compute of one microbatch on one stage. Its text form is the action string of
PyTorch's ``torch.distributed.pipelining`` (``<stage><KIND><microbatch>``, e.g. ``3F12``), so
``str(op)`` is already a cell of a PyTorch schedule CSV.

A stage is a model chunk in pipeline order (global, "virtual" stage id). A stage may be held by
several devices (replicas, as in Chimera's two directions); each microbatch then belongs to one
replica, given by ``Schedule.replica_of``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction
from itertools import repeat
from typing import Any, NamedTuple

from ppopt.errors import ScheduleError, is_positive_number
from ppopt.host import require_memory
from ppopt.placement import linear_placement  # noqa: F401  (re-exported: the placements live in ppopt.placement)
from ppopt.placement import stages_by_device as placement_stages_by_device

MAX_OPS = 10_000_000
"""The largest schedule ppopt builds or reads, in ops (stages x microbatches x op kinds). Generators
and the CSV reader refuse larger ones up front. At the limit a command takes about half a minute and
4 to 5.5 GB on this project's 2-core machine: 1F1B at p = 4, m = 1,250,000 took 32 s and 4.2 GB
with ``table``, 35 s and 5.5 GB with ``export`` to CSV, 31 s and 4.7 GB with ``import`` of that CSV."""


MAX_TOTAL_OPS = 30_000_000
"""The most ops one command simulates over all the schedules of its input (``validate``,
``calibrate`` and ``published``: one or a few jobs per row; ``evaluate -s all``): about a minute at
the 0.5 million ops per second the simulator reaches on 2 cores (1F1B at p = 64, m = 4,096: 0.99 s).
``evaluate -s all -p 4 -m 140000`` (28 million ops, with its tables and formulas) took 81 s and
1.4 GB, with a progress bar on stderr."""


def check_total_size(ops: int, what: str) -> None:
    """Raise :class:`ScheduleError` when simulating ``what`` (``ops`` ops in all) is over
    :data:`MAX_TOTAL_OPS`: refused before the first simulation, not after minutes of them."""
    if ops > MAX_TOTAL_OPS:
        raise ScheduleError(f"input too large: {what} make {ops:,} ops to simulate in all (stages x microbatches "
                            f"x kinds, summed); the limit is {MAX_TOTAL_OPS:,}")


HELD_BYTES_PER_OP = 600
"""Memory a command holds per op of the schedule it builds, with its table, simulation or CSV text
(bytes; measured on 1F1B at p = 4, m = 500,000, 4 million ops: 1.7 GB with ``table``, 2.3 GB with
``export`` to CSV, 1.9 GB with ``import`` of that CSV; 525 bytes per op at most, over the 50 MB a
command holds with one op)."""


def check_size(ops: int, what: str, memory: bool = True) -> None:
    """Raise :class:`ScheduleError` when a schedule of ``ops`` ops is over :data:`MAX_OPS`, or, with
    ``memory``, when building it would need more memory than this machine has available
    (:data:`HELD_BYTES_PER_OP` per op; :func:`ppopt.host.require_memory`). Leave ``memory`` out
    where the ops are counted while they are read or after they are built: the memory they take is
    no longer available, and would be counted twice."""
    if ops > MAX_OPS:
        raise ScheduleError(f"schedule too large: {what} make {ops:,} ops (stages x microbatches x kinds); the limit is {MAX_OPS:,} ops")
    if memory:
        require_memory(ops * HELD_BYTES_PER_OP, f"{what} ({ops:,} ops)")


class Kind(str, Enum):
    """Op kinds: forward, full backward, backward for inputs, backward for weights."""

    F = "F"
    B = "B"
    I = "I"  # noqa: E741  (PyTorch's name for the input-gradient op)
    W = "W"

    def __str__(self) -> str:
        return self.value

    # Each member's name is its value, so hashing the string is Enum's hash (of the name), done in C:
    # ops, which hash their kind, are dictionary keys throughout the generators and reports.
    __hash__ = str.__hash__


class Op(NamedTuple):
    """One op: ``kind`` of ``microbatch`` on ``stage``. ``str(op)`` is the PyTorch action string.

    A named tuple (immutable, ordered and hashed by its fields) rather than a frozen dataclass:
    schedules hold hundreds of thousands of ops, and a tuple is built in about 60% of the time and
    hashed in C. Being a tuple, an op also equals the plain tuple ``(stage, kind, microbatch)``.
    """

    stage: int
    kind: Kind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{str.__str__(self.kind)}{self.microbatch}"  # the kind's letter, without Enum's .value


def ops_of(stages: Iterable[int], kinds: Iterable[Kind], microbatches: Iterable[int]) -> Iterator[Op]:
    """Ops from parallel sequences of stages, kinds and microbatches, for generators building whole
    orders: the tuples are made by ``map`` in C, in about 60% of the time of calling ``Op`` per op."""
    return map(_new_op, repeat(Op), zip(stages, kinds, microbatches))


_new_op: Callable[[type[Op], tuple[int, Kind, int]], Op] = tuple.__new__

_ACTION = re.compile(r"^\s*(\d+)\s*([FBIW])\s*(\d+)\s*$")


def parse_action(text: str) -> Op:
    """Parse a compute action string such as ``3F12`` into an :class:`Op`."""
    match = _ACTION.match(text)
    if not match:
        raise ScheduleError(f"not a compute action: {text!r} (expected <stage><F|B|I|W><microbatch>, e.g. 3F12)")
    stage, kind, microbatch = match.groups()
    return Op(int(stage), Kind(kind), int(microbatch))


def _tuples(rows: Iterable[Iterable[Any]]) -> tuple[tuple[Any, ...], ...]:
    """Rows as a tuple of tuples (a tuple of tuples as itself, in O(rows))."""
    return tuple(tuple(row) for row in rows)


class FrozenOptions(dict):
    """A schedule's options: a dict (JSON writes it, ``options["chunks"]`` reads it) that cannot be
    changed and hashes by its items, so that a frozen :class:`Schedule` holding it hashes too."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("a schedule's options cannot be changed: build the schedule again with others")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda item: item[0])))

    def __reduce__(self):
        """Pickled and copied whole (a dict's pickle fills an empty one item by item)."""
        return FrozenOptions, (dict(self),)


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule: which device runs which op, in what order.

    Attributes:
        name: schedule family or origin (``1f1b``, ``search``, a file name...).
        devices: number of devices (ranks), p.
        microbatches: number of microbatches, m.
        placement: ``placement[stage]`` is the tuple of devices holding that stage (one per replica).
        orders: ``orders[device]`` is the ops that device runs, in execution order.
        replica_of: ``replica_of[microbatch]`` is the replica index (e.g. Chimera's direction: 0 down,
            1 up) whose devices run that microbatch; empty means replica 0 for all.
        stage_weights: relative share of the model's layers per stage (the asymmetric placement's
            uneven split); ``None`` means an even split. Only the cost model reads it.
        options: the generator options that produced the schedule, for reports.
        overlapped: (forward, backward) pairs run together as one overlapped action (PyTorch's
            ``OVERLAP_F_B``): an F of one microbatch and a B of another, on the same device, the B
            right after the F in the order. The table counts them as their two ops' slots; the
            simulator shortens the pair by ``SystemConfig.overlap_f_b_share`` of its communication
            (:mod:`ppopt.simulate`).
    """

    name: str
    devices: int
    microbatches: int
    placement: tuple[tuple[int, ...], ...]
    orders: tuple[tuple[Op, ...], ...]
    replica_of: tuple[int, ...] = ()
    stage_weights: tuple[float, ...] | None = None
    options: Mapping[str, object] = field(default_factory=dict)
    overlapped: tuple[tuple[Op, Op], ...] = ()

    def __post_init__(self) -> None:
        """Lists given for the tuples are taken as tuples (a schedule built by hand in a notebook
        compared unequal to the same one with tuples, and its lists were not the stage maps
        ppopt compares with tuples): O(devices + stages), as
        ``tuple`` of a tuple is the tuple itself."""
        self._convert("placement", _tuples, "a sequence of device tuples, one per stage")
        self._convert("orders", _tuples, "a sequence of op sequences, one per device")
        self._convert("replica_of", tuple, "a sequence of replica indices, one per microbatch")
        self._convert("overlapped", _tuples, "a sequence of (forward, backward) op pairs")
        self._convert("options", lambda given: FrozenOptions(given or {}), "a mapping of option names to values")
        if self.stage_weights is not None:
            self._convert("stage_weights", tuple, "a sequence of positive numbers, one per stage")
            if len(self.stage_weights) != len(self.placement) or not all(map(is_positive_number, self.stage_weights)):
                raise ScheduleError(f"must be positive finite numbers, one per stage ({len(self.placement)}), got "
                                    f"{self.stage_weights!r:.60}", field="stage_weights")

    def _convert(self, name: str, convert: Callable[[Any], object], wanted: str) -> None:
        """Set field ``name`` to ``convert`` of its value; ScheduleError naming it when that fails
        ((0, 1) for a placement, None for the orders: not iterable)."""
        try:
            object.__setattr__(self, name, convert(getattr(self, name)))
        except (TypeError, ValueError):
            raise ScheduleError(f"must be {wanted}, got {getattr(self, name)!r:.60}", field=name) from None

    def __repr__(self) -> str:
        """A short summary (the orders of a large schedule run to megabytes of text)."""
        options = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return (f"Schedule(name={self.name!r}, devices={self.devices}, microbatches={self.microbatches}, "
                f"stages={self.stages}{options}, ops={self.op_count})")

    @property
    def stages(self) -> int:
        """S, the number of pipeline stages (one per entry of the placement)."""
        return len(self.placement)

    @property
    def replicas(self) -> int:
        """Largest number of copies of any stage (2 for Chimera)."""
        return max(len(devs) for devs in self.placement)

    def device_of(self, op: Op) -> int:
        """The device that must run ``op``, by placement and the microbatch's replica."""
        holders = self.placement[op.stage]
        if len(holders) == 1:
            return holders[0]
        replica = self.replica_of[op.microbatch] if self.replica_of else 0
        return holders[replica]

    def ops(self) -> Iterator[Op]:
        """Every op, device 0's order first, each device's in its order."""
        for order in self.orders:
            yield from order

    @property
    def op_count(self) -> int:
        """Ops in all devices' orders (what the size limits count)."""
        return sum(len(order) for order in self.orders)

    @property
    def split_backward(self) -> bool:
        """True when any backward is split into I and W ops (the kind is per op: :attr:`split_pairs`)."""
        return any(op.kind is Kind.I for op in self.ops())

    @property
    def split_pairs(self) -> frozenset[tuple[int, int]]:
        """The (stage, microbatch) pairs whose backward is split into I and W; the others run one B."""
        return frozenset((op.stage, op.microbatch) for op in self.ops() if op.kind is Kind.I)

    def __getstate__(self) -> dict[str, object]:
        """Pickle the fields only, not the flat form :func:`ppopt.validation.validated` caches."""
        return {k: v for k, v in self.__dict__.items() if k != "_flat"}

    def stages_on(self, device: int) -> tuple[int, ...]:
        """Stages that have a replica on ``device``, ascending."""
        return tuple(s for s, devs in enumerate(self.placement) if device in devs)

    def weight_copies(self) -> tuple[int | float, ...]:
        """Per device, the weights it holds in copies of a 1/p model share: its stages times p/S (1
        for one stage per device, for interleaved chunks and for a V; 2 where stages are replicated,
        as in Chimera and DualPipe); an int when whole, as the closed forms give it."""
        copies = (Fraction(len(stages) * self.devices, self.stages) for stages in self.stages_by_device())
        return tuple(int(c) if c.denominator == 1 else float(c) for c in copies)

    def stages_by_device(self) -> tuple[tuple[int, ...], ...]:
        """:meth:`stages_on` of every device (:func:`ppopt.placement.stages_by_device`)."""
        return placement_stages_by_device(self.placement, self.devices)


Split = bool | AbstractSet[tuple[int, int]]
"""Which backwards are split into I and W: all (True), none (False), or the (stage, microbatch) pairs."""

FREEING_KINDS = frozenset({Kind.B, Kind.W})
"""Kinds after which a microbatch's stored activation is released: B, or W where backward is split
(a (stage, microbatch) holds one of them, never both)."""


def is_split(split: Split, stage: int, microbatch: int) -> bool:
    """Whether the backward of ``microbatch`` on ``stage`` is split into I and W."""
    return split if isinstance(split, bool) else (stage, microbatch) in split


def gradient_kind(split_backward: bool) -> Kind:
    """The op that sends the activation gradient upstream: I when backward is split, else B."""
    return Kind.I if split_backward else Kind.B


def freeing_kind(split_backward: bool) -> Kind:
    """The op after which a microbatch's stored activation is released: W when split, else B."""
    return Kind.W if split_backward else Kind.B


def dependencies(op: Op, stages: int, split_backward: Split) -> tuple[Op, ...]:
    """Ops that must finish before ``op`` may start (data dependencies only).

    F(s) needs F(s-1); B/I(s) needs F(s) and the B or I of the same microbatch on s+1 (whichever
    that stage runs, per ``split_backward``); W(s) needs I(s).
    """
    s, m = op.stage, op.microbatch
    grad = gradient_kind(is_split(split_backward, s + 1, m))
    if op.kind is Kind.F:
        return (Op(s - 1, Kind.F, m),) if s > 0 else ()
    if op.kind is Kind.W:
        return (Op(s, Kind.I, m),)
    deps = [Op(s, Kind.F, m)]
    if s < stages - 1:
        deps.append(Op(s + 1, grad, m))
    return tuple(deps)


def required_ops(stages: int, microbatches: int, split_backward: Split) -> list[Op]:
    """Every op a complete training step needs, in (stage, kind, microbatch) order."""
    return list(iter_required_ops(stages, microbatches, split_backward))


def iter_required_ops(stages: int, microbatches: int, split_backward: Split) -> Iterator[Op]:
    """:func:`required_ops` one at a time: the search for a missing op stops at the first (a file of
    500,000 forwards and no backward built all 1.5 million first, 3 s)."""
    kinds = (Kind.F, Kind.B, Kind.I, Kind.W)
    return (Op(s, k, m) for s in range(stages) for k in kinds for m in range(microbatches)
            if k is Kind.F or (k is Kind.B) != is_split(split_backward, s, m))


