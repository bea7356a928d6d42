"""Hanayo: a wave-like pipeline without weight replicas (Liu, Cheng, Zhou, You, SC'23).

Source: Z. Liu, S. Cheng, H. Zhou, Y. You, "Hanayo: Harnessing Wave-like Pipeline Parallelism for
Enhanced Large Model Training Efficiency", SC'23 (arXiv 2308.15762).

Placement: with W >= 1 waves the model is cut into 2W·p chunks (stages). Chunk ``k*p + j``
(k = 0..2W-1, j = 0..p-1) sits on rank j for even k and on rank p-1-j for odd k, so a microbatch
goes down the ranks, back up, down again... (a zig-zag); each rank holds 2W chunks, one copy of the
weights in total. All microbatches enter at rank 0 (chunk 0) and leave there (chunk 2W·p-1 is on
rank 0).

Order: the paper's exact per-device op order was not available to us, so this module builds its
own, deterministically, by a list-scheduling simulation in unit slots (F = B = 1):

- in every slot each device runs one of its *ready* ops (all dependencies done in earlier slots);
- priority, 1F1B-like: a ready backward before any forward; among backwards the lowest microbatch,
  then the latest chunk; among forwards the lowest microbatch, then the earliest chunk;
- at most p microbatches in flight: F of chunk 0 for microbatch i >= p waits until B of chunk 0 of
  microbatch i-p is done (as 1F1B bounds its warm-up), which keeps the activation peak independent
  of m.

Each device's order is the sequence of ops it ran; the table layer reproduces the simulation's
slots exactly at F = B = 1. The order does not depend on ``backward``: with B = 2 the same order is
laid out again and is longer than the closed form (see :func:`hanayo_formula`).

Where it is defined: any p >= 1, m >= 1, W >= 1 (valid and deadlock-free by construction). The
paper evaluates, and the study uses, only the restricted regime m = p; the closed form
:func:`hanayo_formula` matches this construction's table at m = p (and at any m that is a multiple
of p) with F = B = 1, and only there.
"""

from __future__ import annotations

import heapq

from ppopt.errors import ScheduleError
from ppopt.generators.common import require_positive
from ppopt.ir import Kind, Op, Schedule
from ppopt.placement import zigzag_placement


def remainder_caution(devices: int, microbatches: int) -> str | None:
    """Why Hanayo is slow when p does not divide m: at most p microbatches are in flight, so the
    last m mod p enter only when earlier ones are back from their whole zig-zag (p = 8, m = 9: 54.5
    slots at B = 2F, 1F1B's 48, where m = 8 takes 38); None when p divides m or m < p."""
    left = microbatches % devices
    if not left or microbatches < devices:
        return None
    return (f"hanayo at p = {devices}, m = {microbatches}: at most p microbatches are in flight, so the last {left} "
            "enter only once earlier ones are back from their whole zig-zag; m a multiple of p suits it")


def require_waves(waves: object) -> int:
    if isinstance(waves, bool) or not isinstance(waves, int) or waves < 1:
        raise ScheduleError(f"must be an integer >= 1, got {waves!r}", field="waves")
    return waves


def list_schedule(devices: int, microbatches: int, waves: int) -> tuple[tuple[Op, ...], ...]:
    """Per-device op orders from the unit-slot list-scheduling simulation (module docstring).

    Ops are integers, their keys in the priority order: B(s, i) is i·S + (S-1-s) and F(s, i) is
    (m + i)·S + s, with S = 2W·p stages, so a device's heap of keys pops backward before forward,
    lowest microbatch first, then the latest chunk for B and the earliest for F. Dependencies
    are counted per op (F(s, i) waits for F(s-1, i), and F(0, i) for B(0, i-p); B(s, i) waits for
    F(s, i) and B(s+1, i)), so no op graph is built."""
    p, m = devices, microbatches
    stages = 2 * waves * p
    device_of = [holders[0] for holders in zigzag_placement(p, waves)]
    backward_keys = m * stages  # keys below are backwards
    waiting_f = [(1 if s else 0) + (1 if not s and i >= p else 0) for s in range(stages) for i in range(m)]
    waiting_b = [2 if s < stages - 1 else 1 for s in range(stages) for _ in range(m)]
    ready: list[list[int]] = [[] for _ in range(p)]
    for i in range(min(p, m)):
        heapq.heappush(ready[device_of[0]], backward_keys + i * stages)
    orders: list[list[Op]] = [[] for _ in range(p)]
    busy = {device_of[0]}  # devices with a ready op: a slot visits only these
    while busy:  # one iteration = one slot
        ran: list[tuple[bool, int, int]] = []
        for d in busy:
            key = heapq.heappop(ready[d])
            if key < backward_keys:
                i, s = divmod(key, stages)
                s = stages - 1 - s
                orders[d].append(Op(s, Kind.B, i))
                ran.append((True, s, i))
            else:
                i, s = divmod(key - backward_keys, stages)
                orders[d].append(Op(s, Kind.F, i))
                ran.append((False, s, i))
        busy = {d for d in busy if ready[d]}
        for is_backward, s, i in ran:  # their successors become ready for the next slot
            if is_backward:
                if s:
                    waiting_b[(s - 1) * m + i] -= 1
                    if not waiting_b[(s - 1) * m + i]:
                        _push(ready, busy, device_of[s - 1], i * stages + stages - s)
                elif i + p < m:  # a microbatch leaves: the next may enter (at most p in flight)
                    waiting_f[i + p] -= 1
                    if not waiting_f[i + p]:
                        _push(ready, busy, device_of[0], backward_keys + (i + p) * stages)
            else:
                if s < stages - 1:
                    waiting_f[(s + 1) * m + i] -= 1
                    if not waiting_f[(s + 1) * m + i]:
                        _push(ready, busy, device_of[s + 1], backward_keys + i * stages + s + 1)
                waiting_b[s * m + i] -= 1
                if not waiting_b[s * m + i]:
                    _push(ready, busy, device_of[s], i * stages + stages - 1 - s)
    assert sum(map(len, orders)) == 2 * stages * m, "Hanayo list schedule left ops unscheduled"
    return tuple(tuple(order) for order in orders)


