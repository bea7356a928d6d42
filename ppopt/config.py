"""Model and system configurations: strict pydantic models loaded from TOML or JSON.

Three things live here:

* :class:`ModelConfig` describes the transformer being trained, in the Hugging Face / Megatron
  vocabulary (``num_layers``, ``hidden_size``, ``ffn_hidden_size``, ``num_attention_heads``,
  ``num_kv_heads``, ``vocab_size``, ``seq_length``, ``global_batch_size``).
* :class:`SystemConfig` (with :class:`LinkConfig`) describes one device type and the links between
  devices: roofline compute, memory, intra-node and inter-node links.
* :func:`load_model` / :func:`load_system` read a preset by name (file stem in the repository's
  top-level ``models/`` or ``configs/`` directory) or any ``.toml`` / ``.json`` file.

Every model forbids unknown keys and non-finite numbers, and is frozen. Units are part of the field names: seconds (``_s``),
bytes (``_bytes``), bytes per second (``_bytes_per_s``), FLOP/s (``peak_flops``). Every problem a
user can cause is raised as :class:`ppopt.errors.ConfigError` with a one-line message naming
the file and the field, e.g.
``configs/foo.toml: field 'peak_flops': Input should be greater than or equal to 1``.

Limits. Every size, rate and duration has a finite range, far beyond any real model or device, so
that every FLOP, byte and second count derived from them is a finite float64 (an ``inf`` or ``nan``
step time, or an ``OverflowError``, is never the answer to a typo):

* model sizes (:data:`MODEL_LIMITS`): at most 2**20 layers and heads, a hidden size of 2**24 (the
  largest published models use about 2**15), an MLP width of 2**26, 2**30 tokens per sequence,
  vocabulary entries and sequences per batch, 64 bytes per element; the largest product of them
  (a block's attention-score bytes, a step's FLOPs) stays under 1e45;
* system rates: ``peak_flops`` and every bandwidth at least :data:`MIN_RATE` (1 FLOP or byte per
  second), and every efficiency at least :data:`MIN_EFFICIENCY`;
* in files, every rate and the memory capacity at most :data:`MAX_FILE_RATE`, every latency at
  most :data:`MAX_LATENCY_S` (one second per op, message or kernel),
  ``gemm_half_saturation_flops`` at most :data:`MAX_GEMM_HALF_SATURATION_FLOPS`,
  ``gemm_saturation_exponent`` at most :data:`MAX_GEMM_SATURATION_EXPONENT` and
  ``bytes_per_param_state`` at most :data:`MAX_BYTES_PER_PARAM_STATE`. Objects built in Python may
  exceed the file-only limits (the unit mode's links: any latency, an infinite bandwidth).

Unit slips. A file gives every value in base units (FLOP/s, bytes, bytes/s, seconds), and the
limits above would let ``peak_flops = 312`` (meant: 312 TFLOP/s), ``memory_capacity_bytes = 40``
(meant: 40 GB) or ``latency_s = 10`` (meant: 10 µs) through, to results off by 12 orders of
magnitude. So a file's rates and sizes must also reach :data:`FILE_MINIMA`, far below any real
device or link, and its latencies stay within :data:`MAX_LATENCY_S`; the error names the unit.

At every limit at once (the largest model on the slowest system a file may describe) a step is
predicted in about 4e55 s: finite, with some 250 orders of magnitude left to float64's 1.8e308.

Names (of a model or a system) are one line of printable text: control characters (a newline, a
tab, an escape sequence) are refused, since a name is printed in tables and written into the
header comment of a calibrated system file.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ppopt.errors import ConfigError, did_you_mean
from ppopt.io import CONFIG_BYTES, is_a_directory, not_utf8, parse_data, read_text_bounded, shown, unreadable

__all__ = [
    "MAX_BYTES_PER_PARAM_STATE",
    "MAX_GEMM_HALF_SATURATION_FLOPS",
    "MAX_GEMM_SATURATION_EXPONENT",
    "FILE_MINIMA",
    "MAX_FILE_RATE",
    "MAX_LATENCY_S",
    "MIN_EFFICIENCY",
    "MIN_RATE",
    "COMPUTED_DEFAULTS",
    "MODEL_LIMITS",
    "LinkConfig",
    "ModelConfig",
    "SystemConfig",
    "list_models",
    "list_systems",
    "load_model",
    "load_system",
    "model_preset_dirs",
    "name_problem",
    "preset_kind",
    "system_preset_dirs",
    "validation_message",
]

_REPO_ROOT = Path(__file__).resolve().parent.parent
_PACKAGE_DIR = Path(__file__).resolve().parent
_SUFFIXES = (".toml", ".json")

MODEL_LIMITS: dict[str, int] = {
    "num_layers": 2**20,
    "hidden_size": 2**24,
    "ffn_hidden_size": 2**26,
    "num_attention_heads": 2**20,
    "num_kv_heads": 2**20,
    "vocab_size": 2**30,
    "seq_length": 2**30,
    "global_batch_size": 2**30,
    "bytes_per_element": 64,
}
"""The largest value of each integer field of :class:`ModelConfig` (module doc, "Limits")."""

MIN_RATE = 1.0
"""The smallest ``peak_flops`` (FLOP/s) and bandwidth (bytes/s) of a system."""
MIN_EFFICIENCY = 1e-6
"""The smallest compute, memory or link efficiency (a millionth of the peak rate)."""
MAX_LATENCY_S = 1.0
"""The largest latency of a system file (per op, message or kernel launch), seconds: real ones are
micro- to milliseconds, and a larger value is a unit slip (``10`` for 10 µs)."""
FILE_MINIMA: dict[str, tuple[float, str, str]] = {
    "peak_flops": (1e9, "FLOP/s", "989e12 for 989 TFLOP/s"),
    "memory_bandwidth_bytes_per_s": (1e6, "bytes/s", "3.35e12 for 3.35 TB/s"),
    "memory_capacity_bytes": (1e6, "bytes", "80e9 for 80 GB"),
    "bandwidth_bytes_per_s": (1e6, "bytes/s", "50e9 for 50 GB/s"),
}
"""The smallest rate or size of a system file, its unit and an example (module doc, "Unit slips"): a GFLOP/s,
a MB/s, a MB, far below any accelerator, memory or link (the smallest in a file is that value in
the wrong unit)."""
MAX_FILE_RATE = 1e21
"""The largest rate or size of a system file (``peak_flops``, every bandwidth, ``memory_capacity_bytes``):
a zettaFLOP/s, a zettabyte per second or a zettabyte, a million times any real device (``1e300``
made an MFU of 4e-283 % and a memory that "fits in 1.7e+299 GB")."""
MAX_GEMM_HALF_SATURATION_FLOPS = 1e30
"""The largest ``gemm_half_saturation_flops`` of a system file (calibrations give about 1e9)."""
MAX_GEMM_SATURATION_EXPONENT = 4.0
"""The largest ``gemm_saturation_exponent`` of a system file (calibrations try 1 to 2)."""
MAX_BYTES_PER_PARAM_STATE = 1024.0
"""The largest ``bytes_per_param_state`` of a system file (mixed-precision Adam keeps 16 to 18)."""

Efficiency = Annotated[float, Field(ge=MIN_EFFICIENCY, le=1)]
"""A fraction of a peak rate that is actually reached: MIN_EFFICIENCY <= e <= 1."""

Rate = Annotated[float, Field(ge=MIN_RATE)]
"""FLOP/s or bytes/s: at least MIN_RATE (infinite in objects built in Python only)."""


def name_problem(text: str) -> str | None:
    """Why ``text`` cannot be a model or system name (module doc), or None if it can."""
    if not text:
        return "must not be empty"
    for position, char in enumerate(text):
        if not char.isprintable() and char != " ":
            return f"must be one line of printable text, got {text!r} (control character {char!r} at position {position})"
    return None


def _check_name(text: str) -> str:
    if (problem := name_problem(text)) is not None:
        raise ValueError(problem)
    return text


Name = Annotated[str, AfterValidator(_check_name)]


def _size(field: str) -> Any:
    """The bounds of a positive integer field of :class:`ModelConfig`: at most its :data:`MODEL_LIMITS` entry."""
    return Field(gt=0, le=MODEL_LIMITS[field])


class _Strict(BaseModel):
    """Shared settings: unknown keys are errors, instances are immutable.

    A file's numbers must be finite: TOML's ``inf``/``nan`` and JSON's ``Infinity``/``NaN`` are
    refused (no duration, rate or size in a file is infinite, and an infinity would reach the JSON
    output and the plots). Objects built in Python may use an infinite bandwidth: the unit mode's
    links cost only their latency (:func:`ppopt.solve.instance.unit_system`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)  # field docs: `ppopt list model-fields`

    _FILE_MAXIMA: ClassVar[dict[str, float]] = {}
    """Upper limits checked in files only (module doc, "Limits")."""

    @field_validator("*", mode="after")
    @classmethod
    def _finite_in_files(cls, value: Any, info: ValidationInfo) -> Any:
        if not (info.context or {}).get("file") or not isinstance(value, float):
            return value
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        maximum = cls._FILE_MAXIMA.get(info.field_name or "")
        if maximum is not None and value > maximum:
            unit = " s" if (info.field_name or "").endswith("_s") else ""
            raise ValueError(f"must be at most {maximum:g}{unit}, got {value:g}{unit}"
                             + (" (seconds: 10 µs is 1e-05)" if unit and maximum == MAX_LATENCY_S else ""))
        least, unit, example = FILE_MINIMA.get(info.field_name or "", (None, "", ""))
        if least is not None and value < least:
            raise ValueError(f"must be at least {least:g} {unit}, got {value:g} (a file gives {unit}: {example})")
        return value


