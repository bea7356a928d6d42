"""Cost model: (model, system, partition, microbatch size) -> plain numbers per pipeline stage.

Pure functions, no I/O. Times are seconds, sizes bytes, work FLOPs. Generators, evaluators and the
solver only ever see :class:`Costs` (op durations, message bytes, activation bytes, persistent
bytes), never LLM dimensions. "Barley et al." below is the method ppopt follows: Barley et al., "A
Tabular Schedule Abstraction for Communication-Aware Evaluation of Pipeline-Parallel LLM Training",
ISPDC 2026 (its roofline op times with efficiencies and latencies, and Hockney messages).

Notation: b sequences per microbatch, s = seq_length, h = hidden_size, f = ffn_hidden_size,
a = num_attention_heads, g = num_kv_heads, r = g / a, V = vocab_size, e = bytes_per_element,
n_ffn = 2 (GELU) or 3 (SwiGLU).

FLOPs (one multiply-add = 2 FLOPs; only matrix multiplications are counted)
    Every weight matrix of shape (in, out) costs 2·b·s·in·out in the forward pass. A block's weight
    matrices hold ``P_lin = 2h² (Q, output projection) + 2·h·(r·h) (K, V) + n_ffn·h·f`` elements, so

        F_layer = 2·b·s·P_lin + 4·b·s²·h

    where 4·b·s²·h is the attention core (Q·Kᵀ and scores·V, 2·b·s²·h each). For plain GPT
    (r = 1, GELU, f = 4h): P_lin = 12h², F_layer = 24·b·s·h² + 4·b·s²·h (Narayanan et al.,
    "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021,
    Section 5.1). The output layer (logits) costs 2·b·s·h·V; the embedding lookup is treated as free.

Backward split (I = input gradient, W = weight gradient)
    Each weight matrix costs its forward FLOPs once for dX (I) and once for dWeight (W). The
    attention core has no weights: its backward (2 × 4·b·s²·h) belongs entirely to I. So

        I_layer = 2·b·s·P_lin + 8·b·s²·h,   W_layer = 2·b·s·P_lin,   B = I + W = 2·F exactly.

    (Zero Bubble's working assumption T_F ≈ T_B ≈ T_W, Qi et al., "Zero Bubble (Almost) Pipeline Parallelism",
    ICLR 2024, Section 2, is this split with the attention core ignored.)

Activation bytes stored per block per microbatch (no recomputation, no tensor/sequence parallelism)
    Korthikanti et al. 2022 (Section 4.1, Eq. 1) count, for fp16 and 1-byte dropout masks, s·b·h·(34 + 5·a·s/h). We keep
    their item list and let e, r, f and the MLP type vary:

    * attention: input of QKV (e·sbh), Q (e·sbh), K (e·r·sbh), V (e·r·sbh), softmax output (e·as²b),
      dropout mask (as²b), dropout output (e·as²b), input of the output projection (e·sbh), dropout
      mask (sbh)
    * MLP GELU: input (e·sbh), GELU input (e·sbf), GELU output (e·sbf), dropout mask (sbh);
      SwiGLU: input (e·sbh), gate output, up output, their product (3·e·sbf), dropout mask (sbh)
    * two layer norms: their inputs (2·e·sbh)

    Total ``sbh·(e·(6 + 2r) + 2) + n_ffn'·e·sbf + (2e + 1)·as²b`` with n_ffn' = 2 (GELU) or
    3 (SwiGLU); with e = 2, r = 1, GELU, f = 4h this is exactly s·b·h·(34 + 5·a·s/h). A model
    without dropout (``model.dropout`` false, e.g. Llama) stores none of the three masks nor the
    scores' dropout output: ``sbh·e·(6 + 2r) + n_ffn'·e·sbf + e·as²b`` (Llama 3 70B, r = 1/8,
    f = 3.5h, flash attention: 33.5·sbh instead of 35.5·sbh). The last stage also keeps the loss's
    softmax in fp32 (4·b·s·V, Korthikanti et al. 2022, Section 4.3) until the backward pass, and the
    logits' gradient (b·s·V·e) is its working set while that backward runs.

Memory traffic (for the roofline)
    Each of F, I and W moves the stage's weights once (read, or gradient written for W) and its
    stored activations once (written by F, read by I and W): ``bytes = param_count·e +
    activation_bytes``. The embedding lookup moves only its b·s·h·e gathered rows, in F and W.
    With the attention-score term large (a·s/h = 80 in the study model) this makes ops
    memory-bound on some systems: a visible consequence of the no-recomputation, no-fused-attention
    assumption. The weights' share of it is ``Work.operand_bytes`` (counted by the roofline only),
    the activations' share ``Work.memory_bytes``.

Op durations
    One function, :func:`work_time_s`, times every op of both cost paths (this module's
    :func:`stage_costs` is :func:`ppopt.job.job_costs` at t = d = 1 without recomputation). Under
    ``system.op_time_rule = "roofline"`` (the default) the roofline is applied once per op (one op =
    F, I or W of one microbatch on one whole stage), so the latencies L_c and L_m are paid once per
    op; ``"additive"`` adds GEMM and elementwise time (the calibrated presets). ``backward_s`` is
    defined as ``input_grad_s + weight_grad_s`` so that B and I+W always agree. The last stage's F
    moves its logits twice (the output GEMM writes them, the loss reads them back), I and W once.

Parameters per block
    ``P_lin`` + biases + norms. GELU models follow Megatron GPT (biases on every linear layer,
    LayerNorm with scale and shift): ``P_lin + (2h + 2rh) + f + h + 4h`` = 12h² + 13h for plain GPT.
    SwiGLU models follow LLaMA (no biases, RMSNorm with a scale only): ``P_lin + 2h``. Under tensor
    parallelism the norms and the row-parallel biases stay whole on every rank
    (:func:`layer_params_per_rank`).
    The first stage holds the embedding (V·h, plus s·h learned position embeddings when
    ``model.learned_position_embeddings``); the last stage holds the output projection (V·h)
    also when ``tie_embeddings`` and there are several stages: the output layer shares the input
    embedding's weights (Shoeybi et al. 2019, Section 3), and under pipeline parallelism Megatron-LM
    keeps a synchronised copy of that matrix on the last stage (its code:
    ``LanguageModule.setup_embeddings_and_output_layer``); with one stage the matrix is held once.

Communication
    Hockney (1994, "The communication challenge for MPP: Intel Paragon and Meiko CS-2", Parallel
    Computing 20(3)): ``t = bytes / BW + L``; messages between neighbouring stages carry b·s·h·e bytes
    (activations forward, activation gradients backward). Replicated stages (Chimera) all-reduce
    their weight gradients, ``param_count·e`` bytes, with a ring all-reduce.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ppopt.config import MODEL_LIMITS, LinkConfig, ModelConfig, SystemConfig
from ppopt.errors import ConfigError, counted
from ppopt.ir import Kind
from ppopt.units import UnitCosts

__all__ = [
    "Costs",
    "StageCost",
    "activation_bytes_per_layer",
    "elementwise_traffic_bytes",
    "stored_activation_bytes_per_layer",
    "allreduce_time_s",
    "layer_attention_core_flops",
    "layer_forward_flops",
    "layer_linear_params",
    "layer_param_count",
    "layer_params_per_rank",
    "layer_replicated_params",
    "model_param_count",
    "link_between",
    "logits_forward_flops",
    "microbatch_size",
    "op_time_s",
    "partition_layers",
    "stage_costs",
    "transfer_time_s",
    "unit_costs",
    "Work",
    "work_time_s",
]


@dataclass(frozen=True)
class StageCost:
    """Costs of one pipeline stage (model chunk) for one microbatch. Seconds and bytes (slots and
    activation units when built by :func:`unit_costs`)."""

    layers: int
    """Transformer blocks in this stage."""
    forward_s: float
    """F: forward pass of one microbatch."""
    backward_s: float
    """B: full backward pass, always input_grad_s + weight_grad_s."""
    input_grad_s: float
    """I: backward pass for the input (activation) gradient."""
    weight_grad_s: float
    """W: backward pass for the weight gradient."""
    activation_bytes: float
    """Stored per microbatch from its F until it is freed (after B, or after W when split; see
    ``input_grad_release_bytes``)."""
    persistent_bytes: float
    """Weights + gradients + optimizer state of this stage (one copy)."""
    param_count: float
    """Parameters of this stage."""
    send_bytes: float
    """Message to the neighbouring stage per microbatch: activations after F, activation
    gradients after B or I."""
    gradient_bytes: float = 0.0
    """Weight-gradient bytes of this stage (param_count · bytes_per_element): what replicas of the
    stage all-reduce once per step (Chimera)."""
    input_grad_release_bytes: float = 0.0
    """Of ``activation_bytes``, what a split backward frees already at the end of I, because W
    does not need it (the rest is freed at the end of W): on the last stage, the loss's fp32 softmax
    less the logits' gradient that the output layer's W keeps (:func:`ppopt.job.job_work`); 0
    elsewhere and in unit mode. A full backward B frees everything at its end."""

    def __post_init__(self) -> None:
        if not 0 <= self.input_grad_release_bytes <= self.activation_bytes:
            raise ValueError(f"input_grad_release_bytes must lie between 0 and activation_bytes ({self.activation_bytes}), "
                             f"got {self.input_grad_release_bytes}")


@dataclass(frozen=True)
class Costs:
    """Per-stage costs of one configuration, stage 0 first."""

    stages: tuple[StageCost, ...]
    microbatch_size: int
    """Sequences per microbatch."""
    microbatches: int
    """Microbatches per step."""

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("Costs needs at least one stage")

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def __getitem__(self, stage: int) -> StageCost:
        return self.stages[stage]

    def __len__(self) -> int:
        return len(self.stages)


# --------------------------------------------------------------------------------------------------
# Partition and batch
# --------------------------------------------------------------------------------------------------


def partition_layers(
    num_layers: int, stages: int, weights: Sequence[float] | None = None
) -> tuple[int, ...]:
    """Split ``num_layers`` transformer blocks over ``stages`` pipeline stages.

    Without weights the split is even and the remainder goes to the **earliest** stages
    (``numpy.array_split`` convention): 10 blocks over 3 stages -> (4, 3, 3).

    With weights the split is proportional, rounded by largest remainder; equal remainders favour
    the earlier stage, so 128 blocks with weights [1, 2] -> (43, 85) (exact 42.67 / 85.33). Every
    stage gets at least one block: a stage rounded to 0 takes one from the largest stage (the
    latest one among equals).

    Raises ConfigError if stages > num_layers, a count is not positive, or the weights are not
    positive finite numbers, one per stage.
    """
    if num_layers < 1 or stages < 1:
        raise ConfigError(f"need positive num_layers and stages, got {num_layers} and {stages}")
    if stages > num_layers:
        raise ConfigError(f"cannot split {counted(num_layers, 'layer')} over {counted(stages, 'stage')} "
                          "(every stage needs at least one layer)", field="model")
    if weights is None:
        weights = [1.0] * stages
    weights = [float(w) for w in weights]
    if len(weights) != stages:
        raise ConfigError(f"got {len(weights)} stage weights for {stages} stages")
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise ConfigError(f"stage weights must be positive finite numbers, got {weights}")

    total = sum(weights)
    exact = [num_layers * w / total for w in weights]
    counts = [math.floor(x) for x in exact]
    left = num_layers - sum(counts)
    by_remainder = sorted(range(stages), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[:left]:
        counts[i] += 1
    for i in range(stages):
        if counts[i] == 0:
            donor = max(range(stages), key=lambda j: (counts[j], j))
            counts[donor] -= 1
            counts[i] += 1
    return tuple(counts)


def check_global_batch(global_batch: int | None) -> None:
    """A global batch given by a user (``--global-batch``, a field of a job or a plan request): an
    integer from 1 to the model's limit (:data:`ppopt.config.MODEL_LIMITS`), refused in the same
    words by every command; None (the model's own) passes."""
    most = MODEL_LIMITS["global_batch_size"]
    if global_batch is not None and (isinstance(global_batch, bool) or not isinstance(global_batch, int)
                                     or not 1 <= global_batch <= most):
        # a numpy integer passed here and failed later as another field's: refused here, as int fields are
        converts = " (int(...) converts it)" if isinstance(global_batch, numbers.Integral) and not isinstance(global_batch, int) else ""
        raise ConfigError(f"must be a positive integer of at most {most}, got {global_batch!r}{converts}", field="global_batch")


def microbatch_size(model: ModelConfig, microbatches: int, global_batch: int | None = None) -> int:
    """Sequences per microbatch: global batch / microbatches, which must divide exactly.

    ``global_batch`` defaults to ``model.global_batch_size``. Raises ConfigError otherwise.
    """
    check_global_batch(global_batch)  # before divisibility: 10**20 is too large, not indivisible
    batch = model.global_batch_size if global_batch is None else global_batch
    if microbatches < 1:
        raise ConfigError(f"microbatches must be positive, got {microbatches}")
    # named by the microbatches' field; the fix may as well be another global batch, so say so
    if microbatches > batch:
        raise ConfigError(f"{counted(microbatches, 'microbatch')} exceed the global batch of "
                          f"{counted(batch, 'sequence')} (give fewer, or a larger global batch)", field="microbatches")
    if batch % microbatches:
        raise ConfigError(f"global batch of {counted(batch, 'sequence')} is not divisible by "
                          f"{counted(microbatches, 'microbatch')} (give a divisor, or another global batch)",
                          field="microbatches")
    return batch // microbatches


# --------------------------------------------------------------------------------------------------
# Transformer arithmetic (one block, one microbatch of b sequences)
# --------------------------------------------------------------------------------------------------


def _kv_width(model: ModelConfig) -> int | float:
    """Width of K (= width of V): r·h = g·h/a, exact integer when possible."""
    numerator = model.num_kv_heads * model.hidden_size
    if numerator % model.num_attention_heads == 0:
        return numerator // model.num_attention_heads
    return numerator / model.num_attention_heads


def layer_linear_params(model: ModelConfig) -> int | float:
    """Elements of a block's weight matrices: 2h² (Q, output) + 2·h·(r·h) (K, V) + n_ffn·h·f, with r
    the key/value heads over the query heads (grouped-query attention: Ainslie et al., "GQA", EMNLP
    2023, Section 2) and n_ffn = 3 for SwiGLU's gate, up and down matrices (Shazeer, "GLU Variants
    Improve Transformer", 2020, Section 2), 2 for a GELU MLP's up and down matrices."""
    h, f = model.hidden_size, model.ffn_hidden_size
    return 2 * h * h + 2 * h * _kv_width(model) + model.ffn_matrices * h * f


def layer_param_count(model: ModelConfig) -> int | float:
    """Parameters of one block: weight matrices + biases + norm parameters (see module doc)."""
    h, f = model.hidden_size, model.ffn_hidden_size
    if model.activation == "swiglu":
        return layer_linear_params(model) + 2 * h
    return layer_linear_params(model) + (2 * h + 2 * _kv_width(model)) + f + h + 4 * h


def model_param_count(model: ModelConfig) -> int:
    """Parameters of the whole model, each counted once: L blocks (:func:`layer_param_count`), the
    word embedding V·h, s·h learned position embeddings when the model has them, and the output
    projection V·h unless tied to the embedding (see module doc; the final norm's h or 2h is left
    out, as the stages leave it). Llama 3 8B: 32 × 218,112,000 + 2 × 128,256 × 4,096 = 8.03e9."""
    h, v = model.hidden_size, model.vocab_size
    embeddings = v * h + (model.seq_length * h if model.learned_position_embeddings else 0)
    return int(model.num_layers * layer_param_count(model) + embeddings + (0 if model.tie_embeddings else v * h))


def layer_replicated_params(model: ModelConfig) -> int:
    """Parameters of one block that every tensor-parallel rank holds whole: the norms' (4h for two
    LayerNorms with scale and shift, 2h for two RMSNorms) and the biases added after a row-parallel
    layer's all-reduce (attention output and second MLP matrix, 2h, GELU models only) (Shoeybi et
    al. 2019, "Megatron-LM", Section 3: only the matrices and the column-parallel biases are split)."""
    h = model.hidden_size
    return 2 * h if model.activation == "swiglu" else 4 * h + 2 * h


def layer_params_per_rank(model: ModelConfig, tp: int) -> float:
    """Parameters of one block on each of ``tp`` tensor-parallel ranks: the split ones over ``tp``,
    plus the replicated ones (:func:`layer_replicated_params`) whole."""
    replicated = layer_replicated_params(model)
    return (layer_param_count(model) - replicated) / tp + replicated


def layer_forward_flops(model: ModelConfig, batch: int) -> float:
    """Forward FLOPs of one block for ``batch`` sequences: 2·b·s·P_lin + 4·b·s²·h.

    Equals 24·b·s·h² + 4·b·s²·h for plain GPT (Narayanan et al. 2021, SC'21, Section 5.1).
    """
    linear = 2 * batch * model.seq_length * layer_linear_params(model)
    return float(linear) + layer_attention_core_flops(model, batch)


def layer_attention_core_flops(model: ModelConfig, batch: int) -> float:
    """Forward FLOPs of one block's Q·Kᵀ and scores·V (no weights) for ``batch`` sequences: 4·b·s²·h
    (Korthikanti et al. 2022, Section 5: what selective recomputation runs again)."""
    return float(4 * batch * model.seq_length**2 * model.hidden_size)


def logits_forward_flops(model: ModelConfig, batch: int) -> float:
    """Forward FLOPs of the output projection: 2·b·s·h·V (the logit term of the step FLOPs of Narayanan
    et al. 2021, SC'21, Section 5.1)."""
    return float(2 * batch * model.seq_length * model.hidden_size * model.vocab_size)


def activation_bytes_per_layer(model: ModelConfig, batch: int) -> float:
    """Bytes one block stores per microbatch of ``batch`` sequences (see module doc).

    For fp16, MHA, GELU, f = 4h: s·b·h·(34 + 5·a·s/h) (Korthikanti et al. 2022, Section 4.1, Eq. 1); with
    ``model.flash_attention`` the a·s² score terms are not stored: s·b·h·34.
    """
    return sum(_activation_parts(model, batch))


def _score_bytes_per_element(model: ModelConfig) -> int:
    """Bytes stored per attention-score element: softmax output (e), and with dropout its mask (1)
    and output (e)."""
    e = model.bytes_per_element
    return 2 * e + 1 if model.dropout else e


def _activation_parts(model: ModelConfig, batch: int) -> tuple[float, float, float]:
    """The items of :func:`activation_bytes_per_layer`, grouped by how tensor parallelism splits them.

    Returns (replicated, split, scores) bytes for t = 1 (Korthikanti et al. 2022, Section 4.2.1 for the
    split by tensor parallelism, Section 4.2.2 for the part sequence parallelism splits too):

    * replicated across the t ranks without sequence parallelism: the inputs of QKV and of the MLP
      (e·sbh each), the two layer-norm inputs (2·e·sbh) and the two dropout masks (2·sbh; none
      without ``model.dropout``): ``sbh·(4e + 2)`` (= 10·sbh at fp16);
    * split by t (heads or MLP columns): Q, K, V, the output projection's input and the MLP's
      intermediate tensors: ``e·sb·(2h + 2·r·h) + n_ffn'·e·sbf`` (= 24·sbh at fp16, GELU, f = 4h);
    * the attention scores (softmax output, and with dropout its mask and output), split by t:
      ``(2e + 1)·a·s²·b`` (= 5·a·s²·b; e·a·s²·b without dropout), 0 with ``flash_attention``.

    The three sum to :func:`activation_bytes_per_layer`'s s·b·h·(34 + 5·a·s/h).
    """
    s, h, f = model.seq_length, model.hidden_size, model.ffn_hidden_size
    e, sb = model.bytes_per_element, model.seq_length * batch
    replicated = sb * h * (4 * e + (2 if model.dropout else 0))
    split = e * sb * (2 * h + 2 * _kv_width(model)) + (3 if model.activation == "swiglu" else 2) * e * sb * f
    scores = 0 if model.flash_attention else _score_bytes_per_element(model) * model.num_attention_heads * s * sb
    return float(replicated), float(split), float(scores)


def stored_activation_bytes_per_layer(
    model: ModelConfig,
    batch: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
) -> float:
    """Bytes one block stores per microbatch on one of ``tp`` tensor-parallel ranks.

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
    Table 2 (fp16, GELU, f = 4h), generalised by :func:`_activation_parts`:

    * ``none``: ``sbh·(10 + 24/t + 5·a·s/(h·t))``; with sequence parallelism the replicated
      10·sbh is split too: ``sbh·(34/t + 5·a·s/(h·t))``;
    * ``selective``: the attention-score term is dropped (recomputed in the backward):
      ``sbh·(10 + 24/t)``, or ``sbh·34/t`` with sequence parallelism;
    * ``full``: only the block's input, ``e·sbh`` (Table 2's 2·sbh in fp16). With sequence
      parallelism ppopt divides it by t, which Table 2 does not: the checkpointed input is the
      sequence-split one each rank holds (Megatron checkpoints the block's input as it enters).

    ``recompute`` is "none", "selective" or "full".
    """
    replicated, split, scores = _activation_parts(model, batch)
    replicated_share = replicated / tp if sequence_parallel else replicated
    if recompute == "none":
        return replicated_share + split / tp + scores / tp
    if recompute == "selective":
        return replicated_share + split / tp
    if recompute == "full":
        block_input = float(model.bytes_per_element * model.seq_length * batch * model.hidden_size)
        return block_input / tp if sequence_parallel else block_input
    raise ConfigError(f"unknown recomputation {recompute!r} (known: none, selective, full)", field="recompute")


def elementwise_traffic_bytes(
    model: ModelConfig, batch: int, tp: int = 1, sequence_parallel: bool = False, core_only: bool = False,
) -> tuple[float, float]:
    """HBM bytes the memory-bound kernels of one block read and write per microbatch on one of
    ``tp`` ranks: (forward, backward). With ``core_only`` only the attention-score kernels' bytes
    (what selective recomputation re-runs).

    Kernel by kernel, over the operator list of a Megatron block (Korthikanti et al. 2022,
    Section 4.1; Shoeybi et al. 2019, Figure 2; biases fused into the next elementwise kernel as in
    Megatron-LM), e bytes per element, m = 1 byte per dropout-mask element (0 without dropout):

    * per b·s·h elements, replicated across the t ranks unless ``sequence_parallel``: two layer
      norms (forward: read, write, 2e each; backward: read gradient and input, write, 3e each) and
      two bias-dropout-adds (forward: read input and residual, write, 3e + m each; backward: read
      gradient and mask, write, 2e + m each): ``10e + 2m`` forward and backward;
    * split by t: the attention output's transpose (read, write: 2e per b·s·h), the MLP
      activation per b·s·f (GeLU: 2e forward, 3e backward; SwiGLU reads two inputs and writes
      two gradients: 3e, 5e);
    * per a·s²·b attention-score elements, split by t (none with ``model.flash_attention``):
      forward Q·Kᵀ writes (e), softmax reads and writes (2e), dropout reads and writes (2e + m),
      scores·V reads (e): ``6e + m``; backward scores·V reads the scores and writes their gradient
      (2e), dropout (2e + m), softmax reads two, writes one (3e), Q·Kᵀ reads the gradient twice
      (2e): ``9e + m``. Without dropout 4e and 7e.

    For fp16 GPT (f = 4h) that is ``42·sbh + 13·as²b`` forward and ``50·sbh + 19·as²b`` backward,
    against the 34·sbh + 5·as²b a block stores (:func:`activation_bytes_per_layer`): the score
    kernels move 2.6 times their stored bytes.
    """
    s, h, f, a = model.seq_length, model.hidden_size, model.ffn_hidden_size, model.num_attention_heads
    e, m = model.bytes_per_element, (1 if model.dropout else 0)
    sb = s * batch
    scores = 0.0 if model.flash_attention else float(a * s * sb) / tp
    if model.dropout:
        score_f, score_b = (6 * e + m) * scores, (9 * e + m) * scores
    else:
        score_f, score_b = 4 * e * scores, 7 * e * scores
    if core_only:
        return score_f, score_b
    replicated = (10 * e + 2 * m) * sb * h / (tp if sequence_parallel else 1)
    swiglu = model.activation == "swiglu"
    split_f = (2 * e * sb * h + (3 if swiglu else 2) * e * sb * f) / tp
    split_b = (2 * e * sb * h + (5 if swiglu else 3) * e * sb * f) / tp
    return float(replicated + split_f + score_f), float(replicated + split_b + score_b)


# --------------------------------------------------------------------------------------------------
# Roofline and stage costs
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Work:
    """What one op or transfer does, before a system turns it into seconds (:func:`work_time_s`).

    Fields may be floats or numpy arrays (the calibration stacks many jobs' work).
    """

    gemm_flops: Any = 0.0
    """FLOPs of matrix multiplications."""
    gemm_units: Any = 0.0
    """Σ FLOPs / g^n over the GEMMs (g their size, n the system's gemm_saturation_exponent)."""
    memory_bytes: Any = 0.0
    """HBM traffic of memory-bound kernels (the op's stored activations, embedding rows), bytes."""
    ops: Any = 0.0
    """Kernel sequences launched, each paying ``compute_latency_s`` under the additive rule."""
    intra_bytes: Any = 0.0
    """Bytes over an intra-node link (ring factors applied)."""
    inter_bytes: Any = 0.0
    """Bytes over an inter-node link at full bandwidth (ring factors and NIC sharing applied)."""
    intra_hops: Any = 0.0
    """Intra-node link latencies paid (ring steps, messages)."""
    inter_hops: Any = 0.0
    """Inter-node link latencies paid."""
    operand_bytes: Any = 0.0
    """HBM traffic of the GEMMs' weights (read by F and I, gradient written by W), bytes: part of
    the roofline's bytes; hidden under the GEMM time by the additive rule."""
    kernels: Any = 0.0
    """GPU kernels the host launches (:data:`ppopt.job.BLOCK_KERNELS`), each taking
    ``kernel_host_s`` of host time under the additive rule."""
    partial_ring_bytes: Any = 0.0
    """Bytes over an inter-node link, as ``inter_bytes``, of a ring whose group holds some but not
    all of a node's devices: timed at ``partial_ring_efficiency`` of the inter-node bandwidth
    (:func:`ppopt.job.ring_allreduce_work`)."""

    # (vars() lists the fields in declaration order: the dataclass __init__ sets them in that order)
    def __add__(self, other: Work) -> Work:
        return Work(*map(operator.add, vars(self).values(), vars(other).values()))

    def __mul__(self, factor: float) -> Work:
        return Work(*(value * factor for value in vars(self).values()))

    __rmul__ = __mul__


def work_time_s(work: Work, system: SystemConfig) -> Any:
    """Seconds one op's ``work`` takes on ``system``; works on numpy arrays. The one per-op cost
    function of ppopt: :func:`stage_costs`, :func:`ppopt.job.job_costs` and the calibration use it.

    With ``C = (gemm_flops + k^n·gemm_units) / (peak_flops·compute_efficiency)`` (a GEMM of size g
    runs at ``compute_efficiency / (1 + (k/g)^n)`` of peak, k = ``gemm_half_saturation_flops``,
    n = ``gemm_saturation_exponent``: ppopt's own empirical curve, fitted by :mod:`ppopt.calibrate`,
    not taken from the literature; k = 0 gives plain FLOPs / achieved peak) and
    ``M(x) = x / (memory_bandwidth_bytes_per_s·memory_efficiency)``, the compute part is, by
    ``system.op_time_rule``:

    * ``roofline`` (Barley et al., ISPDC 2026; the paper's method): ``max(C + L_c, M(memory_bytes +
      operand_bytes) + L_m)`` for an op with any compute or memory work, 0 otherwise: every op
      (F, I or W of one stage and microbatch) pays the latencies once;
    * ``additive``: ``max(G, kernels·kernel_host_s) + ops·L_c`` with the GPU time
      ``G = C + M(memory_bytes) + X``: GEMMs (operands hidden under their FLOPs), memory-bound
      elementwise kernels and the op's collectives X (below) run one after the other on the GPU's
      stream, while the host launches the op's kernels ahead of them (asynchronous execution:
      Paszke et al., "PyTorch: An Imperative Style, High-Performance Deep Learning Library",
      NeurIPS 2019, Section 5.2), so the op lasts the longer of the two; the latency L_c is paid
      per kernel sequence (F and B of a stage once each). With ``kernel_host_s = 0`` (the default)
      this is ``G + ops·L_c``.

    Communication ``X = intra_bytes / intra_bandwidth + inter_bytes / inter_bandwidth +
    partial_ring_bytes / (inter_bandwidth·partial_ring_efficiency) + intra_hops·intra_latency +
    inter_hops·inter_latency`` (Hockney) is added to the local time.
    Each of G and the host time is linear in the system's reciprocals under the additive rule,
    which :mod:`ppopt.calibrate` relies on (it keeps F, I and W apart, so the max is taken per op).
    """
    compute = ((work.gemm_flops + system.gemm_half_saturation_flops ** system.gemm_saturation_exponent
                * work.gemm_units) / (system.peak_flops * system.compute_efficiency))
    bandwidth = system.memory_bandwidth_bytes_per_s * system.memory_efficiency
    if system.op_time_rule == "additive":
        local = compute + work.memory_bytes / bandwidth
        if system.kernel_host_s > 0:  # the op's collectives run on the GPU's stream: inside the max
            gpu = _communication_s(work, system, local)
            host = np.maximum(gpu, work.kernels * system.kernel_host_s)
            return (float(host) if np.ndim(host) == 0 else host) + work.ops * system.compute_latency_s
        local = local + work.ops * system.compute_latency_s
    else:
        memory = (work.memory_bytes + work.operand_bytes) / bandwidth
        busy = (work.gemm_flops + work.memory_bytes + work.operand_bytes) > 0
        local = np.where(busy, np.maximum(compute + system.compute_latency_s, memory + system.memory_latency_s), 0.0)
        if np.ndim(local) == 0:
            local = float(local)
    return _communication_s(work, system, local)


def _communication_s(work: Work, system: SystemConfig, local: Any) -> Any:
    """``local`` plus the work's link time (Hockney: bytes / bandwidth + hops·latency), seconds."""
    return (local
            + work.intra_bytes / system.intra_node.bandwidth_bytes_per_s
            + work.inter_bytes / system.inter_node.bandwidth_bytes_per_s
            + work.partial_ring_bytes / (system.inter_node.bandwidth_bytes_per_s * system.partial_ring_efficiency)
            + work.intra_hops * system.intra_node.latency_s
            + work.inter_hops * system.inter_node.latency_s)


def op_time_s(flops: float, bytes_moved: float, system: SystemConfig) -> float:
    """Time of one op of ``flops`` FLOPs moving ``bytes_moved`` bytes, seconds: :func:`work_time_s`
    of that work (under the default roofline rule ``max(flops / (peak_flops·compute_efficiency) +
    compute_latency_s, bytes / (memory_bandwidth_bytes_per_s·memory_efficiency) +
    memory_latency_s)``, Barley et al.). An op with no work (0 FLOPs and 0 bytes) takes 0 s.
    """
    if flops < 0 or bytes_moved < 0:
        raise ValueError(f"negative work: {flops} FLOPs, {bytes_moved} bytes")
    return float(work_time_s(Work(gemm_flops=flops, memory_bytes=bytes_moved, ops=1.0), system))


def stage_costs(
    model: ModelConfig,
    system: SystemConfig,
    layers_per_stage: Sequence[int],
    microbatches: int,
    global_batch: int | None = None,
) -> Costs:
    """Costs of every stage for ``microbatches`` microbatches of the global batch.

    ``layers_per_stage`` (e.g. from :func:`partition_layers`) must sum to ``model.num_layers``;
    stage 0 also holds the embedding, the last stage the output projection (logits). Raises
    ConfigError for a bad partition or batch split.

    One code path with the 3D job model: these are :func:`ppopt.job.job_costs` of the job with
    t = d = 1 and no recomputation (the formulas of the module doc and of :mod:`ppopt.job`).
    """
    from ppopt.job import Job, job_costs  # job builds on this module: imported when called

    layers = [int(n) for n in layers_per_stage]
    if not layers:
        raise ConfigError("need at least one stage")
    if any(n < 1 for n in layers):
        raise ConfigError(f"every stage needs at least one layer, got partition {layers}")
    if sum(layers) != model.num_layers:
        raise ConfigError(f"partition {layers} has {sum(layers)} layers, "
                          f"model '{model.name}' has {model.num_layers}")
    b = microbatch_size(model, microbatches, global_batch)
    job = Job(model, system, pp=len(layers), micro_batch=b, global_batch=b * microbatches, layers=tuple(layers))
    return job_costs(job)


def unit_costs(
    stages: int,
    units: UnitCosts | None = None,
    *,
    devices: int | None = None,
    microbatches: int = 1,
    persistent_bytes: float = 0.0,
    send_bytes: float = 0.0,
) -> Costs:
    """Idealised "unit mode" costs: every stage identical, durations in slots.

    Durations are ``units.durations(devices, stages)`` (:class:`ppopt.units.UnitCosts`, default F = 1,
    B = 2, I = W = 1 slots of a 1/p model share, scaled by p/S for chunks), and each stage stores
    p/S of an activation of a 1/p model share per microbatch (``devices`` defaults to ``stages``: one
    whole activation per stage). No persistent memory, no messages by default: with zero-cost links the
    simulator reproduces the idealised table. ``microbatches`` is recorded only.
    """
    units = units if units is not None else UnitCosts()
    devices = stages if devices is None else devices
    if stages < 1:
        raise ValueError(f"stages must be positive, got {stages}")
    if devices < 1:
        raise ValueError(f"devices must be positive, got {devices}")
    if microbatches < 1:
        raise ValueError(f"microbatches must be positive, got {microbatches}")
    durations = units.durations(devices, stages)
    stage = StageCost(
        layers=1,
        forward_s=float(durations[Kind.F]),
        backward_s=float(durations[Kind.B]),
        input_grad_s=float(durations[Kind.I]),
        weight_grad_s=float(durations[Kind.W]),
        activation_bytes=devices / stages,
        persistent_bytes=float(persistent_bytes),
        param_count=0.0,
        send_bytes=float(send_bytes),
        gradient_bytes=0.0,
    )
    return Costs(stages=(stage,) * stages, microbatch_size=1, microbatches=microbatches)


# --------------------------------------------------------------------------------------------------
# Communication
# --------------------------------------------------------------------------------------------------


def link_between(system: SystemConfig, device_a: int, device_b: int) -> LinkConfig:
    """The link two devices use: ``intra_node`` iff they sit on the same node.

    Devices are numbered 0, 1, ... and node k holds devices k·devices_per_node ... (k+1)·
    devices_per_node - 1. A device paired with itself gets ``intra_node``; callers should not
    send messages to the same device. Each device pair is modelled as its own link: no contention
    between pairs (no congestion, no topology), only between messages on the same pair.
    """
    if device_a < 0 or device_b < 0:
        raise ValueError(f"device ids must be non-negative, got {device_a} and {device_b}")
    same_node = device_a // system.devices_per_node == device_b // system.devices_per_node
    return system.intra_node if same_node else system.inter_node


def transfer_time_s(num_bytes: float, link: LinkConfig) -> float:
    """Hockney time of one message (Hockney 1994, module doc "Communication"), seconds:
    ``bytes / bandwidth + latency`` (bytes, bytes per second,
    seconds; slots with the unit mode's links). A zero-byte message costs 0."""
    if num_bytes < 0:
        raise ValueError(f"negative message size {num_bytes}")
    if num_bytes == 0:
        return 0.0
    return num_bytes / link.bandwidth_bytes_per_s + link.latency_s


def ring_allreduce_traffic(num_bytes: float, participants: int) -> tuple[float, float]:
    """(bytes each member sends, steps) of a ring all-reduce of ``num_bytes`` over ``participants``
    devices: ``2(n-1)/n · bytes`` in ``2(n-1)`` steps, reduce-scatter then all-gather, each n-1
    steps of bytes/n (Patarasuk and Yuan 2009, "Bandwidth optimal all-reduce algorithms for
    clusters of workstations", J. Parallel Distrib. Comput. 69(2))."""
    n = participants
    return 2 * (n - 1) / n * num_bytes, 2.0 * (n - 1)


def allreduce_time_s(num_bytes: float, link: LinkConfig, participants: int = 2) -> float:
    """Ring all-reduce of ``num_bytes`` over ``participants`` devices joined by ``link``.

    ``2(n-1)/n · bytes / bandwidth + 2(n-1) · latency`` (:func:`ring_allreduce_traffic`), seconds.
    For 2 participants: bytes / bandwidth + 2 · latency. One participant or zero bytes costs 0.
    """
    if num_bytes < 0:
        raise ValueError(f"negative message size {num_bytes}")
    if participants < 1:
        raise ValueError(f"participants must be positive, got {participants}")
    if participants == 1 or num_bytes == 0:
        return 0.0
    volume, steps = ring_allreduce_traffic(num_bytes, participants)
    return volume / link.bandwidth_bytes_per_s + steps * link.latency_s
