"""DualPipe: DeepSeek's bidirectional pipeline with weight replicas (DeepSeek-AI, "DeepSeek-V3
Technical Report", 2024, §3.2.1 and Table 2), as DeepSeek's public implementation builds it
(the reference below: github.com/deepseek-ai/DualPipe, ``DualPipe.step`` in ``dualpipe/dualpipe.py``;
facts from it, the code is our own).

Placement: p devices (p even), p stages each held twice, as in Chimera
(:func:`ppopt.placement.bidirectional_placement`): device r holds stage r of the "down" pipeline and
stage p-1-r of the "up" pipeline. Microbatches 0..m/2-1 enter at device 0 and run down,
m/2..m-1 enter at device p-1 and run up (``replica_of``).

Order. Take device r's half rank h = min(r, p-1-r) and call its *early* stage the one it holds at
depth h (stage h of the direction entering at its own end: down for r < p/2, up otherwise) and its
*late* stage the one at depth p-1-h (of the other direction). The reference runs, per device, the
eight phases of ``step()`` with P = p/2 half ranks and n = m/2 microbatches per direction:

1. nF0: 2(P-h-1) forwards of the early stage;
2. nF0F1: h+1 times a forward of the early stage, then one of the late stage;
3. nB1W1F1: P-h-1 times the late stage's I, its W, a forward of the late stage;
4. main loop, n-2P+h+1 times: the early forward overlapped with the late stage's full B (on the
   middle devices, h = P-1, the first of these runs as two plain ops), then the late forward
   overlapped with the early stage's B;
5. nB1F1B0: P-h-1 times the late stage's B, then its forward overlapped with the early stage's B;
6. nB1B0: h+1 times a backward of the late stage, then one of the early stage: full B until step
   (h+1)//2, I from there (on odd h from that step's late backward, on even h from its early one);
7. nWB0: P-h-1 times the oldest deferred W, then the early stage's I;
8. nW: the h+1 remaining W, oldest first.

These are, phase for phase, the phases PyTorch's DualPipeV runs on its device h of P devices with n
microbatches (the reference's ``step()`` with ``half_rank``, ``num_half_ranks`` and
``half_num_chunks``), its first chunk being the early stage and its second the late stage. So the
order is built from :func:`ppopt.generators.dualpipev.device_order` (P, n, h), each op relabelled:
the stage keeps its number (V stage s of 2P = p stages is DualPipe's stage s) and a microbatch k of
the early stage is the k-th of that direction. Devices r and p-1-r run mirror images of one order.
The reference asserts p even, m even and m >= 2p (``num_chunks >= num_ranks * 2``: the main loop
runs at least once on device 0); so does this generator.

Closed forms (Table 2 of the report, per device, F, B, W the times of one stage's forward, full
backward and weight backward, F&B that of an overlapped pair): bubble (p/2 - 1)(F&B + B - 3W),
parameters 2x, activations p + 1. In ppopt's unit model a pair counts as its two ops, F&B = F + B,
so with F = 1, B = b, W = w the bubble is (p/2 - 1)(1 + 2b - 3w) slots ((p/2 - 1)(1 + b/2) at the
unit model's w = b/2) and the length m(1 + b) plus that. The report's accounting runs a pair as one block: it starts once both its inputs have arrived
and its F's output leaves with its B's at the block's end; laid out that way (F = 1, B = 2, W = 1,
F&B = 3) every device idles exactly (p/2 - 1)·2 slots, the formula. ppopt's table runs a pair as its
F then its B, the F's output leaving when the F ends, so the next device starts earlier: at the
default units (and at B = 1) the table's length is m(1 + b) + p/2 - 1, shorter than the formula for
p > 2. That is the least length any schedule of the placement can have (device p/2 - 1 has nothing
to run before slot p/2 - 1: each of its stages needs a forward of another device first, and it then
works m(1 + b) slots), so DualPipe is optimal in its relaxed space there. tests/test_dualpipe.py pins
both layouts; peak activations are p + 1 on every device, as Table 2 says, for every m >= 2p.
"""

