"""Zero-bubble schedules (Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024,
for ZB-H1; ZB-V is in the later arXiv version, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241,
§6; the authors' repository github.com/sail-sg/zero-bubble-pipeline-parallelism). Backward is split into I (gradient for the input, sent
upstream) and W (gradient for the weights, needed only by the optimizer), so W can fill bubbles.

Conventions: lengths below are in chunk-op slots, F = I = W = 1 per chunk, which is the table
layer's default unit model (:mod:`ppopt.units`: B = I + W = 2 per 1/p model share) scaled by the
chunks per device (ZB-V's table lengths in slots are half these figures); an activation lives from
its F to its W. Bubble ratio is
idle / total time of the table, counting the idle slots before a device's first op and after its
last one. The ZB paper and its repository's README count only *internal* idle time: with their "optimizer post
validation" consecutive iterations overlap as parallelograms, so the start-up offset of device r
(r slots) and the matching tail (p-1-r slots) are not bubbles there. That is why that README's
"0 bubble" for ZB-V shows up here as (p-1) idle slots per device.

ZB-H1 (ICLR paper §2.1, "memory efficient"; its bubble in Table 2, §2.3): stage r on device r. Device r runs 1F1B's order with every
B replaced by I (warm-up p-1-r forwards), and the W of microbatch j placed right after the I of
microbatch j + r, or at the end when j + r >= m. So device r holds back r weight passes, every
device keeps p activations in flight (the same peak as 1F1B's worst device 0, as the paper says),
and the held-back W's fill the tail. This is PyTorch's ``ScheduleInterleavedZeroBubble`` (ZB1P)
with one chunk: W skipped in the first r steady-state steps. Requires m >= p.
Table (measured p 1..6, m p..3p): length 3m + p - 1, i.e. (p-1)(F + I - W) = p - 1 idle slots per
device, bubble (p-1)/(3m+p-1), peak p on every device: exactly :func:`zb_h1_formula`.

ZB-V (§6 of the later arXiv version, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241; PyTorch ``ScheduleZBVZeroBubble``): 2p stages; device r holds
stage r (chunk 0, going down) and stage 2p-1-r (chunk 1, coming back up), so the forward and
backward paths are V-shaped and device 0 both starts and ends each pass. Order on device r, with n =
max(m, 2p-1) microbatches and ops of microbatches >= m deleted afterwards (PyTorch's padding):

1. 2(p-r)-1 forwards of chunk 0;
2. r times: F of chunk 1, F of chunk 0;
3. p-r times: F, I, W of chunk 1;
4. steady state, while chunk 1 has fewer forwards than chunk 0 or chunk 0 has fewer than n: F of
   chunk 0 (while any are left), I and W of chunk 0, F, I and W of chunk 1;
5. r times: I of chunk 0, I of chunk 1;
6. p-r times: I of chunk 0 and the oldest pending W of chunk 0;
7. the pending W's of chunk 1, then those of chunk 0.

Requires m >= p (the project's rule; the padded construction itself is valid for any m >= 1).
Table (measured p 1..10, m p..3p+1), in chunk-op slots: length 6m + max(p-1, 2(2p-1-m)), so the
paper's 6m + p - 1 from m >= floor(3p/2) on; no internal idle slot at all (the paper's zero bubble)
exactly when m >= 2p-1; peak live chunk activations on device r min(2m, m+1+r, 2p), i.e. 2p (the
same as 1F1B's p full-stage activations) on every device once m >= 2p-1.
"""

from __future__ import annotations

from itertools import repeat

from ppopt.errors import ScheduleError
from ppopt.generators.common import require_positive
from ppopt.generators.linear import one_f_one_b_order
from ppopt.ir import Kind, Op, Schedule, ops_of
from ppopt.placement import linear_placement, v_placement


def _require_at_least_devices(name: str, devices: int, microbatches: int) -> None:
    require_positive(devices, microbatches)
    if microbatches < devices:
        raise ScheduleError(f"{name} needs microbatches >= devices (m >= p), got m = {microbatches} < p = {devices}", field="microbatches")


def zb_h1(devices: int, microbatches: int) -> Schedule:
    """ZB-H1: 1F1B with B -> I, and device r's W of microbatch j right after its I of microbatch j + r."""
    _require_at_least_devices("zb-h1", devices, microbatches)
    p, m = devices, microbatches
    orders = []
    for r in range(p):
        order: list[Op] = []
        for op in one_f_one_b_order(r, p - 1 - r, m, backward=Kind.I):
            order.append(op)
            if op.kind is Kind.I and op.microbatch >= r:
                order.append(Op(r, Kind.W, op.microbatch - r))
        order += [Op(r, Kind.W, j) for j in range(m - r, m)]
        orders.append(tuple(order))
    return Schedule("zb-h1", p, m, linear_placement(p, p), tuple(orders))


