"""Schedule families and their registry, the single source of truth about them.

Each family lives in its own module and is one :class:`Family` entry in :data:`REGISTRY`: its
generator (a callable), its closed forms with the range where they hold (or ``None`` with the reason
there are none), the relaxed search space it is a point of, its options and rules, the solver
placements it hints, and whether it exports to PyTorch's CSV. ``list``, ``evaluate``, ``compare``,
``gap``, ``frontier``, ``search``'s hints, the sweep specs and the study read everything from here,
so adding a schedule is one new module plus one entry (README: "Adding a schedule");
``tests/test_registry.py`` walks every entry through every command.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ppopt.errors import ScheduleError, did_you_mean
from ppopt.flat import paused_gc
from ppopt.generators import (
    chimera,
    dualpipe,
    dualpipev,
    hanayo,
    interleaved,
    linear,
    looped_bfs,
    v_half,
    v_min,
    zb_h2,
    zero_bubble,
)
from ppopt.generators.common import require_positive
from ppopt.ir import Schedule, check_size
from ppopt.units import UnitCosts

if TYPE_CHECKING:
    from ppopt.formula import Formula

#: Every generator option, its default and its meaning (the CLI's shared schedule flags).
OPTIONS: Mapping[str, tuple[object, str]] = {
    "chunks": (2, "model chunks per device, v (interleaved-1f1b, looped-bfs)"),
    "waves": (1, "waves W; each device holds 2W chunks (hanayo)"),
    "split": ((1, 2), "layer split A:B between the first and second half of the stages (chimera-asym)"),
}


OPTION_LABELS = {"chunks": "v", "waves": "w", "split": ""}
"""How a schedule's label writes each option's value: ``v2``, ``w2``, ``1:2`` (every option is also
a :class:`ppopt.job.Job` field of the same name)."""


def schedule_label(name: str, options: Mapping[str, object], changed_only: bool = False) -> str:
    """``name`` with the options it was built with: ``interleaved-1f1b v2``, ``hanayo w2``,
    ``chimera-asym 1:2``; ``changed_only``: only those not at their default (:data:`OPTIONS`), so a
    family built with its defaults reads as its name alone."""
    from ppopt.placement import split_text

    def text(option: str, value: object) -> str:
        return split_text(value) if option == "split" else str(value)

    shown = [f"{OPTION_LABELS[k]}{text(k, v)}" for k, v in options.items()
             if k in OPTION_LABELS and v is not None and not (changed_only and text(k, v) == text(k, OPTIONS[k][0]))]
    return " ".join([name, *shown])


def _one(options: Mapping[str, object]) -> object:
    return 1


def _twice(value: object) -> object:
    """Hanayo's 2W chunks per device (a non-int W is left for the generator to refuse)."""
    return 2 * value if isinstance(value, int) else value


def _anywhere(devices: int, microbatches: int, options: Mapping[str, object]) -> str | None:
    return None


def _any_units(devices: int, microbatches: int, units: UnitCosts) -> str | None:
    return None


def _equal_units(devices: int, microbatches: int, units: UnitCosts) -> str | None:
    """Qi et al. 2024 state ZB-H1's and ZB-V's forms at F = I = W (the default units)."""
    forward, backward, weight = units.exact()
    return None if weight == backward / 2 and backward == 2 * forward else "needs F = I = W"


@dataclass(frozen=True)
class ClosedForms:
    """A family's closed forms and the range where they hold.

    ``function(devices, microbatches, backward, **options) -> Formula`` states them in chunk-op slots
    (:mod:`ppopt.formula`), with ``weight`` = W/F as a keyword too when ``weight`` is True;
    ``outside(devices, microbatches, options)`` is None inside the range and
    otherwise the reason, as the user sees it after "n/a" (e.g. ``"m < 2p - 1"``): a value outside
    its range is shown as such and never ranked. ``table_differs``: empty when, inside the range and at
    the default units (F = 1, B = 2, I = W = 1), ppopt's own table equals the closed form
    (tests/test_registry.py checks it); otherwise where it does not, in words (``ppopt list``), when the
    forms are a paper's claim the construction does not meet everywhere (see the module's docs).
    """

    function: Callable[..., Formula]
    outside: Callable[[int, int, Mapping[str, object]], str | None] = _anywhere
    table_differs: str = ""
    holds: str = "any p, m"  # the range in words (``ppopt list``), within the family's rules
    units_outside: Callable[[int, int, UnitCosts], str | None] = _any_units
    """Why the unit durations (``--forward``, ``--backward``, ``--weight``) are outside the range,
    or None: "n/a (needs F = I = W)" and the like, never compared with the table. Checked against
    ppopt's tables: ZB-H1's and ZB-V's forms hold only at F = I = W, ZB-H2's where
    :func:`ppopt.generators.zb_h2.units_outside` says."""
    weight: bool = False

    @property
    def table_exact(self) -> bool:
        return not self.table_differs