# --------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------


COMPUTED_DEFAULTS = {"name": "the file's name without its suffix", "ffn_hidden_size": "4 x hidden_size",
                     "num_kv_heads": "num_attention_heads"}
"""The defaults that are other values (filled in when a file leaves the field out): a file's name
(:func:`_load_file`), and in :class:`ModelConfig` other fields'."""


class ModelConfig(_Strict):
    """A decoder-only transformer (its layers, widths, sequence and batch; the parallel layout is the job's, :mod:`ppopt.job`).

    ``hidden_size`` need not be a multiple of ``num_attention_heads``: the study model of Barley et
    al. (hidden 4096, 80 heads) is not, and none of the cost formulas needs an integral head size;
    but there are at most ``hidden_size`` heads. ``num_kv_heads`` (grouped-query attention) must
    divide ``num_attention_heads``.
    """

    name: Name
    """The model's name in reports (one line of printable text)."""
    num_layers: Annotated[int, _size("num_layers")]
    """Transformer blocks."""
    hidden_size: Annotated[int, _size("hidden_size")]
    """Model width h."""
    ffn_hidden_size: Annotated[int, _size("ffn_hidden_size")] = None  # type: ignore[assignment]  # filled in: 4 * hidden_size
    """Inner width of the MLP; defaults to 4 * hidden_size."""
    num_attention_heads: Annotated[int, _size("num_attention_heads")]
    """Query heads a."""
    num_kv_heads: Annotated[int, _size("num_kv_heads")] = None  # type: ignore[assignment]  # filled in: num_attention_heads
    """Key/value heads (grouped-query attention); defaults to num_attention_heads (plain MHA)."""
    vocab_size: Annotated[int, _size("vocab_size")]
    """Vocabulary entries V (the embedding and output layer are V x h)."""
    seq_length: Annotated[int, _size("seq_length")]
    """Tokens per sequence s."""
    global_batch_size: Annotated[int, _size("global_batch_size")] = 256
    """Sequences per optimizer step (split into microbatches)."""
    bytes_per_element: Annotated[int, _size("bytes_per_element")] = 2
    """Bytes of one activation / weight element in compute precision (2 = fp16/bf16)."""
    activation: Literal["gelu", "swiglu"] = "gelu"
    """MLP type: "gelu" has 2 matrices (h->f, f->h), "swiglu" has 3 (gate, up, down)."""
    flash_attention: StrictBool = False
    """True: fused attention keeps the a·s² score, softmax and dropout tensors on chip, so a block
    stores (and moves) only its s·b·h-sized tensors (Korthikanti et al.'s 34·s·b·h at fp16/GELU);
    False: the full s·b·h·(34 + 5·a·s/h) of the paper's study."""
    tie_embeddings: StrictBool = False
    """Output projection shares the input embedding matrix: counted once with one stage; with
    several, the last stage holds a synchronised copy (as Megatron-LM does), so it counts there too."""
    dropout: StrictBool = True
    """Dropout after the attention scores, the attention output and the MLP output (GPT; Korthikanti
    et al. 2022, Section 4.1): a block stores their 1-byte masks and the scores' dropout output for
    the backward. Llama trains without dropout (Touvron et al. 2023, "LLaMA"; Llama 3's released
    config has attention_dropout 0): false drops those items."""
    learned_position_embeddings: StrictBool = False
    """A learned s x h position-embedding matrix on the first stage (GPT-2/3: Radford et al. 2019;
    Brown et al. 2020). False: no position parameters (rotary embeddings, as in Llama)."""

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        # An explicit None (from Python) is left out, as a file leaves the field out: the "after" hook
        # fills it in from the fields it depends on, once they are valid, and the field stays out of
        # ``model_fields_set`` (so `ppopt list models FILE` marks it a default).
        if isinstance(data, dict):
            data = {key: value for key, value in data.items() if not (key in COMPUTED_DEFAULTS and key != "name" and value is None)}
        return data

    @model_validator(mode="after")
    def _check_heads(self) -> ModelConfig:
        if self.ffn_hidden_size is None:
            object.__setattr__(self, "ffn_hidden_size", 4 * self.hidden_size)
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_attention_heads)
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads ({self.num_kv_heads}) must divide "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.num_attention_heads > self.hidden_size:  # the a·s² attention tensors would grow without a head to fill
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be at most hidden_size "
                             f"({self.hidden_size}): each head needs at least one dimension")
        return self

    @property
    def ffn_matrices(self) -> int:
        """Weight matrices in the MLP: 2 for GELU, 3 for SwiGLU."""
        return 3 if self.activation == "swiglu" else 2


