"""ppopt run / profile: every setting a rank would refuse or fail on is refused before any rank
starts, in one line naming the flag (exit status 1): the seed (torch.manual_seed's range), the
threads, the devices, the steps, the profile's microbatches, and the profiles of ``run --compare``.

No test here starts a process: the launcher fails the test if it is called.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.errors import ConfigError
from ppopt.run import RunError
from ppopt.run.spec import MAX_STEPS, MAX_THREADS, SEED_RANGE, ModelSize, RunSpec

SEED = "error: --seed: must be an integer from -2^63 to 2^64 - 2 (torch.manual_seed's range; the batch uses seed + 1), got {}\n"
RUN = ("run", "-s", "1f1b", "-p", 2, "-m", 4)


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(autouse=True)
def eight_cores(monkeypatch):
    """The runs' lines do not depend on this machine's cores (two ranks on one core get a note);
    a test of the note sets its own count."""
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)


@pytest.fixture
def no_launch(monkeypatch):
    """No rank may start."""
    import ppopt.run.launcher as launcher

    monkeypatch.setattr(launcher, "launch", lambda *a, **k: pytest.fail("a process was started"))


@pytest.fixture
def launched(monkeypatch):
    """The spec the launcher is given (the launch then fails in one line instead of starting ranks);
    torch need not be installed, as no rank starts."""
    import ppopt.run as run
    import ppopt.run.execute as execute
    import ppopt.run.launcher as launcher

    monkeypatch.setattr(run, "require_torch", lambda: None)
    monkeypatch.setattr(execute, "require_torch", lambda: None)

    specs = []

    def record(spec, *args, **kwargs):
        specs.append(spec)
        raise RunError("not started")

    monkeypatch.setattr(launcher, "launch", record)
    return specs


def _refused(result, line):
    assert (result.exit_code, result.output) == (1, line)


# 1. --seed: what torch.manual_seed takes, checked before the ranks start ----------------------------


@pytest.mark.parametrize("seed", [2**70, 2**64 - 1, -(2**63) - 1])
@pytest.mark.parametrize("command", [RUN, ("profile", "-o", "x.json")])
def test_a_seed_torch_cannot_take_is_refused_before_any_rank_starts(no_launch, command, seed):
    _refused(cli(*command, "--seed", seed), SEED.format(seed))


def test_the_seed_range_is_what_the_ranks_can_seed():
    torch = pytest.importorskip("torch")
    from ppopt.run.model import build_stages, synthetic_batch

    size = ModelSize(layers=1, hidden=4, heads=1, sequence=2, microbatch_size=1, vocab=4)
    for seed in SEED_RANGE:
        RunSpec((), 2, size, seed=seed).check_values()
        build_stages(size, 1, seed, torch.float32)
        synthetic_batch(size, 1, seed)
    with pytest.raises(ValueError):  # one past the top: the batch's seed + 1 overflows inside a rank
        synthetic_batch(size, 1, SEED_RANGE[1] + 1)
    with pytest.raises(ConfigError, match=r"^seed: must be an integer"):
        RunSpec((), 2, seed=1.5).check_values()  # type: ignore[arg-type]


def test_the_seeds_at_the_ends_of_the_range_reach_the_ranks(launched):
    for seed in SEED_RANGE:
        _refused(cli(*RUN, "--seed", seed), "running 1 schedule(s) on 2 local ranks (gloo, 127.0.0.1)\nerror: not started\n")
    assert [spec.seed for spec in launched] == list(SEED_RANGE)


# 2. --threads -------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [RUN, ("profile", "-o", "x.json")])
def test_more_threads_than_the_limit_are_refused_before_any_rank_starts(no_launch, command):
    _refused(cli(*command, "--threads", 100000), "error: --threads: must be at most 256 torch threads per rank, got 100000\n")
    _refused(cli(*command, "--threads", MAX_THREADS + 1), "error: --threads: must be at most 256 torch threads per rank, got 257\n")
    _refused(cli(*command, "--threads", 0), "error: --threads: must be >= 1, got 0\n")


def test_a_one_word_vocabulary_is_refused_before_any_rank_starts(no_launch):
    """--vocab 1 ran, and its gradient check passed comparing zeros: with one word the cross-entropy
    and every gradient are 0."""
    _refused(cli(*RUN, "--vocab", 1), "error: --vocab: must be >= 2 (one word makes every loss and gradient 0), got 1\n")


def test_the_thread_limit_itself_reaches_the_ranks(launched):
    _refused(cli(*RUN, "--threads", MAX_THREADS),
             "running 1 schedule(s) on 2 local ranks (gloo, 127.0.0.1)\nnote: 2 ranks x 256 thread(s) on 8 core(s): the ranks "
             "take turns on the cores, so the measured times include waiting for one\nerror: not started\n")
    assert launched[0].threads == 256


@pytest.mark.parametrize("cores, noted", [(1, True), (2, False), (8, False)])
def test_ranks_that_outnumber_the_cores_get_a_note(launched, monkeypatch, cores, noted):
    """`run --compare` at p = 4 on 2 cores was 62 % off its prediction without a word of why."""
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    for quiet in ((), ("-q",)):  # a note on the result, said with -q too, as -q's help promises
        output = cli(*RUN, *quiet).output
        assert ("note: 2 ranks x 1 thread(s) on 1 core(s): the ranks take turns on the cores" in output) is noted
        assert ("note:" in output) is noted


# 3. profile's microbatches: its two schedules are generated before the ranks start -----------------


@pytest.mark.parametrize(("args", "line"), [
    (("-m", 0), "error: --microbatches: must be an integer >= 1, got 0\n"),
    (("-m", -3), "error: --microbatches: must be an integer >= 1, got -3\n"),
    (("-m", 1), "error: --microbatches: zb-h1 needs microbatches >= devices (m >= p), got m = 1 < p = 2\n"),
    (("-m", 1, "-v", 2), "error: --microbatches: interleaved-1f1b needs microbatches to be a multiple of devices (2), got 1: 2 would do\n"),
    (("-m", 3, "-v", 2), "error: --microbatches: interleaved-1f1b needs microbatches to be a multiple of devices (2), got 3: "
                         "2 or 4 would do\n"),
])
def test_profile_microbatches_its_schedules_cannot_take_are_refused_before_any_rank_starts(no_launch, args, line):
    _refused(cli("profile", *args, "-o", "x.json"), line)


# 4. the other settings: devices, steps, warmup, p2p repeats, and run --compare's profiles ----------


@pytest.mark.parametrize("command", [("run", "-s", "1f1b", "-m", 4), ("profile", "-o", "x.json")])
@pytest.mark.parametrize("layers", [(), ("--layers", 65)])
def test_more_ranks_than_the_limit_are_refused_before_any_rank_starts(no_launch, command, layers):
    """Without --layers (4 by default) the error named --layers ("at least 65 layers"), a flag not
    given, while the bound is the rank count's."""
    least = "2 to 64 ranks (a message needs two; " if command[0] == "profile" else "1 to 64 ranks ("
    _refused(cli(*command, "-p", 65, *layers), f"error: --devices: must be from {least}processes on this machine), got 65\n")