def zb_h1_formula(devices: int, microbatches: int, backward: float = 2):
    """Qi et al. 2024 §2.1: (p-1)(F+I-W) idle slots per device, peak min(m, p) per device (p for
    the m >= p the generator accepts).

    In chunk-op slots with F = 1 and B = I + W = ``backward`` split evenly (I = W = b/2, so F + I - W
    = 1): length m(1+b) + p - 1 (3m + p - 1 at the paper's I = W = F), bubble (p-1)/length.
    """
    from ppopt.formula import Formula

    p, m, b = devices, microbatches, backward
    return Formula(
        bubble_ratio=(p - 1) / (m * (1 + b) + p - 1),
        length=m * (1 + b) + p - 1,
        peak_activations=(min(m, p),) * p,
        weight_copies=(1,) * p,
        source="Qi et al., ICLR 2024 (Zero Bubble (Almost) PP), ZB-H1: §2.1, bubble Table 2 (§2.3)",
    )


def _zb_v_order(devices: int, microbatches: int, rank: int) -> tuple[Op, ...]:
    """Device ``rank``'s ZB-V order (steps 1-7 of the module docs), phantom microbatches removed."""
    p, r = devices, rank
    n = max(microbatches, 2 * p - 1)
    down, up = r, 2 * p - 1 - r  # the stages of chunk 0 and chunk 1
    F0, I0, W0 = (down, Kind.F), (down, Kind.I), (down, Kind.W)
    F1, I1, W1 = (up, Kind.F), (up, Kind.I), (up, Kind.W)
    # Steps 1-3 leave 2p-r-1 forwards of chunk 0 and p of chunk 1. Step 4 then runs n - (2p-r-1)
    # times with a forward of chunk 0 (until it has n) and p-r-1 times without (until chunk 1 has n).
    # Steps 5-7: I of chunk 1 runs r times without its W (step 5), I of chunk 0 r times (step 5), so r
    # W's of each chunk are pending at the end.
    steps = (
        [F0] * (2 * (p - r) - 1)
        + [F1, F0] * r
        + [F1, I1, W1] * (p - r)
        + [F0, I0, W0, F1, I1, W1] * (n - (2 * p - r - 1))
        + [I0, W0, F1, I1, W1] * (p - r - 1)
        + [I0, I1] * r
        + [I0, W0] * (p - r)
        + [W1] * r
        + [W0] * r
    )
    # Each step takes the next microbatch of its (stage, kind); the phantom ones (n > m) find none
    # (next's default None) and are dropped (ops are non-empty tuples, so true).
    runs = {key: ops_of(repeat(key[0]), repeat(key[1]), range(microbatches)) for key in dict.fromkeys(steps)}
    return tuple(filter(None, map(next, map(runs.__getitem__, steps), repeat(None))))


def zb_v(devices: int, microbatches: int) -> Schedule:
    """ZB-V: two chunks per device in a V (stages r and 2p-1-r on device r), split backward."""
    _require_at_least_devices("zb-v", devices, microbatches)
    p, m = devices, microbatches
    orders = tuple(_zb_v_order(p, m, r) for r in range(p))
    return Schedule("zb-v", p, m, v_placement(p), orders)


def zb_v_formula(devices: int, microbatches: int, backward: float = 2):
    """Qi et al. 2024 (ZB-V, F = I = W per chunk): no internal bubble, peak as 1F1B (2p chunks).

    In chunk-op slots (F = 1, B = I + W = ``backward``, I = W): each device runs 2m(1+b) slots of
    ops after a start-up offset of p - 1 the parallelogram cannot avoid, so length 2m(1+b) + p - 1
    (6m + p - 1 at the paper's b = 2) and bubble (p-1)/length in the idle/total convention (the
    authors' README's "0" counts internal idle only). Peak min(2m, 2p) chunk activations per device. At b = 2
    the table matches the length for m >= floor(3p/2) and the peaks for m >= 2p-1 (see the module
    docs); the order is built for I = W = F, and with other b the table is longer.
    """
    from ppopt.formula import Formula

    p, m, b = devices, microbatches, backward
    return Formula(
        bubble_ratio=(p - 1) / (2 * m * (1 + b) + p - 1),
        length=2 * m * (1 + b) + p - 1,
        peak_activations=(min(2 * m, 2 * p),) * p,
        weight_copies=(1,) * p,
        source="Qi et al., arXiv 2401.10241 (Zero Bubble PP), §6, ZB-V; github.com/sail-sg/zero-bubble-pipeline-parallelism README",
    )