# --------------------------------------------------------------------------------------------------
# System
# --------------------------------------------------------------------------------------------------


class LinkConfig(_Strict):
    """A point-to-point link in the Hockney model ``t = bytes / bandwidth + latency``.

    ``bandwidth_bytes_per_s`` is **per direction**: a link sending A->B and B->A at the same time
    gives each direction the full bandwidth (NVLink's "900 GB/s" for H100 is 450 GB/s per
    direction).
    """

    bandwidth_bytes_per_s: Rate
    """Bytes per second in one direction."""
    latency_s: NonNegativeFloat = 0.0
    """Fixed cost of one message, seconds."""

    _FILE_MAXIMA = {"latency_s": MAX_LATENCY_S, "bandwidth_bytes_per_s": MAX_FILE_RATE}


class SystemConfig(_Strict):
    """One accelerator type and the links between devices.

    Compute follows a roofline (Williams, Waterman and Patterson, "Roofline: An Insightful Visual
    Performance Model for Multicore Architectures", CACM 52(4), 2009) with efficiencies (Barley et al.,
    ISPDC 2026):
    ``t = max(FLOPs / (peak_flops * compute_efficiency) + compute_latency_s,
    bytes / (memory_bandwidth_bytes_per_s * memory_efficiency) + memory_latency_s)``.

    Devices ``d`` and ``e`` share a node iff ``d // devices_per_node == e // devices_per_node``;
    same-node pairs use ``intra_node``, others ``inter_node``. A very large ``devices_per_node``
    means "every device pair uses ``intra_node``" (the study grid).

    ``bytes_per_param_state`` is the persistent memory per parameter in mixed-precision Adam
    training: 2 (fp16/bf16 weight) + 2 (fp16/bf16 gradient) + 4 (fp32 master weight) + 4 (fp32
    Adam m) + 4 (fp32 Adam v) = 16 bytes; implementations that keep fp32 gradients or extra
    buffers reach 18 (16 is the count of Rajbhandari et al., "ZeRO: Memory Optimizations Toward
    Training Trillion Parameter Models", SC'20, Section 3.1: 2 + 2 + K with K = 12).
    """

    name: Name
    """The system's name in reports (one line of printable text)."""
    description: str = ""
    """Free text shown by `ppopt list systems`."""
    peak_flops: Rate
    """Peak dense throughput of one device, FLOP/s."""
    compute_efficiency: Efficiency = 1.0
    """Fraction of peak_flops reached."""
    compute_latency_s: NonNegativeFloat = 0.0
    """Fixed cost added to the compute time of every op, seconds."""
    memory_bandwidth_bytes_per_s: Rate
    """Device memory (HBM) bandwidth, bytes per second."""
    memory_efficiency: Efficiency = 1.0
    """Fraction of memory_bandwidth_bytes_per_s reached."""
    memory_latency_s: NonNegativeFloat = 0.0
    """Fixed cost added to the memory time of every op, seconds."""
    memory_capacity_bytes: PositiveFloat
    """Device memory per device, bytes."""
    devices_per_node: Annotated[int, Field(ge=1, le=2**40)] = 8
    """Devices that share a node (and its intra_node link); at most 2^40 (the study presets' "one node"
    is 10^6): larger only overflows the arithmetic."""
    intra_node: LinkConfig
    """Link between two devices of the same node."""
    inter_node: LinkConfig
    """Link between two devices on different nodes."""
    overlap_comm_compute: StrictBool = True
    """Whether a device may compute while its messages are in flight."""
    overlap_f_b_share: Annotated[float, Field(ge=0, le=1)] = 0.0
    """Share of the communication an overlapped F&B pair (PyTorch's ``OVERLAP_F_B``) hides: the pair
    lasts F + B − share · min(message time of F, message time of B) (:mod:`ppopt.simulate`).
    0: no benefit, the pair lasts as its two ops."""
    bytes_per_param_state: PositiveFloat = 16.0
    """Persistent bytes per parameter: weights + gradients + optimizer state (16 for mixed-precision
    Adam: 2 + 2 + 12, Rajbhandari et al. 2020, Section 3.1)."""
    # ---- Job model (ppopt.job): tensor/data parallelism, measured-run calibration. The defaults
    # switch every term off, so presets without these fields give the results they always gave.
    gemm_half_saturation_flops: NonNegativeFloat = 0.0
    """Matrix-multiply size k at which half of ``compute_efficiency`` is reached, in FLOPs of the
    block's reference h x h/t GEMM (g = 2·b·s·h²/t), or of each GEMM kernel under
    ``op_accounting = "kernels"``. A GEMM of size g runs at
    ``compute_efficiency / (1 + (k/g)^n)`` of peak (n = ``gemm_saturation_exponent``): small GEMMs
    (small micro batches, large t) run far below peak. 0: the efficiency does not depend on size."""
    gemm_saturation_exponent: PositiveFloat = 1.0
    """n in the GEMM efficiency curve above: how sharply efficiency saturates with size (1: the
    hyperbola g/(g + k))."""
    kernel_host_s: NonNegativeFloat = 0.0
    """Host (CPU) time to launch one GPU kernel, seconds. Under the "additive" ``op_time_rule`` an op
    takes the larger of its GPU time and its kernels' host time: the host queues kernels ahead of
    the GPU, so launch overhead shows only when the kernels are shorter than their launch
    (:func:`ppopt.costs.work_time_s`). 0: never host-bound."""
    op_accounting: Literal["block", "kernels"] = "block"
    """How :mod:`ppopt.job` counts a block's work. "block" (the default): the memory-bound
    elementwise kernels move the bytes the block would store without recomputation, once per F, I
    and W, and every GEMM FLOP is sized as the block's reference GEMM (g = 2·b·s·h²/t). "kernels":
    each elementwise kernel's own reads and writes (:func:`ppopt.costs.elementwise_traffic_bytes`:
    the attention-score kernels, which scale with s², weigh about 2.6 times their stored bytes)
    and each GEMM kernel at its own size, so that with ``gemm_saturation_exponent = 1`` every GEMM
    kernel pays the same fixed cost (:data:`ppopt.job.BLOCK_KERNELS`)."""
    inter_node_per: Literal["device", "node"] = "device"
    """What ``inter_node.bandwidth_bytes_per_s`` belongs to: one NIC per device ("device": every
    device has that bandwidth of its own) or one NIC per node ("node": the devices of a node that
    cross nodes at once share it)."""
    partial_ring_efficiency: Efficiency = 1.0
    """Fraction of its inter-node bandwidth (the share ``inter_node_per`` gives it) that a ring
    collective reaches when its group holds some but not all of a node's devices: a data-parallel
    group of stride t with 1 < devices_per_node / t < devices_per_node members on a node (t = 2 or
    4 on 8-GPU nodes; :func:`ppopt.job.ring_allreduce_work`). 1 (the default): as any other ring.
    ``ppopt calibrate`` fits it when some row has such a ring (0.216 in ``a100-vtrain-calibrated``;
    README, "How accurate is ppopt?")."""
    op_time_rule: Literal["roofline", "additive"] = "roofline"
    """How :func:`ppopt.costs.work_time_s` combines an op's compute and memory time (both cost
    paths, pure pipeline and 3D job, use it). "roofline" (the default, the paper's method, Barley et
    al.): ``max(FLOPs/(peak·e_c) + L_c, bytes/(BW·e_m) + L_m)`` with bytes = the op's weights and
    stored activations. "additive": GEMMs and memory-bound elementwise kernels run one after the
    other, ``GEMM time + elementwise bytes/(BW·e_m) + L_c`` (the GEMMs' own operand traffic hidden
    under their FLOPs); the calibrated presets and ``dgx-a100`` use it (:mod:`ppopt.calibrate`)."""

    _FILE_MAXIMA = {
        "peak_flops": MAX_FILE_RATE,
        "memory_bandwidth_bytes_per_s": MAX_FILE_RATE,
        "memory_capacity_bytes": MAX_FILE_RATE,
        "compute_latency_s": MAX_LATENCY_S,
        "memory_latency_s": MAX_LATENCY_S,
        "kernel_host_s": MAX_LATENCY_S,
        "gemm_half_saturation_flops": MAX_GEMM_HALF_SATURATION_FLOPS,
        "gemm_saturation_exponent": MAX_GEMM_SATURATION_EXPONENT,
        "bytes_per_param_state": MAX_BYTES_PER_PARAM_STATE,
    }


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------

