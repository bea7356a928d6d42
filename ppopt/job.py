"""A training job in three dimensions (tensor, pipeline, data parallel) and its step time.

A :class:`Job` is a model, a system, a layout (tensor parallel t, pipeline parallel p, data parallel
d on t·p·d GPUs), a micro batch size, a recomputation mode and two Megatron switches (sequence
parallelism, distributed optimizer). :func:`evaluate_job` predicts one training step:

    step = pipeline (simulated) + data-parallel gradient all-reduce + optimizer step

The pipeline is simulated by :func:`ppopt.simulate.simulate` with per-stage costs from
:func:`job_costs`; the gradient all-reduce (no bucketing, after the last backward: the measured
runs of ``data/measured`` use none) and the optimizer step follow it.

Work and time
    Every cost is first expressed as :class:`Work` (FLOPs, bytes, counts), and :func:`work_time_s`
    turns work into seconds with the system's parameters. Under the ``additive`` op-time rule (the
    calibrated presets) the time is linear in the parameters' reciprocals, which the calibration
    (:mod:`ppopt.calibrate`) relies on: it evaluates the same work under many candidate systems
    without rebuilding it. Under the default ``roofline`` rule an op takes the longer of its
    compute and its memory time instead (:func:`ppopt.costs.work_time_s`). The additive rule:

    ``time = (gemm_flops + k^n·gemm_units) / (peak_flops·compute_efficiency)
    + memory_bytes / (memory_bandwidth·memory_efficiency) + ops·compute_latency_s
    + intra_bytes / intra_bandwidth + inter_bytes / inter_bandwidth
    + partial_ring_bytes / (inter_bandwidth·partial_ring_efficiency)
    + intra_hops·intra_latency + inter_hops·inter_latency``

    (with ``kernel_host_s > 0`` everything but ``ops·compute_latency_s`` is at least
    ``kernels·kernel_host_s``, the host's launches: :func:`ppopt.costs.work_time_s`; under
    ``op_accounting = "kernels"`` the GEMMs are sized and the elementwise bytes counted kernel by
    kernel: :func:`_kernel_units`, :func:`ppopt.costs.elementwise_traffic_bytes`)

    where ``k = gemm_half_saturation_flops``, ``n = gemm_saturation_exponent`` and
    ``gemm_units = Σ FLOPs / g^n`` over the GEMMs, g the size of a block's reference GEMM
    (2·b·s·h²/t; the logits GEMM counts as its own size): a GEMM of size g runs at
    ``compute_efficiency / (1 + (k/g)^n)`` of peak. ``gemm_units`` depends on n, so work built for
    one system must be timed on systems with the same n. Elementwise kernels (layer norm, GELU, softmax,
    dropout) are memory-bound: their HBM traffic is taken as the bytes a block would store without
    recomputation (Korthikanti et al. 2022, Table 2), once in the forward and twice in the backward
    (a coarse proxy: the calibrated ``memory_efficiency`` absorbs the true multiple). Under the calibrated presets' ``op_time_rule = "additive"`` GEMMs and elementwise kernels run
    one after the other, so their times add; under the default "roofline" each op (F, I, W) takes
    the larger of its compute and memory time (:func:`ppopt.costs.work_time_s`, the one per-op cost
    function, also behind :func:`ppopt.costs.stage_costs`, which is this model at t = d = 1).

Schedules (:data:`SCHEDULES`)
    ``pp`` is the number of devices of one pipeline; the schedule places ``stages`` stages on them
    (the registry entry's ``Family.chunks``: ``chunks`` per device for interleaved-1f1b and
    looped-bfs, two for the V families zb-v, v-min, v-half and dualpipev, 2·``waves`` for hanayo,
    the p stages of Chimera and DualPipe twice as two replicated pipelines), and the layers are split over
    the stages. A device keeps the persistent state of every stage it holds, each replica in full,
    and the activations of all its chunks (as :func:`ppopt.simulate.simulate` counts them), and
    all-reduces every held stage's gradients over its data-parallel group, one after the other.

Per block and microbatch of b sequences on one of t ranks (s sequence, h hidden, a heads, e bytes)
    * FLOPs ``(2·b·s·P_lin + 4·b·s²·h)/t`` forward, twice that backward (Narayanan et al. 2021,
      "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
      Section 5.1; Shoeybi et al. 2019, "Megatron-LM", Section 3: every GEMM is split by t).
    * Tensor parallelism: two all-reduces of b·s·h·e bytes per block in the forward (after the
      attention and the MLP) and two in the backward (Shoeybi et al. 2019, Figure 4: the f and g
      operators), ring all-reduce ``2(t-1)/t · bytes / bandwidth + 2(t-1)·latency``. Sequence
      parallelism replaces each by a reduce-scatter and an all-gather of the same total volume
      (Korthikanti et al. 2022, Section 4.2.2): the same collective volume per block. It splits
      the activations and the norms' and dropouts' elementwise traffic by t, and a pipeline
      message, already split, needs no all-gather on arrival (see the sections below).
    * Recomputation (Korthikanti et al. 2022, Sections 4.1 and 5): ``selective`` recomputes the
      attention core (4·b·s²·h/t FLOPs and the score tensors' traffic) in the backward and does not
      store the scores; ``full`` stores each block's input only and re-runs the whole forward,
      including its all-reduces, before the backward (backward = F + B). With
      ``model.flash_attention`` no score tensor is stored in either mode, so ``selective`` costs its
      recomputation and saves nothing (Megatron-Core still checkpoints the attention core under
      selective recomputation; the legacy Megatron-LM flash path does not): ``plan`` never prefers it
      for such models.
    * Stored bytes: :func:`ppopt.costs.stored_activation_bytes_per_layer`.

Pipeline messages
    Each tensor-parallel rank sends its 1/t share of the b·s·h·e activation (or gradient) to the
    next stage, and the receiving ranks all-gather it over their tensor-parallel group (ring,
    ``(t-1)/t · bytes``, charged to the receiving stage's F or B): Megatron's scatter/gather
    optimisation (Narayanan et al. 2021, Section 4.1, "Communication Optimizations"). With sequence
    parallelism the activation is already split, so there is no all-gather.

Embedding and output layer
    Stage 0 gathers b·s·h·e embedding rows (plus one all-reduce of them under tensor parallelism:
    Megatron's vocabulary-parallel embedding; with sequence parallelism a reduce-scatter, and an
    all-gather of their gradient in the backward); the last stage computes the logits,
    2·b·s·h·V/t FLOPs (vocabulary-parallel), and the loss reads and writes them (2·b·s·V·e/t). The
    loss keeps the softmax in fp32 for the backward, 4·b·s·V/t bytes until the last stage's
    backward (Korthikanti et al. 2022, Section 4.3, the cross entropy's stored logits), and the
    logits' gradient, b·s·V·e/t bytes, lives while that backward runs. Where the backward is split,
    I computes the loss's gradient and frees the softmax, while the output layer's W still needs the
    logits' gradient: the stage's stored bytes drop by (4 - e)·b·s·V/t at the end of I, and the
    rest goes at the end of W (the loss has no weights, so its W needs none of it; Qi et al. 2024,
    Section 2.1: W needs less memory than B).
    The logits layer's input enters the tensor-parallel region, so its gradient is all-reduced in
    the last stage's I (Shoeybi et al. 2019, Section 3, the f operator; with sequence parallelism an
    all-gather in F and a reduce-scatter in I). With tied embeddings on several devices, the first
    and the last stage all-reduce the word embedding's gradient, V·h·e/t bytes, once per step after
    the data-parallel all-reduce.

Data parallelism and the optimizer
    Each stage's d replicas all-reduce their fp16/bf16 gradients, ``param_count · e`` bytes, by a
    ring over d ranks (a distributed optimizer's reduce-scatter + all-gather move the same volume).
    That is DeepSpeed's fp16 optimizer (the measured runs of data/measured) and Megatron-LM with
    ``--grad-reduce-in-bf16``; Megatron-LM's bf16 default accumulates and all-reduces fp32
    gradients, twice these bytes and 2 bytes more of state per parameter, which ppopt does not model.
    The optimizer step is memory-bound: it reads and writes the GPU's parameter state once,
    ``2 · state bytes``; with a distributed optimizer each rank updates its 1/d shard of the
    optimizer state, ``2 · state bytes / d``. (:func:`ppopt.simulate.simulate`'s optimizer step,
    for the pure pipeline model, moves twice the persistent bytes.) ``param_count`` is one GPU's: the weight matrices, the
    embedding and the column-parallel biases split by t, the norms and the row-parallel biases whole
    on every rank (:func:`ppopt.costs.layer_params_per_rank`). Persistent bytes per GPU:
    ``param_count`` times ``bytes_per_param_state`` (16 for mixed-precision Adam), or, with the
    distributed optimizer, ``2e + (bytes_per_param_state - 2e)/d`` (Rajbhandari et al. 2020, "ZeRO",
    SC'20, Section 5.1: optimizer state partitioning).

    By default the all-reduce starts after the pipeline (no gradient bucketing, as in the measured
    runs). With ``overlap_gradient_sync`` it is bucketed and overlapped with the backward of the
    last microbatch (Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating Data
    Parallel Training", Section 3.2.3): only the part longer than that stage's backward pass,
    ``max(0, sync - B)``, is exposed; a simplification that treats every bucket as ready at the
    start of that backward.

Placement (Megatron order: tensor parallel innermost, then data parallel, then pipeline)
    Global rank = tp_rank + t·(dp_rank + d·pp_rank); node = rank // devices_per_node. On more
    than one node, t and t·d must each divide devices_per_node or be a multiple of it
    (:func:`node_layout_reason`): otherwise some groups straddle a node boundary unevenly (t = 6
    on 8-GPU nodes: ranks 6-11 span two nodes, ranks 0-5 one), which the uniform per-stage costs
    below cannot express, and the job is refused. So a tensor
    parallel group crosses nodes iff t > devices_per_node; a data-parallel group (stride t, span
    t·d) iff t·d > devices_per_node; neighbouring pipeline stages (t·d ranks apart) iff
    t·d >= devices_per_node, else devices_per_node/(t·d) stages share a node. Collectives and
    messages that stay in a node use ``intra_node``; the others ``inter_node``. With one NIC per
    node (``inter_node_per = "node"``) the node's bandwidth is shared by the transfers of the node
    that cross at once: a ring gets ``k/devices_per_node`` of it when k of its members sit on the
    node (every GPU of the node takes part in one such ring at the same time), a pipeline message
    ``1/min(t·d, devices_per_node)``. With one NIC per device a pipeline message has its device's
    own, and a ring the NICs of its k members on the node (:func:`ring_allreduce_work`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Literal, NamedTuple

from ppopt.config import MODEL_LIMITS, ModelConfig, SystemConfig, load_model, load_system, short_repr
from ppopt.costs import (
    Costs,
    StageCost,
    Work,
    _activation_parts,
    _kv_width,
    check_global_batch,
    elementwise_traffic_bytes,
    layer_attention_core_flops,
    layer_forward_flops,
    layer_linear_params,
    layer_params_per_rank,
    logits_forward_flops,
    microbatch_size,
    partition_layers,
    ring_allreduce_traffic,
    stage_costs,
    stored_activation_bytes_per_layer,
    work_time_s,
)
from ppopt.errors import ConfigError, ScheduleError, counted, require_bool, require_positive_int
from ppopt.flat import Flat
from ppopt.generators import get, names, schedule_label, too_many_stages
from ppopt.ir import Schedule, check_size
from ppopt.placement import Placement, split_weights
from ppopt.simulate import Prepared, Simulation, prepare, simulate

__all__ = ["Job", "JobResult", "JobWork", "Parallelism", "Work", "evaluate_job", "job_costs", "job_schedule", "job_work", "pipeline_system", "simulate_pipeline",
           "placement", "stages_per_device",
           "work_time_s"]

Recompute = Literal["none", "selective", "full"]
RECOMPUTE_MODES = ("none", "selective", "full")
FP32_BYTES = 4
"""Bytes of a float32 value: the loss's softmax, kept for its backward, whatever the activations' precision."""
SCHEDULES = tuple(names())
"""Schedule families a job can use: every family of the registry (:mod:`ppopt.generators`). What a
job needs of a family is read from its entry: its options (:meth:`Job.schedule_options`), its stages
per device (``Family.chunks``) and its placement (its space's, :func:`placement`); its rules (e.g.
DualPipeV's m >= 2p) are its generator's, checked when the job's schedule is built
(:func:`job_schedule`)."""


def stages_per_device(schedule: str, **options: object) -> int:
    """Schedule stages per device, S/p, of ``schedule`` with its generator ``options`` (the
    registry's defaults for those not given): its entry's ``chunks`` (Chimera's and DualPipe's
    replicas count once: p stages, each on two devices)."""
    per_device = get(schedule).chunks(options)
    if isinstance(per_device, bool) or not isinstance(per_device, int) or per_device < 1:
        raise ConfigError(f"{schedule} needs a positive number of stages per device, got {per_device!r}", field="schedule")
    return per_device


@lru_cache(maxsize=1024)
def placement(schedule: str, devices: int, options: tuple[tuple[str, object], ...] = ()) -> Placement:
    """The devices holding each stage of ``schedule`` on ``devices`` devices (one per replica): the
    placement of the family's space (:func:`ppopt.solve.space.family_space`), which its generator
    uses. ConfigError naming ``schedule`` when the placement is not defined (e.g. Chimera's for odd p)."""
    from ppopt.solve.space import family_space, placement_of

    try:
        placed = placement_of(family_space(schedule, dict(options)), devices)
    except ScheduleError as error:
        raise ConfigError(f"{schedule} is not defined for {counted(devices, 'device')}: {error.reason}", field="schedule") from None
    assert placed is not None  # a family's space fixes its placement
    return placed


# --------------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------------


def tensor_parallel_reason(model: ModelConfig, tp: int, sequence_parallel: bool = False) -> str | None:
    """Why Megatron cannot split ``model`` over ``tp`` tensor-parallel ranks, or None if it can.

    Every rank holds whole query heads and whole key/value groups, and an equal slice of the MLP's
    hidden units (Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language Models
    Using Model Parallelism", Section 3; Megatron-LM divides each of these by t and refuses a
    remainder). Sequence parallelism also splits the sequence by t (Korthikanti et al. 2022,
    "Reducing Activation Recomputation in Large Transformer Models", Section 4.2.2)."""
    counts = [("query heads", model.num_attention_heads), ("key/value heads", model.num_kv_heads),
              ("MLP hidden units", model.ffn_hidden_size)]
    if sequence_parallel:
        counts.append(("sequence tokens", model.seq_length))
    for what, count in counts:
        if count % tp:
            return f"tensor parallelism {tp} does not divide the model's {count} {what}"
    return None


def node_layout_reason(tp: int, dp: int, gpus: int, devices_per_node: int) -> tuple[str, str] | None:
    """Why Megatron's rank order (module doc, "Placement") splits tensor- or data-parallel groups
    across nodes unevenly on ``gpus`` GPUs, as (reason, field), or None when every group and stage
    either fits in a node or spans whole nodes: t and t·d each divide ``devices_per_node`` or are
    a multiple of it (on one node nothing crosses)."""
    if gpus <= devices_per_node:
        return None
    for size, what, name in ((tp, f"tensor parallelism {tp}", "tp"), (tp * dp, f"t·d = {tp * dp} ranks per stage", "dp")):
        if devices_per_node % size and size % devices_per_node:
            return (f"{what} neither divides nor is a multiple of the {devices_per_node} GPUs of a node: Megatron's "
                    "rank order would split groups across node boundaries unevenly, which ppopt does not model"), name
    return None


@dataclass(frozen=True)
class Job:
    """One training job: model, system, layout and Megatron options (see module doc).

    ``global_batch`` defaults to ``model.global_batch_size``; microbatches per step
    m = global_batch / (micro_batch · dp). Raises ConfigError (naming the field) for a layout or
    batch that does not fit.
    """

    model: ModelConfig
    """The model (a preset name or a .toml/.json file is loaded on construction)."""
    system: SystemConfig
    """The system (a preset name or a file, as ``model``)."""
    tp: int = 1
    """Tensor-parallel degree t: GPUs that split each layer (within a node, or whole nodes)."""
    pp: int = 1
    """Pipeline devices p (each holds the family's stages per device)."""
    dp: int = 1
    """Data-parallel replicas d; the job takes t·p·d GPUs."""
    micro_batch: int = 1
    """Sequences per microbatch (b)."""
    global_batch: int | None = None
    """Sequences per step over all replicas (None: the model's ``global_batch_size``)."""
    recompute: Recompute = "none"
    """Activation recomputation: ``"none"``, ``"selective"`` (the attention core) or ``"full"``
    (each block's input kept; module doc)."""
    sequence_parallel: bool = False
    """Megatron's sequence parallelism (needs t > 1): reduce-scatter and all-gather instead of
    all-reduce, norm and dropout activations split by t."""
    distributed_optimizer: bool = False
    """Optimizer state sharded across the d replicas (needs d > 1)."""
    overlap_gradient_sync: bool = False
    """The gradient all-reduce bucketed and overlapped with the last backward, rather than after it."""
    schedule: str = "1f1b"
    """The pipeline schedule, a family of ``ppopt list``."""
    layers: tuple[int, ...] | None = None
    """Transformer blocks per schedule stage, stage 0 first (None: :func:`ppopt.costs.partition_layers`'s
    even split, the remainder on the earliest stages)."""
    chunks: int = 2
    """Stages per device of interleaved-1f1b and looped-bfs (others ignore it)."""
    waves: int = 1
    """Hanayo's waves W (2W stages per device; others ignore it)."""
    split: str = "1:2"
    """chimera-asym's layer split A:B between the first and second half of the stages, the default
    of ``layers`` (others ignore it)."""

    def __repr__(self) -> str:
        """Short: the model and system by name (:func:`ppopt.config.short_repr`)."""
        return short_repr(self)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", load_model(self.model))  # unchanged when already a ModelConfig
        object.__setattr__(self, "system", load_system(self.system))
        for name in ("tp", "pp", "dp", "micro_batch"):
            require_positive_int(getattr(self, name), name)
        for name in ("sequence_parallel", "distributed_optimizer", "overlap_gradient_sync"):
            require_bool(getattr(self, name), name)
        check_global_batch(self.global_batch)  # the model's limit: keeps every count finite (ppopt.config)
        idle = idle_job_flag(self.tp, self.dp, self.sequence_parallel, self.distributed_optimizer, self.overlap_gradient_sync)
        if idle is not None:  # as the commands refuse it: it would change nothing but the job's label
            raise ConfigError(f"{idle.why}: set {idle.degree} > 1 or leave it False", field=idle.field)
        try:
            get(self.schedule)
        except ScheduleError as error:  # the registry's words, as every command says them, naming the field
            raise ConfigError(error.reason, field="schedule") from None
        if self.recompute not in RECOMPUTE_MODES:
            raise ConfigError(f"unknown mode {self.recompute!r} (known: {', '.join(RECOMPUTE_MODES)})", field="recompute")
        for name in ("chunks", "waves"):
            require_positive_int(getattr(self, name), name)
        if (reason := tensor_parallel_reason(self.model, self.tp, self.sequence_parallel)) is not None:
            raise ConfigError(reason, field="tp")
        if (layout := node_layout_reason(self.tp, self.dp, self.tp * self.pp * self.dp, self.system.devices_per_node)):
            raise ConfigError(layout[0], field=layout[1])
        if "split" in self.schedule_options:
            try:  # the split's text, and its halves (p = 1 has none), before anything weighs the stages by it
                split_weights(self.pp, self.split)
            except ScheduleError as error:
                if error.field == "split":
                    raise ConfigError(error.reason, field="split") from None
                raise ConfigError(f"{self.schedule} is not defined for {counted(self.pp, 'device')}: {error.reason}",
                                  field="schedule") from None
        if (reason := too_many_stages(self.schedule, self.pp, self.schedule_options, self.model.num_layers)) is not None:
            # p stages alone would fit: the chunks or waves per device make the rest, so they are named
            per_device = [option for option in ("chunks", "waves") if option in self.schedule_options]
            raise ConfigError(reason, field=per_device[0] if per_device and self.pp <= self.model.num_layers else "pp")
        if self.layers is not None:
            counts = self.layers
            if not isinstance(counts, tuple | list):  # a string would be read character by character
                raise ConfigError(f"must be a tuple of counts, one per stage, got {counts!r:.60}", field="layers_per_stage")
            if len(counts) != self.stages or any(not isinstance(n, int) or n < 1 for n in counts) \
                    or sum(counts) != self.model.num_layers:
                raise ConfigError(f"needs {counted(self.stages, 'positive count')} summing to the model's {self.model.num_layers} "
                                  f"layers, got {','.join(map(str, counts))}", field="layers_per_stage")
        per_replica, left = divmod(self.batch, self.dp)
        if left:  # the replicas cannot share the batch, whatever the micro batch
            raise ConfigError(f"{self.dp} data-parallel replicas do not share the global batch of {counted(self.batch, 'sequence')} "
                              "evenly", field="dp")
        if per_replica % self.micro_batch:
            raise ConfigError(f"micro batch {self.micro_batch} does not divide the global batch per replica "
                              f"({counted(self.batch, 'sequence')} / {counted(self.dp, 'replica')})", field="micro_batch")
        try:  # the schedule's size, named by the batch that sets it (F and B of every stage and microbatch at least)
            check_size(2 * self.stages * self.microbatches, f"{counted(self.stages, 'stage')}, {counted(self.microbatches, 'microbatch')} "
                       f"({counted(self.batch, 'sequence')} / ({self.micro_batch} x {counted(self.dp, 'replica')}))")
        except ScheduleError as error:
            raise ConfigError(error.reason, field="global_batch") from None

    @property
    def batch(self) -> int:
        """Sequences per step."""
        return self.model.global_batch_size if self.global_batch is None else self.global_batch

    @property
    def stages(self) -> int:
        """Pipeline stages of the schedule: ``pp`` devices x :func:`stages_per_device` (Chimera's
        replicas are the same p stages twice)."""
        return self.pp * stages_per_device(self.schedule, **self.schedule_options)

    @property
    def schedule_options(self) -> dict[str, object]:
        """The generator options of the job's schedule: the job's fields its registry entry names."""
        return {name: getattr(self, name) for name in get(self.schedule).options}

    @property
    def schedule_label(self) -> str:
        """The schedule with its options, e.g. ``interleaved-1f1b v2``, ``hanayo w2`` or ``chimera-asym 1:2``
        (not the split when ``layers`` gives the counts: the split only sets the default counts)."""
        options = self.schedule_options
        if self.layers is not None:
            options = {k: v for k, v in options.items() if k != "split"}
        return schedule_label(self.schedule, options)

    @property
    def stage_layers(self) -> tuple[int, ...]:
        """Transformer blocks per schedule stage (``layers``; or the split of the schedule's
        ``split`` option, as :func:`ppopt.generators.chimera.chimera_asym` weighs its stages; or the
        even split)."""
        if self.layers is not None:
            return self.layers
        weights = split_weights(self.pp, self.split) if "split" in self.schedule_options else None
        return partition_layers(self.model.num_layers, self.stages, weights)

    @property
    def stage_devices(self) -> Placement:
        """Per schedule stage, the devices holding it (one per replica): :func:`placement`."""
        return placement(self.schedule, self.pp, tuple(sorted(self.schedule_options.items())))

    def device_of(self, stage: int) -> int:
        """The device (pipeline rank) that holds ``stage``: the first of :attr:`stage_devices` (the
        down pipeline's for Chimera and DualPipe), e.g. stage k of a looped schedule on k mod p, of a
        V-shaped one on k or 2p - 1 - k."""
        return self.stage_devices[stage][0]

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def microbatches(self) -> int:
        """m = global batch / (micro batch · dp)."""
        return self.batch // (self.micro_batch * self.dp)

    def describe(self) -> str:
        """Short label, e.g. ``t2 p4 d1 b2 m8``."""
        return f"t{self.tp} p{self.pp} d{self.dp} b{self.micro_batch} m{self.microbatches}"

    def layout_json(self) -> dict:
        """The job's layout and choices as ``job`` and ``plan`` print them in --json (``micro_batch``
        in sequences, ``layers_per_stage`` one count per stage)."""
        return {"job": self.describe(), "tp": self.tp, "pp": self.pp, "dp": self.dp, "micro_batch": self.micro_batch,
                "microbatches": self.microbatches, "recompute": self.recompute, "schedule": self.schedule,
                "schedule_options": self.schedule_options, "sequence_parallel": self.sequence_parallel,
                "distributed_optimizer": self.distributed_optimizer, "layers_per_stage": list(self.stage_layers)}


NEEDS_A_MODEL = ("is a job field, which needs --model and --system (the unit model has no tensor or data parallelism, "
                 "micro batch size or recomputation)")
"""The reason a unit-mode command refuses a job field (:attr:`Parallelism.first_set` names which)."""


@dataclass(frozen=True)
class Parallelism:
    """The job fields every modelled command takes (``--tp``, ``--dp``, ``--micro-batch``,
    ``--recompute``, ``--sequence-parallel``, ``--distributed-optimizer``). The defaults are pure
    pipeline parallelism (t = d = 1, no recomputation), for which commands keep
    :func:`ppopt.costs.stage_costs`; otherwise a schedule's stages are costed by :func:`job_costs`."""

    tp: int = 1
    dp: int = 1
    micro_batch: int | None = None
    """Sequences per microbatch; None: global batch / (m·d). Given without a global batch, the
    global batch is micro_batch·m·d."""
    recompute: Recompute = "none"
    sequence_parallel: bool = False
    distributed_optimizer: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "dp", "micro_batch"):
            if getattr(self, name) is not None or name != "micro_batch":  # micro_batch None: from the global batch
                require_positive_int(getattr(self, name), name)

    @property
    def is_default(self) -> bool:
        """No field given a value (a mode without a model, unit mode or ``--costs``, takes none)."""
        return self == Parallelism()

    @property
    def pipeline_only(self) -> bool:
        """t = d = 1, no recomputation: the job is a pure pipeline, costed by
        :func:`ppopt.costs.stage_costs` without working sets, whether or not ``micro_batch`` is given
        (it only sets the batch: typing the size a job would take anyway must not change its figures)."""
        return replace(self, micro_batch=None) == Parallelism()

    def given_batch(self, model: ModelConfig, microbatches: int, global_batch: int | None = None) -> int | None:
        """The global batch the fields set, in sequences: ``global_batch`` (checked against
        ``micro_batch`` when both are given, :meth:`batch_split`), or micro_batch·m·d; None when
        neither is given (the model's)."""
        if self.micro_batch is None:
            return global_batch
        return self.batch_split(model, microbatches, global_batch)[0]

    @property
    def first_set(self) -> str:
        """The first field given a value other than its default (the one to name when a mode
        without a model takes none of them); ``tp`` when all are defaults."""
        default = Parallelism()
        return next((f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)), "tp")

    def pipeline_costs(self, model: ModelConfig, system: SystemConfig, layers: tuple[int, ...], microbatches: int,
                       global_batch: int | None = None) -> Costs | None:
        """The pure pipeline's per-stage costs (:func:`ppopt.costs.stage_costs`, the batch the fields
        give, :meth:`given_batch`) when the job is one (:attr:`pipeline_only`); None when it needs the
        job model (:meth:`job`, :func:`job_costs`). The one place the two cost paths part."""
        if not self.pipeline_only:
            return None
        return stage_costs(model, system, layers, microbatches, self.given_batch(model, microbatches, global_batch))

    def check_batch(self, model: ModelConfig, microbatches: int, global_batch: int | None = None) -> None:
        """The check of the batch split that costing the job makes (:meth:`pipeline_costs` or
        :meth:`job`), with its ConfigError, for a command to make before it builds a schedule."""
        if self.pipeline_only:
            microbatch_size(model, microbatches, self.given_batch(model, microbatches, global_batch))
        else:
            self.batch_split(model, microbatches, global_batch)

    def job(self, model: ModelConfig, system: SystemConfig, layers: tuple[int, ...], microbatches: int,
            global_batch: int | None = None) -> Job:
        """The job whose pipeline has one stage per entry of ``layers`` and ``microbatches``
        microbatches per step. ConfigError (naming the field) when the batch does not split."""
        batch, micro = self.batch_split(model, microbatches, global_batch)
        return Job(model, system, tp=self.tp, pp=len(layers), dp=self.dp, micro_batch=micro, global_batch=batch,
                   recompute=self.recompute, sequence_parallel=self.sequence_parallel,
                   distributed_optimizer=self.distributed_optimizer, layers=tuple(layers))

    def batch_split(self, model: ModelConfig, microbatches: int, global_batch: int | None = None) -> tuple[int, int]:
        """(global batch, sequences per microbatch) of a step of ``microbatches`` microbatches per
        replica: ``global_batch``, else micro_batch·m·d, else the model's. ConfigError (naming the
        field) when the batch does not split into m·d microbatches of equal size."""
        batch = global_batch
        if batch is None:
            batch = model.global_batch_size if self.micro_batch is None else self.micro_batch * microbatches * self.dp
            most = MODEL_LIMITS["global_batch_size"]
            if self.micro_batch is not None and batch > most:
                raise ConfigError(f"{self.micro_batch} x {counted(microbatches, 'microbatch')} x {counted(self.dp, 'replica')} "
                                  f"makes a global batch of {counted(batch, 'sequence')}, more than {most:,}", field="micro_batch")
        micro, left = divmod(batch, microbatches * self.dp)
        if left or micro < 1:  # named as costs.microbatch_size names it without replicas: by the microbatches
            raise ConfigError(f"global batch of {counted(batch, 'sequence')} does not split into "
                              f"{counted(microbatches, 'microbatch')} x {counted(self.dp, 'replica')} (give another "
                              "count, data-parallel degree or global batch)", field="microbatches")
        if self.micro_batch is not None and self.micro_batch != micro:
            raise ConfigError(f"{self.micro_batch} x {counted(microbatches, 'microbatch')} x {counted(self.dp, 'replica')} "
                              f"differs from the global batch {batch}", field="micro_batch")
        return batch, micro

    def summary_json(self, model: ModelConfig, system: SystemConfig, microbatches: int, global_batch: int | None = None) -> dict:
        """:meth:`summary`'s fields for ``--json`` output (``micro_batch`` in sequences per microbatch)."""
        batch, micro = self.batch_split(model, microbatches, global_batch)
        return {"model": model.name, "system": system.name, "microbatches": microbatches, "micro_batch": micro,
                "global_batch": batch, "seq_length": model.seq_length, "tp": self.tp, "dp": self.dp,
                "recompute": self.recompute, "sequence_parallel": self.sequence_parallel,
                "distributed_optimizer": self.distributed_optimizer, "working_set": not self.pipeline_only}

    def summary(self, model: ModelConfig, system: SystemConfig, microbatches: int, global_batch: int | None = None) -> str:
        """What a modelled command simulates, in one line (:func:`summary_line` of :meth:`summary_json`)."""
        return summary_line(self.summary_json(model, system, microbatches, global_batch))


def summary_line(job: dict) -> str:
    """:meth:`Parallelism.summary_json` in one line: model, system, the batch split (so a micro batch
    taken from the model's global batch is visible), the job fields, that its times are the
    pipeline's (the step `ppopt job` and `ppopt plan` print is longer), and whether its peaks hold
    each device's transient working set (they do unless the job is a pure pipeline)."""
    batch, micro, dp = job["global_batch"], job["micro_batch"], job["dp"]
    replicas = f" per replica (global batch {batch:,} over {dp:,} replicas)" if dp > 1 else f" (global batch {batch:,})"
    working = job["working_set"]
    with_working = ", peaks with each device's working set" if working else ""
    job_adds = " and the optimizer step" if working else ", the optimizer step and each device's working set"
    extras = "".join(label for key, label in (("sequence_parallel", ", sequence parallel"),
                                              ("distributed_optimizer", ", distributed optimizer")) if job[key])
    return (f"simulated: {job['model']} on {job['system']}, {counted(job['microbatches'], 'microbatch')} of "
            f"{counted(micro, 'sequence')} x {job['seq_length']:,} tokens{replicas}, t{job['tp']} d{dp}, "
            f"recompute {job['recompute']}{extras}; times are the pipeline's{with_working} (`ppopt job` adds the "
            f"gradient all-reduce{job_adds})")


# --------------------------------------------------------------------------------------------------
# Placement and collectives
# --------------------------------------------------------------------------------------------------


def _nic_users(system: SystemConfig, users: int) -> int:
    """How many transfers share the inter-node bandwidth a transfer gets: ``users`` with one NIC per
    node, 1 with one NIC per device."""
    return max(1, users) if system.inter_node_per == "node" else 1


def ring_allreduce_work(num_bytes: float, ranks: int, span: int, stride: int, system: SystemConfig) -> Work:
    """Ring all-reduce of ``num_bytes`` over ``ranks`` GPUs ``stride`` ranks apart (``span`` = stride·ranks).

    ``2(n-1)/n · bytes`` over the slowest link of the ring plus ``2(n-1)`` link latencies
    (:func:`ppopt.costs.ring_allreduce_traffic`). The ring crosses nodes iff span > devices_per_node (placement in the module
    doc). Then its inter-node hops carry the volume over the network links of its k members on a
    node: the collective library splits the data over several rings (channels) and lays them over
    the NICs of the node's members, so the group gets k times a device's link with one NIC per
    device, and ``k/devices_per_node`` of the node's NIC with one NIC per node (every GPU of a
    node is in one such group, all crossing at once). Both are k device-links' worth on a node
    whose NIC is the sum of its devices'. (A single ring through one NIC would take k times as
    long: 8 times on a DGX node, whose one NIC per GPU exists to carry these collectives.) A group
    with some but not all of a node's devices (1 < k < devices_per_node) reaches only
    ``system.partial_ring_efficiency`` of that (1 by default): its bytes are ``partial_ring_bytes``.
    """
    if ranks <= 1 or num_bytes == 0:
        return Work()
    volume, steps = ring_allreduce_traffic(num_bytes, ranks)
    per_node = system.devices_per_node
    if span <= per_node:
        return Work(intra_bytes=volume, intra_hops=steps)
    members_on_node = max(1, per_node // stride) if stride <= per_node else 1
    share = per_node // members_on_node if system.inter_node_per == "node" else 1 / members_on_node
    if 1 < members_on_node < per_node:  # some but not all of a node's devices
        return Work(partial_ring_bytes=volume * share, inter_hops=steps)
    return Work(inter_bytes=volume * share, inter_hops=steps)


def stages_per_node(job: Job) -> int:
    """Pipeline stages whose GPUs share one node: devices_per_node / (t·d), at least 1."""
    return max(1, job.system.devices_per_node // (job.tp * job.dp))


def pipeline_system(job: Job) -> SystemConfig:
    """The system the pipeline simulation sees: one device per stage, ``stages_per_node`` stages per
    node, and an inter-node link at the share of the NIC one stage-to-stage message gets."""
    system = job.system
    users = _nic_users(system, min(job.tp * job.dp, system.devices_per_node))
    inter = system.inter_node.model_copy(update={"bandwidth_bytes_per_s": system.inter_node.bandwidth_bytes_per_s / users})
    return system.model_copy(update={"devices_per_node": stages_per_node(job), "inter_node": inter})


# --------------------------------------------------------------------------------------------------
# Work of one job
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobWork:
    """Per stage (stage 0 first) work of one microbatch, and the step's collectives."""

    forward: tuple[Work, ...]
    input_grad: tuple[Work, ...]
    """I: the input-gradient part of the backward (with any recomputation)."""
    weight_grad: tuple[Work, ...]
    """W: the weight-gradient part of the backward."""
    messages: tuple[Work, ...]
    """One stage-to-stage message per boundary (p - 1)."""
    gradient_sync: tuple[Work, ...]
    """The data-parallel all-reduce of each stage's gradients (overlapped with the last backward
    under ``overlap_gradient_sync``)."""
    optimizer: tuple[Work, ...]
    """The optimizer step of each stage's GPU."""
    layers: tuple[int, ...]
    param_count: tuple[float, ...]
    """Parameters per GPU of each stage."""
    stored_bytes: tuple[float, ...]
    """Activation bytes stored per microbatch, per GPU of each stage."""
    working_bytes: tuple[float, ...]
    """Transient bytes per GPU while one microbatch's backward runs (recomputed block, logits)."""
    persistent_bytes: tuple[float, ...]
    """Weights, gradients and optimizer state per GPU of each stage, bytes."""
    send_bytes: float
    """Bytes of one stage-to-stage message per tensor-parallel rank."""
    embedding_sync: tuple[Work, ...]
    """The tied word embedding's gradient all-reduce, on the first and the last stage (zero work on
    the others, and on all when there is none), after the data-parallel one: never overlapped."""
    released_by_input_grad: tuple[float, ...] = ()
    """Of ``stored_bytes``, what a split backward frees at the end of I (W does not need it), per
    stage; empty: none (:attr:`ppopt.costs.StageCost.input_grad_release_bytes`)."""

    @property
    def backward(self) -> tuple[Work, ...]:
        """B = I + W of every stage."""
        return tuple(i + w for i, w in zip(self.input_grad, self.weight_grad))

    @property
    def step_sync(self) -> tuple[Work, ...]:
        """Every stage's collectives after the pipeline: data-parallel, then the tied embedding's."""
        return tuple(g + e for g, e in zip(self.gradient_sync, self.embedding_sync))


BLOCK_KERNELS = (13, 15, 4)
"""GPU kernels one transformer block launches per microbatch: (F, I, W), without tensor parallelism.

The forward of a Megatron GPT block (Shoeybi et al. 2019, Figure 2; the operator list of
Korthikanti et al. 2022, Section 4.1) runs 13 kernels: layer norm, QKV GEMM, Q·Kᵀ, softmax,
dropout, scores·V, output-projection GEMM, bias-dropout-add, layer norm, first MLP GEMM,
bias-GeLU, second MLP GEMM, bias-dropout-add (the bias additions fused, as Megatron-LM does). The
backward differentiates each: two kernels per GEMM (input and weight gradient; Q·Kᵀ and scores·V
have two input gradients each) and one per elementwise kernel: 4 weight-gradient GEMMs (W) and
4 + 4 + 7 = 15 others (I). Tensor parallelism adds its two all-reduces per pass to F and I
(NCCL kernels); full recomputation adds the forward's kernels to I, selective recomputation
the attention core's four (Q·Kᵀ, softmax, dropout, scores·V). Only the ratios matter to a fit:
the calibrated ``kernel_host_s`` takes the host time per kernel, whatever else the framework
launches per kernel."""


def _kernel_units(model: ModelConfig, b: int, t: int, n: float) -> tuple[float, float, float, float]:
    """``gemm_units`` (Σ FLOPs / size^n = Σ size^(1-n)) of a block's GEMM kernels, each at its own
    size, under ``op_accounting = "kernels"``: (F, I, W, the attention core's forward).

    Linear layers (Shoeybi et al. 2019, Section 3: each split by t): QKV 2·b·s·h·(h + 2rh)/t, the
    output projection 2·b·s·h²/t, the MLP's first GEMM(s) 2·b·s·h·f/t (two with SwiGLU: gate and
    up) and second 2·b·s·f·h/t; each runs once in F, and once more at the same size for the input
    gradient (I) and the weight gradient (W). The attention core's Q·Kᵀ and scores·V run
    2·b·s²·h/t each, as one batched kernel over the heads: two in F, four in I (two input
    gradients each). With n = 1 each kernel counts 1.
    """
    s, h, f = model.seq_length, model.hidden_size, model.ffn_hidden_size
    row = 2.0 * b * s * h / t
    linear = [row * (h + 2 * _kv_width(model)), row * h, *[row * f] * (model.ffn_matrices - 1), row * f]
    linear_units = sum(x ** (1 - n) for x in linear)
    core_units = (2.0 * b * s * s * h / t) ** (1 - n)
    return linear_units + 2 * core_units, linear_units + 4 * core_units, linear_units, 2 * core_units


def job_work(job: Job) -> JobWork:
    """The work of every stage of ``job`` (formulas in the module doc)."""
    model, system, t, b = job.model, job.system, job.tp, job.micro_batch
    s, h, v, e = model.seq_length, model.hidden_size, model.vocab_size, model.bytes_per_element
    rows = float(b * s * h * e)  # one block's input: message, all-reduce size, embedding rows
    g = 2.0 * b * s * h * h / t
    n_exp = system.gemm_saturation_exponent

    def units(flops: float, size: float = g) -> float:
        return flops / size**n_exp

    tp_ar = ring_allreduce_work(rows, t, t, 1, system)

    core = layer_attention_core_flops(model, b) / t
    f_gemm = layer_forward_flops(model, b) / t
    weight_flops = 2.0 * b * s * layer_linear_params(model) / t  # = f_gemm - core
    scores = _activation_parts(model, b)[2]
    elementwise = stored_activation_bytes_per_layer(model, b, t, job.sequence_parallel, "none")
    operands = layer_params_per_rank(model, t) * e  # a block's weights, read (F, I) or gradient written (W)
    if system.op_accounting == "kernels":
        traffic_f, traffic_i, traffic_w = (*elementwise_traffic_bytes(model, b, t, job.sequence_parallel), 0.0)
        traffic_core = elementwise_traffic_bytes(model, b, t, job.sequence_parallel, core_only=True)[0]
        units_f, units_i, units_w, units_core = _kernel_units(model, b, t, n_exp)
    else:  # the bytes a block would store, once per op; every FLOP at the reference size (module doc)
        traffic_f = traffic_i = traffic_w = elementwise
        # the re-run attention core's score tensors (their 5·a·s²·b/t bytes at fp16 with dropout),
        # written by the recomputed forward and read again by the backward: twice their bytes
        traffic_core = 2 * scores / t
        units_f, units_i, units_w, units_core = units(f_gemm), units(f_gemm + core), units(weight_flops), units(core)
    collectives = 2.0 if t > 1 else 0.0  # the block's two tensor-parallel all-reduces per pass
    kernels_f, kernels_i, kernels_w = BLOCK_KERNELS
    forward = Work(gemm_flops=f_gemm, gemm_units=units_f, memory_bytes=traffic_f,
                   operand_bytes=operands, kernels=kernels_f + collectives) + 2 * tp_ar
    input_flops = f_gemm + core
    input_grad = Work(gemm_flops=input_flops, gemm_units=units_i, memory_bytes=traffic_i,
                      operand_bytes=operands, kernels=kernels_i + collectives) + 2 * tp_ar
    if job.recompute == "full":
        input_grad = input_grad + forward
    elif job.recompute == "selective":
        input_grad = input_grad + Work(gemm_flops=core, gemm_units=units_core, memory_bytes=traffic_core,
                                       kernels=4.0)
    weight = Work(gemm_flops=weight_flops, gemm_units=units_w, memory_bytes=traffic_w,
                  operand_bytes=operands, kernels=kernels_w)
    stored = stored_activation_bytes_per_layer(model, b, t, job.sequence_parallel, job.recompute)
    working = {"none": 0.0, "selective": scores / t, "full": elementwise}[job.recompute]

    layers = job.stage_layers
    last = job.stages - 1
    logits_flops = logits_forward_flops(model, b) / t
    logits_bytes = float(b * s * v * e) / t
    softmax_bytes = float(b * s * v * FP32_BYTES) / t
    output = Work(gemm_flops=logits_flops, gemm_units=units(logits_flops, logits_flops), memory_bytes=logits_bytes,
                  operand_bytes=v * h * e / t)
    bps = system.bytes_per_param_state
    state_per_param = 2 * e + (bps - 2 * e) / job.dp if job.distributed_optimizer else bps
    optimizer_share = 1 / job.dp if job.distributed_optimizer else 1.0

    def stage(index: int, n: int) -> tuple:
        """Stage ``index`` of ``n`` blocks: its F, I, W, parameters, stored and working bytes,
        persistent bytes, gradient all-reduce, optimizer step, and the stored bytes a split
        backward frees at the end of I."""
        f, i, w = n * forward, n * input_grad, n * weight
        count = n * layer_params_per_rank(model, t)
        kept, extra, released = n * stored, working, 0.0
        if index == 0:  # embedding: gather rows (vocabulary-parallel: all-reduce them), scatter their gradient
            if job.sequence_parallel:  # the rows leave split by sequence: a reduce-scatter, its backward an all-gather
                f, w = f + Work(memory_bytes=rows) + 0.5 * tp_ar, w + Work(memory_bytes=rows) + 0.5 * tp_ar
            else:
                f, w = f + Work(memory_bytes=rows) + tp_ar, w + Work(memory_bytes=rows)
            count += v * h / t + (s * h if model.learned_position_embeddings else 0)  # positions: replicated
        if index == last:  # output projection and loss: the logits are kept until the backward
            # F writes the logits and the loss reads them back (2 passes); I reads the kept softmax,
            # W the logits' gradient (one pass each)
            f, i, w = f + output + Work(memory_bytes=logits_bytes), i + output, w + output
            # the output layer's input enters the tensor-parallel region: all-reduce of its gradient
            # in I, or with sequence parallelism an all-gather in F and a reduce-scatter in I
            f, i = (f + 0.5 * tp_ar, i + 0.5 * tp_ar) if job.sequence_parallel else (f, i + tp_ar)
            kept += softmax_bytes  # the loss keeps the softmax in fp32 for its backward (Korthikanti et al. 2022, Section 4.3)
            # their gradient, in the activations' precision, from the loss's backward until the output
            # layer's: freed before the last block's backward recomputes anything, so the larger of the two
            extra = max(extra, logits_bytes)
            # split backward: I computes the loss's gradient, so the softmax goes at its end; the output
            # layer's W needs only the logits' gradient, kept until W (the loss has no weights)
            released = max(0.0, softmax_bytes - logits_bytes)
            if index != 0 or not model.tie_embeddings:  # own matrix, or Megatron's synchronised copy
                count += v * h / t
        return (f + Work(ops=1.0), i + Work(ops=1.0), w, count, kept, extra, count * state_per_param,
                ring_allreduce_work(count * e, job.dp, job.tp * job.dp, job.tp, system),
                Work(memory_bytes=2 * count * bps * optimizer_share, ops=1.0), released)

    # a stage between the first and the last depends only on its block count: built once per count
    # (sizing gpt3-175b's 7,710 plan jobs spent 15 of its 18 s here, building each stage anew)
    middle: dict[int, tuple] = {}

    def stage_once(index: int, n: int) -> tuple:
        if index in (0, last):
            return stage(index, n)
        if n not in middle:
            middle[n] = stage(index, n)
        return middle[n]

    built = [stage_once(index, n) for index, n in enumerate(layers)]
    fw, iw, ww, params, store, work_bytes, persistent, sync, opt, released = (list(column) for column in zip(*built))

    message = _message_work(job, rows / t)
    per_node = stages_per_node(job)
    embedding = Work()
    # tied word embedding: the first and the last stage all-reduce its gradient, V·h·e/t bytes per GPU,
    # after the data-parallel all-reduce (Megatron-LM's finalize_model_grads); a ring of two ranks is
    # two steps of half of it each way, every GPU of the stage at once (so across nodes they share the
    # NIC as a stage-to-stage message does). A device holding both copies (V shapes; Chimera's and
    # DualPipe's replicas) sums them locally.
    if model.tie_embeddings and last > 0 and not set(job.stage_devices[0]) & set(job.stage_devices[last]):
        crossing = job.device_of(0) // per_node != job.device_of(last) // per_node
        embedding = _message_work(job, v * h / t * e / 2)[crossing] * 2
    embedding_sync = tuple(embedding if k in (0, last) else Work() for k in range(job.stages))
    if t > 1 and not job.sequence_parallel:  # the receiver all-gathers the scattered activation
        gather = 0.5 * ring_allreduce_work(rows, t, t, 1, system)
        fw = [f + gather if k > 0 else f for k, f in enumerate(fw)]
        iw = [i + gather if k < last else i for k, i in enumerate(iw)]
    nodes = [devices[0] // per_node for devices in job.stage_devices]  # placement() once, not twice per stage
    messages = tuple(message[nodes[k] != nodes[k + 1]] for k in range(last))
    return JobWork(tuple(fw), tuple(iw), tuple(ww), messages, tuple(sync), tuple(opt), layers,
                   tuple(params), tuple(store), tuple(work_bytes), tuple(persistent), rows / t, embedding_sync, tuple(released))


def _message_work(job: Job, num_bytes: float) -> tuple[Work, Work]:
    """One stage-to-stage message of ``num_bytes`` sent by each tensor-parallel rank (its 1/t
    share of the activation): (inside a node, across nodes)."""
    system = job.system
    inside = Work(intra_bytes=num_bytes, intra_hops=1.0)
    users = _nic_users(system, min(job.tp * job.dp, system.devices_per_node))
    across = Work(inter_bytes=num_bytes * users, inter_hops=1.0)
    return inside, across


# --------------------------------------------------------------------------------------------------
# Costs and evaluation
# --------------------------------------------------------------------------------------------------


def job_costs(job: Job, work: JobWork | None = None) -> Costs:
    """Per-stage :class:`Costs` of ``job`` for the pipeline simulator (one GPU of each stage)."""
    work = job_work(job) if work is None else work
    system = job.system
    stages = []
    for k in range(job.stages):
        input_grad = float(work_time_s(work.input_grad[k], system))
        weight = float(work_time_s(work.weight_grad[k], system))
        stages.append(StageCost(
            layers=work.layers[k],
            forward_s=float(work_time_s(work.forward[k], system)),
            backward_s=input_grad + weight,
            input_grad_s=input_grad,
            weight_grad_s=weight,
            activation_bytes=work.stored_bytes[k],
            persistent_bytes=work.persistent_bytes[k],
            param_count=work.param_count[k],
            send_bytes=work.send_bytes,
            gradient_bytes=work.param_count[k] * job.model.bytes_per_element,
            input_grad_release_bytes=work.released_by_input_grad[k] if work.released_by_input_grad else 0.0,
        ))
    return Costs(stages=tuple(stages), microbatch_size=job.micro_batch, microbatches=job.microbatches)


@lru_cache(maxsize=1024)  # a plan evaluates ~300 distinct schedules in best-first order: 256 evicted a third of them
def _prepared(schedule: str, devices: int, microbatches: int, options: tuple[tuple[str, object], ...] = ()) -> Prepared:
    from ppopt.generators import generate

    try:
        return prepare(generate(schedule, devices, microbatches, **dict(options)))
    except ScheduleError as error:
        raise ConfigError(f"{schedule} is not defined for {counted(devices, 'device')} and {counted(microbatches, 'microbatch')}: {error.reason}",
                          field="schedule") from None


class IdleFlag(NamedTuple):
    """A job flag with nothing to act on (:func:`idle_job_flag`)."""

    field: str
    """The flag's field: ``sequence_parallel``, ``distributed_optimizer`` or ``overlap_gradient_sync``."""
    why: str
    """Why it acts on nothing."""
    degree: str
    """The degree that would give it something to act on, above 1: ``tp`` or ``dp``."""


def idle_job_flag(tp: int, dp: int, sequence_parallel: bool = False, distributed_optimizer: bool = False,
                  overlap_gradient_sync: bool = False) -> IdleFlag | None:
    """The first of a job's flags with nothing to act on, or None: sequence parallelism at t = 1 and
    a distributed optimizer or an overlapped gradient sync at d = 1 change nothing (no group to split
    over, no all-reduce to hide) yet a job's label would name them. The commands refuse them
    (``job``, ``--sequence-parallel`` anywhere, a measured row's columns, a sweep's ``[job]``)."""
    if sequence_parallel and tp == 1:
        return IdleFlag("sequence_parallel", "splits activations over the tensor-parallel ranks, and t = 1", "tp")
    if distributed_optimizer and dp == 1:
        return IdleFlag("distributed_optimizer", "shards the optimizer state over the data-parallel replicas, and d = 1", "dp")
    if overlap_gradient_sync and dp == 1:
        return IdleFlag("overlap_gradient_sync", "overlaps the data-parallel gradient all-reduce, and d = 1 has none", "dp")
    return None


def job_schedule(job: Job) -> Prepared:
    """The job's schedule over its ``pp`` devices, prepared for the simulator (cached);
    ConfigError naming ``schedule`` when the family is not defined for p and m."""
    return _prepared(job.schedule, job.pp, job.microbatches, tuple(sorted(job.schedule_options.items())))


@dataclass(frozen=True)
class JobResult:
    """Predicted step of a job. Seconds and bytes (per GPU)."""

    job: Job
    step_time_s: float
    pipeline_s: float
    """The simulated pipeline (forward and backward passes, stage-to-stage messages)."""
    gradient_sync_s: float
    """The gradient all-reduce's time after the pipeline (its exposed part when overlapped)."""
    optimizer_s: float
    peak_memory_bytes: float
    """The largest per-GPU peak: persistent state + stored activations + transient working set."""
    simulation: Simulation = field(repr=False, compare=False)
    """The pipeline's simulation; its per-device peaks include the working set (:func:`simulate_pipeline`)."""

    @property
    def fits_memory(self) -> bool:
        """Whether the peak fits the system's memory per GPU (``ppopt job --json``'s ``fits_memory``)."""
        return self.peak_memory_bytes <= self.job.system.memory_capacity_bytes


def working_set_bytes(work: JobWork, held: Sequence[Sequence[int]]) -> tuple[float, ...]:
    """Per device, the transient working set on top of what it stores (``held``: each device's
    stages): the largest of its stages' (a recomputed block, the logits' gradient), as only one
    backward runs at a time."""
    return tuple(max((work.working_bytes[s] for s in stages), default=0.0) for stages in held)


def with_working_sets(costs: Costs, work: JobWork, held: Sequence[Sequence[int]] | None) -> Costs:
    """``costs`` with the job's transient working sets held as if persistent, for a solver that adds
    up the persistent bytes of the stages a device holds: each device's (:func:`working_set_bytes`)
    once, on the first stage it holds (``held``: each device's stages), so the solver's peak is the
    job's. Without ``held`` (a placement the solver chooses) every stage carries its own: exact with
    one stage per device; where a device holds several, more than the job's peak by the smaller ones,
    never less."""
    if held is None:
        extra = list(work.working_bytes)
    else:
        extra = [0.0] * len(costs.stages)
        for on_device, working in zip(held, working_set_bytes(work, held)):
            if on_device:
                extra[on_device[0]] = max(extra[on_device[0]], working)
    return replace(costs, stages=tuple(replace(stage, persistent_bytes=stage.persistent_bytes + add)
                                       for stage, add in zip(costs.stages, extra)))


def simulate_pipeline(job: Job, schedule: Schedule | Flat | Prepared, work: JobWork) -> tuple[Costs, Simulation]:
    """The pipeline part of ``job``'s step on ``schedule`` (its ``pp`` devices), with the job's
    costs from ``work`` on the system one stage's GPUs see (:func:`pipeline_system`); each
    device's peak memory includes its transient working set (:func:`working_set_bytes`)."""
    costs = job_costs(job, work)
    simulation = simulate(schedule, costs, pipeline_system(job))
    plain = schedule if isinstance(schedule, Schedule) else schedule.schedule
    working = working_set_bytes(work, plain.stages_by_device())
    return costs, replace(simulation, peak_memory_bytes=tuple(map(sum, zip(simulation.peak_memory_bytes, working))))


def _one_optimizer_step(stage_steps: Sequence[Work]) -> Work:
    """The optimizer step of a GPU holding several stages: their memory traffic, as one op. A
    fused optimizer updates all of a GPU's parameters in one pass (multi-tensor kernels), so the
    fixed time per op is paid once per GPU, not once per stage it holds."""
    total = sum(stage_steps, Work())
    return replace(total, ops=min(total.ops, 1.0))


def evaluate_job(job: Job, work: JobWork | None = None) -> JobResult:
    """Predict one training step of ``job`` (see module doc); ``work``: its :func:`job_work`, when
    the caller has it (a plan computes it once for every family of a placement).

    A device holding several stages (chunks, waves, Chimera's replicas) keeps the persistent
    state of every one, each replica in full, and its chunks' activations (the simulator counts
    both), and all-reduces the gradients of every stage it holds over its data-parallel group, one
    after the other; Chimera's replica all-reduce is simulated. Its optimizer step updates the
    state of every stage it holds in one pass (:func:`_one_optimizer_step`). The step adds the
    slowest device's all-reduces and optimizer step to the simulated pipeline."""
    if not isinstance(job, Job):  # None or a name: an AttributeError from deep inside named nothing
        raise ConfigError(f"must be a Job (ppopt.job.Job(model, system, ...)), got {job!r:.60}", field="job")
    work = job_work(job) if work is None else work
    prepared = job_schedule(job)
    costs, simulation = simulate_pipeline(job, prepared, work)
    system = job.system
    held = prepared.schedule.stages_by_device()
    syncs = [float(work_time_s(w, system)) for w in work.gradient_sync]
    if job.overlap_gradient_sync:
        syncs = [max(0.0, s - c.backward_s) for s, c in zip(syncs, costs.stages)]
    syncs = [s + float(work_time_s(w, system)) for s, w in zip(syncs, work.embedding_sync)]  # never overlapped
    sync = max(sum(syncs[k] for k in stages) for stages in held)
    optimizer = max(float(work_time_s(_one_optimizer_step([work.optimizer[k] for k in stages]), system)) for stages in held)
    peak = max(simulation.peak_memory_bytes)
    step = simulation.step_time_s + sync + optimizer
    if not math.isfinite(step):  # pragma: no cover - inputs are validated finite
        raise ConfigError(f"step time of {job.describe()} is not finite")
    return JobResult(job, step, simulation.step_time_s, sync, optimizer, peak, simulation)