from __future__ import annotations

from ppopt.errors import ScheduleError
from ppopt.generators import dualpipev
from ppopt.generators.common import require_even_devices, require_positive
from ppopt.ir import Op, Schedule
from ppopt.placement import bidirectional_placement

DOWN, UP = 0, 1


def _check(devices: int, microbatches: int) -> None:
    """The reference's rules: p even, m even, m >= 2p; each error names its field."""
    require_positive(devices, microbatches)
    p, m = devices, microbatches
    require_even_devices("dualpipe", p)  # two directions over p/2 devices each
    if m % 2:
        raise ScheduleError(f"dualpipe needs an even number of microbatches (half enter from each end), got {m}",
                            field="microbatches")
    if m < 2 * p:
        raise ScheduleError(f"dualpipe needs m >= 2p (its main loop runs at least once on every device), got m = {m} "
                            f"with p = {p}: the minimum is m = {2 * p}", field="microbatches")


def _relabel(op: Op, devices: int, microbatches: int, device: int) -> Op:
    """DualPipeV's op on half rank h as DualPipe's op on ``device`` (module docs). Stage s runs down on
    device s and up on device p-1-s, so the op's microbatch goes up exactly when its stage and the
    device lie in different halves."""
    half = devices // 2
    direction = (op.stage >= half) != (device >= half)
    return Op(op.stage, op.kind, op.microbatch + (microbatches // 2 if direction else 0))


def dualpipe(devices: int, microbatches: int) -> Schedule:
    """DualPipe on ``devices`` x ``microbatches`` (module docs); needs p even, m even, m >= 2p."""
    _check(devices, microbatches)
    p, m = devices, microbatches
    orders: list[tuple[Op, ...]] = []
    pairs: list[tuple[Op, Op]] = []
    for r in range(p):
        order, overlapped = dualpipev.device_order(p // 2, m // 2, min(r, p - 1 - r))
        orders.append(tuple(_relabel(op, p, m, r) for op in order))
        pairs += [(_relabel(f, p, m, r), _relabel(b, p, m, r)) for f, b in overlapped]
    replica_of = tuple(DOWN if k < m // 2 else UP for k in range(m))
    return Schedule("dualpipe", p, m, bidirectional_placement(p), tuple(orders), replica_of, overlapped=tuple(pairs))


def split_pairs(devices: int, microbatches: int) -> int:
    """(stage, microbatch) pairs that run I then W: DualPipeV's count on p/2 devices, for each half."""
    return 2 * dualpipev.split_pairs(devices // 2, microbatches // 2)


def dualpipe_formula(devices: int, microbatches: int, backward: float = 2, weight: float | None = None):
    """DualPipe's closed forms (DeepSeek-V3 report, Table 2) in chunk-op slots (module docs).

    F = 1, B = ``backward``, W = ``weight`` (default B/2, the unit model's even split) and
    F&B = F + B (ppopt counts an overlapped pair as its two ops): bubble
    (p/2 - 1)(F&B + B - 3W) = (p/2 - 1)(1 + 2b - 3w) idle slots on every device, each busy m(1 + b);
    peak p + 1 activations; two weight copies per device.
    """
    from ppopt.formula import Formula

    _check(devices, microbatches)
    p, m, b = devices, microbatches, backward
    w = b / 2 if weight is None else weight
    bubble = (p / 2 - 1) * ((1 + b) + b - 3 * w)
    length = m * (1 + b) + bubble
    return Formula(
        bubble_ratio=bubble / length,
        length=length,
        peak_activations=(p + 1,) * p,
        weight_copies=(2,) * p,
        source="DeepSeek-AI 2024 (DeepSeek-V3 report, §3.2.1, Table 2), F&B = F + B",
    )
