"""ppopt plan: the space, memory without simulation, balanced splits, the search adapter, the command."""

from __future__ import annotations

import csv
import json
import math
import re
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.cli import main
from ppopt.config import load_model, load_system
from ppopt.errors import ConfigError, InfeasibleError
from ppopt.generators import generate
from ppopt.io.measured import read_measured
from ppopt.io.torch_csv import read_torch_csv
from ppopt.job import SCHEDULES, Job, evaluate_job, job_costs, job_work
from ppopt.plan import (
    PlanProgress,
    PlanRequest,
    _divisors,
    _group,
    _shared_work,
    balanced_layers,
    best_first,
    count_jobs,
    describe,
    enumerate_jobs,
    group_estimate,
    layouts,
    live_microbatches,
    megatron_layout,
    memory_of,
    plan,
    sizing_ops,
    step_estimate,
    torchtitan_stages,
)
from ppopt.plan_search import JobSearch, first_after_search, job_spec, ranking_changes
from ppopt.report.plan_plot import pareto_front
from ppopt.simulate import simulate
from ppopt.solve.options import SolveOptions

ROOT = Path(__file__).resolve().parent.parent
MULTI_NODE = ROOT / "data" / "measured" / "vtrain-multi-node-small.csv"
CALIBRATED = ROOT / "configs" / "a100-vtrain-calibrated.toml"
H100 = load_system("dgx-h100")
LLAMA8 = load_model("llama3-8b")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_layouts_of_70b_on_64_gpus_are_the_hand_counted_19():
    # t in {1,2,4,8} (a node, dividing 64 heads); p divides gcd(64/t, 80): 16,16,16,8 -> 5+5+5+4 layouts
    request = PlanRequest(load_model("llama3-70b"), H100, 64)
    found = layouts(request)
    assert len(found) == 19
    assert all(t * p * d == 64 and t <= 8 and 80 % p == 0 for t, p, d in found)
    assert (8, 8, 1) in found and (16, 4, 1) not in found


def test_layouts_keep_only_the_t_megatron_can_split_the_model_over():
    """Llama 3 8B with 4 key/value groups instead of 8: t = 8 still divides the 32 query heads but
    not the 4 groups, so 8 GPUs have the layouts of t = 1, 2 and 4 only (p dividing 32 layers and 8/t)."""
    grouped = LLAMA8.model_copy(update={"num_kv_heads": 4})
    assert {t for t, _, _ in layouts(PlanRequest(LLAMA8, H100, 8))} == {1, 2, 4, 8}
    found = layouts(PlanRequest(grouped, H100, 8))
    assert {t for t, _, _ in found} == {1, 2, 4}
    assert len(found) == 4 + 3 + 2  # p in {1,2,4,8}, {1,2,4}, {1,2}
    assert all(Job(grouped, H100, tp=t, pp=p, dp=d, sequence_parallel=t > 1) for t, p, d in found)