def _push(ready: list[list[int]], busy: set[int], device: int, key: int) -> None:
    heapq.heappush(ready[device], key)
    busy.add(device)


def hanayo(devices: int, microbatches: int, waves: int = 1) -> Schedule:
    """Hanayo with ``waves`` waves: 2W chunks per device on a zig-zag (module docstring)."""
    require_positive(devices, microbatches)
    waves = require_waves(waves)
    return Schedule(
        "hanayo", devices, microbatches, zigzag_placement(devices, waves),
        list_schedule(devices, microbatches, waves), options={"waves": waves},
    )


def hanayo_formula(devices: int, microbatches: int, backward: int = 1, waves: int = 1):
    """Hanayo's closed forms in the unit model (one op of one chunk = F 1 slot, B ``backward`` slots).

    - bubble ratio (p-1)/(2W·m+p-1): the interleaved-style form for 2W chunks per device, attributed
      to Hanayo (Z. Liu, S. Cheng, H. Zhou, Y. You, "Hanayo: Harnessing Wave-like Pipeline Parallelism
      for Enhanced Large Model Training Efficiency", SC'23) but *unverified* against the paper's text:
      what this module relies on is its own proof. With this placement it is a lower bound for any b: rank p-1 cannot start before
      slot p-1, and after its last op (a B of chunk p-1, its lowest chunk) p-1 more backwards run in
      sequence on the ranks below, so it idles at least (p-1)(1+b) slots. This module's table
      attains the bound exactly at F = B = 1 for m = p (the paper's regime) and for any m that is a
      multiple of p. It does not for m < p (one microbatch's critical path, 2W·p·(1+b) slots, is
      longer), for other m not a multiple of p, nor with B = 2 (the order is built for F = B): at
      m = p the table's length is then 6W·m + 4(p-1) instead of 3(2W·m+p-1), and the gap grows for
      larger multiples of p (tests/test_hanayo.py derives the lengths it checks).
    - length (1+b)(2W·m+p-1) = busy 2W·m(1+b) per device over (1 - bubble).
    - peak live activations, counted in chunks (each 1/(2W·p) of the model): **no closed form**. The
      paper gives none for its own order, and this module's order comes from a list-scheduling
      simulation whose peak we could not derive by hand. What can be derived is a bound: at most p
      microbatches are in flight (the cap of the module docstring) and each holds at most one
      activation per chunk of rank r, so every rank holds at most 2W·p. The value reported here is
      the construction's *measured* count, (2W-1)p + 1 + r on rank r for m >= p (it reaches the
      bound on rank p-1); tests/test_hanayo.py derives the peaks of three small cases by hand and
      checks the bound on more, and the ``source`` says so. It is not evidence that the table is right.
    - weight copies: 1 per device (2W chunks of 1/(2W·p) of the model each).
    """
    from ppopt.formula import Formula

    require_positive(devices, microbatches)
    w = require_waves(waves)
    p, m = devices, microbatches
    return Formula(
        bubble_ratio=(p - 1) / (2 * w * m + p - 1),
        length=(1 + backward) * (2 * w * m + p - 1),
        peak_activations=tuple((2 * w - 1) * p + 1 + r for r in range(p)),
        weight_copies=(1,) * p,
        source=(
            "Liu et al., SC'23 (Hanayo); bubble (p-1)/(2Wm+p-1): ppopt's own lower bound (proof in "
            "ppopt.generators.hanayo; the form is unverified against the paper's text), equal to ppopt's table at m = p "
            "with F = B; peak: no closed form, ppopt's construction's measured count "
            "(2W-1)p+1+r (bounded by 2Wp)"
        ),
    )
