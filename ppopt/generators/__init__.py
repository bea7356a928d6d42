"""Schedule generators and their registry: ``generate(name, devices, microbatches, **options)``.

Each family lives in its own module and is registered here with the options it takes. A new
schedule is one module plus one :class:`Generator` entry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ppopt.errors import ScheduleError
from ppopt.flat import paused_gc
from ppopt.ir import Schedule, check_size

#: Every generator option, its default and its meaning (the CLI's shared schedule flags).
OPTIONS: Mapping[str, tuple[object, str]] = {
    "chunks": (2, "model chunks per device, v (interleaved-1f1b)"),
    "waves": (1, "waves W; each device holds 2W chunks (hanayo)"),
    "split": ((1, 2), "layer split A:B between the first and second half of the stages (chimera-asym)"),
}


def _one(options: Mapping[str, object]) -> object:
    return 1


def _twice(value: object) -> object:
    """Hanayo's 2W chunks per device (a non-int W is left for the generator to refuse)."""
    return 2 * value if isinstance(value, int) else value


@dataclass(frozen=True)
class Generator:
    """A registered schedule family.

    ``chunks(options)``: stages per device, S/p (an int for valid options; anything else is left
    for the generator to refuse); ``kinds``: op kinds per (stage, microbatch), 2 (F, B) or 3 (F, I, W).
    Together they give the schedule's size before it is built.
    """

    name: str
    function: str  # "module:function" under ppopt.generators
    summary: str
    options: tuple[str, ...] = ()
    rules: str = ""
    chunks: Callable[[Mapping[str, object]], object] = _one
    kinds: int = 2

    def ops(self, devices: int, microbatches: int, options: Mapping[str, object]) -> int | None:
        """Ops the schedule will have (stages x microbatches x kinds), or None when an input is not a
        positive int (the generator then refuses it with its own message)."""
        chunks = self.chunks(options)
        sizes = (devices, microbatches, chunks)
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in sizes):
            return None
        return devices * chunks * microbatches * self.kinds  # type: ignore[operator]

    @property
    def formula(self) -> str:
        """``module:function`` of the family's closed forms (see :mod:`ppopt.formula`)."""
        module, func = self.function.split(":")
        return f"{module}:{func}_formula"

    def build(self, devices: int, microbatches: int, **options: object) -> Schedule:
        module, func = self.function.split(":")
        return getattr(importlib.import_module(f"ppopt.generators.{module}"), func)(devices, microbatches, **options)


REGISTRY: dict[str, Generator] = {
    g.name: g
    for g in (
        Generator("gpipe", "linear:gpipe", "all forwards, then all backwards (Huang et al. 2019)"),
        Generator("1f1b", "linear:one_f_one_b", "PipeDream-Flush: warm-up, one forward one backward, drain"),
        Generator(
            "interleaved-1f1b", "interleaved:interleaved_1f1b",
            "Megatron interleaved 1F1B: v chunks per device, looped placement",
            ("chunks",), "m a multiple of p when v >= 2", chunks=lambda o: o.get("chunks", OPTIONS["chunks"][0]),
        ),
        Generator(
            "chimera", "chimera:chimera",
            "bidirectional pipelines, two weight replicas (Li & Hoefler 2021), direct concatenation",
            (), "p even, m a multiple of p",
        ),
        Generator(
            "chimera-asym", "chimera:chimera_asym",
            "Chimera with an uneven A:B layer split between the pipeline halves (the study's asymmetric placement)",
            ("split",), "p even, m a multiple of p",
        ),
        Generator(
            "hanayo", "hanayo:hanayo",
            "wave-like pipeline, 2W chunks per device on a zig-zag, no replicas (Liu et al. 2023)",
            ("waves",), "see the module docs for where it is defined",
            chunks=lambda o: _twice(o.get("waves", OPTIONS["waves"][0])),
        ),
        Generator("zb-h1", "zero_bubble:zb_h1", "zero-bubble H1: 1F1B with split backward, W fills bubbles (Qi et al. 2024)", (), "m >= p",
                  kinds=3),
        Generator("zb-v", "zero_bubble:zb_v", "zero-bubble V: two chunks per device in a V, split backward (Qi et al. 2024)", (), "m >= p",
                  chunks=lambda o: 2, kinds=3),
    )
}


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str) -> Generator:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ScheduleError(f"unknown schedule {name!r} (known: {', '.join(REGISTRY)})") from None


def generate(name: str, devices: int, microbatches: int, **options: object) -> Schedule:
    """Build schedule ``name`` for ``devices`` x ``microbatches``.

    Options the schedule does not take are ignored, so one set of flags can serve every schedule;
    an option no schedule knows is an error. A schedule over :data:`ppopt.ir.MAX_OPS` ops is refused
    before anything is built.
    """
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise ScheduleError(f"unknown schedule option(s): {', '.join(sorted(unknown))} (known: {', '.join(OPTIONS)})")
    generator = get(name)
    taken = {k: v for k, v in options.items() if k in generator.options and v is not None}
    size = generator.ops(devices, microbatches, taken)
    if size is not None:
        check_size(size, f"{name} with {devices} devices, {microbatches} microbatches")
    with paused_gc():
        return generator.build(devices, microbatches, **taken)
