"""Megatron's interleaved 1F1B (Narayanan et al., SC'21, "Efficient Large-Scale Language Model Training
on GPU Clusters Using Megatron-LM", §2.2.2).

Placement: each device holds v = ``chunks`` model chunks; there are v·p stages and stage c·p + r
(chunk c of device r) runs on device r (the looped placement, :func:`ppopt.ir.linear_placement`).

Order on device r, following Megatron-LM's ``forward_backward_pipelining_with_interleaving`` and
PyTorch's ``ScheduleInterleaved1F1B`` (our own code, same rule):

- The device runs v·m forwards and v·m backwards. Its k-th forward (k = 0 .. v·m-1) is on chunk
  c = (k // p) mod v for microbatch (k // (v·p))·p + k mod p: microbatches go in groups of p, and each
  group visits chunks 0, 1, .., v-1. Its k-th backward uses the same microbatch numbering with the
  chunks in reverse, c = v-1 - (k // p) mod v.
- Warm-up: w = min((v-1)·p + 2·(p-1-r), v·m) forwards; then one forward and one backward alternate
  (forward k = w + i, then backward i); then the remaining backwards drain. This is the 1F1B order
  over the device's sequence of chunk ops, so it reuses :func:`one_f_one_b_order`.
- v = 1 is plain 1F1B: Megatron then runs its non-interleaved schedule with warm-up p-1-r, and so do
  we (the interleaved warm-up would be 2·(p-1-r) and hold p-1-r more activations for nothing).

Conventions and rules:

- m must be a multiple of p when v >= 2, as Megatron requires. (PyTorch relaxes this with
  "rounds": round size max(1, m // p) must divide m, and uses m / rounds instead of p as the group
  size; we do not implement that.) Older Megatron releases also ran all forwards first when m == p;
  current Megatron and PyTorch use the rule above for every m, and so do we.
- A "chunk op" (one chunk's forward or backward of one microbatch) is one table slot (F = 1,
  B = ``backward``), so the lengths below are in chunk-op slots: 1/v of a 1F1B slot.

Measured with :func:`ppopt.table.build_table` (p 1..5, v 1..3, m in {p, 2p, 3p}, B = 1 and 2):
length (1+B)(v·m + p - 1) and peak live chunk activations min(v·m, (v-1)·p + 2·(p-1-r) + 1) on
device r for v >= 2, exactly the closed forms of :func:`interleaved_1f1b_formula`. Only the order
matters for the peak (an activation lives from its F to its B on the same device), and it is the
warm-up count plus one. On device 0 that is v·p + p - 1 chunks = p·(1 + (p-1)/(p·v)) stage-sized
activations, the count Korthikanti et al. 2022 give for the interleaved schedule's first stage
(Section 4.2.3).
"""

from __future__ import annotations

from ppopt.errors import ScheduleError
from ppopt.generators.common import require_multiple, require_positive
from ppopt.generators.linear import one_f_one_b_order
from ppopt.ir import Kind, Op, Schedule
from ppopt.placement import linear_placement


def _check_chunks(chunks: object) -> int:
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
        raise ScheduleError(f"must be an integer >= 1 (model chunks per device), got {chunks!r}", field="chunks")
    return chunks


def warmup_count(devices: int, microbatches: int, chunks: int, rank: int) -> int:
    """Forwards device ``rank`` runs before its first backward (Megatron's rule; p-1-r when v = 1)."""
    p, m, v, r = devices, microbatches, chunks, rank
    if v == 1:
        return min(p - 1 - r, m)
    return min((v - 1) * p + 2 * (p - 1 - r), v * m)


def chunk_op(devices: int, chunks: int, rank: int, kind: Kind, k: int) -> Op:
    """The device's k-th op of ``kind`` (F or B): microbatches in groups of p, chunks 0..v-1 (F) or v-1..0 (B)."""
    p, v = devices, chunks
    group, position = divmod(k, p * v)
    chunk = position // p
    if kind is not Kind.F:
        chunk = v - 1 - chunk
    return Op(chunk * p + rank, kind, group * p + position % p)


def interleaved_1f1b(devices: int, microbatches: int, chunks: int = 2) -> Schedule:
    """Megatron interleaved 1F1B with ``chunks`` model chunks per device (see the module docs)."""
    require_positive(devices, microbatches)
    v = _check_chunks(chunks)
    p, m = devices, microbatches
    if v > 1:
        require_multiple("interleaved-1f1b", m, p, "devices")
    orders = []
    for r in range(p):
        # 1F1B over the device's sequence of chunk ops; Op.microbatch here is the op's index k.
        sequence = one_f_one_b_order(0, warmup_count(p, m, v, r), v * m)
        orders.append(tuple(chunk_op(p, v, r, op.kind, op.microbatch) for op in sequence))
    return Schedule(
        "interleaved-1f1b", p, m, linear_placement(v * p, p), tuple(orders), options={"chunks": v}
    )


def interleaved_1f1b_formula(devices: int, microbatches: int, backward: int = 1, chunks: int = 2):
    """Narayanan et al. 2021: bubble (p-1)/(v·m+p-1), length (1+B)(v·m+p-1) chunk-op slots.

    Peak live chunk activations on device r: min(v·m, (v-1)·p + 2·(p-1-r) + 1) for v >= 2 (warm-up
    count plus one); for v = 1, plain 1F1B's min(m, p-r). One copy of the weights.
    """
    from ppopt.formula import Formula

    p, m, v = devices, microbatches, _check_chunks(chunks)
    peaks = tuple(min(m, p - r) for r in range(p)) if v == 1 else tuple(min(v * m, (v - 1) * p + 2 * (p - 1 - r) + 1) for r in range(p))
    return Formula(
        bubble_ratio=(p - 1) / (v * m + p - 1),
        length=(1 + backward) * (v * m + p - 1),
        peak_activations=peaks,
        weight_copies=(1,) * p,
        source="Narayanan et al. 2021 (Megatron-LM interleaved 1F1B); peak: Korthikanti et al. 2022, Section 4.2.3",
    )
