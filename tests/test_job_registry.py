"""Every registered family in the job model and the plan (the registry is the single source
of truth): a family added to :mod:`ppopt.generators` runs as a job, with the facts the job model
reads from its entry agreeing with its generator; a size outside a family's rules is refused with a
one-line reason."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.config import ModelConfig
from ppopt.errors import ConfigError, InfeasibleError
from ppopt.generators import generate, get, names
from ppopt.job import Job, evaluate_job
from ppopt.plan import PlanRequest, balanced_layers, enumerate_jobs, memory_of, plan
from tests.test_job import SYSTEM  # a toy system: 100 TFLOP/s, 8 GPUs a node

MODEL = ModelConfig(name="gpt-8l", num_layers=8, hidden_size=512, num_attention_heads=8, vocab_size=32000,
                    seq_length=512, global_batch_size=8, tie_embeddings=True)


@pytest.mark.parametrize("name", names())
def test_every_family_builds_a_job(name):
    # p = 2, m = 8 meets every family's rules (m >= 2p, m even, a multiple of p), so no family may
    # be refused here: a refusal is a ConfigError and fails the test
    family = get(name)
    job = Job(MODEL, SYSTEM, pp=2, micro_batch=1, global_batch=8, schedule=name)
    result = evaluate_job(job)
    assert PlanRequest(MODEL, SYSTEM, gpus=2, schedules=(name,)).schedules == (name,)  # what `plan --schedule` takes
    # what the job reads from the registry agrees with the generator's schedule
    assert set(job.schedule_options) == set(family.options)
    schedule = generate(name, 2, 8, **job.schedule_options)
    assert job.stages == schedule.stages and sum(job.stage_layers) == MODEL.num_layers
    assert [job.device_of(k) for k in range(job.stages)] == [devices[0] for devices in schedule.placement]
    assert result.step_time_s > 0
    assert result.step_time_s == pytest.approx(result.pipeline_s + result.gradient_sync_s + result.optimizer_s)
    # the plan sizes it without simulation to the simulated peak, balances it, and enumerates it
    assert memory_of(job).peak_bytes == pytest.approx(result.peak_memory_bytes, rel=1e-12)
    # with full recomputation every stage has a working set (its re-run block): a device holding
    # several stages holds the largest of them, one backward at a time, not their sum
    full = Job(MODEL, SYSTEM, pp=2, micro_batch=1, global_batch=8, schedule=name, recompute="full")
    assert memory_of(full).peak_bytes == pytest.approx(evaluate_job(full).peak_memory_bytes, rel=1e-12)
    counts = balanced_layers(job)
    assert counts is not None and len(counts) == job.stages and sum(counts) == MODEL.num_layers
    jobs = enumerate_jobs(PlanRequest(MODEL, SYSTEM, 2, schedules=(name,), recompute=("none",)))
    assert any(j.pp == 2 and j.schedule == name for j in jobs)


def test_chimera_asym_job_splits_its_layers_a_to_b():
    # 12 layers on p = 4 stages, 1:2: the first two stages share 1/3 (4 layers), the last two 2/3 (8)
    model = MODEL.model_copy(update={"num_layers": 12})
    job = Job(model, SYSTEM, pp=4, micro_batch=1, global_batch=8, schedule="chimera-asym")
    assert job.stage_layers == (2, 2, 4, 4) and job.schedule_label == "chimera-asym 1:2"
    # 1:1 is Chimera's even split, and the op order is Chimera's: the same step to the last bit
    even = Job(model, SYSTEM, pp=4, micro_batch=1, global_batch=8, schedule="chimera-asym", split="1:1")
    assert even.stage_layers == (3, 3, 3, 3)
    assert evaluate_job(even).step_time_s == evaluate_job(Job(model, SYSTEM, pp=4, micro_batch=1, global_batch=8,
                                                              schedule="chimera")).step_time_s
    with pytest.raises(ConfigError, match="A:B") as bad:
        Job(model, SYSTEM, pp=4, micro_batch=1, global_batch=8, schedule="chimera-asym", split="1:0")
    assert bad.value.field == "split"


def test_a_family_rule_is_a_one_line_error_in_job_and_a_skip_in_plan():
    # DualPipe needs an even p and m >= 2p: m = 2 on p = 2 is refused, naming the minimum
    with pytest.raises(ConfigError, match="the minimum is m = 4") as refused:
        evaluate_job(Job(MODEL, SYSTEM, pp=2, micro_batch=1, global_batch=2, schedule="dualpipe"))
    assert refused.value.field == "schedule"
    out = CliRunner().invoke(main, ["job", "--model", "llama3-8b", "--system", "dgx-h100", "--pp", "2",
                                    "--global-batch", "2", "--schedule", "dualpipe"])
    assert out.exit_code == 1 and out.output.startswith("error: --schedule: dualpipe is not defined") \
        and out.output.count("\n") == 1
    # in a plan the undefined candidates are left out; with nothing left the reason is given
    request = PlanRequest(MODEL, SYSTEM, 2, global_batch=2, schedules=("dualpipe", "1f1b"), recompute=("none",))
    assert {j.schedule for j in enumerate_jobs(request)} == {"1f1b"}
    with pytest.raises(InfeasibleError, match="at p = 2, m = 2: dualpipe needs m >= 2p") as none:
        plan(PlanRequest(MODEL, SYSTEM, 2, global_batch=2, schedules=("dualpipe",), recompute=("none",)))
    assert none.value.field == "schedules"


def test_job_refuses_a_schedule_option_its_family_does_not_take():
    # as table and evaluate do: --split means nothing to 1F1B, --chunks nothing to V-Half
    for schedule, flag, value in (("1f1b", "--split", "1:2"), ("v-half", "--chunks", "3"), ("zb-v", "--waves", "2")):
        out = CliRunner().invoke(main, ["job", "--model", "llama3-8b", "--system", "dgx-h100", "--pp", "2", "--global-batch", "8",
                                        "--schedule", schedule, flag, value])
        assert out.exit_code == 1 and out.output.startswith(f"error: {flag}: schedule {schedule} does not take it"), out.output


def test_a_job_whose_peak_equals_the_limit_fits():
    """The limit is what a GPU may hold: a job needing exactly that much is kept, one byte less drops
    it (as a job over the limit, counted and named as the closest)."""
    from dataclasses import replace

    request = PlanRequest(MODEL, SYSTEM, gpus=2, schedules=("1f1b",), recompute=("none",))
    best = plan(request).rows[0]
    at = plan(replace(request, memory_limit_bytes=best.memory.peak_bytes))
    assert best.job in [row.job for row in at.rows]
    below = plan(replace(request, memory_limit_bytes=best.memory.peak_bytes - 1))
    assert best.job not in [row.job for row in below.rows] and below.over_limit > at.over_limit


def _compositions(total: int, parts: int):
    """Every way to split ``total`` layers over ``parts`` stages, each at least one."""
    if parts == 1:
        yield (total,)
        return
    for first in range(1, total - parts + 2):
        for rest in _compositions(total - first, parts - 1):
            yield (first, *rest)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("layers, stages", [(8, 3), (3, 2), (4, 3)])
def test_the_balanced_split_is_the_best_of_every_split_under_every_limit(schedule, layers, stages):
    """Every split of a few layers (8 over 3 stages: 21 splits, each simulated): under every limit
    that some split meets exactly, balanced_layers gives a split within the limit whose slowest
    stage (F + B) is the least any fitting split reaches, and None below the least peak (a split as
    uneven as 1,1,6 included)."""
    from dataclasses import replace

    from ppopt.job import job_costs

    model = MODEL.model_copy(update={"num_layers": layers})
    base = Job(model, SYSTEM, pp=stages, micro_batch=1, global_batch=2 * stages, schedule=schedule, recompute="full")
    splits = {}
    for counts in _compositions(layers, stages):
        job = replace(base, layers=counts)
        slowest = max(stage.forward_s + stage.backward_s for stage in job_costs(job).stages)
        splits[counts] = (slowest, evaluate_job(job).peak_memory_bytes)
    for limit in sorted({peak for _, peak in splits.values()}):
        best = min(slowest for slowest, peak in splits.values() if peak <= limit)
        counts = balanced_layers(base, limit)
        assert counts is not None and splits[counts][1] <= limit
        assert splits[counts][0] == pytest.approx(best, rel=1e-9)
    assert balanced_layers(base, min(peak for _, peak in splits.values()) * (1 - 1e-9)) is None
