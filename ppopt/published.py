"""Published throughput of large Megatron-LM runs, turned into step times ppopt can be checked against.

Source: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC '21), Table 1: GPT models of 1.7 to 1008 billion parameters trained on 32 to 3,072
A100 GPUs of DGX A100 nodes, with the teraFLOP/s each GPU achieved (``data/published``). A step
lasts the FLOPs of one step (the paper's Eq. 3, which counts full recomputation) divided by the GPUs'
achieved FLOP/s.

What the table leaves open, and how it is filled (data/published/README.md): the micro batch size
is not published, so a run is predicted with the fastest micro batch size of :data:`MICRO_BATCHES`
that fits in the GPUs' memory (the authors tuned their runs for throughput); the schedule is 1F1B
(the paper ran its interleaved schedule, whose chunk count is not given either); data parallelism
is GPUs / (t·p). The table is read by :mod:`ppopt.io.published`; ``ppopt published`` prints the
comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppopt.config import ModelConfig, SystemConfig
from ppopt.costs import layer_param_count
from ppopt.errors import ConfigError, PpoptError
from ppopt.io.measured import gpt_model
from ppopt.job import Job, JobResult, evaluate_job

__all__ = ["MICRO_BATCHES", "Prediction", "PublishedRun", "fastest_fitting", "megatron_flops_per_step", "predictions",
           "simulated_ops"]

SEQUENCE = 2048
"""Sequence length of every run of the table (the paper, §5.1)."""
VOCABULARY = 51200
"""Vocabulary size of every run of the table (the paper, §5.1)."""
MICRO_BATCHES = (1, 2, 4, 8)
"""Micro batch sizes tried for a run whose micro batch size is not published."""



def megatron_flops_per_step(batch: int, seq: int, layers: int, hidden: int, vocabulary: int) -> float:
    """FLOPs of one training step of a GPT model with full recomputation, as Narayanan et al. 2021
    count them (Eq. 3, §5.1): ``96 B s l h² (1 + s/(6h) + V/(16 l h))``. 96 = 4 passes over the
    layers (forward, recomputed forward, and a backward of twice a forward) × 24 B s h² FLOPs of
    a layer's GEMMs per pass and sequence; the two terms add the attention scores and the logits."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocabulary / (16 * layers * hidden))


@dataclass(frozen=True)
class PublishedRun:
    """One row of the table: the model, the layout and the achieved throughput."""

    line: int
    parameters_billion: float
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    global_batch: int
    teraflops_per_gpu: float

    @property
    def dp(self) -> int:
        """Data-parallel degree: GPUs / (t·p)."""
        return self.gpus // (self.tp * self.pp)

    @property
    def model(self) -> ModelConfig:
        """The run's GPT model, as Megatron trains it (sequence, vocabulary: the paper's §5.1)."""
        return gpt_model({"hidden": self.hidden, "heads": self.heads, "layers": self.layers, "seq": SEQUENCE,
                          "global_batch": self.global_batch, "vocabulary": VOCABULARY})

    @property
    def dimensions_parameters_billion(self) -> float:
        """Parameters (billions) of :attr:`model`: its blocks (:func:`ppopt.costs.layer_param_count`,
        12h² + 13h each) and the token and position embeddings, (V + s)·h, the output layer tied to
        the first. Narayanan et al. 2021 (§5.1) count the table's parameters this way."""
        model = self.model
        embeddings = (model.vocab_size + model.seq_length) * model.hidden_size
        return (model.num_layers * layer_param_count(model) + embeddings) / 1e9

    @property
    def step_time_s(self) -> float:
        """Seconds per step implied by the achieved throughput (:func:`megatron_flops_per_step`)."""
        flops = megatron_flops_per_step(self.global_batch, SEQUENCE, self.layers, self.hidden, VOCABULARY)
        return flops / (self.gpus * self.teraflops_per_gpu * 1e12)

    def job(self, system: SystemConfig, micro_batch: int) -> Job:
        """The run as a ppopt job on ``system``: full recomputation, 1F1B, ``micro_batch`` sequences."""
        return Job(self.model, system, tp=self.tp, pp=self.pp, dp=self.dp, micro_batch=micro_batch,
                   global_batch=self.global_batch, recompute="full")


def fastest_fitting(run: PublishedRun, system: SystemConfig,
                    micro_batches: tuple[int, ...] = MICRO_BATCHES) -> JobResult | None:
    """The fastest predicted step of ``run`` over the micro batch sizes that divide its batch per
    replica and whose per-GPU peak fits in the system's memory; None if none fits."""
    best = None
    for micro_batch in micro_batches:
        if (run.global_batch // run.dp) % micro_batch:
            continue
        result = evaluate_job(run.job(system, micro_batch))
        if result.fits_memory and (
                best is None or result.step_time_s < best.step_time_s):
            best = result
    return best


def simulated_ops(runs: list[PublishedRun], micro_batches: tuple[int, ...] = MICRO_BATCHES) -> int:
    """Ops :func:`fastest_fitting` simulates for ``runs`` on one system: a 1F1B pipeline (p stages,
    m = batch per replica / b microbatches, F and B) per micro batch size b that divides the batch."""
    total = 0
    for run in runs:
        per_replica = run.global_batch // run.dp
        total += sum(run.pp * (per_replica // b) * 2 for b in micro_batches if per_replica % b == 0)
    return total


@dataclass(frozen=True)
class Prediction:
    """ppopt's prediction of one published run: the fastest fitting job (:func:`fastest_fitting`),
    or None when no micro batch size fits."""

    run: PublishedRun
    result: JobResult | None

    @property
    def error(self) -> float | None:
        """(predicted - published) / published step time; None without a prediction."""
        return None if self.result is None else self.result.step_time_s / self.run.step_time_s - 1


def predictions(runs: list[PublishedRun], system: SystemConfig) -> list[Prediction]:
    """Every run predicted on ``system``. A run ppopt cannot model (e.g. a t that does not divide
    the heads) raises ConfigError naming its line."""
    found = []
    for run in runs:
        try:
            found.append(Prediction(run, fastest_fitting(run, system)))
        except PpoptError as error:  # named by the file's column, not the job's field (d = GPUs / (t·p))
            column = JOB_FIELD_COLUMNS.get(error.field or "")
            raise ConfigError(f"line {run.line}" + (f", column '{column}': {error.reason}" if column else f": {error}")) from error
    return found


JOB_FIELD_COLUMNS = {"dp": "GPUs", "tp": "tensor parallelism", "pp": "pipeline parallelism", "global_batch": "global batch"}
"""The column of a published run's file behind each job field an error may name."""


def error_summary(found: list[Prediction]) -> dict:
    """The mean and worst absolute relative error of the predictions that exist (a run no micro
    batch fits has none), and over how many runs they are: ``{"mape", "worst", "runs"}`` (None
    figures when no run fits)."""
    errors = [abs(p.error) for p in found if p.error is not None]
    return {"mape": sum(errors) / len(errors) if errors else None, "worst": max(errors) if errors else None,
            "runs": len(errors)}