def test_a_rank_count_over_the_limit_is_refused_before_a_schedule_is_built(no_launch, monkeypatch):
    """-p 1000000 built and validated a million-rank 1F1B (30 s) before the rank limit refused it."""
    import ppopt.generators

    def never(*args, **kwargs):
        raise AssertionError("a schedule was built")

    monkeypatch.setattr(ppopt.generators, "generate", never)
    _refused(cli("run", "-s", "1f1b", "-p", 1000000, "-m", 4),
             "error: --devices: must be from 1 to 64 ranks (processes on this machine), got 1000000\n")


@pytest.mark.parametrize("flag", ["--steps", "--warmup"])
@pytest.mark.parametrize("command", [RUN, ("profile", "-o", "x.json")])
def test_more_steps_than_the_limit_are_refused_before_any_rank_starts(no_launch, command, flag):
    _refused(cli(*command, flag, MAX_STEPS + 1), f"error: {flag}: must be at most 1,000,000, got 1000001\n")


def test_the_settings_without_a_flag_are_checked_too():
    for field, value, reason in [("p2p_repeats", -1, "must be >= 0, got -1"), ("p2p_repeats", MAX_STEPS + 1, "must be at most 1,000,000, got 1000001"),
                                 ("devices", 0, "must be from 1 to 64 ranks (processes on this machine), got 0")]:
        with pytest.raises(ConfigError) as caught:
            RunSpec(**{"jobs": (), "devices": 2, field: value}).check_values()
        assert str(caught.value) == f"{field}: {reason}"
    RunSpec((), 64, steps=MAX_STEPS, warmup=MAX_STEPS, p2p_repeats=MAX_STEPS).check_values()  # the limits themselves


