"""Chimera: two pipelines in opposite directions over the same devices (Li & Hoefler, SC'21).

Source: S. Li and T. Hoefler, "Chimera: Efficiently Training Large-Scale Neural Networks with
Bidirectional Pipelines", SC'21 (arXiv 2107.06925).

Placement: p stages (p even), each held twice. ``placement[s] = (s, p-1-s)``: replica 0 is the
"down" pipeline (stage s on rank s), replica 1 the "up" pipeline (stage s on rank p-1-s). Every
device therefore holds two stages (weights of 2/p of the model) and the two replicas of a stage must
have their weight gradients all-reduced every iteration (the cost model handles that, not this
module).

Basic unit: p microbatches, p/2 per direction. In unit k the microbatches ``k*p .. k*p+p/2-1`` run
down and ``k*p+p/2 .. k*p+p-1`` run up (``replica_of``). Within a unit, with F = B = 1 slot, the
j-th microbatch of a direction (j = 0..p/2-1)

- runs F of stage s at slot ``2j + s``, and
- runs B of stage s at slot ``2j + 2p-1-s`` (the backward wave mirrors the forward one from the
  last stage, starting right after the last forward).

These slots never collide on a device for any even p (F-down and B-up of a device share a parity
but would need j - j' = p/2; the same for B-down and F-up), so there are no ties to break; the
per-device *order* is the ops sorted by slot. For p = 4 these slots are, cell for cell, the four-stage,
four-microbatch schedule Li & Hoefler draw in the paper (Section 3.1, "Bidirectional pipelines"),
written out in tests/test_chimera.py.

m > p: direct concatenation of basic units, i.e. a device's order is unit 0's order, then unit 1's,
and so on (the paper's plain variant; its "forward doubling" / "backward halving" are not built).
The table layer then places each op as early as its dependencies and that order allow. Backward is
full B (not split into I and W).

What the table layer makes of it (F = B = 1; pinned in tests/test_chimera.py):

- m = p: length 3p-2 and bubble (p-2)/(3p-2), exactly the closed form; peaks p/2+1+min(r, p-1-r).
  At p = 4 the earliest-start table differs from the paper's p = m = 4 grid (Li & Hoefler, Section 3.1;
  written out in tests/test_chimera.py) only in two forwards that
  start one slot earlier (rank 0's 0F1 and rank 3's 0F3, slot 2 -> 1); metrics are identical.
- m > p: the units do not overlap at all (each device finishes unit k before it starts unit k+1),
  so the length is (m/p)(3p-2) and the bubble stays (p-2)/(3p-2), above the closed form, which
  assumes perfect interleaving (unit k shifted by 2p slots, which is collision-free and meets it).
- B = 2: the same order gives 5p-4 slots per unit instead of the formula's 3(p + (p-2)/2) at m = p.

``chimera_asym`` is the same schedule with an uneven A:B split of the model's layers between the
first and the second half of the stages (the study's asymmetric placement); only ``stage_weights``
differs, which the cost model reads.
"""

from __future__ import annotations

from ppopt.generators.common import require_even_devices, require_multiple, require_positive
from ppopt.ir import Kind, Op, Schedule
from ppopt.placement import bidirectional_placement, parse_split, split_text, split_weights

DOWN, UP = 0, 1