_M = TypeVar("_M", bound=BaseModel)


def model_preset_dirs() -> tuple[Path, ...]:
    """Directories searched for model presets, in order.

    The repo's ``models/`` first, then ``ppopt/presets/models`` (for a non-editable install).
    """
    return (_REPO_ROOT / "models", _PACKAGE_DIR / "presets" / "models")


def system_preset_dirs() -> tuple[Path, ...]:
    """Directories searched for system presets: repo ``configs/``, ``ppopt/presets/configs``."""
    return (_REPO_ROOT / "configs", _PACKAGE_DIR / "presets" / "configs")


def _presets(dirs: tuple[Path, ...]) -> dict[str, Path]:
    """Preset name -> file; the first directory wins, .toml before .json."""
    found: dict[str, Path] = {}
    for directory in dirs:
        if not directory.is_dir():
            continue
        for suffix in _SUFFIXES:
            for path in sorted(directory.glob(f"*{suffix}")):
                found.setdefault(path.stem, path)
    return found


def list_models() -> list[str]:
    """Names of the model presets, sorted."""
    return sorted(_presets(model_preset_dirs()))


def list_systems() -> list[str]:
    """Names of the system presets, sorted."""
    return sorted(_presets(system_preset_dirs()))


def load_model(name_or_path: str | os.PathLike[str] | ModelConfig | Mapping[str, object]) -> ModelConfig:
    """A model preset by name (e.g. ``"study"``), a ``.toml`` / ``.json`` file, or a mapping of a
    file's fields (checked as a file's are, named ``"custom"`` unless it gives a name).

    A ``ModelConfig`` is returned unchanged. Raises ConfigError on unknown names, unreadable
    files and invalid contents.
    """
    if isinstance(name_or_path, ModelConfig):
        return name_or_path
    if isinstance(name_or_path, Mapping):
        return _from_mapping(name_or_path, ModelConfig, "model")
    _require_name(name_or_path, "model", "ModelConfig")
    path = _resolve(name_or_path, model_preset_dirs(), "model")
    return _load_file(path, ModelConfig)