@dataclass(frozen=True)
class Family:
    """One registered schedule family (see the module docstring).

    ``chunks(options)``: stages per device, S/p (an int for valid options; anything else is left
    for the generator to refuse); ``kinds``: op kinds per (stage, microbatch), 2 (F, B) or 3 (F, I, W);
    ``split_pairs(devices, microbatches)``, for a family mixing the two per microbatch (``kinds`` 2):
    how many (stage, microbatch) pairs run I and W. Together they give the schedule's size before it
    is built. ``closed_forms`` is None only with
    ``no_closed_forms`` saying why. ``space(options)``: the ``--space`` spec of the relaxed space the
    family is a point of (same placement and backward, order free), used by ``gap`` and ``frontier``.
    ``hints``: the solver placements in which the family is tried as a starting point. ``torch``: its
    schedules export to PyTorch's CSV (no weight replicas).
    """

    name: str
    build: Callable[..., Schedule]
    summary: str
    space: Callable[[Mapping[str, object]], str]
    closed_forms: ClosedForms | None
    no_closed_forms: str = ""
    options: tuple[str, ...] = ()
    rules: str = "any p, m"  # the sizes the generator accepts, in words
    chunks: Callable[[Mapping[str, object]], object] = _one
    kinds: int = 2
    split_pairs: Callable[[int, int], int] | None = None
    hints: tuple[str, ...] = ()
    torch: bool = True
    caution: Callable[[int, int], str | None] | None = None
    """What a user should know about the family at (devices, microbatches) where it is defined but
    built poorly, said when it is evaluated; None: nothing."""

    def __post_init__(self) -> None:
        if (self.closed_forms is None) == (not self.no_closed_forms):
            raise ValueError(f"{self.name}: give closed forms or the reason there are none, not both")

    def ops(self, devices: int, microbatches: int, options: Mapping[str, object]) -> int | None:
        """Ops the schedule will have (stages x microbatches x kinds), or None when an input is not a
        positive int (the generator then refuses it with its own message)."""
        chunks = self.chunks(options)
        sizes = (devices, microbatches, chunks)
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in sizes):
            return None
        ops = devices * chunks * microbatches * self.kinds  # type: ignore[operator]
        return ops + (self.split_pairs(devices, microbatches) if self.split_pairs is not None else 0)

    def describe(self) -> dict[str, Any]:
        """The entry as plain data (``ppopt list --json``)."""
        forms = self.closed_forms
        return {
            "schedule": self.name, "summary": self.summary, "options": list(self.options), "rules": self.rules,
            "closed_forms": None if forms is None else forms.holds, "table_differs": None if forms is None else forms.table_differs or None, "no_closed_forms": self.no_closed_forms or None,
            "space": self.space({}), "hints": list(self.hints), "torch_export": self.torch,
        }

    def taken(self, options: Mapping[str, object]) -> dict[str, Any]:
        """The options this family takes, without unset (None) ones."""
        return {k: v for k, v in options.items() if k in self.options and v is not None}


def _space(spec: str) -> Callable[[Mapping[str, object]], str]:
    return lambda options: spec


def _zb_v_outside(devices: int, microbatches: int, options: Mapping[str, object]) -> str | None:
    """Qi et al. 2024's ZB-V forms hold once the V is full: the length from m >= floor(3p/2), the
    peaks from m >= 2p - 1 (zero_bubble module docs); the stricter bound is the range."""
    return "m < 2p - 1" if microbatches < 2 * devices - 1 else None


def _at_least_p(devices: int, microbatches: int, options: Mapping[str, object]) -> str | None:
    return "m < p" if microbatches < devices else None


def _looped_bfs_outside(devices: int, microbatches: int, options: Mapping[str, object]) -> str | None:
    """Lamy-Poirier 2023's forms need m >= p once there are two chunks or more (looped_bfs module docs)."""
    chunks = options.get("chunks", OPTIONS["chunks"][0])
    return "m < p" if microbatches < devices and chunks != 1 else None


def _hanayo_outside(devices: int, microbatches: int, options: Mapping[str, object]) -> str | None:
    """Hanayo's forms are stated for the paper's regime, m a multiple of p (hanayo module docs)."""
    return "m not a multiple of p" if microbatches % devices else None


_CHIMERA_TABLE = "can be longer beyond m = p (units concatenated) and unless F = B"