def unit_slots(devices: int) -> dict[tuple[int, Kind, int, int], int]:
    """Slot times of one basic unit with F = B = 1: ``{(direction, kind, j, stage): slot}``.

    ``j`` is the microbatch's index within its direction (0..p/2-1). See the module docstring.
    """
    p = devices
    slots = {}
    for direction in (DOWN, UP):
        for j in range(p // 2):
            for s in range(p):
                slots[(direction, Kind.F, j, s)] = 2 * j + s
                slots[(direction, Kind.B, j, s)] = 2 * j + 2 * p - 1 - s
    return slots


def device_of(devices: int, direction: int, stage: int) -> int:
    """Rank that runs ``stage`` in the given direction: s going down, p-1-s going up."""
    return stage if direction == DOWN else devices - 1 - stage


def unit_orders(devices: int, unit: int = 0) -> list[list[Op]]:
    """Per-device op order of basic unit ``unit`` (microbatches ``unit*p .. unit*p+p-1``)."""
    p = devices
    timed: list[list[tuple[int, Op]]] = [[] for _ in range(p)]
    for (direction, kind, j, s), slot in unit_slots(p).items():
        microbatch = unit * p + direction * (p // 2) + j
        timed[device_of(p, direction, s)].append((slot, Op(s, kind, microbatch)))
    orders = []
    for ops in timed:
        ops.sort(key=lambda item: item[0])
        assert len({slot for slot, _ in ops}) == len(ops), "Chimera unit slots collide"
        orders.append([op for _, op in ops])
    return orders


def _check(name: str, devices: int, microbatches: int) -> None:
    require_positive(devices, microbatches)
    require_even_devices(name, devices)
    require_multiple(name, microbatches, devices, "devices")


def chimera(devices: int, microbatches: int) -> Schedule:
    """Chimera with direct concatenation of basic units (see the module docstring)."""
    _check("chimera", devices, microbatches)
    p, m = devices, microbatches
    orders: list[list[Op]] = [[] for _ in range(p)]
    for unit in range(m // p):
        for d, ops in enumerate(unit_orders(p, unit)):
            orders[d] += ops
    replica_of = tuple(DOWN if mb % p < p // 2 else UP for mb in range(m))
    return Schedule("chimera", p, m, bidirectional_placement(p), tuple(tuple(o) for o in orders), replica_of)


def chimera_asym(devices: int, microbatches: int, split: object = (1, 2)) -> Schedule:
    """Chimera with the layers split A:B between the first and second half of the stages.

    The op order is :func:`chimera`'s; ``stage_weights`` carries the split (summing to 1).
    """
    base = chimera(devices, microbatches)
    weights = split_weights(devices, split)
    return Schedule(
        "chimera-asym", base.devices, base.microbatches, base.placement, base.orders, base.replica_of,
        stage_weights=weights, options={"split": split_text(split)},
    )


def chimera_formula(devices: int, microbatches: int, backward: int = 1):
    """Chimera's closed forms in the unit model (F = 1, B = ``backward`` slots).

    Li & Hoefler, SC'21, Table 1 (Chimera's row, D = p stages, N = m microbatches): bubble ratio
    (p-2)/(2m+p-2) (idle / total). This assumes *perfect
    interleaving* of basic units for m > p (no extra idle between units); a table built by direct
    concatenation is worse for m > p (see tests/test_chimera.py). Length: each device is busy
    m(1+b) slots, so length = m(1+b) / (1 - bubble) = (1+b)(m + (p-2)/2) (10 at p = m = 4, b = 1,
    as in the paper's p = m = 4 grid, Section 3.1). Peak live activations on rank r: p/2 + 1 + min(r, p-1-r). Two weight
    copies (two stages) per device.
    """
    from ppopt.formula import Formula

    _check("chimera", devices, microbatches)
    p, m = devices, microbatches
    return Formula(
        bubble_ratio=(p - 2) / (2 * m + p - 2),
        length=(1 + backward) * (m + (p - 2) / 2),
        peak_activations=tuple(p // 2 + 1 + min(r, p - 1 - r) for r in range(p)),
        weight_copies=(2,) * p,
        source="Li & Hoefler, SC'21 (Chimera); assumes perfect interleaving of basic units",
    )


def chimera_asym_formula(devices: int, microbatches: int, backward: int = 1, split: object = (1, 2)):
    """As :func:`chimera_formula`: the unit model ignores the A:B layer split (only costs see it)."""
    from ppopt.formula import Formula

    parse_split(split)
    base = chimera_formula(devices, microbatches, backward)
    return Formula(
        base.bubble_ratio, base.length, base.peak_activations, base.weight_copies,
        base.source + "; the A:B layer split changes costs only, not the unit-slot counts",
    )
