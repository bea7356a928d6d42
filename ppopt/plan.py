"""Plan a training job: the fastest 3D layout, micro batch, recomputation and schedule under a memory limit.

:func:`plan` answers "which tensor × pipeline × data parallel layout, micro batch size,
recomputation mode and pipeline schedule trains this model fastest on N GPUs without running out
of memory?" by enumerating every valid :class:`ppopt.job.Job` (:func:`enumerate_jobs`), dropping
those whose per-GPU peak memory exceeds the limit (:func:`memory_of`, no simulation needed), and
predicting the step of the others with :func:`ppopt.job.evaluate_job`, those estimated fastest
first (:func:`best_first`), so that a budget ending early leaves out the slowest.

The space (:func:`layouts`, :func:`enumerate_jobs`)
    * t·p·d = N; t ≤ devices_per_node (tensor parallelism stays in a node) and Megatron can split
      the model over t (:func:`ppopt.job.tensor_parallel_reason`: t divides the query and key/value
      heads, the MLP units and, with the sequence parallelism below, the sequence); p ≤ the layers
      and, with the even split, p divides them; d divides the global batch; on more than one node
      t·d divides a node or is a multiple of it (:func:`ppopt.job.node_layout_reason`).
    * every micro batch size dividing the global batch per replica (global batch / d);
    * every recomputation mode (none, selective, full) and every requested schedule a job supports
      (by default every family of :data:`ppopt.job.SCHEDULES` but chimera-asym, :data:`DEFAULT_SCHEDULES`;
      with p = 1 only the one keeping the fewest activations, 1F1B by default, and only its option set
      with the fewest stages), each with its options:
      interleaved-1f1b and looped-bfs with every ``chunks`` c ≥ 2 for which c·p divides the layers
      (with the balanced split, every c with c·p at most the layers),
      Hanayo with ``waves`` 1 and 2 (when 2W·p stages fit the layers). A family the generator does
      not define for p and m (e.g. ZB-H1 with m < p, Chimera with odd p) is left out.
    * Megatron switches that the job model shows never to cost time are on: sequence parallelism
      when t > 1 (same communication volume, activations split by t: Korthikanti et al. 2022,
      Section 4.2.2) and the distributed optimizer when d > 1 (same gradient traffic, state split by
      d: Rajbhandari et al. 2020, "ZeRO", SC'20, Section 5.1).

Memory (:func:`memory_of`)
    The per-GPU peak of device k is the persistent state of every stage it holds (each Chimera
    replica in full) + the peak of its stored activations + the largest transient working set of
    its stages, exactly :func:`ppopt.job.evaluate_job`'s peak: the activation peak is read off the
    device's order (+ a stage's bytes at its F, - at the op that frees them), so jobs over the
    limit are dropped before any simulation. What bounds the peak is named: the weights (persistent
    state) or the activations, and the device ("stage k": with one stage per device they coincide).

Stage splits (:func:`balanced_layers`)
    ``even``: the layers split equally (p must divide them). ``balanced``: per-stage counts that
    minimise the slowest stage's forward + backward time, under the memory limit. Stage 0 also
    carries the embedding and the last stage the output layer and loss, so equal counts are not
    balanced. A stage's time and memory are taken as linear in its layer count, T_k(n) = n·L + E_k,
    read off two probe jobs (exact under the additive op-time rule; under the roofline rule or a
    host launch time, a maximum of linear terms, so the line through the probes approximates it);
    the smallest achievable max_k T_k is found by bisection over the candidate values. Counts may also be given explicitly (``(7, 8, 8, 7)``). Counts are per schedule
    stage: a job with S = v·p stages (chunks, a V, waves; Chimera's p) takes S of them, so explicit
    counts go to every job with that many stages, and ``balanced`` gives S counts; where a device
    holds several stages their memory adds up, so there the limit is checked on the split job
    (:func:`balanced_layers`). Exports:
    :func:`megatron_layout` and :func:`torchtitan_stages`.

Throughput
    tokens/s = global batch · sequence / step. Model FLOPs utilisation: the model's FLOPs per step,
    3 × forward (blocks and logits, no recomputation: Chowdhery et al. 2022, "PaLM", Appendix B),
    over step × N × peak FLOP/s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from ppopt.config import ModelConfig, SystemConfig, load_model, load_system
from ppopt.costs import Costs, check_global_batch, layer_forward_flops, logits_forward_flops, work_time_s
from ppopt.errors import ConfigError, InfeasibleError, ScheduleError, is_positive_number, require_bool, require_positive_int
from ppopt.flat import paused_gc
from ppopt.generators import get
from ppopt.ir import FREEING_KINDS, MAX_OPS, Kind
from ppopt.job import (
    RECOMPUTE_MODES,
    SCHEDULES,
    Job,
    JobWork,
    evaluate_job,
    job_costs,
    job_work,
    node_layout_reason,
    placement,
    stages_per_device,
    tensor_parallel_reason,
)
from ppopt.solve.options import SolveOptions

__all__ = [
    "MAX_JOBS", "BalancedCheck", "Memory", "Plan", "PlanProgress", "PlanRequest", "PlanRow", "balanced_layers", "best_first", "count_jobs",
    "describe", "enumerate_jobs", "evaluate_row", "group_estimate", "layouts", "live_microbatches", "megatron_layout",
    "memory_of", "out_of_time", "plan", "step_estimate", "torchtitan_stages",
]

MAX_JOBS = 200_000
"""Most jobs one plan enumerates; a larger space is refused before any work (narrow it)."""
MAX_SIZING_OPS = 20_000_000
"""Most ops of the distinct schedules one plan generates to size its jobs (:func:`sizing_ops`); a
larger request is refused before any work. The default plan of llama3-70b on 64 GPUs generates
about 1.4 million, gpt3-175b on 1,024 GPUs (global batch 1,536) about 3 million."""

Split = str | tuple[int, ...]
Progress = Callable[[int, int], None]


def _divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending (√n trial divisions)."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted({*small, *(n // k for k in small)})


DEFAULT_SCHEDULES = tuple(name for name in SCHEDULES if "split" not in get(name).options)
"""The families a plan enumerates unless asked for others: every family a job supports except those
whose option is a layer split (chimera-asym): the plan chooses the split itself (``--layers-per-stage``),
and with balanced or explicit counts such a family is the same job as its even twin (Chimera)."""


NARROWING_FLAGS = "--schedule, --recompute, --micro-batch, --tp, --pp, --dp"
"""The flags that narrow a plan's space, for the errors that ask for a smaller one."""