REGISTRY: dict[str, Family] = {
    f.name: f
    for f in (
        Family("gpipe", linear.gpipe, "all forwards, then all backwards (Huang et al. 2019)",
               _space("placement=linear"), ClosedForms(linear.gpipe_formula), hints=("linear",)),
        Family("1f1b", linear.one_f_one_b, "PipeDream-Flush: warm-up, one forward one backward, drain",
               _space("placement=linear"), ClosedForms(linear.one_f_one_b_formula), hints=("linear", "any")),
        Family(
            "interleaved-1f1b", interleaved.interleaved_1f1b,
            "Megatron interleaved 1F1B: v chunks per device, looped placement",
            lambda o: f"placement=looped,chunks={o.get('chunks') or OPTIONS['chunks'][0]}",
            ClosedForms(interleaved.interleaved_1f1b_formula),
            options=("chunks",), rules="m a multiple of p when v >= 2",
            chunks=lambda o: o.get("chunks", OPTIONS["chunks"][0]), hints=("looped", "any"),
        ),
        Family(
            "looped-bfs", looped_bfs.looped_bfs,
            "looped breadth-first: v chunks per device, all microbatches of a chunk before the next (Lamy-Poirier 2023)",
            lambda o: f"placement=looped,chunks={o.get('chunks') or OPTIONS['chunks'][0]}",
            ClosedForms(looped_bfs.looped_bfs_formula, _looped_bfs_outside, holds="m >= p (v >= 2)"),
            options=("chunks",), chunks=lambda o: o.get("chunks", OPTIONS["chunks"][0]), hints=("looped",),
        ),
        Family(
            "chimera", chimera.chimera,
            "bidirectional pipelines, two weight replicas (Li & Hoefler 2021), direct concatenation",
            _space("placement=bidirectional,directions=free"),
            ClosedForms(chimera.chimera_formula, table_differs=_CHIMERA_TABLE),
            rules="p even, m a multiple of p", hints=("bidirectional",), torch=False,
        ),
        Family(
            "chimera-asym", chimera.chimera_asym,
            "Chimera with an uneven A:B layer split between the pipeline halves (the study's asymmetric placement)",
            lambda o: f"placement=bidirectional,directions=free,split={o.get('split') or '1:2'}",
            ClosedForms(chimera.chimera_asym_formula, table_differs=_CHIMERA_TABLE),
            options=("split",), rules="p even, m a multiple of p", torch=False,
        ),
        Family(
            "hanayo", hanayo.hanayo,
            "wave-like pipeline, 2W chunks per device on a zig-zag, no replicas (Liu et al. 2023)",
            lambda o: f"placement=zigzag,waves={o.get('waves') or OPTIONS['waves'][0]}",
            ClosedForms(hanayo.hanayo_formula, _hanayo_outside, table_differs="longer unless F = B", holds="m a multiple of p"),
            options=("waves",), rules="any p, m",
            chunks=lambda o: _twice(o.get("waves", OPTIONS["waves"][0])), hints=("zigzag",),
            caution=hanayo.remainder_caution,
        ),
        Family("zb-h1", zero_bubble.zb_h1, "zero-bubble H1: 1F1B with split backward, W fills bubbles (Qi et al. 2024)",
               _space("placement=linear,backward=split"), ClosedForms(zero_bubble.zb_h1_formula, holds="any p, m; F = I = W", units_outside=_equal_units),
               rules="m >= p", kinds=3, hints=("linear",)),
        Family("zb-h2", zb_h2.zb_h2, "zero-bubble H2: more warm-up forwards, W fills every gap, peak 2p - 1 (Qi et al. 2024)",
               _space("placement=linear,backward=split"), ClosedForms(zb_h2.zb_h2_formula, _at_least_p, holds="m >= p + (p-1)max(0, I/F - 1); I = W <= 2F", units_outside=zb_h2.units_outside),
               kinds=3, hints=("linear",)),
        Family("zb-v", zero_bubble.zb_v, "zero-bubble V: two chunks per device in a V, split backward (Qi et al. 2024)",
               _space("placement=v,backward=split"), ClosedForms(zero_bubble.zb_v_formula, _zb_v_outside, holds="m >= 2p - 1; F = I = W", units_outside=_equal_units),
               rules="m >= p", chunks=lambda o: 2, kinds=3, hints=("v",)),
        Family("v-min", v_min.v_min,
               "V-shape building block of least lifespan: about 1/3 of 1F1B's activations (Qi et al. 2024, NeurIPS)",
               _space("placement=v,backward=split"), None,
               "Qi et al. give the bubble only as ~2p/3m",
               chunks=lambda o: 2, kinds=3, hints=("v",)),
        Family("v-half", v_half.v_half,
               "V-shape building block with half of 1F1B's activations (Qi et al. 2024, NeurIPS)",
               _space("placement=v,backward=split"), None,
               "Qi et al. give the bubble only as ~p/2m",
               chunks=lambda o: 2, kinds=3, hints=("v",)),
        Family("dualpipev", dualpipev.dualpipev,
               "DualPipe folded into a V: overlapped F&B pairs, B then I+W per microbatch (PyTorch's ScheduleDualPipeV)",
               _space("placement=v,backward=split"), None,
               "DualPipe's README: (PP/2-1)(F&B+B-3W); F&B runs as F then B here",
               rules="m >= 2p", chunks=lambda o: 2, split_pairs=dualpipev.split_pairs, hints=("v",)),
        Family("dualpipe", dualpipe.dualpipe,
               "DeepSeek's DualPipe: two directions, weight replicas, overlapped F&B pairs, B then I+W (DeepSeek-AI 2024)",
               _space("placement=bidirectional,backward=split,directions=even"),
               ClosedForms(dualpipe.dualpipe_formula, table_differs="shorter for p > 2 (F&B runs as F then B)", weight=True),
               rules="p even, m even, m >= 2p", split_pairs=dualpipe.split_pairs, hints=("bidirectional",),
               torch=False),  # weight replicas: PyTorch's CSV and runtime hold one rank per stage
    )
}