def load_system(name_or_path: str | os.PathLike[str] | SystemConfig | Mapping[str, object]) -> SystemConfig:
    """A system preset by name (e.g. ``"mid-mid"``, ``"dgx-h100"``), a ``.toml`` / ``.json`` file,
    or a mapping of a file's fields (as :func:`load_model`).

    A ``SystemConfig`` is returned unchanged. Raises ConfigError on unknown names, unreadable
    files and invalid contents.
    """
    if isinstance(name_or_path, SystemConfig):
        return name_or_path
    if isinstance(name_or_path, Mapping):
        return _from_mapping(name_or_path, SystemConfig, "system")
    _require_name(name_or_path, "system", "SystemConfig")
    path = _resolve(name_or_path, system_preset_dirs(), "system")
    return _load_file(path, SystemConfig)


def _from_mapping(fields: Mapping[str, object], cls: type[_M], kind: str) -> _M:
    """A config from a mapping of a file's fields: the same checks and one-line ConfigError as a
    file's (:func:`_load_file`), with Python's own numbers accepted (numpy's too)."""
    data = _plain({"name": "custom", **fields})
    try:  # strictly, as a file's: "32" or True for a layer count is a slip, not 32 or 1
        return cls.model_validate(data, strict=True, context={"file": True})
    except ValidationError as error:
        raise ConfigError(validation_message(error, model=cls), field=kind) from None