def test_a_compare_whose_profile_cannot_run_is_refused_before_the_run_starts(no_launch, tmp_path):
    after = "give --costs FILE from `ppopt profile`\n"
    _refused(cli("run", "-s", "1f1b", "-p", 1, "-m", 4, "--compare"),
             "error: --compare: cannot profile 1 stage(s) on 1 rank(s) after the run (--devices: must be from 2 to 64 ranks "
             f"(a message needs two; processes on this machine), got 1); {after}")
    _refused(cli("run", "-s", "1f1b", "-p", 2, "-m", 1, "--compare"),
             "error: --compare: cannot profile 2 stage(s) on 2 rank(s) after the run (--microbatches: zb-h1 needs "
             f"microbatches >= devices (m >= p), got m = 1 < p = 2); {after}")
    _refused(cli("run", "-s", "interleaved-1f1b", "-p", 2, "-m", 4, "-v", 3, "--layers", 6, "--compare"),
             "error: --compare: cannot profile 6 stage(s) on 2 rank(s) after the run (--chunks: must be 1 or 2 stages per "
             f"rank, got 3); {after}")
    three = tmp_path / "three.csv"  # stages 0 and 2 on rank 0, stage 1 on rank 1
    three.write_text("0F0,2F0,2B0,0B0\n1F0,1B0\n")
    _refused(cli("run", three, "--compare"),
             f"error: --compare: cannot profile 3 stage(s) on 2 rank(s) after the run (not a whole number of stages per rank); {after}")


def test_a_compare_whose_profile_can_run_reaches_the_ranks(launched):
    _refused(cli(*RUN, "--compare"), "running 1 schedule(s) on 2 local ranks (gloo, 127.0.0.1)\nerror: not started\n")


@pytest.mark.parametrize("extra, line", [
    (["-p", 3, "-m", 4], "error: --devices: 3 differs from the 2 of {path} (a schedule file gives its own sizes)\n"),
    (["-p", 2, "-m", 8], "error: --microbatches: 8 differs from the 4 of {path} (a schedule file gives its own sizes)\n"),
    (["-v", 2], "error: --chunks: only applies with --schedule (a schedule file gives its own sizes)\n"),
])
def test_run_refuses_sizes_a_schedule_file_gives_itself(no_launch, tmp_path, extra, line):
    """They were ignored: the file's 2 ranks and 4 microbatches ran."""
    path = tmp_path / "s.csv"
    assert cli("export", "-s", "1f1b", "-p", 2, "-m", 4, "-o", path).exit_code == 0
    _refused(cli("run", path, *extra), line.format(path=path))


def test_run_takes_sizes_that_repeat_the_file_s_as_evaluate_does(launched, tmp_path):
    path = tmp_path / "s.csv"
    assert cli("export", "-s", "1f1b", "-p", 2, "-m", 4, "-o", path).exit_code == 0
    assert cli("evaluate", "--schedule-file", path, "-p", 2, "-m", 4).exit_code == 0
    result = cli("run", path, "-p", 2, "-m", 4)
    assert result.exit_code == 1 and "not started" in result.output  # it reached the launcher
    (spec,) = launched
    assert [(job.stages, job.microbatches) for job in spec.jobs] == [(2, 4)]


def test_run_refuses_chunks_no_schedule_takes_and_gives_them_to_those_that_do(launched):
    _refused(cli(*RUN, "-v", 2), "error: --chunks: none of the schedules given takes it (only interleaved-1f1b, looped-bfs)\n")
    result = cli("run", "-s", "looped-bfs", "-s", "1f1b", "-p", 2, "-m", 4, "-v", 3, "--layers", 6)
    assert result.exit_code == 1 and "not started" in result.output
    (spec,) = launched
    assert [job.stages for job in spec.jobs] == [6, 2]  # looped-bfs with 3 chunks per rank, 1f1b with one