_SIZE_FILTERS = ("micro_batches", "tensor_parallel", "pipeline_parallel", "data_parallel")
"""The request's fields that keep only the sizes they list (None: every valid size)."""


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: a model on ``gpus`` GPUs of ``system``, and the space's limits.

    ``memory_limit_bytes`` is per GPU (None: the system's memory capacity). ``split`` is ``"even"``,
    ``"balanced"`` or explicit per-stage layer counts. ``micro_batches`` restricts the micro batch
    sizes (None: every divisor of the batch per replica).
    """

    model: ModelConfig
    system: SystemConfig
    gpus: int
    global_batch: int | None = None
    memory_limit_bytes: float | None = None
    split: Split = "even"
    recompute: tuple[str, ...] = RECOMPUTE_MODES
    schedules: tuple[str, ...] = DEFAULT_SCHEDULES
    micro_batches: tuple[int, ...] | None = None
    overlap_gradient_sync: bool = False
    tensor_parallel: tuple[int, ...] | None = None
    pipeline_parallel: tuple[int, ...] | None = None
    data_parallel: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", load_model(self.model))  # a preset name or a file, as Job takes them
        object.__setattr__(self, "system", load_system(self.system))
        for name in ("recompute", "schedules"):  # one name given alone, not its letters
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, (getattr(self, name),))
        for name in ("split", "recompute", "schedules") + _SIZE_FILTERS:  # a list is taken as the tuple it holds
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in _SIZE_FILTERS:  # one size given alone
            if isinstance(getattr(self, name), int) and not isinstance(getattr(self, name), bool):
                object.__setattr__(self, name, (getattr(self, name),))
        require_positive_int(self.gpus, "gpus")
        require_bool(self.overlap_gradient_sync, "overlap_gradient_sync")
        check_global_batch(self.global_batch)
        limit = self.memory_limit_bytes
        if limit is not None and not is_positive_number(limit):
            raise ConfigError(f"must be a positive number of bytes, got {limit!r}", field="memory_limit_bytes")
        if not (self.split in ("even", "balanced") or isinstance(self.split, tuple)
                and all(isinstance(n, int) and not isinstance(n, bool) for n in self.split)):
            raise ConfigError(f"must be even, balanced or counts like 7,8,8,7, got {self.split!r}", field="layers_per_stage")
        if isinstance(self.split, tuple) and (any(n < 1 for n in self.split) or sum(self.split) != self.model.num_layers):
            raise ConfigError(f"counts must be positive and sum to the model's {self.model.num_layers} layers, got "
                              f"{','.join(map(str, self.split))}", field="layers_per_stage")
        for name in self.schedules:  # the registry's words, as every command says them
            try:
                get(name)
            except ScheduleError as error:
                raise ConfigError(error.reason, field="schedules") from None
        if not self.schedules:
            raise ConfigError(f"must name at least one schedule (known: {', '.join(SCHEDULES)})", field="schedules")
        if (unknown := [v for v in self.recompute if v not in RECOMPUTE_MODES]) or not self.recompute:
            raise ConfigError(f"unknown {', '.join(unknown) or 'empty'} (known: {', '.join(RECOMPUTE_MODES)})", field="recompute")
        for name in _SIZE_FILTERS:
            sizes = getattr(self, name)
            if sizes is None:
                continue
            bad = [b for b in sizes if isinstance(b, bool) or not isinstance(b, int) or b < 1] if isinstance(sizes, tuple) else [sizes]
            if bad or not sizes:
                raise ConfigError(f"must be positive integers, got {', '.join(map(repr, bad)) or 'none'}", field=name)

    @property
    def batch(self) -> int:
        return self.model.global_batch_size if self.global_batch is None else self.global_batch

    @property
    def limit(self) -> float:
        """Per-GPU memory limit, bytes."""
        return self.system.memory_capacity_bytes if self.memory_limit_bytes is None else self.memory_limit_bytes


# --------------------------------------------------------------------------------------------------
# The space
# --------------------------------------------------------------------------------------------------


def _sequence_parallel(t: int) -> bool:
    """Plans use sequence parallelism whenever there is tensor parallelism (see the module doc)."""
    return t > 1


def layouts(request: PlanRequest) -> list[tuple[int, int, int]]:
    """Every (t, p, d) of the request's space (see module doc); InfeasibleError naming ``gpus`` if none."""
    model, n = request.model, request.gpus
    found = []
    for t in _divisors(math.gcd(n, model.num_attention_heads)):  # t divides the heads: no search over n's divisors
        if t > request.system.devices_per_node or tensor_parallel_reason(model, t, _sequence_parallel(t)):
            continue
        for p in range(1, min(n // t, model.num_layers) + 1):
            d = n // (t * p)
            if (n // t) % p or request.batch % d or node_layout_reason(t, d, n, request.system.devices_per_node):
                continue
            if request.split == "even" and model.num_layers % p:
                continue
            if isinstance(request.split, tuple) and len(request.split) % p:
                continue
            found.append((t, p, d))
    if not found:
        split = (f"p dividing the {len(request.split)} stages of --layers-per-stage" if isinstance(request.split, tuple)
                 else "p dividing the layers" if request.split == "even" else "p at most the layers")
        uneven = request.split == "even" and bool(_layouts_if_any(replace(request, split="balanced")))
        raise InfeasibleError(
            f"no valid layout of {n} GPUs for {model.name}: t·p·d = {n} needs t ≤ {request.system.devices_per_node} "
            f"(a node) that splits the model (dividing its {model.num_attention_heads} heads, key/value heads, MLP units "
            f"and sequence), {split} ({model.num_layers}), d dividing the global batch {request.batch}, and t·d dividing "
            f"a node or a multiple of it" + ("; --layers-per-stage balanced, which lets p leave a remainder of layers, "
                                             "finds some" if uneven else ""), field="gpus")
    return _filtered(request, found)


_LAYOUT_FILTERS = (("tensor_parallel", "t", 0), ("pipeline_parallel", "p", 1), ("data_parallel", "d", 2))
"""The request's layout filters: field, letter, index in (t, p, d)."""


def _filter_words(letter: str, wanted: tuple[int, ...]) -> str:
    """``t = 2 or 4``: what a layout filter keeps."""
    return f"{letter} = {' or '.join(map(str, sorted(set(wanted))))}"


def layout_filters(request: PlanRequest) -> str | None:
    """The request's layout filters in words (``t = 2 and p = 2 or 4``), None without any."""
    words = [_filter_words(letter, getattr(request, name)) for name, letter, _ in _LAYOUT_FILTERS
             if getattr(request, name) is not None]
    return " and ".join(words) or None


def _filtered(request: PlanRequest, found: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The layouts of ``found`` that every layout filter of ``request`` keeps; InfeasibleError naming
    the filter (and the values it could take) when they keep none."""
    kept = found
    applied: list[str] = []  # the filters kept so far, in words
    for name, letter, k in _LAYOUT_FILTERS:
        wanted = getattr(request, name)
        if wanted is None:
            continue
        said = _filter_words(letter, wanted)
        narrowed = [layout for layout in kept if layout[k] in wanted]
        if not narrowed:
            valid = ", ".join(map(str, sorted({layout[k] for layout in kept})))
            raise InfeasibleError(f"no valid layout of {request.gpus} GPUs for {request.model.name} has "
                                  f"{' and '.join([said, *applied])}; valid: {letter} = {valid}"
                                  + (f" (with {' and '.join(applied)})" if applied else ""), field=name)
        kept, applied = narrowed, [*applied, said]
    return kept


def _layouts_if_any(request: PlanRequest) -> list[tuple[int, int, int]]:
    """:func:`layouts`, or an empty list where it finds none."""
    try:
        return layouts(request)
    except InfeasibleError:
        return []


def depths_left_out(request: PlanRequest) -> list[int]:
    """The pipeline depths p the even split leaves out because p does not divide the layers, and
    which ``--layers-per-stage balanced`` plans (empty for any other split)."""
    if request.split != "even":
        return []
    planned = {p for _, p, _ in _layouts_if_any(request)}
    if not planned:  # no layout at all: plan's error names the balanced split
        return []
    return sorted({p for _, p, _ in _layouts_if_any(replace(request, split="balanced"))} - planned)


def _micro_batches(request: PlanRequest, d: int) -> list[int]:
    """The micro batch sizes dividing the batch per replica (those of ``--micro-batch`` if given)."""
    per_replica = request.batch // d
    if request.micro_batches is not None:
        return sorted(b for b in set(request.micro_batches) if per_replica % b == 0)
    if per_replica > MAX_SIZING_OPS:  # even b = 1 would give every family a schedule over MAX_OPS
        raise ConfigError(f"{per_replica:,} sequences per replica are too many to plan every micro batch size of; "
                          "give --micro-batch", field="global_batch")
    return _divisors(per_replica)


@lru_cache(maxsize=4096)
def _refusal(schedule: str, devices: int, microbatches: int, options: tuple[tuple[str, object], ...] = ()) -> str | None:
    """None when the generator defines ``schedule`` with ``options`` for p devices and m
    microbatches, else its reason (e.g. ZB-H1 needs m >= p, Chimera an even p, DualPipeV m >= 2p:
    their generators' rules). It is generated once, and what memory needs of it is kept
    (:func:`_device_events`), so sizing does not generate again."""
    from ppopt.errors import PpoptError

    try:
        _device_events(schedule, devices, microbatches, options)
    except PpoptError as error:
        return error.reason
    return None


def _defined(schedule: str, devices: int, microbatches: int, options: tuple[tuple[str, object], ...] = ()) -> bool:
    return _refusal(schedule, devices, microbatches, options) is None


def _none_defined(request: PlanRequest) -> str:
    """Why the request has no job: each family's refusal on the layout with the most microbatches
    (:func:`_refusals`)."""
    p, m, refusals = _refusals(request, request.schedules)
    reasons = [_reason(request, name, refusal) for name, refusal in refusals.items()]
    return f"no job of the schedules {', '.join(request.schedules)} is defined on {request.gpus} GPUs; at p = {p}, " \
           f"m = {m}: {'; '.join(reasons)}"


def _refusals(request: PlanRequest, families: Sequence[str], pipelined: bool = False) -> tuple[int, int, dict[str, str | None]]:
    """p, m and each family's generator refusal there (None: the generator defines it), on the layout
    with the most microbatches (the smallest micro batch asked for that divides its batch per replica,
    b = 1 when none is asked for; the most devices among equals; with ``pipelined``, among layouts of
    p > 1)."""
    sizes = sorted(set(request.micro_batches or [1]))
    choices = [(request.batch // d // b, p) for _, p, d in layouts(request) for b in sizes
               if (request.batch // d) % b == 0 and (p > 1 or not pipelined)]
    m, p = max(choices, default=(request.batch, 1))
    return p, m, {name: _refusal(name, p, m) for name in families}


def _reason(request: PlanRequest, name: str, refusal: str | None) -> str:
    """A family's refusal worded with its name; where its generator defines it, why no job takes it:
    no option set with as many stages as the given counts, or stages beyond the layers."""
    if refusal is None:
        chunked = "chunks" in get(name).options and request.split == "even"
        refusal = (f"has no option set with {len(request.split)} stages (--layers-per-stage)" if isinstance(request.split, tuple)
                   else "no chunk count c >= 2 has c·p dividing the layers, as the even split needs (--layers-per-stage "
                   "balanced plans any c·p up to them)" if chunked else "its stages exceed the layers")
    return refusal if refusal.startswith(name) else f"{name}: {refusal}"


def families_left_out(request: PlanRequest) -> dict[str, str]:
    """The families of the request that no job of a pipelined layout (p > 1) takes, each with its
    generator's reason where it is closest to being defined (:func:`_refusals`), e.g. DualPipe's
    m >= 2p; none when no pipelined layout has a micro batch (one family stands for all at p = 1). A
    family left out only because it has no option set with as many stages as given counts is left
    out as asked, not named."""
    pipelined = [(p, d) for _, p, d in layouts(request) if p > 1 and _micro_batches(request, d)]
    seen = {name for p, d in pipelined for b in _micro_batches(request, d)
            for name, _ in _schedules(request, p, request.batch // (b * d))}
    missing = [name for name in request.schedules if name not in seen]
    if not missing or not pipelined:
        return {}
    p, m, refusals = _refusals(request, missing, pipelined=True)
    # m is the global batch over b·d, not a flag: "240 or 264 would do" is changed through --global-batch
    return {name: f"at p = {p}, m = {m} (global batch / (b·d)): {_reason(request, name, refusal)}" for name, refusal in refusals.items()
            if refusal is not None or not isinstance(request.split, tuple)}


def _no_micro_batch(request: PlanRequest) -> str:
    """Why no job has one of the requested micro batch sizes: none divides the batch per
    data-parallel replica (global batch / d) of any layout."""
    assert request.micro_batches is not None
    sizes = sorted(set(request.micro_batches))
    replicas = sorted({d for _, _, d in layouts(request)})
    per_replica = ", ".join(f"{request.batch // d} at d = {d}" for d in replicas)
    return (f"{' and '.join(map(str, sizes))} {'does' if len(sizes) == 1 else 'do'} not divide the batch per data-parallel "
            f"replica of any layout of {request.gpus} GPUs (global batch {request.batch} / d: {per_replica})")


def _option_values(option: str, devices: int, layers: int, stages: int | None, balanced: bool = False) -> list[object]:
    """The values of a generator option a plan tries (module doc): chunks c >= 2 with c·p dividing
    the layers (``balanced``: every c with c·p stages up to the layers, as a balanced split holds any
    stage count), waves 1 and 2, a layer split at its default; with ``stages`` (explicit counts) every
    chunks or waves value up to S/p (the caller keeps those giving S stages)."""
    if option == "chunks":
        if stages is not None:
            return list(range(2, stages // devices + 1))
        return [c for c in range(2, layers // devices + 1) if balanced or layers % (c * devices) == 0]
    if option == "waves":
        return [1, 2] if stages is None else list(range(1, stages // devices + 1))
    return [Job.split]


def schedule_variants(schedule: str, devices: int, layers: int, stages: int | None = None,
                      balanced: bool = False) -> list[dict[str, Any]]:
    """The option sets of ``schedule`` (its registry entry's options) a plan tries on ``devices``
    devices for a model of ``layers`` layers (module doc): chunks c ≥ 2 with c·p dividing the layers,
    waves 1 and 2, each with its S stages within the layers; with ``stages`` (explicit per-stage
    counts) the option sets giving that many stages."""
    variants: list[dict[str, Any]] = [{}]
    for option in get(schedule).options:
        variants = [{**v, option: value} for v in variants for value in _option_values(option, devices, layers, stages, balanced)]
    fits = [v for v in variants if stages_per_device(schedule, **v) * devices <= layers]
    return fits if stages is None else [v for v in fits if stages_per_device(schedule, **v) * devices == stages]


def _single_device(names: tuple[str, ...], m: int) -> str:
    """The family a one-device job uses: with p = 1 there is no pipeline, every family runs the same
    ops one after the other, so the plan keeps the one holding the fewest microbatches' activations
    at m and at 2m (1F1B's one), the first among equals (:func:`live_microbatches`)."""
    def peak(name: str, microbatches: int) -> float:
        return max(live_microbatches(name, 1, microbatches)) if _defined(name, 1, microbatches) else math.inf

    return min(names, key=lambda name: (peak(name, m), peak(name, 2 * m), names.index(name)))


def _variants(request: PlanRequest, name: str, p: int) -> list[dict[str, Any]]:
    """:func:`schedule_variants` of family ``name`` on p devices under the request's stage split (with
    explicit counts only the option sets with as many stages as counts)."""
    wanted = len(request.split) if isinstance(request.split, tuple) else None
    return schedule_variants(name, p, request.model.num_layers, wanted, request.split == "balanced")


def _schedules(request: PlanRequest, p: int, m: int) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The (family, options) pairs of a p-device pipeline with m microbatches (:func:`_variants`)
    that are defined there."""
    names = (_single_device(request.schedules, m),) if p == 1 else request.schedules
    return tuple((name, options) for name in names for options in _one_device_variants(request, name, p)
                 if _defined(name, p, m, tuple(sorted(options.items()))))


def _one_device_variants(request: PlanRequest, name: str, p: int) -> list[dict[str, Any]]:
    """:func:`_variants`, of which one device (p = 1) keeps the one with the fewest stages: there its
    chunks only cut the same ops finer (interleaved 1F1B filled a plan's table with v2 ... v32 copies
    of one job, 0.015 s apart)."""
    variants = _variants(request, name, p)
    return variants if p > 1 else sorted(variants, key=lambda v: stages_per_device(name, **v))[:1]


ScheduleKey = tuple[str, int, int, tuple[tuple[str, Any], ...]]
"""(family, p, m, sorted options): one distinct schedule of a request's space."""


def _schedule_keys(request: PlanRequest, p: int, m: int) -> list[ScheduleKey]:
    """The schedules :func:`_schedules` generates to find the (family, options) pairs of a p-device
    pipeline with m microbatches: every option set of every family; with p = 1 every family at its
    default options with m and 2m microbatches (:func:`_single_device`; the one chosen then adds
    its option set with the fewest stages, :func:`_one_device_variants`, if that is not its default)."""
    if p == 1:
        return [(name, 1, k, ()) for name in request.schedules for k in (m, 2 * m)]
    return [(name, p, m, tuple(sorted(options.items()))) for name in request.schedules for options in _variants(request, name, p)]


def _sizing_keys(request: PlanRequest) -> list[ScheduleKey]:
    """The distinct schedules the request's sizing generates (:func:`_schedule_keys` of every layout
    and micro batch), in order."""
    return list(dict.fromkeys(key for _, p, d in layouts(request) for b in _micro_batches(request, d)
                              for key in _schedule_keys(request, p, request.batch // (b * d))))


def sizing_ops(request: PlanRequest) -> int:
    """Ops of the distinct schedules the request's sizing generates (:func:`_sizing_keys`; with p = 1
    each family at m and 2m microbatches), each counted by its registry entry (``Family.ops``)
    without generating it; those over :data:`ppopt.ir.MAX_OPS` are refused by the generator at once
    and do not count."""
    sizes = (get(name).ops(p, m, dict(options)) or 0 for name, p, m, options in _sizing_keys(request))
    return sum(ops for ops in sizes if ops <= MAX_OPS)


def _generate(request: PlanRequest, budget: SolveOptions | None, progress: Progress | None) -> None:
    """Generate (and cache, :func:`_refusal`) the distinct schedules of the request's space, the
    first part of sizing; InfeasibleError naming ``time_limit_s`` when the budget ends first, or
    when the next schedule would end past it at the rate (seconds per op, ``Family.ops``) of those
    generated so far: one schedule may take a tenth of a second or more."""
    keys = _sizing_keys(request)
    began = budget.remaining_s() if budget is not None else 0.0
    sizes = [min(get(name).ops(p, m, dict(options)) or 0, MAX_OPS) for name, p, m, options in keys]
    total_ops, ops_done = sum(sizes), 0
    for done, (key, ops) in enumerate(zip(keys, sizes)):
        if budget is not None:
            left = budget.remaining_s()
            needed = _foreseen_s(ops_done, total_ops, began - left, left)
            if needed is not None:  # the command's time so far (imports included) and the rest of this phase
                raise out_of_time(budget, _would_end("generating the schedules that size the jobs", budget.time_limit_s - left + needed,
                                                     f"{done} of {len(keys)} distinct schedules in {began - left:.1f} s"),
                                  foreseen=True)
            if left <= 0 or (ops_done and ops * (began - left) / ops_done > left):
                raise out_of_time(budget, f"generating the schedules that size the jobs took the budget ({done} of "
                                          f"{len(keys)} distinct schedules)")
        _refusal(*key)
        ops_done += ops
        if progress:
            progress(done + 1, len(keys))


def count_jobs(request: PlanRequest) -> int:
    """How many jobs :func:`enumerate_jobs` yields (cheap: no job is built)."""
    return sum(len(request.recompute) * len(_schedules(request, p, request.batch // (b * d)))
               for _, p, d in layouts(request) for b in _micro_batches(request, d))


def enumerate_jobs(request: PlanRequest) -> Iterator[Job]:
    """Every job of the request's space, without the stage split of ``balanced`` (see :func:`plan`)."""
    counts = request.split if isinstance(request.split, tuple) else None
    for t, p, d in layouts(request):
        for b in _micro_batches(request, d):
            for recompute in request.recompute:
                for schedule, options in _schedules(request, p, request.batch // (b * d)):
                    yield Job(request.model, request.system, tp=t, pp=p, dp=d, micro_batch=b,
                              global_batch=request.global_batch, recompute=recompute,  # type: ignore[arg-type]
                              sequence_parallel=_sequence_parallel(t), distributed_optimizer=d > 1,
                              overlap_gradient_sync=request.overlap_gradient_sync and d > 1,  # d = 1: nothing to hide
                              schedule=schedule, layers=counts,
                              **options)


# --------------------------------------------------------------------------------------------------
# Memory without simulation
# --------------------------------------------------------------------------------------------------


@lru_cache(maxsize=512)
def live_microbatches(schedule: str, stages: int, microbatches: int) -> tuple[int, ...]:
    """Peak microbatches whose activations stage k holds at once under ``schedule`` (one stage per
    device, so device k's events are stage k's): +1 at an F, -1 at the op that frees them (B, or W
    when backward is split), walked along each device's order, as :func:`ppopt.simulate.simulate`
    counts them (:func:`_device_events`)."""
    return tuple(events.peak_live for events in _device_events(schedule, stages, microbatches, ()))


@dataclass(frozen=True)
class Memory:
    """The per-GPU peak of a job (bytes) and what makes it: the worst stage's parts."""

    peak_bytes: float
    stage: int
    persistent_bytes: float
    """Weights, gradients and optimizer state of that stage's GPU."""
    activation_bytes: float
    """Stored activations at the peak (bytes)."""
    working_bytes: float
    """Transient bytes of one backward (recomputed block, logits)."""

    def bound(self) -> str:
        """What bounds the peak and on which GPU of the pipeline, e.g. ``weights (pipeline rank 0)`` or
        ``activations (pipeline rank 3)`` (Megatron's term: "stage" would be ambiguous with the
        schedule's stages, two per GPU in a V)."""
        what = "weights" if self.persistent_bytes >= self.activation_bytes + self.working_bytes else "activations"
        return f"{what} (pipeline rank {self.stage})"


class _DeviceEvents(NamedTuple):
    """A device's ops that change stored activations, in its order."""

    stages: np.ndarray
    """Each op's stage."""
    live: np.ndarray
    """What each does to its stage's live microbatches: +1 at F, -1 at B or W."""
    early: np.ndarray | None
    """What each does to the part of its stage's microbatches a split backward frees early: -1 at I,
    +1 at W, which then frees only the rest (:attr:`ppopt.costs.StageCost.input_grad_release_bytes`);
    None without I ops."""
    held: tuple[int, ...]
    """The stages the device holds."""
    peak_live: int
    """The most microbatches live at once, all its stages together."""


@lru_cache(maxsize=4096)
def _device_events(schedule: str, devices: int, microbatches: int,
                   options: tuple[tuple[str, int], ...]) -> tuple[_DeviceEvents, ...]:
    """Each device's :class:`_DeviceEvents` under ``schedule``."""
    from ppopt.generators import generate

    generated = generate(schedule, devices, microbatches, **dict(options))
    out = []
    for order in generated.orders:  # numpy from the ops' fields: no Python tuple per op for the collector to walk
        stages = np.fromiter(map(attrgetter("stage"), order), dtype=int, count=len(order))
        kinds = list(map(attrgetter("kind"), order))
        live = np.fromiter(map(_ACTIVATION_DELTA.__getitem__, kinds), dtype=float, count=len(order))
        early = np.fromiter(map(_EARLY_DELTA.__getitem__, kinds), dtype=float, count=len(order)) if Kind.I in kinds else None
        kept = live != 0 if early is None else (live != 0) | (early != 0)
        out.append(_DeviceEvents(stages[kept], live[kept], None if early is None else early[kept],
                                 tuple(sorted(set(stages.tolist()))), int(np.max(np.cumsum(live), initial=0.0))))
    return tuple(out)


_ACTIVATION_DELTA = {kind: 1.0 if kind is Kind.F else -1.0 if kind in FREEING_KINDS else 0.0 for kind in Kind}
"""What an op of each kind does to its stage's live microbatches: F allocates, B or W frees, I neither."""
_EARLY_DELTA = {Kind.F: 0.0, Kind.B: 0.0, Kind.I: -1.0, Kind.W: 1.0}
"""What it does to the part of a microbatch's activation a split backward frees at I."""


def _stage_memory(job: Job, work: JobWork) -> list[Memory]:
    """One :class:`Memory` per device (its ``stage`` field: the device)."""
    released = work.released_by_input_grad or (0.0,) * job.stages
    stored, early = np.array(work.stored_bytes), np.array(released)
    out = []
    for d, events in enumerate(_device_events(job.schedule, job.pp, job.microbatches,
                                              tuple(sorted(job.schedule_options.items())))):
        held = events.held
        if len(held) == 1 and (events.early is None or not released[held[0]]):  # its peak count times its bytes
            activations = events.peak_live * work.stored_bytes[held[0]]
        else:
            changes = events.live * stored[events.stages]
            if events.early is not None:
                changes += events.early * early[events.stages]
            activations = float(np.max(np.cumsum(changes), initial=0.0))
        persistent = sum(work.persistent_bytes[k] for k in held)
        working = max(work.working_bytes[k] for k in held)
        out.append(Memory(persistent + activations + working, d, persistent, activations, working))
    return out


def memory_of(job: Job, work: JobWork | None = None) -> Memory:
    """The per-GPU peak memory of ``job`` (module doc), its worst stage first among equals."""
    stages = _stage_memory(job, _shared_work(job) if work is None else work)
    return max(stages, key=lambda m: (m.peak_bytes, -m.stage))


# --------------------------------------------------------------------------------------------------
# Uneven stage splits
# --------------------------------------------------------------------------------------------------


def _probe(job: Job, per_stage: int) -> Job:
    model = job.model.model_copy(update={"num_layers": per_stage * job.stages})
    return replace(job, model=model, layers=(per_stage,) * job.stages)


def one_stage_per_device(job: Job) -> bool:
    """Whether device k holds stage k alone (no chunks, no replicas), so a stage's memory is its
    device's (:attr:`ppopt.job.Job.stage_devices`)."""
    return all(devices == (k,) for k, devices in enumerate(job.stage_devices))


@lru_cache(maxsize=8192)
def _cached_work(job: Job) -> JobWork:
    """:func:`ppopt.job.job_work`, kept for every placement a plan sizes and then evaluates in
    another order (64 entries missed half of gpt3-175b's 10,928 lookups on 1,024 GPUs; a JobWork
    is a few tuples per stage)."""
    return job_work(job)


def _shared_work(job: Job) -> JobWork:
    """``job_work(job)``, computed once for the families of one placement: the work depends on the
    schedule only through its stages' layers and devices (:func:`_same_placement`)."""
    return _cached_work(replace(job, schedule=_same_placement(job), layers=job.stage_layers))


@lru_cache(maxsize=4096)
def _placed_work(job: Job) -> tuple[JobWork, Costs]:
    return (work := _cached_work(job)), job_costs(job, work)


def _probe_work(job: Job, per_stage: int) -> tuple[Job, JobWork, Costs]:
    """A probe job of ``per_stage`` layers per stage, its work and costs. The work depends on the
    schedule only through its stages and their devices, so families of one placement share it
    (cached: the plan balances every family of a layout)."""
    probe = _probe(job, per_stage)
    work, costs = _placed_work(replace(probe, schedule=_same_placement(job)))
    return probe, work, costs


def _same_placement(job: Job) -> str:
    """The first family (registry order) whose stages sit on the same devices as ``job``'s, with the
    job's option fields (:func:`ppopt.job.placement`): gpipe for 1F1B and ZB-H1, interleaved-1f1b
    for looped-BFS, zb-v for V-Min and DualPipeV, chimera for DualPipe."""
    own = job.stage_devices
    for name in SCHEDULES:
        options = tuple(sorted((option, getattr(job, option)) for option in get(name).options))
        try:
            if placement(name, job.pp, options) == own:
                return name
        except ConfigError:  # no such placement on p devices (e.g. Chimera's for odd p)
            continue
    return job.schedule  # pragma: no cover - the job's own family matches


def balanced_layers(job: Job, limit: float | None = None) -> tuple[int, ...] | None:
    """Per-stage layer counts minimising the slowest stage's F + B time of ``job`` with every
    stage's peak memory within ``limit`` bytes (module doc); None when no split fits the limit.

    One count per schedule stage (``job.stages``). With one stage per device a stage's memory is
    its device's, so the limit bounds each count; a device holding several stages (chunks, a V,
    waves, Chimera's replicas) sums them, so there the counts minimise the slowest stage alone and
    the caller checks the split job's memory (:func:`memory_of`, as :func:`plan` does)."""
    p, total = job.stages, job.model.num_layers
    one, w1, costs1 = _probe_work(job, 1)
    two, w2, costs2 = _probe_work(job, 2)
    c1, c2 = costs1.stages, costs2.stages
    per_layer = [(b.forward_s + b.backward_s) - (a.forward_s + a.backward_s) for a, b in zip(c1, c2)]
    fixed = [a.forward_s + a.backward_s - slope for a, slope in zip(c1, per_layer)]
    if not one_stage_per_device(job):
        limit = None
    if limit is not None:
        m1, m2 = _stage_memory(one, w1), _stage_memory(two, w2)
        mem_slope = [b.peak_bytes - a.peak_bytes for a, b in zip(m1, m2)]
        mem_fixed = [a.peak_bytes - slope for a, slope in zip(m1, mem_slope)]
    most = total - p + 1

    def time_of(k: int, n: int) -> float:
        return n * per_layer[k] + fixed[k]

    def cap(k: int, target: float) -> int:
        best = 0
        for n in range(1, most + 1):
            if time_of(k, n) > target * (1 + 1e-12):
                break
            if limit is not None and n * mem_slope[k] + mem_fixed[k] > limit:
                break
            best = n
        return best

    targets = sorted({time_of(k, n) for k in range(p) for n in range(1, most + 1)})

    def feasible(target: float) -> bool:
        caps = [cap(k, target) for k in range(p)]
        return min(caps) >= 1 and sum(caps) >= total

    if not feasible(targets[-1]):
        return None
    low, high = 0, len(targets) - 1
    while low < high:
        mid = (low + high) // 2
        if feasible(targets[mid]):
            high = mid
        else:
            low = mid + 1
    counts = [cap(k, targets[low]) for k in range(p)]
    while sum(counts) > total:  # shed layers from the slowest stage that can spare one
        k = max((k for k in range(p) if counts[k] > 1), key=lambda k: (time_of(k, counts[k]), k))
        counts[k] -= 1
    return tuple(counts)


def megatron_layout(counts: tuple[int, ...]) -> str:
    """The split as a Megatron-LM ``--pipeline-model-parallel-layout`` string: stages separated by
    ``|``, ``E`` the embedding, ``t`` a transformer layer (``t*n`` for n of them), ``L`` the output
    layer and loss; e.g. ``Et*7|t*8|t*8|t*7L``."""
    stages = [f"t*{n}" if n > 1 else "t" for n in counts]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + "L"
    return "|".join(stages)


def torchtitan_stages(counts: tuple[int, ...]) -> list[list[str]]:
    """The split as torchtitan's per-stage module names (``module_fqns_per_model_part``): the
    embedding ``tok_embeddings`` first, ``layers.i``, and ``norm`` and ``output`` last."""
    stages, first = [], 0
    for n in counts:
        stages.append([f"layers.{i}" for i in range(first, first + n)])
        first += n
    stages[0].insert(0, "tok_embeddings")
    stages[-1] += ["norm", "output"]
    return stages


# --------------------------------------------------------------------------------------------------
# Evaluation and the plan
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanRow:
    """One evaluated job: predicted step, throughput and per-GPU peak memory."""

    job: Job
    step_time_s: float
    """Predicted training step, seconds: the pipeline, the gradient sync and the optimizer step."""
    pipeline_s: float
    """The simulated pipeline, seconds."""
    gradient_sync_s: float
    """The data-parallel gradient all-reduce (and the tied embedding's) after the pipeline, seconds."""
    optimizer_s: float
    """The optimizer step, seconds."""
    tokens_per_s: float
    """Training throughput, tokens per second over the whole job."""
    mfu: float
    """Model FLOPs utilisation, 0..1."""
    memory: Memory
    """The per-GPU peak and its parts, bytes."""


def model_flops_per_step(job: Job) -> float:
    """3 × forward FLOPs of one step, without recomputation (module doc)."""
    model = job.model
    forward = model.num_layers * layer_forward_flops(model, 1) + logits_forward_flops(model, 1)
    return 3.0 * forward * job.batch


def throughput(job: Job, step_time_s: float) -> tuple[float, float]:
    """Tokens per second and model FLOPs utilisation (:func:`model_flops_per_step` over the GPUs'
    peak FLOP/s for the step) of ``job`` at a step of ``step_time_s`` seconds."""
    tokens = job.batch * job.model.seq_length / step_time_s
    return tokens, model_flops_per_step(job) / (step_time_s * job.gpus * job.system.peak_flops)


def evaluate_row(job: Job, memory: Memory | None = None) -> PlanRow:
    """Simulate ``job``; ``memory``: its :func:`memory_of` when sizing has it already (computed
    again, it took 1.3 of gpt3-175b's 20 s plan on 1,024 GPUs); the work of its placement's
    families is computed once (:func:`_shared_work`)."""
    result = evaluate_job(job, _shared_work(job))
    step = result.step_time_s
    tokens, mfu = throughput(job, step)
    return PlanRow(job, step, result.pipeline_s, result.gradient_sync_s, result.optimizer_s, tokens, mfu,
                   memory_of(job) if memory is None else memory)


def _evaluate_sized(sized: tuple[Job, Memory]) -> PlanRow:
    """:func:`evaluate_row` of a job and its memory (a module-level function, so the sweep executors
    can run it)."""
    return evaluate_row(*sized)


NEAR_STEP = 0.005
"""A job within this share of #1's step time is as fast, to the model's accuracy (README, "How
accurate is ppopt?"): ``plan``'s "as fast on less memory" line, and the least gain
:func:`balanced_first` names."""


@dataclass(frozen=True)
class BalancedCheck:
    """What :func:`balanced_first` found: the faster balanced job (None if none), and how many of
    the jobs it was to check it did check before the time left stopped it."""

    faster: PlanRow | None
    checked: int
    to_check: int

    @property
    def complete(self) -> bool:
        return self.checked == self.to_check


def balanced_first(result: Plan, rows: int = 10, go_on: Callable[[Job], bool] = lambda job: True) -> BalancedCheck:
    """The fastest of an even-split plan's first ``rows`` jobs with the balanced split
    (:func:`_with_splits`, as a balanced plan takes it), when it then beats #1 by :data:`NEAR_STEP`
    or more. ``go_on(job)`` is asked before each job is simulated (the time left for it); a "no"
    ends the check, incomplete (:attr:`BalancedCheck.complete`). The even split puts the
    embedding and the output layer on top of equal blocks: Llama 3 8B on 8 H100s ranked t2 p1 d4
    first at 31.99 s, and t1 p2 d4 interleaved v8 runs 30.96 s balanced, with nothing said."""
    if result.request.split != "even" or not result.rows:
        return BalancedCheck(None, 0, 0)
    balanced = replace(result.request, split="balanced")
    jobs = []
    for row in result.rows[:rows]:
        split = _with_splits(row.job, balanced)[:1]  # [] when no split fits; the even job when balancing over-fills it
        if split and split[0].stage_layers != row.job.stage_layers:
            jobs.append(split[0])
    best: PlanRow | None = None
    checked = 0
    for job in jobs:
        if not go_on(job):
            break
        candidate = evaluate_row(job)
        checked += 1
        if candidate.step_time_s < (best or result.rows[0]).step_time_s:
            best = candidate
    faster = best if best is not None and best.step_time_s < result.rows[0].step_time_s * (1 - NEAR_STEP) else None
    return BalancedCheck(faster, checked, len(jobs))


@dataclass(frozen=True)
class Plan:
    """The outcome of :func:`plan`: the evaluated jobs, fastest first, and what was dropped."""

    request: PlanRequest
    rows: tuple[PlanRow, ...]
    enumerated: int
    over_limit: int
    """Jobs dropped because their peak exceeds the limit."""
    closest_over: tuple[Job, Memory] | None
    """The dropped job that came closest to the limit, and its peak: the tightest reason."""
    unevaluated: int = 0
    """Fitting jobs not simulated because the time budget ran out."""
    unsized: int = 0
    """Jobs not sized because the time budget ran out (then none is evaluated)."""
    sizing_foreseen: tuple[float, float] | None = None
    """When sizing gave up early (:data:`FORESIGHT_MARGIN`): the seconds it had taken, and when
    (seconds into the budget) it would have ended at that rate."""
    families_left_out: tuple[tuple[str, str], ...] = ()
    """The families asked for that no job takes, each with its generator's reason (:func:`families_left_out`)."""
    both_splits: int = 0
    """Jobs (within the limit) taken with the balanced and the even split alike (:func:`_with_splits`),
    so the splits evaluated or left unevaluated count them twice."""

    def __repr__(self) -> str:
        """Short: the request, the counts and the first row (its rows ran to 161,244 characters for
        8 GPUs); the fields hold the rest."""
        first = f"{self.rows[0].job!r} in {self.rows[0].step_time_s:.6g} s" if self.rows else "none"
        return (f"Plan({self.request.model.name} on {self.request.gpus} x {self.request.system.name}: {self.enumerated} jobs, "
                f"{self.over_limit} over the memory limit, {len(self.rows)} evaluated; first: {first})")

    def spent(self) -> str:
        """Where the budget went when no job was evaluated (for :func:`out_of_time`)."""
        sized = self.enumerated - self.unsized
        if self.sizing_foreseen is not None:
            elapsed, ends = self.sizing_foreseen
            return _would_end(f"sizing the {self.enumerated} jobs", ends, f"{sized} sized in {elapsed:.1f} s")
        if self.unsized:
            return f"sizing the {self.enumerated} jobs took the budget ({sized} sized, {self.unsized} not sized)"
        return f"sizing the {self.enumerated} jobs took the budget ({self.unevaluated} within the memory limit, none evaluated)"

    def out_of_time(self, budget: SolveOptions, listed: bool = False) -> InfeasibleError:
        """The error of this plan when no job was evaluated within ``budget`` (:func:`out_of_time`;
        ``listed``: the jobs were given, not enumerated)."""
        return out_of_time(budget, self.spent(), foreseen=self.sizing_foreseen is not None, listed=listed)


@dataclass(frozen=True)
class PlanProgress:
    """What :func:`plan` reports as it goes, each as ``(done, total)``: the distinct schedules
    generated to size the jobs, the jobs sized (and split), the jobs simulated."""

    generating: Progress | None = None
    sizing: Progress | None = None
    simulating: Progress | None = None


def out_of_time(budget: SolveOptions, spent: str, foreseen: bool = False, listed: bool = False) -> InfeasibleError:
    """The error of a plan whose budget ended before any job was evaluated (or, ``foreseen``, that
    gave up early because a phase would not end within it); ``spent`` says where the time went;
    ``listed``: the jobs were given (``--candidates``), so there is no space to narrow."""
    from ppopt.report.text import seconds

    head = "no job would be evaluated" if foreseen else "no job evaluated"
    advice = "give more time" if listed else f"give more time or narrow the space ({NARROWING_FLAGS})"
    return InfeasibleError(f"{head} within {seconds(budget.time_limit_s)}: {spent}; {advice}", field="time_limit_s")


FORESIGHT_MARGIN = 2.0
"""Generating the schedules and sizing the jobs stop before the deadline, with the seconds they
would need, once at their rate so far the rest would take this many times the time left (a plan
given 2 s for 20 s of sizing used to spend the 2 s first). The margin keeps a rate that varies
from giving up on a phase that would have ended in time: llama3-70b on 64 GPUs, the first 5 % of
its schedules (0.4 s) foretold 2.6 s for the rest of its generation, which took 1.6 s."""


def _would_end(phase: str, ends_s: float, progress: str) -> str:
    """Where a phase that gave up early (:data:`FORESIGHT_MARGIN`) would have ended, ``ends_s``
    seconds into the budget, and how far it got (``progress``)."""
    return f"{phase} would end about {ends_s:.1f} s into it at the rate so far ({progress})"


def _foreseen_s(done: float, total: float, elapsed_s: float, left_s: float) -> float | None:
    """Seconds the rest of a phase needs at its rate so far (``done`` of ``total`` units of work in
    ``elapsed_s``), when that is over :data:`FORESIGHT_MARGIN` times ``left_s`` and the rate rests
    on at least a fifth of the work or a second; else None."""
    if done <= 0 or total <= done or (done < 0.2 * total and elapsed_s < 1.0):
        return None
    needed = elapsed_s / done * (total - done)
    return needed if needed > FORESIGHT_MARGIN * left_s else None


def _with_splits(job: Job, request: PlanRequest) -> list[Job]:
    """The job with the request's split (balanced counts computed here); none if no split fits. A
    device holding several stages gets the balanced split and the even one, when they differ: the
    balancing evens out the stages, not the devices, and the even split was faster for some
    (Chimera t2 p4 on Llama 3 8B: 42.02 s against 42.64 s balanced), so both are evaluated."""
    if request.split != "balanced" or job.stages == 1:
        return [job]
    counts = balanced_layers(job, request.limit)
    if counts is None:
        return []
    split = replace(job, layers=counts)
    if one_stage_per_device(job):
        return [split]
    if memory_of(split).peak_bytes > request.limit:
        return [job]  # the balancing did not see the limit (several stages per device): keep the even split
    return [split] if counts == job.stage_layers else [split, job]


def plan(request: PlanRequest, map_unordered: Callable | None = None, progress: PlanProgress | None = None,
         budget: SolveOptions | None = None, jobs: list[Job] | None = None, keep_share: float = 0.0) -> Plan:
    """Enumerate, filter by memory and evaluate the request's jobs (module doc).

    ``jobs`` replaces the enumeration (e.g. the jobs a measured-data file lists). ``map_unordered(fn,
    items)`` runs the evaluations (an executor's method; None: in this process). ``progress``
    reports each phase. ``budget`` (started :class:`~ppopt.solve.options.SolveOptions`) bounds
    every phase by its deadline: generating the schedules, sizing and evaluating the jobs; jobs
    left when it passes are not sized (``unsized``) or not evaluated (``unevaluated``), and a job
    left unsized leaves every job unevaluated (``rows`` empty, :meth:`Plan.spent` says why). Jobs
    are evaluated best first (:func:`best_first`), and the evaluations leave ``keep_share`` of the
    time left when they begin to what the caller does next.
    Raises InfeasibleError naming ``gpus`` when no layout exists, ConfigError when the space exceeds
    :data:`MAX_JOBS`, InfeasibleError naming the least memory any job needs when none fits the
    limit, and InfeasibleError naming ``time_limit_s`` when the budget ends before the jobs'
    schedules are generated (:func:`out_of_time`).

    Python's cyclic collector is paused throughout (:func:`ppopt.flat.paused_gc`): the schedules
    the sizing caches hold millions of ops, and each full collection walked them all to free
    nothing (3 of gpt3-175b's 20 s on 1,024 GPUs).
    """
    with paused_gc():
        return _plan(request, map_unordered, progress, budget, jobs, keep_share)


def _plan(request: PlanRequest, map_unordered: Callable | None, progress: PlanProgress | None, budget: SolveOptions | None,
          jobs: list[Job] | None, keep_share: float) -> Plan:
    """:func:`plan`, with the collector paused."""
    if not isinstance(request, PlanRequest):
        raise ConfigError(f"must be a PlanRequest (ppopt.plan), got {request!r:.60}", field="request")
    progress = progress or PlanProgress()
    if jobs is None:
        ops = sizing_ops(request)
        if ops > MAX_SIZING_OPS:
            raise ConfigError(f"sizing its jobs would generate schedules of {ops:,} ops, over the limit of {MAX_SIZING_OPS:,}; "
                              "fewer microbatches per job (a smaller --global-batch, a larger --micro-batch) or fewer "
                              "--schedule families", field="global_batch")
        _generate(request, budget, progress.generating)
        total = count_jobs(request)
        if total == 0 and isinstance(request.split, tuple):
            raise InfeasibleError(f"no job of the schedules {', '.join(request.schedules)} has {len(request.split)} stages "
                                  "(one count per schedule stage: p devices x stages per device)", field="layers_per_stage")
        if total == 0 and request.micro_batches is not None and not any(
                _micro_batches(request, d) for _, _, d in layouts(request)):
            raise InfeasibleError(_no_micro_batch(request), field="micro_batches")
        if total == 0:
            raise InfeasibleError(_none_defined(request), field="schedules")
        if total > MAX_JOBS:
            raise ConfigError(f"{total} jobs to enumerate exceed the limit of {MAX_JOBS}; narrow the space "
                              f"({NARROWING_FLAGS})", field="gpus")
        source: Iterable[Job] = enumerate_jobs(request)
        left_out = tuple(families_left_out(request).items())
    else:
        total, source, left_out = len(jobs), jobs, ()
    limit = request.limit
    fitting: list[Job] = []
    memories: dict[Job, Memory] = {}  # each fitting job's, for its row
    over, closest, sized, both = 0, None, 0, 0
    least: tuple[Job, Memory] | None = None
    sizing_began, foreseen = time.monotonic(), None
    for job in _until(source, budget):
        sized += 1
        if progress.sizing:
            progress.sizing(sized, total)
        if budget is not None and sized % 16 == 0:
            elapsed = time.monotonic() - sizing_began
            left = budget.remaining_s()
            needed = _foreseen_s(sized, total, elapsed, left)
            if needed is not None:
                foreseen = (elapsed, budget.time_limit_s - left + needed)
                break
        splits = _with_splits(job, request)
        sized_jobs = [(candidate, memory_of(candidate)) for candidate in splits or [job]]
        for candidate, memory in sized_jobs:
            if least is None or memory.peak_bytes < least[1].peak_bytes:
                least = (candidate, memory)
        kept = [candidate for candidate, memory in sized_jobs if splits and memory.peak_bytes <= limit]
        if not kept:
            over += 1
            candidate, memory = min(sized_jobs, key=lambda sized_job: sized_job[1].peak_bytes)
            if closest is None or memory.peak_bytes < closest[1].peak_bytes:
                closest = (candidate, memory)
            continue
        fitting += kept
        memories.update((candidate, memory) for candidate, memory in sized_jobs if candidate in kept)
        both += len(kept) == 2
    if sized < total:  # the budget ended: evaluating some jobs would rank them against unsized ones
        return Plan(request, (), total, over, closest, len(fitting), total - sized, foreseen, left_out, both)
    if not fitting:
        if least is None:
            raise ConfigError("no job to plan", field="candidates")
        job, memory = least
        given = request.memory_limit_bytes is not None  # else the system's memory: say so, not blame a flag never given
        where = "" if given else f" (the memory_capacity_bytes of system {request.system.name})"
        # the limit rounded down and the least need up: 17.26 GB on both sides read as a contradiction,
        # and the least need passed back as --memory-limit must be accepted
        shown = f"{math.floor(limit / 1e7) / 100:.2f} GB" if limit >= 1e7 else f"{limit:,.0f} bytes" if limit >= 1 else \
            f"{limit:g} bytes"  # 80 bytes is not "0.00 GB", half a byte not "0 bytes"
        # weights, gradients and optimizer state over the limit on their own: no layout of these GPUs helps
        more = (f"; its weights, gradients and optimizer state alone take {memory.persistent_bytes / 1e9:.2f} GB, "
                "which more GPUs would shard further") if memory.persistent_bytes > limit else ""
        raise InfeasibleError(
            f"no job fits {shown} per GPU{where}: the least any of the {total} jobs needs is "
            f"{math.ceil(memory.peak_bytes / 1e7) / 100:.2f} GB ({describe(job)}, {memory.bound()}){more}",
            field="memory_limit_bytes" if given else None)
    rows: list[PlanRow] = []
    fitting = best_first(fitting, budget)
    # the share kept begins when the simulations do, so the first one always has time
    simulating = budget.reserve(keep_share * budget.remaining_s()) if budget is not None and keep_share > 0 else budget
    evaluating = ((job, memories[job]) for job in _until(fitting, simulating))
    results = (map_unordered or (lambda fn, items: map(fn, items)))(_evaluate_sized, evaluating)
    for row in results:
        rows.append(row)
        if progress.simulating:
            progress.simulating(len(rows), len(fitting))
        if simulating is not None and simulating.expired:
            break
    if hasattr(results, "close"):  # a pool's generator: cancel its queued jobs now, not at garbage collection
        results.close()
    rows.sort(key=lambda r: (r.step_time_s, r.memory.peak_bytes, describe(r.job)))
    return Plan(request, tuple(rows), total, over, closest, len(fitting) - len(rows), families_left_out=left_out, both_splits=both)


def step_estimate(job: Job) -> float:
    """An optimistic step time of ``job``, seconds, to choose what to simulate first (not a bound):
    the busiest device's forward and backward work for its share of the m microbatches, as if the
    schedule had no bubble, plus the largest gradient all-reduces and optimizer step of a device
    (of every stage it holds), as :func:`ppopt.job.evaluate_job` adds them.

    Without the bubble, the groups of the best jobs come first: of the default plans of llama3-8b
    on 8 GPUs, llama3-70b on 64 and gpt3-175b on 1,024 (global batch 1,536), every top-10 job's
    group starts within the first 25, 19 and 218 jobs of 677, 817 and 2,925; with 1F1B's bubble,
    (p − 1)/m of the work, within 106, 44 and 696."""
    work = _shared_work(job)
    stages = job_costs(job, work).stages
    syncs = [float(work_time_s(w, job.system)) for w in work.step_sync]
    optimizers = [float(work_time_s(w, job.system)) for w in work.optimizer]
    load, sync, optimizer = ([0.0] * job.pp for _ in range(3))
    for k, devices in enumerate(job.stage_devices):
        for d in devices:  # a replicated stage (Chimera, DualPipe) runs half the microbatches on each
            load[d] += (stages[k].forward_s + stages[k].backward_s) * job.microbatches / len(devices)
            sync[d] += syncs[k]
            optimizer[d] += optimizers[k]
    return max(load) + max(sync) + max(optimizer)


def best_first(jobs: list[Job], budget: SolveOptions | None = None) -> list[Job]:
    """``jobs`` in the order to simulate them: grouped by layout, micro batch and recomputation,
    the groups by :func:`group_estimate`, smallest first (jobs of a group keep their order). A
    budget that ends before every job is simulated then leaves out the groups expected to be
    slowest, not the last ones enumerated. One estimate per group (a few milliseconds at p = 32;
    the simulations take tens); unsorted if the budget is spent."""
    estimates: dict[tuple, float] = {}
    for job in jobs:
        if _group(job) not in estimates:
            if budget is not None and budget.expired:
                return jobs
            estimates[_group(job)] = group_estimate(job)
    return sorted(jobs, key=lambda job: estimates[_group(job)])


def _group(job: Job) -> tuple:
    return job.tp, job.pp, job.dp, job.micro_batch, job.recompute


def group_estimate(job: Job) -> float:
    """The :func:`step_estimate` of ``job``'s layout, micro batch and recomputation under 1F1B with
    the even split, the same for every job of the group."""
    return step_estimate(replace(job, schedule="1f1b", layers=None))


def describe(job: Job) -> str:
    """A job's label with its recomputation and schedule, e.g. ``t4 p4 d4 b1 m64 none 1f1b``."""
    return f"{job.describe()} {job.recompute} {job.schedule_label}"


def _until(jobs: Iterable[Job], budget: SolveOptions | None) -> Iterator[Job]:
    """``jobs`` until the budget's deadline passes (one clock read per job: a job takes far longer)."""
    for job in jobs:
        if budget is not None and budget.expired:
            return
        yield job