def _plain(value: object) -> object:
    """``value`` with numpy's numbers as Python's (an array's element is a numpy number), in nested
    mappings and lists too, so that a strict validation takes them as a file's numbers."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if type(value) is list:  # plain ones: a named tuple's constructor takes fields, not one iterable
        return [_plain(item) for item in value]
    if type(value) is tuple:
        return tuple(_plain(item) for item in value)
    import numpy as np

    return value.item() if isinstance(value, np.generic) else value


def short_repr(obj: object) -> str:
    """A dataclass's repr with its model and system configs by name (``model='llama3-8b'``): their
    every field made a job's repr 1.3 kB. Fields that are not configs are shown as ``repr`` shows them."""
    import dataclasses

    parts = []
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        if not f.repr:
            continue
        value = getattr(obj, f.name)
        shown = repr(value.name) if isinstance(value, (ModelConfig, SystemConfig)) else repr(value)
        parts.append(f"{f.name}={shown}")
    return f"{type(obj).__name__}({', '.join(parts)})"


def _require_name(value: object, kind: str, config: str) -> None:
    """ConfigError naming ``kind`` unless ``value`` is a preset name or a file's path."""
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"must be a preset name, a .toml/.json file, a {config} or a mapping of its fields, got {value!r}", field=kind)


def _resolve(name_or_path: str | os.PathLike[str], dirs: tuple[Path, ...], kind: str) -> Path:
    """The file of a preset name or a path. Anything that exists and is not a directory is read as
    a file (a device such as ``/dev/null``, a FIFO, a symbolic link to either): :func:`_read` reads
    it up to :data:`ppopt.io.CONFIG_BYTES` and says what is wrong with its contents."""
    text = os.fspath(name_or_path)
    if not text:
        raise ConfigError(f"empty file name: give a {kind} preset name or a .toml/.json file")
    path = Path(text)
    looks_like_path = path.suffix.lower() in _SUFFIXES or os.sep in text or "/" in text
    try:
        if path.is_dir():
            raise ConfigError(is_a_directory(text, f"a {kind} file (.toml or .json)"))
        os.stat(path)  # what is wrong with a path that exists and cannot be followed: a loop of links, a name too long
        return path
    except FileNotFoundError:
        pass  # a preset name, or a missing file
    except OSError as error:
        raise ConfigError(unreadable(text, error, f"a {kind} file (.toml or .json)")) from None
    if path.is_symlink():
        raise ConfigError(f"{text}: no such file (a broken symbolic link to {os.readlink(path)})")
    if looks_like_path:
        raise ConfigError(f"{text}: no such file")
    presets = _presets(dirs)
    if text in presets:
        return presets[text]
    known = ", ".join(sorted(presets)) or "none"
    files = [text + suffix for suffix in _SUFFIXES if Path(text + suffix).is_file()]
    meant = f"; for the file, give its name: {files[0]}" if files else did_you_mean(text, presets)
    raise ConfigError(f"unknown {kind} preset '{text}' (known: {known}){meant}")


