"""What a run executes: the model size and the run settings (pure data, no torch).

A :class:`RunSpec` is written to a JSON file that every rank reads (:func:`spec_json`,
:func:`spec_from_json`), so the launcher and the workers agree on one description.

Memory (:meth:`RunSpec.rank_memory_bytes`): every rank is a process on this machine, and a rank's
tensors are estimated from the settings alone, before any process starts, so that a model that
cannot fit is refused in one line instead of being killed by the kernel (or failing inside a rank)
minutes later. A rank builds every stage of the model (all ranks build the same parameters from
one seed, :func:`ppopt.run.model.build_stages`) and keeps gradients of its own; with the gradient
check it also keeps a copy of the whole model and its gradients, and runs the whole batch through
it at once. So a rank holds at most:

* ``(2 + 2·check) · P · e`` bytes of parameters and gradients, P = :meth:`ModelSize.parameters`,
  e = 4 (float32) or 8 (float64);
* ``2 · 8 · T`` bytes of token ids and targets (int64), T = microbatches · microbatch size ·
  sequence tokens of a step;
* ``T · A · e`` bytes of activations kept for the backward, A =
  :meth:`ModelSize.activation_elements_per_token`: per block :data:`BLOCK_ACTIVATIONS` times the
  hidden size (PyTorch saves about 17 h per token: the two layer norms' inputs and outputs, Q, K
  and V, the attention output, the projection's input, the MLP's 4h input and 4h GELU output; the
  rest covers the backward's temporaries; the attention itself is fused and stores no s x s
  scores), plus 4 h and three vocabulary-wide rows (the logits, their log-softmax and its gradient).

It leaves out the fixed cost of a Python process that imported torch (a few hundred MB).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

from ppopt.costs import partition_layers
from ppopt.errors import ConfigError

DTYPES = ("float32", "float64")
ELEMENT_BYTES = {"float32": 4, "float64": 8}
MAX_SIZE = 2**30
"""The largest ``layers``, ``hidden``, ``heads``, ``sequence``, ``microbatch_size`` and ``vocab`` of a run
(a model this large never fits; the bound keeps the memory estimate a float)."""
MAX_TIMEOUT_S = 7 * 86400.0
"""The longest ``timeout_s`` (seven days), seconds: every process group operation is given it."""
MAX_DEVICES = 64
"""The most ranks of a run: each is a process on this machine that holds torch (a few hundred MB the
memory check leaves out) and a gloo connection to every other rank; 64 is past the pipeline depth
one machine's CPUs can time meaningfully."""
MAX_THREADS = 256
"""The most torch threads per rank (``threads``): as many as the cores of a two-socket server of
128-core CPUs, more than a rank sharing the machine with the other ranks can use. Far more (100,000)
exhaust the kernel's thread limit inside the ranks, after they have started."""
MAX_STEPS = 1_000_000
"""The most ``steps``, ``warmup`` steps and ``p2p_repeats``: a median is settled long before, and the
ranks keep every timed op's duration until the end (memory :meth:`RunSpec.rank_memory_bytes` does
not count); a million steps of the default run take hours (about 20 ms each on 2 CPU cores)."""
SEED_RANGE = (-2**63, 2**64 - 2)
"""The seeds a run takes: ``torch.manual_seed`` takes -2^63 to 2^64 - 1 (a negative seed modulo
2^64) and fails inside the ranks beyond; the synthetic batch is drawn from ``seed + 1``
(:func:`ppopt.run.model.synthetic_batch`), so the top is 2^64 - 2."""
BLOCK_ACTIVATIONS = 20
"""Elements a transformer block keeps per token for the backward, in units of the hidden size (module doc)."""
TOLERANCES = {"float64": (1e-9, 1e-12), "float32": (1e-4, 1e-6)}
"""(relative, absolute) tolerance of the gradient check per dtype: ``|g - g_ref| <= atol + rtol·|g_ref|``
elementwise (``torch.allclose``). float64 differs from the reference only by the order of
summation over microbatches (about 1e-15 relative); float32 by about 1e-6."""


@dataclass(frozen=True)
class ModelSize:
    """A tiny GPT: token + position embedding, ``layers`` pre-norm transformer blocks, final norm and
    a vocabulary head. ``microbatch_size`` sequences of ``sequence`` tokens per microbatch."""

    layers: int = 4
    hidden: int = 32
    heads: int = 2
    sequence: int = 16
    microbatch_size: int = 2
    vocab: int = 64

    def check(self, stages: int) -> None:
        """Sizes before any process starts (field names are the CLI's parameter names)."""
        for field in ("layers", "hidden", "heads", "sequence", "microbatch_size", "vocab"):
            if getattr(self, field) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, field)}", field=field)
            if getattr(self, field) > MAX_SIZE:
                raise ConfigError(f"must be at most {MAX_SIZE}, got {getattr(self, field)}", field=field)
        if self.vocab < 2:  # one word: the loss is 0 and every gradient 0, so the gradient check compares zeros
            raise ConfigError(f"must be >= 2 (one word makes every loss and gradient 0), got {self.vocab}", field="vocab")
        if self.hidden % self.heads:  # named by the one changed from its default (--heads 3 named --hidden)
            changed = "heads" if self.hidden == type(self).hidden else "hidden"
            raise ConfigError(f"hidden size {self.hidden} is not a multiple of {self.heads} heads", field=changed)
        if self.layers < stages:
            raise ConfigError(f"the schedule has {stages} stages, each needs a block: at least {stages} layers", field="layers")

    def stage_parameters(self, stages: int) -> list[int]:
        """Parameters of each stage of :func:`ppopt.run.model.build_stages` (closed form): a block
        has 12h² + 13h (QKV, projection, a 4h MLP, two layer norms), stage 0 adds the token and
        position embeddings, the last stage the final norm and the head."""
        h, v = self.hidden, self.vocab
        params = [n * (12 * h * h + 13 * h) for n in partition_layers(self.layers, stages)]
        params[0] += v * h + self.sequence * h
        params[-1] += 2 * h + h * v + v
        return params

    def parameters(self) -> int:
        """Parameters of the whole model (:meth:`stage_parameters` of one stage)."""
        return self.stage_parameters(1)[0]

    def activation_elements_per_token(self) -> int:
        """Elements kept per token of a microbatch for the backward, whole model (module doc)."""
        return self.layers * BLOCK_ACTIVATIONS * self.hidden + 4 * self.hidden + 3 * self.vocab


