"""Placements: which devices hold each stage, one function per style, shared by generators and solver.

A placement is a tuple indexed by stage; ``placement[s]`` is the tuple of devices holding stage s
(one per replica). Styles:

- ``linear``: p stages, stage s on device s (GPipe, 1F1B, ZB-H1);
- ``looped``: v·p stages, stage s on device s mod p (Narayanan et al., "Efficient Large-Scale
  Language Model Training on GPU Clusters Using Megatron-LM", SC'21, §2.2: interleaved 1F1B);
- ``v``: 2p stages, device r holds stages r and 2p-1-r (Qi et al., "Zero Bubble Pipeline
  Parallelism", arXiv 2401.10241, §6: ZB-V);
- ``zigzag``: 2W·p stages; wave k runs down the devices for even k and back up for odd k (Liu et
  al., "Hanayo: Harnessing Wave-like Pipeline Parallelism", SC'23);
- ``bidirectional``: p stages (p even), stage s held by devices s and p-1-s (Li & Hoefler,
  "Chimera", SC'21).

Also here: the A:B layer split of the asymmetric bidirectional placement (:func:`parse_split`,
:func:`split_weights`), which the Chimera generator and the solver's spaces share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ppopt.errors import ScheduleError
from ppopt.io import decimal_float

Placement = tuple[tuple[int, ...], ...]

STYLES = ("linear", "looped", "v", "zigzag", "bidirectional")


def stages_by_device(placement: Sequence[Sequence[int]], devices: int) -> tuple[tuple[int, ...], ...]:
    """Per device, the stages with a replica on it, ascending: one pass over the placement (asking
    every device about every stage took seconds at thousands of devices)."""
    held: list[list[int]] = [[] for _ in range(devices)]
    for stage, holders in enumerate(placement):
        for device in sorted(set(holders)):
            held[device].append(stage)
    return tuple(tuple(stages) for stages in held)


def linear_placement(stages: int, devices: int) -> Placement:
    """Looped placement: stage s on device s mod p (plain linear when stages == devices)."""
    return tuple((s % devices,) for s in range(stages))


def v_placement(devices: int) -> Placement:
    """V-shaped placement: stage s on device s for s < p, on device 2p-1-s for the second half."""
    p = devices
    return tuple((s if s < p else 2 * p - 1 - s,) for s in range(2 * p))


def zigzag_placement(devices: int, waves: int) -> Placement:
    """``placement[k*p + j]`` is ``(j,)`` for even k and ``(p-1-j,)`` for odd k, k = 0..2W-1."""
    p = devices
    return tuple((j if k % 2 == 0 else p - 1 - j,) for k in range(2 * waves) for j in range(p))


def bidirectional_placement(devices: int) -> Placement:
    """Stage s held twice: replica 0 ("down") on device s, replica 1 ("up") on device p-1-s; p even."""
    p = devices
    if p % 2:
        raise ScheduleError(f"the bidirectional placement needs an even number of devices, got {p}", field="devices")
    return tuple((s, p - 1 - s) for s in range(p))


def placement(style: str, devices: int, chunks: int = 1, waves: int = 1) -> Placement:
    """The placement of ``style`` on ``devices`` devices (``chunks`` for looped, ``waves`` for zigzag)."""
    if style == "linear":
        return linear_placement(devices, devices)
    if style == "looped":
        return linear_placement(chunks * devices, devices)
    if style == "v":
        return v_placement(devices)
    if style == "zigzag":
        return zigzag_placement(devices, waves)
    if style == "bidirectional":
        return bidirectional_placement(devices)
    raise ScheduleError(f"must be one of {', '.join(STYLES)}, got {style!r}", field="placement")


def parse_split(split: object) -> tuple[float, float]:
    """``split`` as two positive finite numbers: a pair ``(A, B)`` or the text ``"A:B"``."""
    error = ScheduleError(f"must be two positive numbers A:B, e.g. 1:2, got {split!r}", field="split")
    parts = split.split(":") if isinstance(split, str) else split
    if not isinstance(parts, (tuple, list)) or len(parts) != 2 or any(isinstance(x, bool) for x in parts):
        raise error
    try:  # text as plain decimals: float() would also read 1_0, inf and other scripts' digits
        a, b = (decimal_float(x.strip()) if isinstance(x, str) else float(x) for x in parts)
    except (TypeError, ValueError):
        raise error from None
    if not (0 < a < math.inf and 0 < b < math.inf):
        raise error
    if min(_shares(a, b)) <= 0.0:  # 1e308:1e-308: one side's share of the layers rounds to nothing
        raise ScheduleError(f"the parts of {split!r} are too far apart: one side would get no layers", field="split")
    return a, b


def split_text(split: object) -> str:
    """``split`` (:func:`parse_split`) as ppopt writes it, ``A:B`` in shortest form (``1:2``)."""
    a, b = parse_split(split)
    return f"{a:g}:{b:g}"


def _shares(a: float, b: float) -> tuple[float, float]:
    """A/(A+B) and B/(A+B), computed from the ratios so that A + B cannot overflow (1e308:1e308)."""
    return 1.0 / (1.0 + b / a), 1.0 / (1.0 + a / b)


SPLIT_NOTE_SHARE = 0.05
"""How far the first half's share of the layers may lie from the split's before :func:`split_note` says so."""


def split_note(layers: Sequence[int], split: object) -> str | None:
    """When whole layers cannot follow an A:B ``split`` (chimera-asym's) of ``layers`` per stage: what
    the halves hold instead, for a note (None when the first half's share of the layers is within
    :data:`SPLIT_NOTE_SHARE` of A/(A+B): 1:2 of llama3-8b's 32 layers over 4 stages is 10:22, a share
    of 0.31 for 0.33; 1:3 of 4 layers is 2:2, and 1:100 too, since every stage keeps a layer)."""
    a, b = parse_split(split)
    half = len(layers) // 2
    first, second = sum(layers[:half]), sum(layers[half:])
    if abs(first / (first + second) - _shares(a, b)[0]) <= SPLIT_NOTE_SHARE:
        return None
    return (f"chimera-asym's split {split_text(split)} becomes {first}:{second} layers on this model "
            f"({','.join(map(str, layers))} per stage: whole layers, at least one per stage)")


def split_weights(devices: int, split: object = (1, 2)) -> tuple[float, ...]:
    """Stage weights for an A:B split: stages 0..p/2-1 share A/(A+B), stages p/2..p-1 share B/(A+B)."""
    a, b = parse_split(split)
    if devices < 2 or devices % 2:
        raise ScheduleError(f"an A:B split of the layers between the pipeline's halves needs an even number of "
                            f"devices, got {devices}", field="devices")
    half = devices // 2
    share_a, share_b = _shares(a, b)
    first, second = share_a / half, share_b / half
    return tuple(first if s < half else second for s in range(devices))
