"""The job fields (--tp, --dp, --micro-batch, --recompute, --sequence-parallel,
--distributed-optimizer) on evaluate, compare and the solver commands."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.config import load_model, load_system
from ppopt.job import Job, Parallelism, evaluate_job, job_costs, job_work
from ppopt.solve.instance import InstanceSpec

BASE = ["-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "32"]
JOB = ["--tp", "2", "--dp", "2", "--recompute", "selective"]


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_defaults_change_nothing():
    plain = run("evaluate", "-s", "1f1b", *BASE, "--json")
    explicit = run("evaluate", "-s", "1f1b", *BASE, "--tp", "1", "--dp", "1", "--recompute", "none", "--json")
    assert plain.exit_code == explicit.exit_code == 0
    assert plain.output == explicit.output


def test_evaluate_simulates_the_job_pipeline():
    # t = 2, d = 2, p = 4 on 16 GPUs, 32 sequences in m = 8 microbatches per replica: b = 32 / (8·2) = 2;
    # the simulated step is the pipeline part of `ppopt job` for the same job.
    result = run("evaluate", "-s", "1f1b", *BASE, *JOB, "--json")
    assert result.exit_code == 0, result.output
    sim = json.loads(result.stdout)["simulation"]
    job = Job(load_model("llama3-8b"), load_system("dgx-h100"), tp=2, pp=4, dp=2, micro_batch=2, global_batch=32,
              recompute="selective")
    predicted = evaluate_job(job)
    assert sim["step_time_s"] == pytest.approx(predicted.pipeline_s, rel=1e-12)
    # both count each device's transient working set (the recomputed scores) on top of what is stored
    assert max(sim["peak_memory_bytes"]) == pytest.approx(predicted.peak_memory_bytes, rel=1e-12)


@pytest.mark.parametrize("schedule, pp, microbatches, fields", [
    ("1f1b", 1, 4, ["--tp", "4", "--dp", "2", "--micro-batch", "32", "--recompute", "full", "--sequence-parallel",
                    "--distributed-optimizer"]),
    ("chimera", 2, 128, ["--tp", "2", "--dp", "2", "--micro-batch", "1"]),
    ("zb-v", 2, 64, ["--tp", "2", "--dp", "2", "--micro-batch", "2", "--recompute", "selective"]),
])
def test_evaluate_and_job_report_the_same_peak(schedule, pp, microbatches, fields):
    """The same job's per-GPU peak is one number in `evaluate` and `job` (and so `plan`): evaluate
    left out the transient working set, and called fitting (54 GB) a job that `job` puts at 80.0 GB."""
    common = ["--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "256", *fields]
    evaluated = run("evaluate", "-s", schedule, "-p", str(pp), "-m", str(microbatches), *common, "--json")
    assert evaluated.exit_code == 0, evaluated.output
    job = run("job", "--pp", str(pp), "--schedule", schedule, *common, "--json")
    assert job.exit_code == 0, job.output
    simulation = json.loads(evaluated.stdout)["simulation"]
    assert max(simulation["peak_memory_bytes"]) == pytest.approx(json.loads(job.stdout)["peak_memory_bytes"], rel=1e-12)


def test_micro_batch_sets_or_checks_the_global_batch():
    # no --global-batch: b·m·d = 2·8·2 = 32 sequences, the same job as above
    given = run("evaluate", "-s", "1f1b", *BASE[:-2], *JOB, "--micro-batch", "2", "--json")
    derived = run("evaluate", "-s", "1f1b", *BASE, *JOB, "--json")
    assert json.loads(given.stdout)["simulation"] == json.loads(derived.stdout)["simulation"]
    bad = run("evaluate", "-s", "1f1b", *BASE, *JOB, "--micro-batch", "4")
    assert bad.exit_code == 1 and bad.output.startswith("error: --micro-batch: 4 x 8 microbatches x 2 replicas")


def test_a_micro_batch_typed_as_derived_changes_nothing_in_a_pure_pipeline():
    """--micro-batch only sets the batch: typing the 4 sequences that 32 / 8 gives anyway printed a
    peak 7.8 GiB higher (the job model's working set) for the same job. A pure pipeline's peaks
    hold no working set either way, and the summary line says so; `job` adds it."""
    derived = run("evaluate", "-s", "zb-h1", *BASE, "--json")
    typed = run("evaluate", "-s", "zb-h1", *BASE, "--micro-batch", "4", "--json")
    assert json.loads(typed.stdout)["simulation"] == json.loads(derived.stdout)["simulation"]
    assert json.loads(typed.stdout)["simulation"]["job"]["working_set"] is False
    text = run("evaluate", "-s", "zb-h1", *BASE, "--micro-batch", "4").output
    assert "(`ppopt job` adds the gradient all-reduce, the optimizer step and each device's working set)" in text
    job = json.loads(run("job", "--pp", "4", "-s", "zb-h1", *BASE[4:], "--micro-batch", "4", "--json").stdout)
    assert job["peak_memory_bytes"] > max(json.loads(typed.stdout)["simulation"]["peak_memory_bytes"])
    # the solver commands cost the job the same way (InstanceSpec.instance), with or without the typed size
    searched = [json.loads(run("search", *BASE, *extra, "--space", "fixed:zb-h1", "-q", "--json").stdout)
                for extra in ((), ("--micro-batch", "4"))]
    assert searched[0]["step_time_s"] == searched[1]["step_time_s"] == json.loads(derived.stdout)["simulation"]["step_time_s"]
    assert searched[0]["peak_memory"] == searched[1]["peak_memory"]


def test_job_fields_need_a_model_and_a_system():
    unit = run("search", "-p", "2", "-m", "2", "--unit", "--tp", "2", "--time-limit", "5", "-q")
    assert unit.exit_code == 1 and unit.output.startswith("error: --tp:")
    table_only = run("evaluate", "-s", "1f1b", "-p", "2", "-m", "2", "--recompute", "full")  # the flag given is named
    assert table_only.exit_code == 1 and table_only.output.startswith("error: --recompute:")
    sequence = run("search", "-p", "2", "-m", "2", "--unit", "--sequence-parallel", "--time-limit", "5", "-q")
    assert sequence.exit_code == 1 and sequence.output.startswith("error: --sequence-parallel:")


def test_a_micro_batch_below_one_is_named_as_such():
    """It was reported as a global batch that does not split (0 x 8 microbatches)."""
    for value in ("0", "-1"):
        result = run("evaluate", "-s", "1f1b", *BASE, "--micro-batch", value)
        assert (result.exit_code, result.output) == (1, f"error: --micro-batch: must be a positive integer, got {value}\n")


def test_compare_and_the_solver_take_the_job():
    compared = json.loads(run("compare", *BASE, *JOB, "--json").stdout)
    one = next(r for r in compared if r["schedule"] == "1f1b")
    evaluated = json.loads(run("evaluate", "-s", "1f1b", *BASE, *JOB, "--json").stdout)
    assert one["simulation"]["step_time_s"] == evaluated["simulation"]["step_time_s"]
    spec = InstanceSpec(4, 8, model="llama3-8b", system="dgx-h100", global_batch=32, parallel=Parallelism(2, 2, None, "selective"))
    instance = spec.instance(4)
    job = Job(load_model("llama3-8b"), load_system("dgx-h100"), tp=2, pp=4, dp=2, micro_batch=2, global_batch=32,
              recompute="selective")
    own = job_costs(job)
    assert [replace(stage, persistent_bytes=0.0) for stage in instance.costs.stages] == [
        replace(stage, persistent_bytes=0.0) for stage in own.stages]
    # the solver holds each stage's transient working set (here the last stage's logits gradient) with
    # its persistent state
    assert [stage.persistent_bytes for stage in instance.costs.stages] == pytest.approx(
        [stage.persistent_bytes + extra for stage, extra in zip(own.stages, job_work(job).working_bytes)], rel=1e-12)
    assert job_work(job).working_bytes[-1] > 0
    assert instance.system.devices_per_node == 2  # 8 GPUs per node / (t·d = 4): two stages per node


def test_a_job_too_large_to_schedule_names_the_global_batch():
    """2^30 sequences of one microbatch each: 2^31 ops on one stage, over the 10-million-op limit; it
    was reported against --schedule (1f1b "is not defined"), which the user had not given."""
    result = run("job", "--model", "llama3-8b", "--system", "a100-vtrain", "--global-batch", str(2**30))
    assert (result.exit_code, result.output) == (
        1, "error: --global-batch: schedule too large: 1 stage, 1,073,741,824 microbatches (1,073,741,824 sequences / "
           "(1 x 1 replica)) make 2,147,483,648 ops (stages x microbatches x kinds); the limit is 10,000,000 ops\n")


def test_modelled_reports_say_which_batch_split_they_simulated():
    """Without --micro-batch the micro batch is the model's global batch over m·d, which can be
    large (llama3-8b: 256 sequences / 8 = 32 per microbatch): every modelled text report names it."""
    plain = ["-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "dgx-h100"]
    batch = load_model("llama3-8b").global_batch_size
    expected = f"simulated: llama3-8b on dgx-h100, 8 microbatches of {batch // 8} sequences x 8,192 tokens (global batch {batch})"
    solver = ["--time-limit", "5", "--workers", "1"]
    for args in (["evaluate", "-s", "1f1b", *plain], ["evaluate", "-s", "all", *plain], ["compare", *plain],
                 ["search", *plain, *solver, "--no-grid"], ["gap", "-s", "1f1b", *plain, *solver],
                 ["frontier", *plain, *solver, "--limits", "1000GiB"]):
        result = run(*args)
        assert result.exit_code == 0, (args, result.output)
        assert expected + ", t1 d1, recompute none; times are the pipeline's" in result.output, args
    # with the job fields: b = 2 per replica, 2·8·2 = 32 sequences in all (BASE's global batch)
    result = run("evaluate", "-s", "1f1b", *BASE, *JOB, "--sequence-parallel")
    assert ("8 microbatches of 2 sequences x 8,192 tokens per replica (global batch 32 over 2 replicas), t2 d2, "
            "recompute selective, sequence parallel; times are the pipeline's, peaks with each device's working set "
            "(`ppopt job` adds the gradient all-reduce and the optimizer step)\n") in result.output
    # nothing is simulated in unit mode, and CSV stays a bare table
    assert "simulated:" not in run("evaluate", "-s", "1f1b", "-p", "4", "-m", "8").output
    assert "simulated:" not in run("gap", "-s", "1f1b", *plain, *solver, "--format", "csv").output


def test_modelled_json_names_the_job_it_simulated():
    """The `simulated:` line's fields in --json: in each simulated row of evaluate and compare, at the
    top of the solver commands' output (null in unit mode)."""
    plain = ["-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "2", "--dp", "2",
             "--micro-batch", "4"]
    expected = {"model": "llama3-8b", "system": "dgx-h100", "microbatches": 8, "micro_batch": 4, "global_batch": 4 * 8 * 2,
                "seq_length": load_model("llama3-8b").seq_length, "tp": 2, "dp": 2, "recompute": "none",
                "sequence_parallel": False, "distributed_optimizer": False, "working_set": True}
    one = json.loads(run("evaluate", "-s", "1f1b", *plain, "--json").stdout)
    assert one["simulation"]["job"] == expected
    for row in json.loads(run("compare", *plain, "--json").stdout):
        assert row["simulation"]["job"] == expected
    solver = ["--time-limit", "5", "--workers", "1", "--json", "-q"]
    assert json.loads(run("search", *plain, *solver).stdout)["job"] == expected
    assert json.loads(run("gap", "-s", "1f1b", *plain, *solver).stdout)["job"] == expected
    assert json.loads(run("search", "-p", "4", "-m", "8", "--unit", *solver).stdout)["job"] is None
    assert "simulation" not in json.loads(run("evaluate", "-s", "1f1b", "-p", "4", "-m", "8", "--json").stdout)


def test_export_simulates_the_job_as_evaluate_does(tmp_path):
    """export took no job fields: a searched schedule exported with --model/--system was simulated
    at t = 1 with the model's global batch (279.8 s where the search had 5.1 s). It now takes them,
    writes the trace evaluate writes for the same job, and names the job on stderr."""
    fields = ["-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "dgx-h100", *JOB, "--micro-batch", "1"]
    exported, evaluated = tmp_path / "export.json", tmp_path / "evaluate.json"
    result = run("export", "-s", "zb-v", *fields, "-o", str(exported))
    assert result.exit_code == 0, result.output
    assert ("simulated: llama3-8b on dgx-h100, 8 microbatches of 1 sequence x 8,192 tokens per replica (global batch 16 "
            "over 2 replicas), t2 d2, recompute selective") in result.stderr
    assert run("evaluate", "-s", "zb-v", *fields, "--trace", str(evaluated)).exit_code == 0
    assert json.loads(exported.read_text()) == json.loads(evaluated.read_text())
    plain = run("export", "-s", "zb-v", "-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "dgx-h100",
                "-o", str(tmp_path / "plain.json"))
    assert plain.exit_code == 0 and json.loads((tmp_path / "plain.json").read_text()) != json.loads(exported.read_text())
    half = run("export", "-s", "zb-v", "-p", "4", "-m", "8", "--model", "llama3-8b", "-o", str(tmp_path / "half.json"))
    assert (half.exit_code, half.output) == (1, "error: give both --model and --system (see 'ppopt export --help')\n")


@pytest.mark.parametrize("args, line", [
    (["job", "--model", "llama3-8b", "--system", "dgx-a100", "--pp", 4, "--sequence-parallel"],
     "error: --sequence-parallel: splits activations over the tensor-parallel ranks, and t = 1"),
    (["evaluate", "-s", "1f1b", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-a100", "--distributed-optimizer"],
     "error: --distributed-optimizer: shards the optimizer state over the data-parallel replicas, and d = 1"),
])
def test_a_job_flag_with_no_group_to_act_on_is_refused(args, line):
    """--sequence-parallel at t = 1 and --distributed-optimizer at d = 1 changed nothing but were
    shown in the job's label as if they had."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 1 and result.output.startswith(line), result.output


def test_messages_count_in_the_singular_for_one():
    """A global batch of one sequence is one sequence, not "1 sequences"; counts keep their separators."""
    from ppopt.errors import counted

    assert [counted(1, "sequence"), counted(2, "sequence"), counted(1024, "microbatch"), counted(1, "microbatch")] == [
        "1 sequence", "2 sequences", "1,024 microbatches", "1 microbatch"]
    result = run("evaluate", "-s", "1f1b", "-p", "2", "-m", "2", "--model", "llama3-8b", "--system", "dgx-a100",
                 "--global-batch", "1")
    assert (result.exit_code, result.output) == (
        1, "error: --microbatches: 2 microbatches exceed the global batch of 1 sequence (give fewer, or a larger global batch)\n")
    result = run("evaluate", "-s", "1f1b", "-p", "3", "-m", "5", "--model", "llama3-8b", "--system", "dgx-a100")
    assert result.output == ("error: --microbatches: global batch of 256 sequences is not divisible by 5 microbatches "
                             "(give a divisor, or another global batch)\n")


def test_a_batch_that_does_not_split_is_named_by_the_microbatches_with_or_without_replicas():
    """--dp 3 blamed --global-batch for 256 sequences not splitting into 4 x 3, where the same
    problem without replicas (--global-batch 6, 4 microbatches) blamed --microbatches: one field for
    one problem now, with the three ways out."""
    common = ["evaluate", "-s", "1f1b", "-p", "4", "-m", "4", "--model", "study", "--system", "mid-mid"]
    with_replicas = CliRunner().invoke(main, [*common, "--dp", "3"])
    assert (with_replicas.exit_code, with_replicas.output) == (
        1, "error: --microbatches: global batch of 256 sequences does not split into 4 microbatches x 3 replicas "
           "(give another count, data-parallel degree or global batch)\n")
    without = CliRunner().invoke(main, [*common, "--global-batch", "6"])
    assert without.exit_code == 1 and without.output.startswith("error: --microbatches: global batch of 6 sequences")


@pytest.mark.parametrize("field", ["tp", "pp", "dp", "micro_batch"])
def test_a_job_refuses_true_as_a_degree_as_its_parallelism_does(field):
    """Parallelism(tp=True) was refused ("must be a positive integer, got True") and Job's chunks
    and waves too, but Job(tp=True) was taken as t = 1."""
    from ppopt.errors import ConfigError

    sizes = {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1} | {field: True}
    with pytest.raises(ConfigError) as raised:
        Job(load_model("llama3-8b"), load_system("dgx-a100"), **sizes)
    assert (raised.value.field, raised.value.reason) == (field, "must be a positive integer, got True")
    if field != "pp":
        with pytest.raises(ConfigError, match="must be a positive integer, got True"):
            Parallelism(**{field: True})


def test_job_takes_the_schedule_and_the_devices_as_the_other_commands_do():
    """`job -s` was a click choice with its own error, and `--devices` (which every other command
    takes for -p) was unknown to it; `-s all` names the flag as table and export do."""
    wrong = run("job", "--model", "llama3-8b", "--system", "dgx-h100", "-s", "zb-h7")
    evaluated = run("evaluate", "-s", "zb-h7", "-p", "4", "-m", "8")
    assert wrong.exit_code == evaluated.exit_code == 1 and wrong.output == evaluated.output
    assert evaluated.output.startswith("error: unknown schedule 'zb-h7' (known: gpipe, 1f1b,")
    common = ["--model", "llama3-8b", "--system", "dgx-h100", "-s", "zb-h1", "--global-batch", "32", "--json"]
    assert run("job", "--devices", "4", *common).stdout == run("job", "--pp", "4", *common).stdout
    assert json.loads(run("job", "--devices", "4", *common).stdout)["pp"] == 4
    every = run("job", "--model", "llama3-8b", "--system", "dgx-h100", "-s", "all")
    assert every.output == "error: --schedule: 'all' is for `ppopt evaluate`, `gap` and `plan` (`ppopt compare` ranks them all); this command takes one schedule\n"


def test_selective_recomputation_of_a_fused_attention_model_is_noted_as_saving_nothing():
    """Llama's fused attention stores no scores, all that selective recomputation drops: the mode
    costs its recomputed attention core and keeps the same memory. The README's own example used it."""
    common = ["--model", "llama3-70b", "--system", "dgx-h100", "--tp", 8, "--pp", 8, "--micro-batch", 1, "--sequence-parallel",
              "--json"]
    selective = run("job", *common, "--recompute", "selective")
    plain = run("job", *common, "--recompute", "none")
    a, b = json.loads(selective.stdout), json.loads(plain.stdout)
    assert a["peak_memory_bytes"] == b["peak_memory_bytes"] and a["step_time_s"] > b["step_time_s"]
    assert selective.stderr.startswith("note: --recompute selective saves no memory for llama3-70b") and plain.stderr == ""
    unfused = run("job", "--model", "study", "--system", "dgx-h100", "--tp", 8, "--pp", 8, "--micro-batch", 1,
                  "--recompute", "selective", "--json")
    assert unfused.exit_code == 0 and "note: --recompute selective" not in unfused.stderr
    for command in (["evaluate", "-s", "1f1b"], ["compare"]):  # the same note where a schedule is simulated
        result = run(*command, "-p", 4, "-m", 8, "--model", "llama3-70b", "--system", "dgx-h100", "--tp", 8, "--micro-batch", 1,
                     "--recompute", "selective")
        assert result.exit_code == 0 and "note: --recompute selective saves no memory for llama3-70b" in result.stderr


def test_an_uneven_layer_split_is_shown_where_it_is_simulated():
    """80 layers over 7 stages ran as 12,12,12,11,11,11,11 without a word (plan says the even split
    needs p to divide the layers); job's line gives the split, evaluate a note, an even split neither."""
    job = run("job", "--model", "llama3-70b", "--system", "dgx-h100", "--tp", 8, "--pp", 7, "--micro-batch", 1)
    assert job.stdout.splitlines()[0].endswith("(1f1b, recompute none, layers per stage 12,12,12,11,11,11,11)")
    even = run("job", "--model", "llama3-70b", "--system", "dgx-h100", "--tp", 8, "--pp", 8, "--micro-batch", 1)
    assert even.stdout.splitlines()[0].endswith("(1f1b, recompute none)")
    common = ["evaluate", "-s", "1f1b", "--model", "llama3-70b", "--system", "dgx-h100", "--tp", 8, "--micro-batch", 1]
    uneven = run(*common, "-p", 7, "-m", 14)
    assert "note: 80 layers over 7 stages: 12,12,12,11,11,11,11 per stage (the first stages take the remainder)" in uneven.stderr
    assert "layers over" not in run(*common, "-p", 8, "-m", 16).stderr
    for every in (["evaluate", "-s", "all"], ["compare"]):  # once for all: no multiple of 7 divides 80
        result = run(*every, "--model", "llama3-70b", "--system", "dgx-h100", "--tp", 8, "--micro-batch", 1, "-p", 7, "-m", 14)
        assert "note: 80 layers do not divide over p = 7: every schedule's stages split unevenly" in result.stderr
        even = run(*every, "--model", "llama3-70b", "--system", "dgx-h100", "--tp", 8, "--micro-batch", 1, "-p", 8, "-m", 16)
        assert even.exit_code == 0 and "do not divide over" not in even.stderr


def test_job_says_when_the_gradient_sync_is_overlapped():
    """`job --overlap-grad-sync` printed the same header and JSON as without it, a grad sync of 0.0 ms
    unexplained; the header and JSON now say so and the line says what its figure is. At d = 1 there
    is no all-reduce to overlap: refused, as --distributed-optimizer is there."""
    common = ("job", "--model", "llama3-8b", "--system", "dgx-h100", "--dp", "16")
    plain, overlapped = run(*common), run(*common, "--overlap-grad-sync")
    assert "gradient sync overlapped" in overlapped.output.splitlines()[0] and "overlapped" not in plain.output
    assert "  grad sync" in overlapped.output and "(the part the last backward does not hide)" in overlapped.output
    hidden, shown = (json.loads(run(*common, *extra, "--json").stdout) for extra in (("--overlap-grad-sync",), ()))
    assert hidden["overlap_gradient_sync"] is True and shown["overlap_gradient_sync"] is False
    assert hidden["gradient_sync_s"] < shown["gradient_sync_s"]
    alone = run("job", "--model", "llama3-8b", "--system", "dgx-h100", "--overlap-grad-sync")
    assert (alone.exit_code, alone.output) == (1, "error: --overlap-grad-sync: overlaps the data-parallel gradient all-reduce, "
                                                  "and d = 1 has none: give --dp > 1 or leave it out\n")


def test_too_many_stages_names_the_chunks_or_waves_that_make_them():
    """`--chunks 100` at p = 4 on 32 layers blamed --pp; p stages alone fit, so the chunks are named
    (and --pp when p alone is too many)."""
    base = ("job", "--model", "llama3-8b", "--system", "dgx-h100")
    assert run(*base, "--pp", "4", "--schedule", "interleaved-1f1b", "--chunks", "100").output.startswith("error: --chunks: 400 stages")
    assert run(*base, "--pp", "4", "--schedule", "hanayo", "--waves", "100").output.startswith("error: --waves: 800 stages")
    assert run(*base, "--pp", "40", "--schedule", "interleaved-1f1b").output.startswith("error: --pp: 80 stages")


def test_a_numpy_global_batch_is_refused_under_its_own_name():
    """It passed the global batch's check, then failed as 'micro_batch: must be a positive integer'
    or as a schedule not defined for m = np.int64(8)."""
    import numpy as np

    from ppopt.errors import ConfigError
    from ppopt.job import Job

    with pytest.raises(ConfigError) as raised:
        Job("llama3-8b", "dgx-h100", pp=2, global_batch=np.int64(8))
    assert raised.value.field == "global_batch" and "int(...) converts it" in raised.value.reason