def test_layout_filters_keep_the_hand_counted_layouts_of_their_values():
    """70B on 64 GPUs has 19 layouts (the test above): t = 4 keeps p in {1, 2, 4, 8, 16} (p divides
    gcd(16, 80) = 16), and p = 8 with it the one (4, 8, 2); d = 1 keeps (8, 8, 1) and (4, 16, 1)."""
    model = load_model("llama3-70b")
    assert layouts(PlanRequest(model, H100, 64, tensor_parallel=4)) == [(4, p, 16 // p) for p in (1, 2, 4, 8, 16)]
    assert layouts(PlanRequest(model, H100, 64, tensor_parallel=[4], pipeline_parallel=(8, 3))) == [(4, 8, 2)]
    assert sorted(layouts(PlanRequest(model, H100, 64, data_parallel=(1,)))) == [(4, 16, 1), (8, 8, 1)]
    jobs = list(enumerate_jobs(PlanRequest(model, H100, 64, global_batch=64, pipeline_parallel=(8,), schedules=("1f1b",))))
    assert jobs and {j.pp for j in jobs} == {8}


@pytest.mark.parametrize("filters, field, message", [
    (dict(tensor_parallel=(3, 5)), "tensor_parallel", "has t = 3 or 5; valid: t = 1, 2, 4, 8"),
    (dict(tensor_parallel=(8,), pipeline_parallel=(2,)), "pipeline_parallel", "has p = 2 and t = 8; valid: p = 1 (with t = 8)"),
    (dict(data_parallel=(0,)), "data_parallel", "must be positive integers, got 0"),
    (dict(pipeline_parallel=()), "pipeline_parallel", "must be positive integers, got none"),
])
def test_layout_filters_that_keep_nothing_name_the_field_and_the_valid_values(filters, field, message):
    with pytest.raises((ConfigError, InfeasibleError)) as error:
        layouts(PlanRequest(LLAMA8, H100, 8, **filters))
    assert error.value.field == field and message in error.value.reason


def test_plan_cli_layout_filters_header_json_and_errors():
    base = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", 8, "--search", 0, "-q"]
    result = run(*base, "--tp", 2, "--pp", 2, "--pp", 4, "--top", 3)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith(", layouts with t = 2 and p = 2 or 4")
    assert all(re.match(r"\d +t2 p[24] d", line) for line in result.output.splitlines()[3:6]), result.output
    data = json.loads(run(*base, "--dp", 4, "--json").stdout)
    assert data["layouts"] == {"tensor_parallel": None, "pipeline_parallel": None, "data_parallel": [4]}
    assert data["top"] and all(" d4 " in f" {r['job']} " for r in data["top"])
    refused = run(*base, "--tp", 3)
    assert refused.exit_code == 1
    assert refused.output == "error: --tp: no valid layout of 8 GPUs for llama3-8b has t = 3; valid: t = 1, 2, 4, 8\n"
    # --devices, the pipeline depth's name in every other command, is the same filter as --pp and -p
    narrowed = [run(*base, flag, 4) for flag in ("--devices", "-p", "--pp")]
    assert all(result.exit_code == 0 for result in narrowed)
    assert narrowed[0].output.splitlines()[0].endswith(", layouts with p = 4")
    assert narrowed[0].output == narrowed[1].output == narrowed[2].output


def test_count_matches_the_enumeration_and_zb_h1_needs_m_at_least_p():
    request = PlanRequest(LLAMA8, H100, 8, global_batch=16)
    jobs = list(enumerate_jobs(request))
    assert len(jobs) == count_jobs(request)
    assert all(j.microbatches >= j.pp for j in jobs if j.schedule == "zb-h1")
    assert all(j.schedule == "1f1b" for j in jobs if j.pp == 1)
    assert all(j.sequence_parallel == (j.tp > 1) and j.distributed_optimizer == (j.dp > 1) for j in jobs)


def test_live_microbatches_are_the_known_peaks():
    # 1F1B: stage k holds min(m, p - k) (Narayanan et al. 2021); GPipe holds all m; ZB-H1's worst
    # stage holds no more than 1F1B's, p (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", Section 3.1)
    assert live_microbatches("1f1b", 4, 8) == (4, 3, 2, 1)
    assert live_microbatches("gpipe", 4, 8) == (8, 8, 8, 8)
    assert max(live_microbatches("zb-h1", 4, 8)) == 4
    assert live_microbatches("1f1b", 4, 2) == (2, 2, 2, 1)


@settings(max_examples=12, deadline=None)
@given(t=st.sampled_from([1, 2, 4]), p=st.sampled_from([1, 2, 4]), b=st.sampled_from([1, 2]),
       recompute=st.sampled_from(["none", "selective", "full"]), schedule=st.sampled_from(["1f1b", "gpipe", "zb-h1"]))
def test_memory_without_simulation_equals_the_simulated_peak(t, p, b, recompute, schedule):
    job = Job(LLAMA8, H100, tp=t, pp=p, dp=1, micro_batch=b, global_batch=8 * b, recompute=recompute, schedule=schedule,
              sequence_parallel=t > 1)
    assert memory_of(job).peak_bytes == pytest.approx(evaluate_job(job).peak_memory_bytes, rel=1e-12)


def test_search_instance_times_and_sizes_the_job_as_the_job_model():
    job = Job(LLAMA8, H100, tp=2, pp=4, dp=1, micro_batch=1, global_batch=8, recompute="selective", schedule="1f1b")
    spec = job_spec(job, None)
    instance = spec.instance(4)
    sim = simulate(generate("1f1b", 4, 8), instance.costs, instance.system)
    result = evaluate_job(job)
    assert sim.step_time_s == pytest.approx(result.pipeline_s, rel=1e-12)
    assert max(sim.peak_memory_bytes) == pytest.approx(result.peak_memory_bytes, rel=1e-12)


def test_balanced_split_beats_the_equal_split_on_llama3_8b():
    """Llama 3 8B (32 layers, vocabulary 128256, untied output) on 4 stages, 1F1B, full recomputation,
    32 microbatches of 1 on DGX H100: the output layer and loss make the last stage of the equal split
    (8,8,8,8) the slowest (0.355 s of F+B against 0.302 s, DGX H100's roofline op times); balanced
    moves a layer off it, (9,8,8,7), and the predicted step drops from 12.28 s to 11.74 s (-4.4 %)."""
    job = Job(LLAMA8, H100, tp=1, pp=4, dp=1, micro_batch=1, global_batch=32, recompute="full", schedule="1f1b")
    counts = balanced_layers(job)
    assert counts is not None and sum(counts) == 32 and counts[-1] < 8
    balanced = replace(job, layers=counts)

    def slowest(j):
        return max(s.forward_s + s.backward_s for s in job_costs(j).stages)

    assert slowest(balanced) < slowest(job)
    equal_step, balanced_step = evaluate_job(job).step_time_s, evaluate_job(balanced).step_time_s
    assert balanced_step < 0.98 * equal_step


def test_balanced_split_respects_the_memory_limit():
    job = Job(LLAMA8, H100, tp=1, pp=4, dp=1, micro_batch=1, global_batch=32, recompute="none", schedule="gpipe")
    free = balanced_layers(job)
    assert free is not None
    # GPipe: every stage holds all 32 microbatches, and the last stage the output layer's logits as
    # well, so the peak is on pipeline rank 3; a limit just below the unlimited split's peak binds and
    # moves a layer off that stage
    free_peak = memory_of(replace(job, layers=free)).peak_bytes
    tight = free_peak * 0.97
    counts = balanced_layers(job, tight)
    assert counts is not None and counts != free and counts[-1] < free[-1]
    assert memory_of(replace(job, layers=counts)).peak_bytes <= tight < free_peak
    assert balanced_layers(job, 1e9) is None  # 1 GB: no split fits


@pytest.mark.parametrize("schedule", ["chimera", "v-min"])
def test_a_balanced_plan_is_never_slower_than_the_even_one(schedule):
    """Where a device holds several stages, the balanced counts even out the stages, not the devices:
    Chimera t2 p4 on Llama 3 8B took 42.64 s balanced against 42.02 s even, and the even split was not
    evaluated. Both are now, so the balanced plan's every job is at least as fast as the even plan's."""
    common = dict(global_batch=256, schedules=(schedule,), recompute=("none",))
    even = plan(PlanRequest(LLAMA8, H100, 8, **common))
    balanced = plan(PlanRequest(LLAMA8, H100, 8, split="balanced", **common))
    best = {}
    for row in balanced.rows:
        key = row.job.describe()
        best[key] = min(best.get(key, math.inf), row.step_time_s)
    for row in even.rows:
        assert best[row.job.describe()] <= row.step_time_s + 1e-9, row.job.describe()
    assert balanced.both_splits > 0


def test_the_header_s_counts_add_up_with_both_splits():
    """"3135 jobs: 2347 over the memory limit, 1284 evaluated (496 ... alike)": 2347 + 1284 is not
    3135, as the jobs taken with both splits are evaluated twice; the header now says how they meet."""
    import re

    header = run("plan", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", 8, "--layers-per-stage", "balanced",
                 "--search", 0, "-q", "-s", "chimera", "-s", "v-min").stdout.splitlines()[1]
    found = re.match(r"(\d+) jobs: (\d+) over the memory limit .*, (\d+) evaluated \(the (\d+) jobs within the limit, "
                     r"(\d+) of them with the balanced and the even split alike\)$", header)
    assert found is not None, header
    total, over, evaluated, within, both = map(int, found.groups())
    assert both > 0 and within == total - over and evaluated == within + both


def test_split_exports():
    assert megatron_layout((7, 8, 8, 7)) == "Et*7|t*8|t*8|t*7L"
    assert megatron_layout((1, 2)) == "Et|t*2L"
    stages = torchtitan_stages((2, 1, 2))
    assert stages == [["tok_embeddings", "layers.0", "layers.1"], ["layers.2"], ["layers.3", "layers.4", "norm", "output"]]


@pytest.mark.parametrize("schedule, megatron", [("1f1b", True), ("interleaved-1f1b", True), ("zb-v", False), ("hanayo", False),
                                                ("chimera", False)])
def test_the_megatron_layout_is_given_only_where_megatron_places_stage_i_on_rank_i_mod_p(schedule, megatron):
    """Megatron puts stage i on pipeline rank i mod p; ZB-V's last stage (with the output layer) is on
    rank 0 and its string would have put it on rank p - 1."""
    from ppopt.cli.plan import _split

    job = Job(LLAMA8, H100, pp=4, global_batch=32, schedule=schedule)
    counts, layout, _ = _split(job)
    assert (layout == megatron_layout(counts)) if megatron else layout is None


def test_pareto_front():
    points = [(10, 5.0), (20, 4.0), (15, 6.0), (30, 4.0), (40, 1.0), (5, 9.0)]
    assert pareto_front(points) == [5, 0, 1, 4]


def test_plan_drops_jobs_over_the_limit_and_ranks_by_step():
    request = PlanRequest(LLAMA8, H100, 8, global_batch=16, memory_limit_bytes=40e9)
    result = plan(request)
    assert result.over_limit + len(result.rows) == result.enumerated == count_jobs(request)
    assert result.over_limit > 0 and result.closest_over is not None and result.closest_over[1].peak_bytes > 40e9
    assert all(r.memory.peak_bytes <= 40e9 for r in result.rows)
    steps = [r.step_time_s for r in result.rows]
    assert steps == sorted(steps)
    best = result.rows[0]
    # tokens/s and MFU from their definitions
    assert best.tokens_per_s == pytest.approx(16 * LLAMA8.seq_length / best.step_time_s)
    assert 0 < best.mfu < 1


def test_candidates_rank_first_a_job_within_10_percent_of_the_measured_best():
    system = load_system(str(CALIBRATED))
    measured = defaultdict(dict)
    for row in read_measured(MULTI_NODE, system)[0]:
        measured[row.model_key][row.job.describe()] = row.measured_s
    result = run("plan", "--candidates", MULTI_NODE, "--system", CALIBRATED, "--search", "0", "-q", "--json")
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)
    assert len(plans) == len(measured) == 2
    for key, got in zip(measured, plans):
        first = got["top"][0]["job"]
        best = min(measured[key].values())
        assert measured[key][first] <= 1.10 * best, (key, first, measured[key][first], best)


def test_a_torch_csv_no_planned_schedule_can_fill_is_refused_before_the_plan(tmp_path, monkeypatch):
    """With Chimera and DualPipe alone (each places a stage on two ranks) the whole plan ran, then
    --torch-csv failed; refused now before any job is enumerated, nothing written."""
    import ppopt.plan as planning

    monkeypatch.setattr(planning, "plan", lambda *a, **k: pytest.fail("planned"))
    result = run("plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--schedule", "chimera",
                 "--schedule", "dualpipe", "-q", "--torch-csv", tmp_path / "x.csv")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == ("error: --torch-csv: none of the schedules planned (chimera, dualpipe) fits PyTorch's "
                             "schedule CSV, which holds one rank per stage (see `ppopt list`); add one that does, such "
                             "as 1f1b\n")
    assert not list(tmp_path.iterdir())


def test_a_torch_csv_the_first_job_cannot_fill_gets_the_fastest_job_it_can_hold(tmp_path):
    """With 1f1b and DualPipe planned, DualPipe can be #1, which PyTorch's CSV cannot hold: the plan
    was printed (JSON too), then the command failed with exit 1. Now the fastest job the CSV can
    hold is written, and a note names #1's reason and the rank written. When no job that fits runs
    a schedule the CSV holds, the command is refused before its report, and nothing is written."""
    csv_path = tmp_path / "x.csv"
    result = run("plan", "--model", "llama3-70b", "--gpus", 64, "--system", "dgx-a100", "--schedule", "dualpipe", "--schedule",
                 "1f1b", "--recompute", "full", "--micro-batch", 1, "--search", 0, "--top", 1000, "--time-limit", 20, "-q",
                 "--torch-csv", csv_path, "--json")
    assert result.exit_code == 0, result.output
    jobs = json.loads(result.stdout)["top"]
    assert jobs[0]["schedule"] == "dualpipe"
    rank, job = next((k + 1, job) for k, job in enumerate(jobs) if job["schedule"] == "1f1b")
    note = next(line for line in result.stderr.splitlines() if line.startswith("note: --torch-csv: "))
    assert note == ("note: --torch-csv: #1 cannot be written (dualpipe places a stage on two ranks; PyTorch's schedule CSV holds "
                    f"one rank per stage): it gets #{rank}, the fastest job it can hold ({job['job']}, 1f1b)")
    assert read_torch_csv(csv_path).devices == job["pp"]
    none = tmp_path / "none.csv"
    refused = run("plan", "--model", "llama3-70b", "--gpus", 64, "--system", "dgx-h100", "--schedule", "dualpipe", "--schedule",
                  "gpipe", "--search", 0, "--time-limit", 20, "-q", "--torch-csv", none, "--json")
    assert (refused.exit_code, refused.stdout) == (1, "")  # every job within 80 GB runs DualPipe there
    assert refused.stderr.splitlines()[-1].startswith("error: --torch-csv: no planned job's schedule fits PyTorch's schedule CSV")
    assert not none.exists()


def test_plan_command_searches_exports_and_plots(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PathCollection

    import ppopt.report.plan_plot as plan_plot
    from tests.test_plot import PNG_MAGIC

    figures = []  # the Figure the command saves, kept to check what it shows (as tests/test_plot.py does)
    save = plan_plot._save
    monkeypatch.setattr(plan_plot, "_save", lambda fig, path, fmt: figures.append(fig) or save(fig, path, fmt))
    csv_path, png = tmp_path / "best.csv", tmp_path / "plan.png"
    result = run("plan", "--model", "llama3-8b", "--gpus", 4, "--system", "dgx-h100", "--global-batch", 8,
                 "--recompute", "full", "--schedule", "1f1b", "--schedule", "zb-h1", "--search", 1, "--time-limit", 4,
                 "--layers-per-stage", "balanced", "-q", "--torch-csv", csv_path, "--plot", png, "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert f"wrote {png}" in result.stderr and f"wrote {csv_path}" in result.stderr  # on stderr, as every command
    assert got["search"] and all(s["best_step_s"] is None or s["best_step_s"] <= s["handcrafted_step_s"] + 1e-9
                                 for s in got["search"])
    assert all(s["bound_step_s"] is None or s["bound_step_s"] <= s["best_step_s"] + 1e-9 for s in got["search"])
    assert all(s["note"] is None or s["note"].strip() for s in got["search"])  # no note is null, as in search --json
    # the searched jobs' recomputation, which their layout string leaves out (two rows read alike without it)
    assert [s["recompute"] for s in got["search"]] == ["full"] * len(got["search"])
    assert png.read_bytes().startswith(PNG_MAGIC)
    (figure,) = figures
    (ax,) = figure.axes  # one plan, one panel
    jobs, front = (c.get_offsets() for c in ax.collections if isinstance(c, PathCollection))
    assert len(jobs) == got["evaluated"] and ax.get_title().endswith(f"{got['evaluated']} jobs evaluated, {got['over_limit']} over the limit")
    # the fastest job is the front's last point (least step time, most memory), at the best job's values
    best = got["top"][0]
    assert tuple(front[-1]) == pytest.approx((best["peak_memory_bytes"] / 1e9, best["step_time_s"]))
    assert [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"] == [got["memory_limit_bytes"] / 1e9]
    first = got["top"][0]
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    from test_torch_csv import _MockStage

    p, m = first["pp"], first["microbatches"]
    runtime = schedules._PipelineScheduleRuntime([_MockStage(0, p, p)], m)
    runtime._load_csv(str(csv_path))  # PyTorch's parser and validator
    assert len(runtime.pipeline_order) == p


@pytest.mark.parametrize("args,message", [
    (["--model", "llama3-8b", "--gpus", 7, "--system", "dgx-h100"], "--gpus: no valid layout of 7 GPUs"),
    (["--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--memory-limit", "5GB", "--schedule", "1f1b"],
     "--memory-limit: no job fits 5.00 GB per GPU: the least any of the"),
    (["--model", "no-such-model", "--gpus", 8, "--system", "dgx-h100"], "unknown model preset 'no-such-model'"),
    # the registry's words, as job -s and evaluate -s say them (a click choice listed the names its own way)
    (["--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--schedule", "zb-h7"],
     "--schedule: unknown schedule 'zb-h7' (known: gpipe, 1f1b, "),
    (["--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--layers-per-stage", "1,2"], "--layers-per-stage:"),
    (["--candidates", MULTI_NODE, "--model", "llama3-8b", "--system", "dgx-h100"], "--candidates:"),
    # huge batches are refused before any schedule is generated (they used to run for minutes)
    (["--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--global-batch", 10**7],
     "--global-batch: sizing its jobs would generate schedules of"),
    (["--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--global-batch", 10**9],
     "sequences per replica are too many to plan every micro batch size of; give --micro-batch"),
    (["--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--global-batch", 10**20],
     "--global-batch: must be a positive integer of at most 1073741824, got 100000000000000000000"),
])
def test_bad_input_is_one_line_and_exit_1(args, message):
    result = run("plan", *args, "-q", "--search", 0)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output


@pytest.mark.parametrize("flag", [["--schedule", "zb-h1"], ["--recompute", "none"], ["--micro-batch", 1], ["--overlap-grad-sync"],
                                  ["--layers-per-stage", "15,15"], ["--tp", 2], ["--pp", 4], ["--dp", 2]])
def test_candidates_refuse_the_filters_they_would_ignore(flag):
    """The listed jobs are the measured runs (1F1B, full recomputation): these flags changed nothing
    (the same ranking with or without them), and a split of counts was accepted and not applied."""
    result = run("plan", "--candidates", MULTI_NODE, "--system", CALIBRATED, "--search", 0, "-q", *flag)
    assert result.exit_code == 1
    assert result.output == ("error: --candidates: lists each job whole (layout, micro batch, schedule and recomputation: its "
                             "'schedule' and 'recompute' columns, else 1F1B with full recomputation as measured); drop "
                             f"{flag[0]}{' COUNTS' if flag[0] == '--layers-per-stage' else ''}\n")


def test_candidates_none_can_model_name_the_first_reason(tmp_path):
    """It said only "no row ppopt can model", where `validate` lists each row's reason."""
    path = tmp_path / "odd.csv"
    header = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,"
              "data parallelism,pipeline parallelism,iteration time (ms)")
    path.write_text(f"{header}\n3,3,1,1536,16,4,1024,3,1,1,100\n6,6,1,1536,16,4,1024,3,2,1,100\n")
    result = run("plan", "--candidates", path, "--system", CALIBRATED, "--search", 0, "-q")
    assert result.exit_code == 1
    assert result.output == (f"error: --candidates: no row can be planned: {path.name}, line 2: tensor parallelism 3 does "
                             "not divide the model's 16 query heads (and 1 more row outside the model)\n")


def test_candidates_rows_left_out_or_repeated_are_noted(tmp_path, monkeypatch):
    """A row ppopt cannot model was dropped without a word, so a user could believe every layout of
    the file was ranked, and a repeated row was ranked twice (#1 and #2 the same job). Each now gets
    a note, a few by name and the rest counted, and a job is ranked once."""

    path = tmp_path / "mixed.csv"
    header = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,"
              "data parallelism,pipeline parallelism,iteration time (ms)")
    good, odd = "2,16,8,1024,16,24,1024,1,1,2", "3,3,1,1536,16,4,1024,3,1,1"
    path.write_text(f"{header}\n{good},372.16\n{odd},100\n{good},380\n{odd},110\n{odd},120\n")
    monkeypatch.setattr("ppopt.cli.options.NOTES_SAID", 2)
    result = run("plan", "--candidates", path, "--system", CALIBRATED, "--search", 0, "-q", "--json")
    assert result.exit_code == 0, result.output
    assert [row["job"] for row in json.loads(result.stdout)[0]["top"]] == ["t1 p2 d1 b8 m2"]
    reason = "tensor parallelism 3 does not divide the model's 16 query heads"
    assert result.stderr == (f"note: mixed.csv, line 3 left out: {reason}\n"
                             f"note: mixed.csv, line 5 left out: {reason}\n"
                             "note: 1 more row left out (`ppopt validate` lists each with its reason)\n"
                             "note: mixed.csv, line 4 lists the job of line 2 again: ranked once\n")


def test_candidates_share_the_budget_by_model_and_one_out_of_time_leaves_the_others(still_clock, monkeypatch):
    """Each model of --candidates had the whole budget, and one that ran out of it ended the command
    with an error, the other models' results thrown away. Each now gets an equal share of what is
    left (a still clock: 60 s, then 30 s for the first of two models and the rest for the second), and
    one out of time is left out with a note."""
    import ppopt.plan as planning
    from ppopt.plan import out_of_time

    still_clock("ppopt.solve.options")
    shares = []
    real = planning.plan

    def first_out_of_time(request, map_unordered, progress, budget, jobs, keep_share):
        shares.append(budget.remaining_s())
        if len(shares) == 1:
            raise out_of_time(budget, "sizing took the budget", listed=True)
        return real(request, map_unordered, progress, budget, jobs, keep_share)

    monkeypatch.setattr(planning, "plan", first_out_of_time)
    result = run("plan", "--candidates", MULTI_NODE, "--system", CALIBRATED, "--search", 0, "-q", "--json", "--time-limit", 60)
    assert result.exit_code == 0, result.output
    assert shares == [30, 60]
    assert [p["model"] for p in json.loads(result.stdout)] == ["gpt h6144 a48 L40 s2048"]
    assert result.stderr == ("note: gpt h3072 a32 L30 s2048 on 64 GPUs, global batch 512 left out: no job evaluated within 30 s: "
                             "sizing took the budget; "
                             "give more time\n")  # its share, not the whole 60 s


def test_many_listed_models_out_of_time_are_named_a_few_then_counted(still_clock, monkeypatch, tmp_path):
    """A candidates file of 100 models (with GPU count and batch) given too little time printed a
    note per model; now the first few are named and the rest counted in one line."""
    import ppopt.plan as planning
    from ppopt.plan import out_of_time

    lines = (ROOT / "data" / "measured" / "vtrain-single-node.csv").read_text().splitlines()
    rows, seen = [], set()
    for line in lines[1:]:
        cells = line.split(",")
        if (key := (cells[0], cells[1], *cells[3:7])) not in seen and len(rows) < 4:
            seen.add(key)
            rows.append(line)
    path = tmp_path / "four.csv"
    path.write_text("\n".join([lines[0], *rows]) + "\n")
    real, calls = planning.plan, []

    def all_but_last_out_of_time(request, map_unordered, progress, budget, jobs, keep_share):
        calls.append(request)
        if len(calls) < 4:
            raise out_of_time(budget, "sizing took the budget", listed=True)
        return real(request, map_unordered, progress, budget, jobs, keep_share)

    monkeypatch.setattr(planning, "plan", all_but_last_out_of_time)
    monkeypatch.setattr("ppopt.cli.options.NOTES_SAID", 1)
    result = run("plan", "--candidates", path, "--system", CALIBRATED, "--search", 0, "-q", "--json", "--time-limit", 60)
    assert result.exit_code == 0, result.output
    notes = result.stderr.splitlines()
    assert len(notes) == 2 and notes[0].endswith("left out: no job evaluated within 15 s: sizing took the budget; give more time")
    assert notes[1] == ("note: 2 more models (with GPU count and global batch) left out the same way, no job evaluated "
                        "within its share of the time; give more time")


def test_reading_candidates_stops_once_the_budget_is_spent(still_clock, monkeypatch, tmp_path):
    """Reading a listed-jobs file of 300,000 rows took 14 s of a 10 s budget before the first check;
    the reader now calls back every CHECK_EVERY_ROWS rows, and plan stops there with one line."""
    import ppopt.io.measured as measured

    lines = (ROOT / "data" / "measured" / "vtrain-single-node.csv").read_text().splitlines()
    path = tmp_path / "many.csv"
    path.write_text("\n".join(lines[:26]) + "\n")  # 25 rows
    seen = []
    monkeypatch.setattr(measured, "CHECK_EVERY_ROWS", 10)
    rows, _ = measured.read_measured(path, CALIBRATED, seen.append)
    assert seen == [10, 20] and len(rows) == 25
    clock, real = still_clock("ppopt.solve.options"), measured.read_measured

    def slow(source, system, check=None, deadline=None):  # the budget is spent once reading starts
        clock.jump(61)
        return real(source, system, check, deadline)

    monkeypatch.setattr(measured, "read_measured", slow)
    result = run("plan", "--candidates", path, "--system", CALIBRATED, "--search", 0, "-q", "--time-limit", 60)
    assert result.exit_code == 1
    assert result.stderr == ("error: --time-limit: no job evaluated within 60 s: reading the candidates took the budget "
                             "(10 rows read); give more time or fewer rows\n")


def test_the_named_minimum_is_what_the_cheapest_job_needs():
    result = run("plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--memory-limit", "5GB", "-q", "--search", 0,
                 "--schedule", "1f1b")
    needed = float(result.output.split("needs is ")[1].split(" GB")[0])
    assert needed > 5
    ok = run("plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--memory-limit", f"{needed + 0.01}GB",
             "-q", "--search", 0, "--json", "--schedule", "1f1b")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["evaluated"] >= 1


def test_csv_format_is_one_table_with_one_header():
    result = run("plan", "--candidates", MULTI_NODE, "--system", CALIBRATED, "--search", "0", "-q", "--top", 2, "--format", "csv")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("model,rank,job,") and len(lines) == 1 + 2 * 2
    assert sum(line.startswith("model,") for line in lines) == 1
    # what CSV leaves out is said once, on stderr, and no search where none ran (--search 0)
    assert result.stderr.count("note: --format csv prints the ranking only") == 1
    assert "note: --format csv prints the ranking only; the stage split and the `ppopt job` line are" in result.stderr


def test_ranking_changes_when_a_searched_schedule_overtakes():
    job = Job(LLAMA8, H100)

    def found(best):
        return [JobSearch(job, "space", 0.0, best, 0.0, None, "feasible", None)]

    steps = [10.0, 10.5, 11.0]
    assert ranking_changes(steps, [found(9.9), found(10.4)]) == []
    # the second job's schedule beats the first's: they swap; an unsearched third stays
    assert ranking_changes(steps, [found(10.0), found(9.5)]) == [(2, 1), (1, 2)]
    assert ranking_changes(steps, [found(None), found(None), found(9.0)]) == [(3, 1), (1, 2), (2, 3)]
    # a searched step equal but for float noise is not faster: the handcrafted schedule stays (llama3-8b
    # on 8 GPUs: 31.989050165256117 s against ...113 made plan write a split-backward CSV for 1F1B)
    assert first_after_search([10.0, 10.5], [found(10.0 * (1 - 1e-14)), found(None)]) == (0, None)


def test_the_first_after_the_search_is_the_new_number_one_with_its_searched_schedule():
    """The stage split and --torch-csv used to describe the old #1 (its handcrafted or searched
    schedule) even when the search had made the second job #1."""
    job = Job(LLAMA8, H100)
    schedule = generate("1f1b", 2, 2)

    def found(*bests):
        return [JobSearch(job, f"space {k}", 0.0, best, 0.0, None, "feasible", schedule) for k, best in enumerate(bests)]

    steps = [10.0, 10.5, 11.0]
    assert first_after_search(steps, [found(10.2), found(9.8, 9.5)]) == (1, found(9.8, 9.5)[1])
    assert first_after_search(steps, [found(9.9), found(9.95)]) == (0, found(9.9)[0])
    assert first_after_search(steps, [found(None, 10.1), found(None)]) == (0, None)  # handcrafted stays


def test_a_space_too_large_is_refused_before_any_work(monkeypatch):
    import ppopt.plan

    request = PlanRequest(LLAMA8, H100, 8, global_batch=16)
    monkeypatch.setattr(ppopt.plan, "MAX_JOBS", count_jobs(request) - 1)
    monkeypatch.setattr(ppopt.plan, "evaluate_row", lambda job: pytest.fail("evaluated a job"))
    with pytest.raises(ConfigError, match="jobs to enumerate exceed the limit"):
        plan(request)


def test_job_command_takes_the_split_plan_prints():
    result = run("job", "--model", "llama3-8b", "--system", "dgx-h100", "--pp", 4, "--global-batch", 32,
                 "--recompute", "full", "--layers-per-stage", "8,9,8,7", "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    job = Job(LLAMA8, H100, pp=4, global_batch=32, recompute="full", layers=(8, 9, 8, 7))
    assert got["layers_per_stage"] == [8, 9, 8, 7]
    assert got["step_time_s"] == pytest.approx(evaluate_job(job).step_time_s)
    bad = run("job", "--model", "llama3-8b", "--system", "dgx-h100", "--pp", 4, "--layers-per-stage", "8,8")
    assert bad.exit_code == 1 and bad.output.startswith("error: --layers-per-stage:")


def test_every_family_is_enumerated_by_default_with_its_chunks_and_waves():
    from ppopt.plan import DEFAULT_SCHEDULES, schedule_variants

    # 32 layers on p = 4: chunks c >= 2 with 4c dividing 32 are 2, 4, 8; Hanayo's 2W·4 <= 32 gives W = 1, 2
    assert schedule_variants("interleaved-1f1b", 4, 32) == [{"chunks": 2}, {"chunks": 4}, {"chunks": 8}]
    assert schedule_variants("hanayo", 4, 32) == [{"waves": 1}, {"waves": 2}]
    # explicit counts: 8 stages on 4 devices are 2 per device (v = 2, a V, W = 1); Chimera has 4
    assert schedule_variants("looped-bfs", 4, 32, 8) == [{"chunks": 2}]
    assert schedule_variants("hanayo", 4, 32, 8) == [{"waves": 1}]
    assert schedule_variants("zb-v", 4, 32, 8) == [{}] and schedule_variants("chimera", 4, 32, 8) == []
    jobs = list(enumerate_jobs(PlanRequest(LLAMA8, H100, 8, global_batch=16)))
    assert {j.schedule for j in jobs} == set(DEFAULT_SCHEDULES)
    assert all(32 % j.stages == 0 for j in jobs if j.schedule in ("interleaved-1f1b", "looped-bfs"))


def test_one_device_keeps_one_chunk_count():
    """With p = 1 chunks only cut the same ops finer: `plan -s interleaved-1f1b` listed v2, v4, v8,
    v16 and v32 of one t2 p1 d4 job, 0.015 s apart, above every pipelined one. One device keeps the
    option set with the fewest stages (32 layers: 2 chunks); p = 2 keeps every count."""
    jobs = list(enumerate_jobs(PlanRequest(LLAMA8, H100, 8, global_batch=16, schedules=("interleaved-1f1b",))))
    assert {j.chunks for j in jobs if j.pp == 1} == {2}
    assert {j.chunks for j in jobs if j.pp == 2} == {2, 4, 8, 16}


def test_explicit_counts_go_to_every_job_with_as_many_stages():
    counts = (5, 4, 4, 4, 4, 4, 4, 3)
    request = PlanRequest(LLAMA8, H100, 8, global_batch=16, split=counts, recompute=("full",))
    jobs = list(enumerate_jobs(request))
    assert jobs and all(j.stage_layers == counts and j.stages == 8 for j in jobs)
    # p = 8 one stage per device, p = 4 two per device (v = 2, V, W = 1), p = 2 four (v = 4, W = 2)
    kinds = {(j.pp, j.schedule_label) for j in jobs}
    assert {(8, "1f1b"), (4, "interleaved-1f1b v2"), (4, "zb-v"), (4, "hanayo w1"), (2, "looped-bfs v4"),
            (2, "hanayo w2")} <= kinds
    # 3 counts: p divides 3 and 8, so p = 1, one stage
    with pytest.raises(InfeasibleError, match="has 3 stages"):
        plan(PlanRequest(LLAMA8, H100, 8, global_batch=16, split=(11, 11, 10)))


def test_balanced_split_of_a_v_job_moves_layers_off_the_output_stage():
    """ZB-V on 2 devices, 4 stages: the last stage (device 0's second) carries the output layer and
    loss, so balanced gives it fewer than the even 8 layers and the slowest stage gets faster."""
    job = Job(LLAMA8, H100, pp=2, global_batch=8, recompute="full", schedule="zb-v")
    counts = balanced_layers(job)
    assert counts is not None and len(counts) == 4 and sum(counts) == 32 and counts[-1] < 8

    def slowest(j):
        return max(s.forward_s + s.backward_s for s in job_costs(j).stages)

    assert slowest(replace(job, layers=counts)) < slowest(job)


@pytest.mark.parametrize("schedule,options", [("interleaved-1f1b", {"chunks": 2}), ("looped-bfs", {"chunks": 4}), ("zb-v", {}),
                                              ("v-min", {}), ("hanayo", {"waves": 2}), ("chimera", {})])
def test_search_instance_of_a_multi_stage_job_is_the_job_model(schedule, options):
    # the solver's instance, simulating the handcrafted schedule, gives the job model's pipeline and
    # peak: the device's working set counted once, every held stage's (and replica's) state
    job = Job(LLAMA8, H100, tp=2, pp=4, global_batch=8, recompute="selective", schedule=schedule, sequence_parallel=True, **options)
    instance = job_spec(job, None).instance(job.stages)
    sim = simulate(generate(schedule, 4, 8, **options), instance.costs, instance.system)
    result = evaluate_job(job)
    assert sim.step_time_s == pytest.approx(result.pipeline_s, rel=1e-12)
    assert max(sim.peak_memory_bytes) == pytest.approx(result.peak_memory_bytes, rel=1e-12)


def test_multi_stage_jobs_are_searched_in_their_family_and_split_backward_spaces():
    from ppopt.plan import evaluate_row
    from ppopt.plan_search import search_job
    from ppopt.solve.options import SolveOptions

    job = Job(LLAMA8, H100, pp=2, global_batch=4, recompute="full", schedule="interleaved-1f1b", chunks=2)
    row = evaluate_row(job)
    found = search_job(row, 80e9, SolveOptions(time_limit_s=4, seed=0).start())
    assert [s.space.split(",order")[0] for s in found] == ["placement=looped,chunks=2,backward=full",
                                                           "placement=looped,chunks=2,backward=split"]
    instance = job_spec(job, None).instance(job.stages)
    after_pipeline = row.gradient_sync_s + row.optimizer_s  # what the step adds to the searched pipeline
    assert after_pipeline > 0 and row.step_time_s == pytest.approx(row.pipeline_s + after_pipeline, rel=1e-12)
    for s in found:
        assert s.best_step_s is not None and s.bound_step_s <= s.best_step_s + 1e-9
        assert s.best_step_s <= s.handcrafted_step_s + 1e-9
        pipeline = simulate(s.schedule, instance.costs, instance.system).step_time_s
        assert s.best_step_s == pytest.approx(pipeline + after_pipeline, rel=1e-12)  # a whole step, as the plan's


def test_a_search_that_finds_only_a_slower_schedule_keeps_the_handcrafted_one(monkeypatch):
    """A search short of time (no handcrafted hint tried) can return a schedule slower than the
    job's own, or none; the handcrafted schedule is a point of the space, so the best known is it:
    reported as the best, with its gap against the search's bound, and no searched schedule to take.
    Llama 3 8B on p = 2, m = 4, 1F1B: it is optimal in its own full-backward space (the real search
    proves its step), and in the split space zero-bubble schedules are faster, so there it is only
    feasible, 9 % above the bound."""
    import dataclasses

    import ppopt.solve.search as solver
    from ppopt.plan import evaluate_row
    from ppopt.plan_search import search_job
    from ppopt.solve.options import SolveOptions

    job = Job(LLAMA8, H100, pp=2, global_batch=4, recompute="full", schedule="1f1b")
    row = evaluate_row(job)
    fixed = row.step_time_s - row.pipeline_s
    real = solver.search
    for found_step in (1.5 * row.pipeline_s, None):  # a slower schedule, or none at all
        seen: list = []

        def short_of_time(spec, space, options, seen=seen, found_step=found_step, **kwargs):
            result = real(spec, space, options, **kwargs)
            seen.append(result)
            return dataclasses.replace(result, step_time=found_step, status="feasible" if found_step else "unknown")

        monkeypatch.setattr(solver, "search", short_of_time)
        full, split = search_job(row, 80e9, SolveOptions(time_limit_s=4, seed=0).start())
        own, zero_bubble = seen
        for s in (full, split):
            assert s.best_step_s == row.step_time_s == s.handcrafted_step_s and s.schedule is None
        assert own.bound == pytest.approx(row.pipeline_s, rel=1e-9)  # the real search: 1F1B is its space's optimum
        assert (full.status, full.gap) == ("optimal", 0.0) and full.bound_step_s == pytest.approx(row.step_time_s, rel=1e-9)
        assert zero_bubble.bound < 0.95 * row.pipeline_s and split.status == ("feasible" if found_step else "unknown")
        assert split.bound_step_s == pytest.approx(zero_bubble.bound + fixed, rel=1e-12)
        assert split.gap == pytest.approx((row.pipeline_s - zero_bubble.bound) / zero_bubble.bound, rel=1e-9)


@given(st.integers(1, 2000))
def test_divisors_are_every_divisor_ascending(n):
    assert _divisors(n) == [k for k in range(1, n + 1) if n % k == 0]

def test_sizing_ops_counts_each_distinct_schedule_once_by_hand():
    # 1 GPU, 1F1B only, global batch 4: b = 1, 2, 4 give m = 4, 2, 1, and on one device each is
    # generated at m and 2m (ppopt.plan._single_device): m = 1, 2, 4, 8, each 1 stage x m x (F, B).
    # (The count used to leave out the 2m ones: a 1-GPU plan passed the 20M-op guard at 8M and built 24M.)
    request = PlanRequest(LLAMA8, H100, 1, global_batch=4, schedules=("1f1b",), recompute=("none", "full"))
    assert sizing_ops(request) == 2 * (1 + 2 + 4 + 8)
    # 2 GPUs add p = 2, d = 1 (m = 4, 2, 1: 2·2·m ops) and p = 1, d = 2 (m = 2, 1 and 4, 2: already counted)
    assert sizing_ops(replace(request, gpus=2)) == 30 + 4 * (4 + 2 + 1)


def test_a_family_no_job_takes_is_named_with_its_generator_s_reason():
    """The README promises it; a plan of 1F1B and DualPipe at global batch 2 printed 1F1B's jobs and
    said nothing of DualPipe (m = 2 < 2p everywhere)."""
    result = run("plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--global-batch", 2, "--schedule", "1f1b",
                 "--schedule", "dualpipe", "--search", 0, "-q", "--json")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("note: no job of dualpipe on 8 GPUs: at p = 8, m = 2 (global batch / (b·d)): dualpipe needs m >= 2p")
    assert list(json.loads(result.stdout)["families_left_out"]) == ["dualpipe"]
    assert {row["schedule"] for row in json.loads(result.stdout)["top"]} == {"1f1b"}
    # every family but 1F1B left out (a global batch of 2 on 512 GPUs): three named, the rest counted
    many = run("plan", "--model", "llama3-8b", "--gpus", 512, "--system", "dgx-h100", "--global-batch", 2, "--search", 0, "-q",
               "--json")
    left_out = json.loads(many.stdout)["families_left_out"]
    notes = [line for line in many.stderr.splitlines() if line.startswith("note: no job of") or "without a job here" in line]
    assert len(left_out) > 4 and notes[:3] == [f"note: no job of {name} on 512 GPUs: {why}" for name, why in list(left_out.items())[:3]]
    assert notes[3:] == [f"note: {len(left_out) - 3} more schedules without a job here either (--json lists each with its reason)"]


# --------------------------------------------------------------------------------------------------
# The time budget covers every phase (generating, sizing, evaluating)
# --------------------------------------------------------------------------------------------------


SMALL = PlanRequest(LLAMA8, H100, 8, global_batch=16)


@pytest.fixture
def clock(still_clock):
    return still_clock("ppopt.solve.options")


def test_a_spent_budget_generates_nothing_and_says_so():
    spent = replace(SolveOptions(5), deadline=time.monotonic() - 1)
    with pytest.raises(InfeasibleError, match=r"no job evaluated within 5 s: generating .* \(0 of \d+ distinct") as error:
        plan(SMALL, budget=spent)
    assert error.value.field == "time_limit_s"


@pytest.mark.parametrize("stop", [1, 17])
def test_a_budget_ending_mid_sizing_counts_every_job_once_and_evaluates_none(clock, stop):
    calls = []

    def sizing(done, total):
        calls.append(done)
        if done == stop:
            clock.jump()  # the budget ends while job `stop` is sized

    result = plan(SMALL, progress=PlanProgress(sizing=sizing), budget=SolveOptions(5).start())
    total = count_jobs(SMALL)
    assert calls == list(range(1, stop + 1))
    assert result.rows == () and result.enumerated == total
    assert result.unsized == total - stop and result.over_limit + result.unevaluated == stop
    assert f"({stop} sized, {total - stop} not sized)" in result.spent()


def test_a_budget_ending_with_the_sizing_evaluates_none(clock):
    def sizing(done, total):
        if done == total:
            clock.jump()

    result = plan(SMALL, progress=PlanProgress(sizing=sizing), budget=SolveOptions(5).start())
    assert result.rows == () and result.unsized == 0
    assert result.over_limit + result.unevaluated == result.enumerated == count_jobs(SMALL)
    assert f"({result.unevaluated} within the memory limit, none evaluated)" in result.spent()


def test_plan_command_out_of_time_prints_one_error_line_and_no_table(clock, monkeypatch):
    sized = []

    def memory(job, work=None):
        sized.append(job)
        if len(sized) == 20:
            clock.jump()
        return memory_of(job, work)

    monkeypatch.setattr("ppopt.plan.memory_of", memory)
    result = run("plan", "--model", "llama3-8b", "--gpus", 8, "--global-batch", 16, "--system", "dgx-h100", "-q",
                 "--time-limit", 5)
    total = count_jobs(SMALL)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (f"error: --time-limit: no job evaluated within 5 s: sizing the {total} jobs took the budget "
                             f"(20 sized, {total - 20} not sized); give more time or narrow the space "
                             "(--schedule, --recompute, --micro-batch, --tp, --pp, --dp)\n")


@pytest.mark.parametrize("seconds_per_job, gives_up", [(0.01, True), (0.002, False)])
def test_sizing_that_cannot_end_in_time_gives_up_early_and_says_when_it_would_end(still_clock, seconds_per_job, gives_up):
    """Each job takes ``seconds_per_job`` to size (a fake clock): 1,212 jobs at 0.01 s need 12.1 s of
    a 5 s budget. Sizing used to run until the budget ended; now it checks every 16 jobs, and the
    first check with a rate resting on a second is at 112 jobs, 1.12 s in: the rest, 1,100 x 0.01 =
    11 s, is over twice the 3.88 s left, so it stops, saying sizing would end about 1.12 + 11 =
    12.1 s into the budget. At 0.002 s a job (2.4 s in all) it sizes every job."""
    clock = still_clock("ppopt.solve.options", "ppopt.plan")

    def sizing(done, total):
        clock.now += seconds_per_job

    result = plan(SMALL, progress=PlanProgress(sizing=sizing), budget=SolveOptions(5).start())
    total = count_jobs(SMALL)
    if not gives_up:
        assert result.unsized == 0 and result.sizing_foreseen is None and result.rows
        return
    assert result.rows == () and result.unsized == total - 112
    assert result.spent() == f"sizing the {total} jobs would end about {total * seconds_per_job:.1f} s into it at the rate so far (112 sized in 1.1 s)"
    assert result.out_of_time(SolveOptions(5)).reason == (f"no job would be evaluated within 5 s: {result.spent()}; give more time or "
                                                          "narrow the space (--schedule, --recompute, --micro-batch, --tp, --pp, --dp)")


def test_generating_that_cannot_end_in_time_gives_up_early(still_clock):
    """Every schedule generated to size the jobs takes 0.1 s here (a fake clock), far more than the
    10 s budget allows for all 348 of them: generation stops before the budget ends and says when it
    would have ended, later than the budget."""
    import re

    clock = still_clock("ppopt.solve.options")

    def generating(done, total):
        clock.now += 0.1

    with pytest.raises(InfeasibleError) as error:
        plan(SMALL, progress=PlanProgress(generating=generating), budget=SolveOptions(10).start())
    found = re.fullmatch(r"no job would be evaluated within 10 s: generating the schedules that size the jobs would end about "
                         r"([0-9.]+) s into it at the rate so far \((\d+) of (\d+) distinct schedules in ([0-9.]+) s\); .*",
                         error.value.reason)
    assert found, error.value.reason
    ends, done, total, took = float(found[1]), int(found[2]), int(found[3]), float(found[4])
    assert took < 10 < ends and 0 < done < total and took == pytest.approx(0.1 * done, abs=0.05)


def test_an_executor_that_takes_the_budget_to_start_is_named(clock, monkeypatch):
    """Starting Ray can take seconds; when that spent the budget, the line blamed the generation of
    the schedules ("0 of 616 distinct schedules"). A stand-in executor spends it here."""
    import contextlib

    @contextlib.contextmanager
    def slow_to_start(kind, jobs, address, deadline=None):
        clock.jump()
        yield pytest.fail  # its map is never used: the budget is spent

    monkeypatch.setattr("ppopt.sweep.make_executor", slow_to_start)
    result = run("plan", "--model", "llama3-8b", "--gpus", 8, "--global-batch", 16, "--system", "dgx-h100", "-q",
                 "--time-limit", 5, "-j", 2)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("error: --time-limit: no job evaluated within 5 s: starting the local executor took the budget (")


def test_the_step_estimate_is_the_busiest_device_s_work_plus_the_syncs():
    """1F1B, one stage per device: m (F + B) of the slowest stage, plus the gradient all-reduce and
    optimizer step that evaluate_job adds (computed there independently); below the simulated step,
    which has a bubble. Chimera: each stage's two replicas run m/2 microbatches each, and a device
    holds two stages."""
    job = Job(LLAMA8, H100, tp=2, pp=4, dp=2, micro_batch=1, global_batch=32, recompute="selective")
    slowest = max(s.forward_s + s.backward_s for s in job_costs(job).stages)
    result = evaluate_job(job)
    assert result.gradient_sync_s > 0 and result.optimizer_s > 0
    assert step_estimate(job) == pytest.approx(16 * slowest + result.gradient_sync_s + result.optimizer_s)
    assert step_estimate(job) < result.step_time_s
    chimera = replace(job, schedule="chimera")
    stages = job_costs(chimera).stages
    work = [s.forward_s + s.backward_s for s in stages]
    assert chimera.stage_devices == ((0, 3), (1, 2), (2, 1), (3, 0))
    loads = [8 * (work[d] + work[3 - d]) for d in range(4)]
    chimera_result = evaluate_job(chimera)
    assert step_estimate(chimera) == pytest.approx(max(loads) + chimera_result.gradient_sync_s + chimera_result.optimizer_s)


def test_a_budget_ending_mid_simulation_leaves_out_the_jobs_estimated_slowest(clock):
    """Jobs are simulated by groups (layout, micro batch, recomputation) in the order of their
    estimated step, so the budget leaves out the groups expected to be slowest: here the plan's
    best job is simulated even when the budget ends a third of the way through."""
    everything = plan(SMALL)
    cut = len(everything.rows) // 3

    def simulating(done, total):
        if done == cut:
            clock.jump()

    result = plan(SMALL, progress=PlanProgress(simulating=simulating), budget=SolveOptions(5).start())
    assert len(result.rows) == cut and result.unevaluated == len(everything.rows) - cut
    simulated = {describe(r.job) for r in result.rows}
    left_out = [r.job for r in everything.rows if describe(r.job) not in simulated]
    estimate = {_group(r.job): group_estimate(r.job) for r in everything.rows}
    assert all(group_estimate(r.job) == estimate[_group(r.job)] for r in everything.rows)  # one per group
    assert max(estimate[_group(r.job)] for r in result.rows) <= min(estimate[_group(j)] for j in left_out)
    assert describe(everything.rows[0].job) in simulated
    # the order itself: groups whole, by estimate; a job's place in the plan's rows is unchanged
    order = best_first([r.job for r in everything.rows])
    groups = [_group(j) for j in order]
    assert [estimate[g] for g in groups] == sorted(estimate[g] for g in groups)
    assert len({g for g in groups}) == sum(1 for a, b in zip([None] + groups, groups) if a != b)


def test_the_simulations_leave_their_share_of_the_time(clock):
    """Keeping a quarter of the 40 s left when they begin (the clock stands still until then), the
    simulations stop once fewer than 10 s are left; with 60 s left they keep 15 s; a budget spent
    before them evaluates nothing."""
    def simulating(done, total):
        if done == 2:
            clock.now += 30.5  # 9.5 s left: below the 10 s kept
    clock.now = 20.0
    budget = SolveOptions(60).start(20.0)  # 20 s spent before: 40 s left
    result = plan(SMALL, progress=PlanProgress(simulating=simulating), budget=budget, keep_share=0.25)
    assert len(result.rows) == 2 and result.unevaluated > 0
    clock.now = 0.0
    result = plan(SMALL, progress=PlanProgress(simulating=simulating), budget=SolveOptions(60).start(), keep_share=0.25)
    assert len(result.rows) == len(plan(SMALL).rows)  # 29.5 s left of the 60: above the 15 s kept
    clock.now = 0.0
    spent = SolveOptions(60).start()
    clock.now = 61.0
    with pytest.raises(InfeasibleError, match="no job evaluated"):
        plan(SMALL, budget=spent, keep_share=0.25)


def test_the_command_keeps_a_quarter_of_the_simulations_time_for_the_searches(monkeypatch):
    """`plan --search K` with K > 0 passes SEARCH_SHARE to the plan; `--search 0` keeps nothing back."""
    import ppopt.plan as planning

    kept = []

    def recording(*args, **kwargs):
        kept.append(args[5] if len(args) > 5 else kwargs.get("keep_share", 0.0))
        return plan(*args, **kwargs)

    monkeypatch.setattr(planning, "plan", recording)
    flags = ["plan", "--model", "llama3-8b", "--gpus", 8, "--global-batch", 16, "--system", "dgx-h100", "-q",
             "--time-limit", 40, "--schedule", "1f1b"]
    assert run(*flags, "--search", 0).exit_code == 0
    assert run(*flags, "--search", 1).exit_code == 0
    assert kept == [0.0, 0.25]


def test_plan_without_a_search_never_imports_the_solver():
    """`--search 0` ends when its plan does: importing CP-SAT (and pandas through it, about 0.4 s)
    after the plan had spent a 3 s budget made the command take 3.5 s. A fresh interpreter shows
    which modules the command loaded."""
    import subprocess
    import sys

    script = ("import sys\nfrom ppopt.cli import main\n"
              "main(['plan', '--model', 'llama3-8b', '--gpus', '8', '--global-batch', '16', '--system', 'dgx-h100',"
              " '-q', '--top', '1', '--schedule', '1f1b', '--search', '0'], standalone_mode=False)\n"
              "print(sorted(m for m in ('ortools', 'ppopt.solve.search') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert "#1 as a ppopt job" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_balanced_plan_tries_every_chunk_count_up_to_the_layers():
    """31 layers on 2 devices: no 2c divides them, so the even split has no interleaved job and the
    plan said its stages exceed the layers; the balanced split takes c = 2 to 15 (and says the even
    split's true reason when nothing else can)."""
    odd = LLAMA8.model_copy(update={"num_layers": 31})
    request = PlanRequest(odd, H100, 2, global_batch=8, schedules=("interleaved-1f1b",), recompute=("full",), split="balanced")
    chunks = {job.chunks for job in enumerate_jobs(request) if job.pp == 2}
    assert chunks == set(range(2, 16))
    even = replace(request, split="even")
    assert not [job for job in enumerate_jobs(even) if job.pp == 2]
    from ppopt.plan import _reason

    assert _reason(even, "interleaved-1f1b", None) == ("interleaved-1f1b: no chunk count c >= 2 has c·p dividing the layers, as "
                                                       "the even split needs (--layers-per-stage balanced plans any c·p up to them)")


def test_sizing_shares_a_placement_s_work_exactly():
    # every family (chimera-asym's uneven default split included) and every split: the work the
    # sizing shares between the families of one placement is each job's own
    for split in ("even", "balanced"):
        request = PlanRequest(LLAMA8, H100, 8, global_batch=8, schedules=SCHEDULES, recompute=("selective",), split=split)
        for job in enumerate_jobs(request):
            assert _shared_work(job) == job_work(job), describe(job)


def test_plan_with_a_deterministic_time_says_it_is_reproducible_and_is():
    flags = ("plan", "--model", "llama3-8b", "--gpus", "8", "--system", "dgx-h100", "--schedule", "1f1b", "--top", "2",
             "--search", "2", "--deterministic-time", "0.5", "--json")
    first, second = (CliRunner().invoke(main, flags) for _ in range(2))
    assert first.exit_code == 0, first.output
    assert first.stderr.strip().splitlines()[-1] == "note: reproducible: seed 0, one worker, every step within its deterministic time (all but the wall times printed)"
    assert json.loads(first.stdout) == json.loads(second.stdout)
    bad = CliRunner().invoke(main, [*flags[:-3], "--deterministic-time", "0"])
    assert bad.exit_code == 1 and "--deterministic-time" in bad.stderr
    # no search, nothing to call reproducible (it said "reproducible" for the solver that never ran)
    unsearched = CliRunner().invoke(main, [*flags[:-4], "0", "--deterministic-time", "0.5", "--json"])
    assert unsearched.exit_code == 0, unsearched.output
    assert unsearched.stderr.strip().splitlines()[-1] == "note: --deterministic-time: no CP-SAT solve ran, so it did not apply"


def test_plan_keeps_the_executor_s_closing_time_in_its_budget(monkeypatch):
    """Shutting down a local Ray took 1.5 s after the last result, so `plan --executor ray
    --time-limit 8` ran 9.4 s. The evaluations now end that much before the deadline."""
    import ppopt.cli.plan as cli_plan
    import ppopt.plan
    import ppopt.sweep
    from ppopt.sweep.executors import RAY_SHUTDOWN_S, Executor

    class SlowToClose(Executor):
        closing_s = RAY_SHUTDOWN_S

        def map_unordered(self, fn, items):
            return map(fn, items)

    deadlines = []
    real_plan = ppopt.plan.plan

    def recording_plan(request, run, progress, options, listed, keep_share=0.0):
        deadlines.append(options.deadline)
        return real_plan(request, run, progress, options, listed, keep_share)

    monkeypatch.setattr(ppopt.sweep, "make_executor", lambda *a: SlowToClose())
    monkeypatch.setattr(ppopt.plan, "plan", recording_plan)
    options = SolveOptions(60).start()
    request = PlanRequest(LLAMA8, H100, 8, global_batch=16)
    cli_plan._run_plan(request, None, 2, "local", None, True, options)
    assert deadlines == [pytest.approx(options.deadline - RAY_SHUTDOWN_S, abs=1e-6)]


@pytest.mark.parametrize("model, extra", [
    ("llama3-8b", []),
    ("file", []),  # a model file whose own name is no preset, in a folder with a space: the path, quoted
    ("llama3-8b", ["--schedule", "chimera-asym", "--layers-per-stage", "balanced"]),  # layers, not the split too
])
def test_the_printed_job_command_predicts_the_plan_s_first_job(tmp_path, model, extra):
    """`ppopt job` defaults sequence parallelism and the distributed optimizer to off, which every
    plan job with t > 1 and d > 1 uses: plan's #1 re-run as printed came out at 155 GB instead of 80.
    The command plan prints now gives the same step and peak as the plan."""
    import shlex

    if model == "file":
        folder = tmp_path / "my models"
        folder.mkdir()
        model = str(folder / "mine.toml")
        Path(model).write_text((Path(__file__).resolve().parent.parent / "models" / "llama3-8b.toml").read_text().replace('name = "llama3-8b"', 'name = "mine-8b"'))
    result = CliRunner().invoke(main, ["plan", "--model", model, "--gpus", "8", "--system", "dgx-h100",
                                       "--global-batch", "32", "--search", "0", "-q", "--json", *extra])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.stdout)
    command = shlex.split(planned["job_command"])
    assert command[:2] == ["ppopt", "job"] and "--sequence-parallel" in command and "--distributed-optimizer" in command
    again = CliRunner().invoke(main, [*command[1:], "--json"])
    assert again.exit_code == 0, again.output
    job = json.loads(again.stdout)
    first = planned["top"][0]
    assert job["step_time_s"] == pytest.approx(first["step_time_s"], rel=1e-12)
    assert job["peak_memory_bytes"] == pytest.approx(first["peak_memory_bytes"], rel=1e-12)
    assert (job["tokens_per_s"], job["mfu"]) == pytest.approx((first["tokens_per_s"], first["mfu"]), rel=1e-12)
    assert (job["tp"], job["pp"], job["dp"], job["schedule"]) == (first["tp"], first["pp"], first["dp"], first["schedule"])


def test_overlap_grad_sync_is_left_off_the_jobs_without_data_parallelism():
    """With --overlap-grad-sync every job carried it, d = 1 too, so #1's printed `ppopt job` command
    (t4 p1 d1) had a flag that `job` refuses at d = 1."""
    import shlex

    result = CliRunner().invoke(main, ["plan", "--model", "llama3-8b", "--gpus", "4", "--system", "dgx-h100", "--global-batch", "1",
                                       "--search", "0", "-q", "--json", "--overlap-grad-sync"])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.stdout)
    assert planned["top"][0]["dp"] == 1  # the case: one sequence, no replica
    command = shlex.split(planned["job_command"])
    assert "--overlap-grad-sync" not in command
    again = CliRunner().invoke(main, [*command[1:], "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["step_time_s"] == pytest.approx(planned["top"][0]["step_time_s"], rel=1e-12)


def test_a_first_job_that_fills_the_gpu_gets_a_note(capsys):
    """The default limit is the whole GPU, and the model leaves out the CUDA context and NCCL's
    buffers: a first job within 2 % of it (Llama 3 70B's #1 on 64 H100s uses 99.6 %) gets a note."""
    from types import SimpleNamespace

    from ppopt.cli.plan import _note_no_headroom

    def plan_with(peak):
        row = SimpleNamespace(job=Job(LLAMA8, H100), memory=SimpleNamespace(peak_bytes=peak))
        return SimpleNamespace(rows=[row], request=SimpleNamespace(limit=80e9))

    _note_no_headroom([plan_with(79.7e9)])
    assert capsys.readouterr().err.startswith("note: #1 (t1 p1 d1 b1 m256 1f1b) uses 99.6 % of the system's memory")
    _note_no_headroom([plan_with(78.3e9)])
    assert capsys.readouterr().err == ""


def test_a_ray_this_command_starts_has_its_shutdown_to_keep_and_a_local_pool_none():
    """What the plan keeps for closing (above) comes from the executor: a local Ray it starts takes
    seconds to shut down, a process pool's closing is part of its normal work."""
    pytest.importorskip("ray")
    from ppopt.sweep.executors import RAY_SHUTDOWN_S, LocalExecutor, make_executor

    assert LocalExecutor(1).closing_s == 0 and LocalExecutor(2).closing_s == 0
    with make_executor("ray", 1, None) as pool:
        assert pool.closing_s == RAY_SHUTDOWN_S


def test_a_value_given_twice_is_planned_once():
    """--recompute full --recompute full (or a repeated --schedule or --micro-batch) plans each job
    once: the same job count and the same ranking as the value given once, with no row repeated."""
    base = ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--gpus", 8, "--search", 0, "-q", "--json"]
    once = run(*base, "--recompute", "full", "--schedule", "1f1b", "--micro-batch", 1)
    twice = run(*base, "--recompute", "full", "--recompute", "full", "--schedule", "1f1b", "--schedule", "1f1b",
                "--micro-batch", 1, "--micro-batch", 1)
    assert once.exit_code == 0 and twice.exit_code == 0, once.output + twice.output
    assert json.loads(twice.stdout) == json.loads(once.stdout)
    jobs = [row["job"] for row in json.loads(once.stdout)["top"]]
    assert len(jobs) == len(set(jobs)) > 1


def test_a_memory_limit_above_the_gpu_s_memory_is_named():
    """`--memory-limit 100GB` on 80 GB GPUs ranked a job of 87 GB first without a word, which `job`
    then said does not fit; the plan still runs (a what-if), and says so on stderr."""
    args = ["plan", "--model", "llama3-8b", "--gpus", "8", "--system", "dgx-h100", "--search", "0", "--schedule", "1f1b",
            "--top", "1", "-q"]
    above = CliRunner().invoke(main, [*args, "--memory-limit", "100GB"])
    assert above.exit_code == 0 and above.stderr.startswith(
        "note: --memory-limit 100 GB is above dgx-h100's 80 GB per GPU")
    barely = CliRunner().invoke(main, [*args, "--memory-limit", "80.001GB"])  # not "80.00 GB is above ... 80.00 GB"
    assert barely.stderr.startswith("note: --memory-limit 80.001 GB is above dgx-h100's 80 GB per GPU")
    binary = CliRunner().invoke(main, [*args, "--memory-limit", "80GiB"])  # the user's own figure beside the GB
    assert binary.stderr.startswith("note: --memory-limit 85.89934592 GB (80GiB) is above dgx-h100's 80 GB per GPU")
    within = CliRunner().invoke(main, [*args, "--memory-limit", "70GB"])
    assert within.exit_code == 0 and "note: --memory-limit" not in within.stderr


def test_no_layout_of_the_gpus_points_to_a_balanced_split_when_it_finds_some():
    """24 GPUs for llama3-8b: every p that 24/t gives leaves a remainder of its 32 layers, so no even
    split exists; the error said so without naming --layers-per-stage balanced, which plans 240 jobs."""
    args = ["plan", "--model", "llama3-8b", "--gpus", "24", "--system", "dgx-h100", "--search", "0", "--top", "1", "-q"]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 1 and refused.stderr.rstrip().endswith(
        "; --layers-per-stage balanced, which lets p leave a remainder of layers, finds some")
    planned = CliRunner().invoke(main, [*args, "--layers-per-stage", "balanced", "--time-limit", "20"])
    assert planned.exit_code == 0, planned.output
    # a count no split helps has no hint: 37 GPUs (prime) need p = 37 > 32 layers, or d = 37 not dividing 256
    none = CliRunner().invoke(main, ["plan", "--model", "llama3-8b", "--gpus", "37", "--system", "dgx-h100", "-q"])
    assert none.exit_code == 1 and "balanced" not in none.stderr


def test_plan_names_the_depths_the_even_split_leaves_out(tmp_path):
    """A 37-layer model on 16 GPUs was planned at p = 1 alone, with no word of the depths the even
    split refuses; `job --pp 2` takes them (19 + 18 layers), and `--layers-per-stage balanced` plans them."""
    model = tmp_path / "odd.toml"
    model.write_text("num_layers = 37\nhidden_size = 3072\nnum_attention_heads = 24\nnum_kv_heads = 3\nvocab_size = 32000\n"
                     "seq_length = 4096\nflash_attention = true\n")
    args = ["plan", "--model", str(model), "--gpus", "16", "--system", "dgx-h100", "--search", "0", "-q", "--schedule", "1f1b"]
    even = CliRunner().invoke(main, args)
    assert even.exit_code == 0, even.output
    assert even.stderr.splitlines()[0] == ("note: p = 2, 4, 8, 16 left out: the even split needs p to divide the 37 layers; "
                                          "--layers-per-stage balanced plans them too")
    balanced = CliRunner().invoke(main, [*args, "--layers-per-stage", "balanced"])
    assert balanced.exit_code == 0 and "left out" not in balanced.stderr
    assert {int(row["job"].split()[1][1:]) for row in json.loads(CliRunner().invoke(main, [*args, "--layers-per-stage", "balanced",
                                                                                      "--json", "--top", "100"]).stdout)["top"]} >= {2, 4}
    divides = CliRunner().invoke(main, ["plan", "--model", "llama3-8b", "--gpus", "16", "--system", "dgx-h100", "--search", "0", "-q",
                                        "--schedule", "1f1b"])
    assert divides.exit_code == 0 and "left out" not in divides.stderr


def test_a_limit_the_user_did_not_give_is_named_as_the_systems_memory(tmp_path):
    """With no --memory-limit, the limit is the system's memory_capacity_bytes, which the error blamed
    on --memory-limit."""
    system = tmp_path / "small.toml"
    system.write_text((Path(__file__).resolve().parent.parent / "configs" / "dgx-h100.toml").read_text()
                      .replace("memory_capacity_bytes = 80.0e9", "memory_capacity_bytes = 2e9"))
    result = CliRunner().invoke(main, ["plan", "--model", "llama3-8b", "--gpus", "8", "--system", str(system), "--search", "0", "-q",
                                       "--schedule", "1f1b"])
    assert result.exit_code == 1
    assert result.output.startswith("error: no job fits 2.00 GB per GPU (the memory_capacity_bytes of system dgx-h100): the least")


def test_plan_names_a_job_as_fast_as_the_first_on_much_less_memory():
    """On dgx-h100 (no GEMM-size effect) Llama 3 8B's #1 at b2 fills 71 GB to be 0.03 % faster than
    #2 at b1 on 50 GB: the table ranks by step alone, so a line names #2. CSV gives layer lists with ';'."""
    args = ["plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--search", 0, "--top", 4, "-q"]
    text = CliRunner().invoke(main, [str(a) for a in args])
    assert text.exit_code == 0, text.output
    first, *others = json.loads(CliRunner().invoke(main, [*map(str, args), "--json"]).stdout)["top"]
    second = others[0]
    assert second["step_time_s"] <= first["step_time_s"] * 1.005 and second["peak_memory_bytes"] <= 0.9 * first["peak_memory_bytes"]
    # the one named needs the least memory of those as fast (the first listed among equals)
    rank, named = min(((k, row) for k, row in enumerate(others, start=2) if row["step_time_s"] <= first["step_time_s"] * 1.005
                       and row["peak_memory_bytes"] <= 0.9 * first["peak_memory_bytes"]),
                      key=lambda item: (item[1]["peak_memory_bytes"], item[0]))
    near = next(line for line in text.stdout.splitlines() if line.startswith(f"#{rank} ("))
    assert near.endswith(f"of #1's step with {(first['peak_memory_bytes'] - named['peak_memory_bytes']) / 1e9:.1f} GB less per GPU")
    assert near.startswith(f"#{rank} ({named['job']}, ")
    listed = json.loads(CliRunner().invoke(main, [*map(str, args), "--json"]).stdout)["as_fast_on_less_memory"]  # --json too
    assert (listed["rank"], listed["job"], listed["peak_memory_bytes"]) == (rank, named["job"], named["peak_memory_bytes"])
    rows = list(csv.reader(CliRunner().invoke(main, [*map(str, args), "--format", "csv"]).stdout.splitlines()))
    layers = rows[0].index("layers")
    assert all(";" in row[layers] or row[layers].isdigit() for row in rows[1:]) and any(";" in row[layers] for row in rows[1:])
    # the step, throughput and peak to csv_number's ten significant digits, as the JSON has them (0.03 %
    # apart here; tokens/s was a whole number)
    top = json.loads(CliRunner().invoke(main, [*map(str, args), "--json"]).stdout)["top"]
    step, tokens, peak = rows[0].index("step s"), rows[0].index("tokens/s"), rows[0].index("peak GB")
    for row, entry in zip(rows[1:], top):
        assert float(row[step]) == pytest.approx(entry["step_time_s"], rel=1e-9)
        assert float(row[tokens]) == pytest.approx(entry["tokens_per_s"], rel=1e-9) and "." in row[tokens]
        assert float(row[peak]) == pytest.approx(entry["peak_memory_bytes"] / 1e9, rel=1e-9)


def test_plan_says_when_the_weights_alone_need_more_gpus():
    """Llama 3 70B on one 80 GB GPU: 70.6e9 parameters at 16 bytes each (2 weights, 2 gradients, 12
    optimizer: Rajbhandari et al. 2020, Section 3.1) are about 1,130 GB before any activation, so the
    error says more GPUs are needed; with 8 GPUs and a limit just above the least job's weights it
    does not (activations are what is over)."""
    result = CliRunner().invoke(main, ["plan", "--model", "llama3-70b", "--gpus", "1", "--system", "dgx-h100", "--search", "0", "-q"])
    assert result.exit_code == 1
    alone = re.search(r"optimizer state alone take ([\d.]+) GB, which more GPUs would shard further$", result.output.strip())
    assert alone is not None and 1100 < float(alone.group(1)) < 1160
    small = CliRunner().invoke(main, ["plan", "--model", "llama3-8b", "--gpus", "8", "--system", "dgx-h100", "--search", "0", "-q",
                                      "--memory-limit", "17GB"])
    assert small.exit_code == 1 and "no job fits 17.00 GB" in small.output and "more GPUs" not in small.output


def test_the_search_table_gives_each_job_its_own_recomputation():
    """The search rows gave a job's layout only, so two rows of one layout under different
    recomputation read alike. Each entry's recompute is its ranked job's, in JSON and in the text
    table's column (with full recomputation in the test above, a constant would fail one of them)."""
    import itertools

    args = ["plan", "--model", "llama3-8b", "--gpus", "4", "--system", "dgx-h100", "--global-batch", "8", "--recompute", "full",
            "--recompute", "selective", "--schedule", "1f1b", "--search", "2", "--time-limit", "6", "-q"]
    got = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    assert len({s["rank"] for s in got["search"]}) == 2
    for s in got["search"]:
        ranked = got["top"][s["rank"] - 1]
        assert (s["job"], s["recompute"]) == (ranked["job"], ranked["recompute"]) and s["recompute"] in ("full", "selective")
    text = CliRunner().invoke(main, args).stdout.splitlines()
    header = next(k for k, line in enumerate(text) if line.startswith("rank  job") and "space" in line)
    column = text[header].index("recompute")
    rows = list(itertools.takewhile(lambda line: line[:1].isdigit(), text[header + 1:]))
    assert len(rows) == len(got["search"])
    assert [line[column:].split()[0] for line in rows] == [s["recompute"] for s in got["search"]]


def test_the_least_memory_a_plan_names_is_rounded_up_and_works_as_the_limit():
    """A limit 1 byte under the least any job needs (17,120,624,640 bytes for llama3-8b on 8 H100s)
    read "no job fits 17.26 GB ...: the least any job needs is 17.26 GB", and 17.26 GB passed back
    was refused again. The limit is now rounded down, the need up, and the need works as the limit."""
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", 8, "--search", 0, "-q"]
    refused = run(*args, "--memory-limit", "17120624639B")
    assert refused.exit_code == 1
    found = re.search(r"no job fits (\S+) GB per GPU: the least any of the [\d,]+ jobs needs is (\S+) GB", refused.stderr)
    assert found is not None and float(found[1]) < float(found[2]), refused.stderr
    assert run(*args, "--memory-limit", f"{found[2]}GB").exit_code == 0


def test_small_memory_amounts_are_not_printed_as_zero():
    """A 1 MB system's limit read "0.00 GB per GPU" and a half-byte limit "no job fits 0 bytes"."""
    from ppopt.cli.plan import _gb

    assert (_gb(80e9), _gb(1e6), _gb(5.5e6)) == ("80.00", "0.001", "0.0055")
    result = run("plan", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", 8, "--memory-limit", "0.5B", "--search", 0, "-q")
    assert result.exit_code == 1 and result.stderr.startswith("error: --memory-limit: no job fits 0.5 bytes per GPU: ")


def test_library_calls_of_the_plan_and_the_simulator_take_or_name_their_arguments():
    """plan(None) failed with an AttributeError, micro_batches=2 with "'int' object is not
    iterable", simulate(s, costs, "dgx-h100") with "'str' object has no attribute
    'overlap_comm_compute'", and a Plan's repr ran to 161,244 characters for 8 GPUs."""
    from ppopt.evaluate import schedule_costs

    with pytest.raises(ConfigError) as raised:
        plan(None)
    assert raised.value.field == "request"
    assert PlanRequest("llama3-8b", "dgx-h100", 8, micro_batches=2).micro_batches == (2,)
    schedule = generate("1f1b", 4, 8)
    costs = schedule_costs(schedule, "llama3-8b", "dgx-h100")
    assert simulate(schedule, costs, "dgx-h100") == simulate(schedule, costs, load_system("dgx-h100"))
    with pytest.raises(ConfigError) as raised:
        simulate(schedule, None)
    assert raised.value.field == "costs"
    from ppopt.evaluate import evaluate_schedule

    with pytest.raises(ConfigError) as raised:  # "no" is true to Python: it asked for the formula
        evaluate_schedule(schedule, with_formula="no")
    assert raised.value.field == "with_formula"
    result = plan(PlanRequest("llama3-8b", "dgx-h100", 8, micro_batches=(2,), schedules=("1f1b",)))
    shown = repr(result)
    assert len(shown) < 600 and f"{len(result.rows)} evaluated" in shown and repr(result.rows[0].job) in shown


def test_the_ranking_lists_every_job_the_search_table_names():
    """--top 1 --search 2 listed one job and then a search row and rank moves for #2, which no table
    showed: the ranking now lists as many jobs as were searched."""
    text = run("plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--top", 1, "--search", 2, "-q",
               "-s", "1f1b", "--time-limit", 20).stdout.splitlines()
    searched = text.index(next(line for line in text if line.startswith("schedule search (CP-SAT")))
    ranked = [line.split()[0] for line in text[3:searched] if line[:1].isdigit()]
    named = [line.split()[0] for line in text[searched + 2:] if line[:1].isdigit()]
    assert ranked == ["1", "2"] and set(named) == set(ranked)  # each job in both of its spaces


def test_an_even_plan_says_when_a_balanced_split_beats_its_first():
    """Llama 3 8B on 8 H100s: the even plan's #1 (t2 p1 d4, 31.99 s) and nothing said, where the same
    plan balanced finds t1 p2 d4 interleaved v8 at 30.96 s. A note names the job and its step, the
    step the balanced plan gives that job; a balanced plan says nothing of it."""
    import re

    common = ["plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--search", 0, "-q"]
    even = run(*common, "--json")
    note = re.search(r"note: with balanced layer counts, (.+) \(([0-9,*]+)\) takes ([0-9.]+) s, ([0-9.]+) % less than #1 "
                     r"\((ppopt job [^)]+)\); --layers-per-stage balanced plans every job so", even.stderr)
    assert note is not None, even.stderr
    # the command in the note predicts that step, and its counts as the note writes them are taken too
    import shlex

    command = shlex.split(note[5])[1:]
    assert round(json.loads(run(*command, "--json").stdout)["step_time_s"], 3) == float(note[3])
    short = command[:command.index("--layers-per-stage") + 1] + [note[2]]
    assert round(json.loads(run(*short, "--json").stdout)["step_time_s"], 3) == float(note[3])
    first = json.loads(even.stdout)["top"][0]["step_time_s"]
    balanced = run(*common, "--json", "--layers-per-stage", "balanced", "--top", 50)
    # the note's job: "t1 p2 d4 b1 m64 none interleaved-1f1b v8" with counts like 3,2*14,1
    layout, recompute, schedule = note[1].split(" ", 5)[:5], note[1].split()[5], note[1].split()[6]
    counts = [int(a) for c in note[2].split(",") for a in ([c.split("*")[0]] * int(c.split("*")[1]) if "*" in c else [c])]
    named = [row["step_time_s"] for row in json.loads(balanced.stdout)["top"]
             if (row["job"], row["recompute"], row["schedule"], row["layers_per_stage"]) == (" ".join(layout), recompute, schedule, counts)]
    assert len(named) == 1 and float(note[3]) == round(named[0], 3) and named[0] < first * 0.995
    assert "with balanced layer counts" not in balanced.stderr
    # --json holds the same job (the note's figures), null where there is none
    beats = json.loads(even.stdout)["balanced_beats_first"]
    assert (beats["job"], beats["layers_per_stage"], round(beats["step_time_s"], 3)) == (" ".join(layout), counts, float(note[3]))
    assert json.loads(balanced.stdout)["balanced_beats_first"] is None


def test_the_balanced_check_asks_the_time_left_before_each_job():
    """plan's balanced-split check simulates up to ten more jobs after the plan: each only while
    ``go_on`` (the command's time left for it) allows, so no budget is overrun for a note."""
    from ppopt.plan import balanced_first

    result = plan(PlanRequest(LLAMA8, H100, 8, global_batch=256, recompute=("none",)))
    asked = []
    cut = balanced_first(result, go_on=lambda job: asked.append(job) or False)
    assert cut.faster is None and cut.checked == 0 and cut.to_check >= 1 and not cut.complete
    assert len(asked) == 1 and asked[0].layers is not None  # asked of the balanced job, then stopped
    found = balanced_first(result, go_on=lambda job: True)
    assert found.complete and found.checked == found.to_check
    assert found.faster is not None and found.faster.step_time_s < result.rows[0].step_time_s * 0.995


def test_a_balanced_check_cut_by_the_time_limit_is_said(monkeypatch):
    """With the searches first, the check ran in what they left: at a 10 s limit nothing, and the
    JSON's balanced_beats_first null read as "none is faster". Now it runs before the searches, and
    a check cut short says so on stderr and in the JSON (``balanced_checked``)."""
    import ppopt.cli.plan as plan_cli

    common = ["plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "--search", 0, "--json"]
    full = run(*common, "-q")
    checked = json.loads(full.stdout)["balanced_checked"]
    assert checked["jobs"] == checked["of"] >= 1 and "cut the check" not in full.stderr
    monkeypatch.setattr(plan_cli, "BALANCED_NOTE_S", 1e9)  # no time left for any job of the check
    cut = run(*common, "-q")
    assert cut.exit_code == 0
    data = json.loads(cut.stdout)
    assert data["balanced_beats_first"] is None and data["balanced_checked"] == {"jobs": 0, "of": checked["of"]}
    assert (f"note: the time limit cut the check of the first jobs with balanced layer counts after 0 of {checked['of']}, "
            "none faster so far") in cut.stderr