def display_path(path: Path) -> str:
    """The path as the user would recognise it: relative to the working directory if it lies under
    it, else as given (relative to the repository, a file outside the working directory was named by
    a path that does not lead to it from there)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _read(path: Path) -> dict[str, Any]:
    where = display_path(path)
    try:
        text = read_text_bounded(path, CONFIG_BYTES)
        data = parse_data(text, toml=path.suffix.lower() != ".json")
    except OSError as error:
        raise ConfigError(f"{where}: cannot read file ({error.strerror or error})") from error
    except UnicodeDecodeError as error:
        raise ConfigError(not_utf8(where, error)) from None
    except ValueError as error:  # not TOML or JSON
        read_as = "JSON" if path.suffix.lower() == ".json" else "TOML"  # what parse_data tried, whatever the suffix
        other = "" if path.suffix.lower() in _SUFFIXES else " (ppopt reads .toml and .json files; any other name is read as TOML)"
        raise ConfigError(f"{where}: not valid {read_as}{other}: "
                          f"{_one_line(str(error))}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: top level must be a table/object of fields")
    return data


def _load_file(path: Path, cls: type[_M]) -> _M:
    data = _read(path)
    _refuse_other_kind(path, data, cls)
    named = "name" in data
    data.setdefault("name", path.stem)
    try:
        # Strict types for files: "4" or 4.0 for an int field, or 1 for a bool, are errors.
        # (Objects built in Python stay lax so numpy integers and the like are accepted.)
        loaded = cls.model_validate(data, strict=True, context={"file": True})
    except ValidationError as error:
        raise ConfigError(f"{display_path(path)}: {validation_message(error, model=cls)}") from None
    if not named:  # the file's name is a default too (`ppopt list models FILE` marks it so)
        loaded.model_fields_set.discard("name")
    return loaded


def preset_kind(data: dict) -> tuple[str, str] | None:
    """Which preset file ``data`` is by its keys alone, and a few of them to say so: ("model", "it
    gives activation, bytes_per_element, dropout, ...") when every key but the name and description is
    a model field and none a system field, likewise for a system; None otherwise. Given in the wrong
    place, such a file's every missing and unknown key made one line of thirty items."""
    keys = set(data) - {"name", "description"}
    for noun, own, other in (("model", ModelConfig, SystemConfig), ("system", SystemConfig, ModelConfig)):
        if keys and keys <= set(own.model_fields) and not keys & set(other.model_fields):
            return noun, f"it gives {', '.join(sorted(keys)[:3])}, ..."
    return None


def _refuse_other_kind(path: Path, data: dict, cls: type[BaseModel]) -> None:
    """A system file given for a model (or the other way round), or a cost preset for either, is
    named as such (:func:`preset_kind`)."""
    nouns: dict[type[BaseModel], str] = {ModelConfig: "model", SystemConfig: "system"}
    if cls not in nouns:
        return
    noun = nouns[cls]
    if isinstance(data.get("format"), str) and data["format"].startswith("ppopt-costs/"):  # `ppopt profile`'s output
        raise ConfigError(f"{display_path(path)}: a cost preset ({data['format']}), not a {noun} file: give it as --costs "
                          "(evaluate, compare, search, gap, frontier and run --compare take one)")
    kind = preset_kind(data)
    if kind is not None and kind[0] != noun:
        raise ConfigError(f"{display_path(path)}: a {kind[0]} file, not a {noun} file ({kind[1]})")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _keys_at(model: type[BaseModel], table: Sequence[str]) -> list[str]:
    """The keys ``model`` takes inside the nested table ``table`` (``["intra_node"]``: a LinkConfig's;
    ``["filters", "1f1b"]``: a Filter's, the dict's key skipped; ``[]``: its own); none where the path
    leaves the nested models (a list)."""
    parts = iter(table)
    for part in parts:
        field = model.model_fields.get(part)
        if field is None:
            return []
        nested = [t for t in (field.annotation, *get_args(field.annotation)) if isinstance(t, type) and issubclass(t, BaseModel)]
        if not nested:
            return []
        if get_origin(field.annotation) is dict and next(parts, None) is None:  # a table of named tables
            return []
        model = nested[0]
    return list(model.model_fields)


def validation_message(error: ValidationError, prefix: str = "", noun: str = "field", model: type[BaseModel] | None = None) -> str:
    """Pydantic's errors on one line.

    Like ``field 'x': reason; unknown field 'y'; missing field 'z'`` (``noun`` = "key" for a spec
    file's keys); ``prefix`` is the table the fields belong to (``"link"`` gives
    ``field 'link.latency_s'``), if they were read inside another file. A union reports each of its
    branches: the deepest problem is kept, one per field, without pydantic's branch names. An unknown
    key gets the closest of the keys ``model`` (the file's) takes where it stands, inside a table too;
    at the top of a spec (``noun`` "key") without a close one, the list.
    """
    found: list[tuple[str, str]] = []
    listed = False  # the known keys, said once (after every unknown key they made a line of kilobytes)
    items = error.errors(include_url=False)
    # an int-or-float key given text failed both branches: say "a valid number", not "a valid integer"
    as_number = {tuple(item["loc"][:-1]) for item in items if item["type"] == "float_type"}
    for item in items:
        kind = item["type"]
        if kind == "int_type" and tuple(item["loc"][:-1]) in as_number:
            continue
        parts = list(item["loc"])
        user_key = parts.pop() if kind in ("extra_forbidden", "missing") and parts else None  # the file's own key
        loc = [str(part) for part in parts if not (isinstance(part, str) and _UNION_TAG.search(part))]
        field = ".".join([prefix] * bool(prefix) + loc + ([str(user_key)] if user_key is not None else []))
        message = _one_line(item["msg"]).removeprefix("Value error, ")
        value = item.get("input")
        if kind == "model_type":  # pydantic names the class: "a valid dictionary or instance of LinkConfig"
            message = f"must be a table of its own keys ([{field}] in TOML, an object in JSON), got {_json_kind(value)}"
        elif value is None and kind.endswith("_type"):  # JSON's null: "Input should be a valid integer", of what?
            message = f"{message}, got null"
        elif isinstance(value, float) and not math.isfinite(value):  # pydantic says "should be >= 1" for nan
            message = f"must be a finite number, got {value}"
        elif kind in ("greater_than_equal", "greater_than") and parts and str(parts[-1]) in FILE_MINIMA \
                and isinstance(value, int | float):  # 0 or -5 named the type's bound of 1, a 5 the file's 1e6
            least, unit, example = FILE_MINIMA[str(parts[-1])]
            message = f"must be at least {least:g} {unit}, got {value:g} (a file gives {unit}: {example})"
        elif isinstance(value, str) and kind.startswith(("float", "int")):  # "40GB", as a flag takes it
            where = "" if noun == "key" else " (its unit, if it has one: `ppopt list model-fields`, `system-fields`)"
            message = f"{message}, got the text {value!r}: give the number unquoted{where}"
        if kind == "extra_forbidden":
            text = f"unknown {noun} '{field}'"
            if model is not None and not prefix:
                *table, key = field.split(".")
                known = _keys_at(model, table)
                close = did_you_mean(key, known)
                if not close and noun == "key" and not table and not listed:
                    close, listed = f" (known: {', '.join(known)})", True
                text += close
        elif kind == "missing":
            text = f"missing {noun} '{field}'"
        elif field:
            text = f"{noun} '{field}': {message}"
        else:
            text = message
        found.append((field, text))
    kept: dict[str, str] = {}
    for field, text in found:
        if not (field and any(other.startswith(field + ".") for other, _ in found)):
            kept.setdefault(field or text, text)
    return "; ".join(kept.values())


def _json_kind(value: object) -> str:
    """What a JSON or TOML value is, in the file's words: ``the number 3``, ``the text 'x'``, ``null``,
    ``a list``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {shown(value)}"
    return "a list" if isinstance(value, list) else f"a {type(value).__name__}"


#: Location parts pydantic adds for the branches of a union (``constrained-int``, ``list[...]``).
_UNION_TAG = re.compile(r"^(constrained-)?(int|float|str|bool|list|dict|none)$|\[")
