"""What a run executes: the model size and the run settings (pure data, no torch).

A :class:`RunSpec` is written to a JSON file that every rank reads (:func:`spec_json`,
:func:`spec_from_json`), so the launcher and the workers agree on one description.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from ppopt.errors import ConfigError

DTYPES = ("float32", "float64")
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
        if self.hidden % self.heads:
            raise ConfigError(f"hidden size {self.hidden} is not a multiple of {self.heads} heads", field="hidden")
        if self.layers < stages:
            raise ConfigError(f"the schedule has {stages} stages, each needs a block: at least {stages} layers", field="layers")


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
        for job in self.jobs:
            self.model.check(job.stages)
        if self.steps < 1:
            raise ConfigError(f"must be >= 1, got {self.steps}", field="steps")
        if self.warmup < 0:
            raise ConfigError(f"must be >= 0, got {self.warmup}", field="warmup")
        if self.threads < 1:
            raise ConfigError(f"must be >= 1, got {self.threads}", field="threads")
        if self.dtype not in DTYPES:
            raise ConfigError(f"must be one of {', '.join(DTYPES)}, got {self.dtype!r}", field="dtype")
        if not self.timeout_s > 0:
            raise ConfigError(f"must be positive, got {self.timeout_s}", field="timeout")


def spec_json(spec: RunSpec) -> str:
    return json.dumps(dataclasses.asdict(spec))


def spec_from_json(text: str) -> RunSpec:
    data = json.loads(text)
    data["model"] = ModelSize(**data["model"])
    data["jobs"] = tuple(Job(**job) for job in data["jobs"])
    return RunSpec(**data)