def names() -> list[str]:
    """The registered family names, in the registry's order (`ppopt list`)."""
    return list(REGISTRY)


def get(name: str) -> Family:
    """The family registered as ``name``; a ScheduleError naming the known ones otherwise."""
    if not isinstance(name, str):  # None or a number from Python code: it has no close match to suggest
        raise ScheduleError(f"a schedule is given by its name (known: {', '.join(REGISTRY)}), got {name!r}", field="schedule")
    try:
        return REGISTRY[name]
    except KeyError:
        raise ScheduleError(f"unknown schedule {name!r} (known: {', '.join(REGISTRY)}){did_you_mean(name, REGISTRY)}") from None


def too_many_stages(name: str, devices: int, options: Mapping[str, object], layers: int) -> str | None:
    """Why family ``name`` on ``devices`` devices cannot hold a model of ``layers`` blocks (every
    stage needs one): its stage count exceeds them. None when it can, or when the options are left
    for the generator to refuse."""
    family = get(name)
    per_device = family.chunks(family.taken(options))
    if isinstance(per_device, int) and not isinstance(per_device, bool) and per_device >= 1 and devices * per_device > layers:
        return (f"{devices * per_device} stages ({devices} devices x {per_device} under {name}) exceed the model's "
                f"{layers} layers")
    return None


def check_option_names(options: Mapping[str, object], field: str | None = None) -> None:
    """ScheduleError (naming ``field``) for an option no schedule takes: one schedule ignores the
    options of others, so a misspelt one would be ignored by every schedule without a word."""
    if unknown := sorted(set(options) - set(OPTIONS)):
        raise ScheduleError(f"unknown schedule option(s): {', '.join(unknown)} (known: {', '.join(OPTIONS)})", field=field)


def check_option_values(options: Mapping[str, object]) -> None:
    """ScheduleError (naming the option) for a value no schedule takes: a count that is not an
    integer of at least 1, a split that is not two positive numbers. Over several schedules (``-s
    all``, ``compare``, ``gap``, :func:`ppopt.solve.gap.gap_report`) each would have been skipped
    with the reason, and an empty report returned as if it were one."""
    from ppopt.placement import parse_split

    for name in ("chunks", "waves"):
        value = options.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ScheduleError(f"must be a positive integer, got {value!r}", field=name)
    if options.get("split") is not None:
        try:
            parse_split(options["split"])
        except ScheduleError as error:
            raise ScheduleError(error.reason, field="split") from None


def generate(name: str, devices: int, microbatches: int, **options: object) -> Schedule:
    """Build schedule ``name`` for ``devices`` x ``microbatches``.

    Options the schedule does not take are ignored, so one set of flags can serve every schedule;
    an option no schedule knows is an error. A schedule over :data:`ppopt.ir.MAX_OPS` ops is refused
    before anything is built.
    """
    check_option_names(options)
    family = get(name)
    taken = family.taken(options)
    require_positive(devices, microbatches)
    devices, microbatches = int(devices), int(microbatches)  # numpy's integers too: the schedule holds ints (validate refuses others)
    size = family.ops(devices, microbatches, taken)
    if size is not None:
        given = "".join(f", {option} {value}" for option, value in taken.items()  # chunks, waves: counts that size it too
                        if isinstance(value, int) and not isinstance(value, bool))
        check_size(size, f"{name} with {devices} devices, {microbatches} microbatches{given}")
    with paused_gc():
        return family.build(devices, microbatches, **taken)
