"""ZB-H2: the zero-bubble schedule that trades memory for bubbles (Qi, Wan, Huang, Lin, "Zero Bubble
(Almost) Pipeline Parallelism", ICLR 2024, §2.2).

The paper's construction: split each backward into I (input gradient, on the critical path) and W
(weight gradient, free to move after its I), add forwards to the warm-up and move W passes to the
tail, so that every device runs back to back once it starts, with a larger memory footprint than
1F1B's (§2.2): up to (2p−1)M_B (§2.3; M_B: one microbatch's activations on one stage), with F = B = W
assumed equal.

Order (our own deterministic construction of that rule, linear placement, stage r on device r): a
list-scheduling simulation in unit slots (F = I = W = 1). In every slot each device runs one ready
op (dependencies done in earlier slots), in this priority: an I (lowest microbatch first); else a
forward, if the device holds fewer than 2p - 1 live activations (an activation lives from its F to
its W); else a W (lowest microbatch). The W passes thus fill every slot where neither an I nor an
allowed F is ready, which is the paper's "W fills the bubbles".

Closed forms (chunk-op slots, F = 1, I = W = ``backward``/2), measured on this construction for
p <= 8, m <= 4p at the paper's equal costs and proved optimal by the bound below: every device is
busy from its first slot r to r + m(1+b) - 1 without a gap, the parallelogram of the paper's
Figure 3, so the length is m(1+b) + p - 1 (3m + p - 1 at b = 2), the least any schedule can have
(device p - 1 cannot start before slot p - 1 and has m(1+b) slots of work). The paper calls this
zero bubble because its optimizer post-validation (§4) lets the skew of r slots at the start and
p - 1 - r at the end overlap the neighbouring iterations; ppopt measures one iteration, so the
bubble in the idle/total convention is (p-1)/(m(1+b) + p - 1), as ZB-H1's at equal costs: ZB-H2
gains over ZB-H1 when I and W differ or communication delays the I chain (the simulator shows it),
not in the unit table. Peak live activations min(m, 2p - 1) on every device.

Range of the forms with other durations (:func:`units_outside`; F, I = W any slots). Device 0's
first I comes after some microbatch's forwards down the p devices and its I back up to device 0,
so it starts no earlier than pF + (p-1)I. Before it device 0 can only run forwards (W waits for
its I), at most k = min(m, 2p - 1) of them, so it idles at least (p-1)I - (k-p)F before then. The
forms leave device 0 an idle of (p-1)F in all (its m(F+B) of work in m(F+B) + (p-1)F), so they are
out of reach unless (k-p)F >= (p-1)(I-F): m >= p + (p-1)(I-F)/F, and I <= 2F (k <= 2p - 1). At
I <= F that is the family's m >= p. Where the condition holds, the construction meets the forms
(tests/test_zb_h2.py checks p <= 8, m <= 3p at several I/F); where it fails the forms are shown as
"n/a".
"""

from __future__ import annotations

from ppopt.generators.common import require_positive
from ppopt.ir import Kind, Op, Schedule
from ppopt.placement import linear_placement
from ppopt.units import UnitCosts


def _orders(devices: int, microbatches: int) -> tuple[tuple[Op, ...], ...]:
    """Per-device orders from the unit-slot list scheduling of the module docs.

    Each kind runs in microbatch order on every device: device d's forwards become ready in the
    order device d - 1 finishes them, its I in the order device d + 1 finishes its I (the last
    device's in the order of its own forwards), its W in the order of its own I. So a device's ready
    ops of a kind are the microbatches from the next one it has not run up to the count its
    predecessor had finished by the start of the slot, and three counters per device replace the
    op graph (the same orders as heaps of ops gave, four to seven times faster)."""
    p, m = devices, microbatches
    cap = min(m, 2 * p - 1)
    forwards, grads, weights = [0] * p, [0] * p, [0] * p  # ops of each kind run so far, per device
    orders: list[list[Op]] = [[] for _ in range(p)]
    awake = {0}  # devices that may have a ready op: a slot visits only these (p = 10,000 took minutes)
    remaining = 3 * p * m
    while remaining:  # one iteration = one slot; decisions use the counts at the slot's start
        ran: list[tuple[int, Kind]] = []
        for d in awake:
            f, i, w = forwards[d], grads[d], weights[d]
            if i < (grads[d + 1] if d < p - 1 else f):
                ran.append((d, Kind.I))
            elif f < (forwards[d - 1] if d else m) and f - w < cap:
                ran.append((d, Kind.F))
            elif w < i:
                ran.append((d, Kind.W))
        awake = set()
        for d, kind in ran:
            counts = forwards if kind is Kind.F else grads if kind is Kind.I else weights
            orders[d].append(Op(d, kind, counts[d]))
            counts[d] += 1
            awake.add(d)  # the devices whose ready ops this op can change: d and its neighbours
            if d:
                awake.add(d - 1)
            if d < p - 1:
                awake.add(d + 1)
        remaining -= len(ran)
    return tuple(tuple(order) for order in orders)


def zb_h2(devices: int, microbatches: int) -> Schedule:
    """ZB-H2 on ``devices`` x ``microbatches`` (see the module docs)."""
    require_positive(devices, microbatches)
    return Schedule("zb-h2", devices, microbatches, linear_placement(devices, devices), _orders(devices, microbatches))


def units_outside(devices: int, microbatches: int, units: UnitCosts) -> str | None:
    """Why the closed forms are out of reach at these durations (module docs, "Range"), or None."""
    forward, backward, weight = units.exact()
    if weight != backward / 2:
        return "needs I = W"
    p, grad = devices, backward - weight
    if grad > 2 * forward:
        return "needs I <= 2F"
    least = p + (p - 1) * (grad - forward) / forward
    if microbatches < least:
        return f"m < {float(least):g}"
    return None


def zb_h2_formula(devices: int, microbatches: int, backward: float = 2):
    """Qi et al. 2024 §2.2 in one iteration (module docs): length m(1+b) + p - 1 chunk-op slots, bubble
    (p-1)/length, peak min(m, 2p - 1) activations on every device, one copy of the weights."""
    from ppopt.formula import Formula

    p, m, b = devices, microbatches, backward
    return Formula(
        bubble_ratio=(p - 1) / (m * (1 + b) + p - 1),
        length=m * (1 + b) + p - 1,
        peak_activations=(min(m, 2 * p - 1),) * p,
        weight_copies=(1,) * p,
        source="Qi et al., ICLR 2024 (Zero Bubble (Almost) PP) §2.2, ZB-H2: peak (2p-1) M_B (§2.3); one-iteration length with its start/end skew",
    )