@dataclass(frozen=True)
class Job:
    """One schedule to run: a PyTorch schedule CSV validated by ppopt, and its size."""

    name: str
    csv_path: str
    stages: int
    microbatches: int


@dataclass(frozen=True)
class RunSpec:
    """One launch: the schedules run one after the other by the same ``devices`` processes (one
    process start for all of them), the model and the run settings."""

    jobs: tuple[Job, ...]
    devices: int
    model: ModelSize = ModelSize()
    steps: int = 5
    """Timed steps after the warm-up."""
    warmup: int = 1
    threads: int = 1
    """torch threads per process (``torch.set_num_threads``)."""
    seed: int = 0
    dtype: str = "float32"
    check: bool = True
    """Compare the first step's loss and gradients with the non-pipelined model."""
    p2p_repeats: int = 0
    """Ping-pong rounds between ranks 0 and 1 to time a message (0: not measured)."""
    timeout_s: float = 120.0
    """Per process group operation and for the launcher's wait on all ranks."""

    def check_values(self) -> None:
        """Every setting a rank would refuse or fail on, before any process starts (field names are
        the CLI's parameter names; ``devices`` is the rank count, 0 until a run sets it): the model
        sizes of each job, at most :data:`MAX_DEVICES` ranks, :data:`MAX_STEPS` steps,
        :data:`MAX_THREADS` threads, a seed in :data:`SEED_RANGE`, the dtype and the timeout."""
        require_ranks(self.devices)  # first: a stage count over it is this limit, not one of layers
        for job in self.jobs:
            self.model.check(job.stages)
        for field, least in (("steps", 1), ("warmup", 0), ("p2p_repeats", 0)):
            value = getattr(self, field)
            if value < least:
                raise ConfigError(f"must be >= {least}, got {value}", field=field)
            if value > MAX_STEPS:
                raise ConfigError(f"must be at most {MAX_STEPS:,}, got {value}", field=field)
        if self.threads < 1:
            raise ConfigError(f"must be >= 1, got {self.threads}", field="threads")
        if self.threads > MAX_THREADS:
            raise ConfigError(f"must be at most {MAX_THREADS} torch threads per rank, got {self.threads}", field="threads")
        low, high = SEED_RANGE
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not low <= self.seed <= high:
            raise ConfigError(f"must be an integer from -2^63 to 2^64 - 2 (torch.manual_seed's range; "
                              f"the batch uses seed + 1), got {self.seed}", field="seed")
        if self.dtype not in DTYPES:
            raise ConfigError(f"must be one of {', '.join(DTYPES)}, got {self.dtype!r}", field="dtype")
        if not (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= MAX_TIMEOUT_S):
            raise ConfigError(f"must be a positive number of seconds, at most {MAX_TIMEOUT_S:g} (7 days), "
                              f"got {self.timeout_s}", field="timeout")

    def rank_memory_bytes(self, microbatches: int) -> int:
        """Bytes one rank's tensors take at most, running steps of ``microbatches`` (module doc)."""
        element = ELEMENT_BYTES.get(self.dtype, 8)
        tokens = microbatches * self.model.microbatch_size * self.model.sequence
        copies = 4 if self.check else 2
        return (copies * self.model.parameters() * element + 2 * 8 * tokens
                + tokens * self.model.activation_elements_per_token() * element)


def spec_json(spec: RunSpec) -> str:
    """``spec`` as the JSON text the launcher hands to each rank (:func:`spec_from_json` reads it)."""
    return json.dumps(dataclasses.asdict(spec))


def spec_from_json(text: str) -> RunSpec:
    """The RunSpec :func:`spec_json` wrote."""
    data = json.loads(text)
    data["model"] = ModelSize(**data["model"])
    data["jobs"] = tuple(Job(**job) for job in data["jobs"])
    return RunSpec(**data)


def require_ranks(devices: int) -> None:
    """A run's rank count: 1 to :data:`MAX_DEVICES` processes on this machine (field ``devices``)."""
    if not 1 <= devices <= MAX_DEVICES:
        raise ConfigError(f"must be from 1 to {MAX_DEVICES} ranks (processes on this machine), got {devices}", field="devices")