def test_a_schedule_file_with_too_many_ranks_names_the_file(no_launch, tmp_path):
    """It named --devices, a flag that cannot be given beside a file."""
    path = tmp_path / "big.csv"
    assert cli("export", "-s", "1f1b", "-p", 65, "-m", 1, "-o", path).exit_code == 0
    _refused(cli("run", path, "--layers", 65), f"error: {path}: 65 ranks; a run takes at most 64 (processes on this machine)\n")


# 6. -q, as every other command that prints progress takes it ----------------------------------------


@pytest.mark.parametrize("command, progress", [
    (RUN, "running 1 schedule(s) on 2 local ranks (gloo, 127.0.0.1)\n"),
    (("profile", "-o", "cost.json"), "profiling 2 stages on 2 local ranks (gloo, 127.0.0.1)\n"),
])
def test_run_and_profile_take_quiet_as_the_other_commands_do(launched, tmp_path, monkeypatch, command, progress):
    """run and profile printed their progress line with no way to silence it: -q was refused as an
    unknown option, where import, export, evaluate, search, plan, sweep and calibrate take it."""
    monkeypatch.chdir(tmp_path)
    _refused(cli(*command), progress + "error: not started\n")
    _refused(cli(*command, "-q"), "error: not started\n")
    _refused(cli(*command, "--quiet"), "error: not started\n")


def test_run_refuses_chunks_below_one_as_evaluate_does(no_launch):
    """run passed --chunks 0 to the generator ("must be an integer >= 1 (model chunks per device)");
    evaluate, table, export and the solver commands check it first, in their own words."""
    expected = "error: --chunks: must be a positive integer, got 0\n"
    _refused(cli("evaluate", "-s", "interleaved-1f1b", "-p", 2, "-m", 4, "--chunks", 0), expected)
    _refused(cli("run", "-s", "interleaved-1f1b", "-p", 2, "-m", 4, "--chunks", 0), expected)


def test_a_compare_profile_gets_what_is_left_of_the_timeout_and_its_failure_keeps_the_run(monkeypatch, still_clock):
    """The profile after the run had a whole --timeout of its own (a 10 s limit ended after 20 s), and
    when it failed the run's table, already measured, was thrown away."""
    import ppopt.report.run as report
    import ppopt.run as run
    import ppopt.run.execute as execute
    import ppopt.run.profile as profiling

    monkeypatch.setattr(run, "require_torch", lambda: None)
    clock = still_clock("ppopt.cli.run")  # the run's 0.3 s on a clock of the test's own, whatever the load

    def slow_run(schedules, settings):
        clock.jump(0.3)
        return ["result"], None

    monkeypatch.setattr(execute, "run_schedules", slow_run)
    monkeypatch.setattr(report, "run_text", lambda results, settings, comparisons: f"TABLE of {results}, {comparisons}")
    given = []

    def failing_profile(devices, microbatches, chunks, settings):
        given.append(settings.timeout_s)
        raise RunError(f"the ranks did not finish within {settings.timeout_s:.0f} s (--timeout); stopped all ranks")

    monkeypatch.setattr(profiling, "profile", failing_profile)
    result = cli(*RUN, "--compare", "--timeout", 10)
    assert result.exit_code == 1
    assert given == [pytest.approx(9.7)]  # 10 s less the run's 0.3 s
    lines = result.output.splitlines()
    assert "TABLE of ['result'], None" in lines
    assert lines[-1] == ("error: --compare: the run's table is above, without its comparison: profiling for it failed (the "
                         "ranks did not finish within 10 s (--timeout); stopped all ranks); give --costs FILE from `ppopt "
                         "profile`, or a longer --timeout")
    monkeypatch.setattr("ppopt.report.run.run_json", lambda results, settings, comparisons: {"runs": results})
    as_json = cli(*RUN, "--compare", "--timeout", 10, "--json")  # no table there: the JSON is what came before
    assert as_json.exit_code == 1 and json.loads(as_json.stdout) == {"runs": ["result"]}
    assert as_json.stderr.splitlines()[-1].startswith("error: --compare: the run's JSON is on standard output, without")


@pytest.mark.parametrize("codes, errors, named", [
    # rank 1 ended by SIGTERM (its handler exits 1); rank 0 then lost its peer: rank 1 is the cause
    ((1, 1), ("rank 0: RuntimeError: [pair.cc:537] Read error [127.0.0.1]:1: Connection reset by peer", "rank 1: interrupted"),
     "rank 1 failed (exit status 1): rank 1: interrupted; stopped the other ranks"),
    # a rank killed by a signal comes before one that exited with an error
    ((1, -9), ("rank 0: RuntimeError: something", ""), "rank 1 failed (killed by SIGKILL): no message; stopped the other ranks"),
    # two errors of their own: the first rank
    ((1, 1), ("rank 0: ValueError: a", "rank 1: ValueError: b"), "rank 0 failed (exit status 1): rank 0: ValueError: a; stopped the other ranks"),
])
def test_the_failed_rank_named_is_the_cause_not_a_peer_that_lost_it(tmp_path, codes, errors, named):
    from types import SimpleNamespace

    from ppopt.run.launcher import _wait

    for rank, text in enumerate(errors):
        (tmp_path / f"rank{rank}.err").write_text(text + "\n" if text else "")
    processes = [SimpleNamespace(exitcode=code) for code in codes]
    with pytest.raises(RunError) as failed:
        _wait(processes, float("inf"), 10.0, tmp_path)
    assert failed.value.reason == named


def test_a_run_that_lasts_says_it_is_still_working(monkeypatch):
    """A run or profile printed one line and then nothing until it ended, even over minutes. The
    heartbeat is a stand-in that beats once while the run is inside it (its timing is tested in
    tests/test_cli.py), so what is asserted does not depend on the load."""
    import contextlib
    from types import SimpleNamespace

    import ppopt.report.run as report
    import ppopt.run as run
    import ppopt.run.execute as execute
    import ppopt.solve.options as shared

    inside = []

    @contextlib.contextmanager
    def one_beat(say, every_s, first_s=None):
        inside.append(True)
        yield
        say(0.4)  # the run has ended within the block: a beat while it ran would say this
        inside.pop()

    monkeypatch.setattr(shared, "heartbeat", one_beat)

    def slow_run(schedules, settings):
        assert inside, "the run is not inside the heartbeat"
        return [SimpleNamespace(check=None)], None

    monkeypatch.setattr(run, "require_torch", lambda: None)
    monkeypatch.setattr(execute, "run_schedules", slow_run)
    monkeypatch.setattr(report, "run_text", lambda results, settings, comparisons: "TABLE")
    result = cli(*RUN)
    assert result.exit_code == 0 and "run: still working (0 s)" in result.output.splitlines()
    assert "still working" not in cli(*RUN, "-q").output


def test_run_json_names_where_its_predictions_came_from(monkeypatch, tmp_path):
    """run --compare --json gave predictions without saying whether a preset (--costs) or a profile
    measured after the run timed them."""
    import ppopt.cli.run as command
    import ppopt.report.run as report
    import ppopt.run as run
    import ppopt.run.execute as execute

    monkeypatch.setattr(run, "require_torch", lambda: None)
    from types import SimpleNamespace

    monkeypatch.setattr(execute, "run_schedules", lambda schedules, settings: ([SimpleNamespace(check=None)], None))
    monkeypatch.setattr(command, "_compare", lambda *args, **kwargs: ["compared"])
    monkeypatch.setattr(command, "_presets", lambda *args, **kwargs: {})
    monkeypatch.setattr(report, "run_json", lambda results, settings, comparisons: {"runs": ["result"]})
    profiled = cli(*RUN, "--compare", "--json")
    assert profiled.exit_code == 0, profiled.output
    assert json.loads(profiled.stdout) == {"runs": ["result"], "predicted_from": "a profile measured after the run"}
    preset = cli(*RUN, "--compare", "--costs", tmp_path / "c.json", "--json")
    assert json.loads(preset.stdout)["predicted_from"] == str(tmp_path / "c.json")
    assert "predicted_from" not in json.loads(cli(*RUN, "--json").stdout)  # no prediction, no source
