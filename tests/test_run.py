"""ppopt run / profile: schedules executed in PyTorch's runtime on local gloo ranks (127.0.0.1).

The gradient tests launch the ranks once per device count for all schedules (process start and
``import torch`` dominate), in float64 so the pipelined loss and gradients must equal the
non-pipelined model's to 1e-9 relative (they differ only by the order of summation over
microbatches). Skipped without torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.costs import Costs, StageCost
from ppopt.errors import ConfigError, ScheduleError
from ppopt.generators import generate, names
from ppopt.io.cost_preset import read_cost_preset, write_cost_preset
from ppopt.io.torch_csv import read_torch_csv
from ppopt.run import INSTALL_HINT, RunError
from ppopt.run.spec import ModelSize, RunSpec

NAMES = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "search"]
MORE = ["looped-bfs", "hanayo", "zb-h2", "v-min", "v-half", "dualpipev"]
"""Families run in the same launches, checked by one test each per device count (DualPipeV only at p = 2)."""
TINY = ModelSize(layers=8, hidden=16, heads=2, sequence=8, microbatch_size=1, vocab=32)


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _launch(tmp_path_factory, devices):
    pytest.importorskip("torch.distributed.pipelining")
    from ppopt.run.execute import run_schedules

    schedules = [generate(name, devices, 4) for name in NAMES[:-1]]
    schedules.append(read_searched(tmp_path_factory.mktemp("search"), devices))
    names = list(NAMES)
    for name in MORE:  # the other families PyTorch's runtime can place, where they are defined at m = 4
        try:
            schedules.append(generate(name, devices, 4))
        except ScheduleError:  # DualPipeV needs m >= 2p
            continue
        names.append(name)
    if devices == 4:  # stages 1 and 2 out of their neighbours' order, the last stage's backwards too
        names.append("middle")
        schedules.append(read_torch_csv_text(MIDDLE, tmp_path_factory.mktemp("middle")))
    results, _ = run_schedules(schedules, RunSpec((), devices, TINY, steps=1, warmup=0, dtype="float64", timeout_s=60))
    return dict(zip(names, results, strict=True))


MIDDLE = ("0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\n1F1,1F0,1F2,1F3,1B1,1B0,1B2,1B3\n"
          "2F0,2F1,2F3,2F2,2B0,2B1,2B3,2B2\n3F0,3F1,3F2,3F3,3B3,3B2,3B1,3B0\n")
"""GPipe on four ranks with the middle stages' microbatches out of order and the last stage's backwards reversed."""


def read_searched(folder, devices):
    path = folder / f"search{devices}.csv"
    result = cli("search", "-p", devices, "-m", 4, "--unit", "--space", "placement=linear,backward=split",
                 "--time-limit", 10, "-q", "--no-grid", "--csv", path)
    assert result.exit_code == 0, result.output
    return read_torch_csv(path)


@pytest.fixture(scope="module")
def ran2(tmp_path_factory):
    return _launch(tmp_path_factory, 2)


@pytest.fixture(scope="module")
def ran4(tmp_path_factory):
    return _launch(tmp_path_factory, 4)


def test_the_gradient_check_fails_on_a_wrong_gradient_and_a_wrong_loss():
    """The negative control of the runs' gradient check: what it compares is a copy of the stage's
    gradients, so a difference past torch.allclose's tolerance, a missing gradient or a loss off the
    reference's must each make it fail, naming what differs."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from ppopt.run.worker import _gradient_check

    def stage(grad):
        module = torch.nn.Linear(2, 1, bias=False, dtype=torch.float64)
        module.weight.grad = None if grad is None else torch.tensor([grad], dtype=torch.float64)
        return module

    spec = SimpleNamespace(dtype="float64")  # rtol 1e-9, atol 1e-12
    reference = {0: stage([1.0, 2.0])}
    losses = [torch.tensor(3.0, dtype=torch.float64)]
    same = _gradient_check(spec, {0: stage([1.0, 2.0])}, reference, losses, 3.0, last=True)
    assert same["ok"] and same["elements"] == 2 and same["mismatches"] == []
    off = _gradient_check(spec, {0: stage([1.0, 2.0 + 1e-6])}, reference, losses, 3.0, last=False)
    assert not off["ok"] and off["mismatches"] == ["stage 0 weight: max difference 1e-06"]
    assert off["max_abs_error"] == pytest.approx(1e-6)
    missing = _gradient_check(spec, {0: stage(None)}, reference, losses, 3.0, last=False)
    assert not missing["ok"] and missing["mismatches"] == ["stage 0 weight: no gradient"]
    wrong_loss = _gradient_check(spec, {0: stage([1.0, 2.0])}, reference, losses, 3.1, last=True)
    assert not wrong_loss["ok"] and wrong_loss["mismatches"] == ["loss 3.0 != reference 3.1"]


def _assert_equal_to_reference(result, devices):
    check = result.check
    assert check["ok"], check["mismatches"]
    # the promise: every gradient element within 1e-12 + 1e-9·|g_ref| of the reference (allclose in
    # float64, ppopt.run.spec.TOLERANCES). The largest absolute difference within the absolute part
    # alone meets it for every element, whatever |g_ref| (summation order leaves about 1e-16 here).
    # max_rel_error is not the promise: it divides by max(|g_ref|, atol), so a gradient near 1e-9 with
    # a 1e-16 difference makes it about 1e-7.
    assert (check["rtol"], check["atol"]) == (1e-9, 1e-12)
    assert check["max_abs_error"] <= 1e-12
    # every parameter of the model was compared (the closed form of ModelSize.stage_parameters)

    assert check["elements"] == sum(TINY.stage_parameters(result.stages))
    assert abs(check["loss"] - check["reference_loss"]) <= 1e-12 * check["reference_loss"]
    assert result.devices == devices and len(result.step_s) == 1


@pytest.mark.parametrize("name", NAMES)
def test_two_ranks_train_one_step_with_the_reference_gradients(ran2, name):
    _assert_equal_to_reference(ran2[name], 2)
    split = name in ("zb-h1", "zb-v", "search")
    assert set(ran2[name].kind_s()) == ({"F", "I", "W"} if split else {"F", "B"})


@pytest.mark.parametrize("name", NAMES)
def test_four_ranks_train_one_step_with_the_reference_gradients(ran4, name):
    _assert_equal_to_reference(ran4[name], 4)
    assert ran4[name].stages == (8 if name in ("interleaved-1f1b", "zb-v") else 4)


@pytest.mark.parametrize("name", MORE)
def test_the_other_families_train_with_the_reference_gradients(ran2, ran4, name):
    """Every family with a PyTorch CSV runs in PyTorch's runtime with the reference gradients: DualPipeV
    with its overlapped F&B pairs (OVERLAP_F_B), Hanayo's waves, V-Min's and V-Half's V placements."""
    _assert_equal_to_reference(ran2[name], 2)
    if name in ran4:
        _assert_equal_to_reference(ran4[name], 4)
    else:
        assert name == "dualpipev"  # m = 4 < 2p at p = 4


def test_a_middle_stage_out_of_order_trains_exactly(ran4):
    """Only the last stage's forwards must run in microbatch order (PyTorch files the losses by
    them): the runtime matches each receive to its send whatever order the other stages take."""
    _assert_equal_to_reference(ran4["middle"], 4)


def test_a_killed_rank_ends_every_rank_with_one_line(tmp_path):
    pytest.importorskip("torch.distributed.pipelining")
    from ppopt.io.torch_csv import write_torch_csv
    from ppopt.run.launcher import launch
    from ppopt.run.spec import Job

    path = tmp_path / "1f1b.csv"
    write_torch_csv(generate("1f1b", 2, 2), path)
    spec = RunSpec((Job("1f1b", str(path), 2, 2),), 2, TINY, timeout_s=60)
    started = []

    def kill_rank_1(processes):
        started.extend(processes)
        os.kill(processes[1].pid, signal.SIGKILL)

    with pytest.raises(RunError) as caught:
        launch(spec, on_started=kill_rank_1)
    assert str(caught.value) == "rank 1 failed (killed by SIGKILL): no message; stopped the other ranks"
    assert all(process.exitcode is not None for process in started)


def test_ctrl_c_while_the_ranks_start_prints_only_aborted():
    """Ctrl-C reaches every process of the command. The fork server, starting and importing torch,
    printed torch's traceback under ``aborted``, and a rank forked after the launcher had removed its
    folder printed a FileNotFoundError traceback. Sent here to the whole process group, as a terminal
    does, just after the server appears (while it imports torch)."""
    pytest.importorskip("torch.distributed.pipelining")
    import subprocess

    command = [sys.executable, "-m", "ppopt", "run", "-s", "1f1b", "-p", "2", "-m", "2", "--steps", "1", "--no-check"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    assert process.stderr is not None
    first = process.stderr.readline()  # "running 1 schedule(s) ...": the launch starts now
    server = _wait_for_the_fork_server(session=process.pid)
    _wait_until_ctrl_c_is_heard(process.pid)  # the launcher ignores it while it spawns the server; it imports torch for seconds
    os.killpg(process.pid, signal.SIGINT)
    _, rest = process.communicate(timeout=120)
    assert first.startswith(b"running 1 schedule(s) on 2 local ranks")
    assert (process.returncode, rest) == (1, b"\naborted\n")  # the line break ends the terminal's ^C, as click does
    # nor does the server, which ignores Ctrl-C, import torch on for seconds after "aborted": killed and reaped
    assert not os.path.exists(f"/proc/{server}") or "State:\tZ" in Path(f"/proc/{server}/status").read_text()


def _wait_until_ctrl_c_is_heard(pid: int, timeout_s: float = 60.0) -> None:
    """Until process ``pid`` no longer ignores SIGINT (Linux's /proc/PID/status, SigIgn: a hex mask,
    bit n - 1 for signal n), so that a Ctrl-C sent now is not lost however loaded the machine."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/status") as file:
            status = file.read()
        ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
        if not ignored & (1 << (signal.SIGINT - 1)):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} ignored Ctrl-C for {timeout_s} s")


def _start_a_long_run(tmp_path):
    """A run of 1F1B on two ranks for 100,000 steps in its own session, with its temporary folders
    in ``tmp_path``; returned once both ranks are inside their steps (their result files opened)."""
    import subprocess
    import time

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-m", "ppopt", "run", "-s", "1f1b", "-p", "2", "-m", "2", "--steps", "100000", "-q",
               "--timeout", "120"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    waited = time.monotonic() + 60
    while len(list(tmp_path.glob("ppopt-run-*/rank*.err"))) < 2 and time.monotonic() < waited:
        time.sleep(0.05)
    assert len(list(tmp_path.glob("ppopt-run-*/rank*.err"))) == 2, "the ranks never started"
    return process


def _ranks_in(folder) -> list[int]:
    """Processes holding a file under ``folder`` open (the ranks: their stderr is ``rank<R>.err`` of
    the run's folder, open until they end, even once the folder is removed)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fds = os.listdir(f"/proc/{entry}/fd")
            except OSError:  # ended meanwhile, or not ours
                continue
            links = []
            for fd in fds:  # one at a time: a rank importing torch closes files while we look (CI saw 1 of 2)
                with contextlib.suppress(OSError):
                    links.append(os.readlink(f"/proc/{entry}/fd/{fd}"))
            if any(link.startswith(str(folder) + "/") for link in links):
                found.append(int(entry))
    return found


def test_sigterm_stops_the_ranks_and_removes_the_folders_as_ctrl_c_does(tmp_path):
    """`kill` ended the launcher at once: its ranks ran on (every step, nobody waiting) and the run's
    folders stayed behind."""
    pytest.importorskip("torch.distributed.pipelining")
    process = _start_a_long_run(tmp_path)
    try:
        assert len(_ranks_in(tmp_path)) == 2
        process.terminate()
        _, err = process.communicate(timeout=60)
        assert process.returncode == 1 and err.endswith(b"\naborted\n") and b"Traceback" not in err, err
        assert _ranks_in(tmp_path) == [] and list(tmp_path.iterdir()) == []
    finally:
        _end(process, tmp_path)


def test_ranks_whose_launcher_is_killed_end_themselves(tmp_path):
    """SIGKILL leaves the launcher no clean-up: the ranks watch for it and end within a second, and
    remove the run's temporary folders, which the launcher would have (they were left behind)."""
    import time

    pytest.importorskip("torch.distributed.pipelining")
    process = _start_a_long_run(tmp_path)
    try:
        assert len(_ranks_in(tmp_path)) == 2
        process.kill()
        process.wait(timeout=60)
        waited = time.monotonic() + 30
        while _ranks_in(tmp_path) and time.monotonic() < waited:
            time.sleep(0.1)
        assert _ranks_in(tmp_path) == []
        assert list(tmp_path.glob("ppopt-*")) == []  # the runs' and the CSVs' folders (multiprocessing's pymp-* aside)
    finally:
        _end(process, tmp_path)


def _end(process, folder) -> None:
    """Whatever a failed assertion left: the launcher's session and any rank, ended."""
    import signal as signals

    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signals.SIGKILL)
    for pid in _ranks_in(folder):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signals.SIGKILL)
    process.communicate(timeout=60)


def test_a_run_leaves_nothing_in_the_temporary_folder(tmp_path):
    """The fork server's socket folder (``pymp-*``) stayed behind after every run: the command line
    ended the process at once, before multiprocessing's own clean-up at the interpreter's exit."""
    pytest.importorskip("torch.distributed.pipelining")
    import subprocess

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-m", "ppopt", "run", "-s", "1f1b", "-p", "2", "-m", "2", "--steps", "1", "-q"]
    finished = subprocess.run(command, capture_output=True, env=env, timeout=120)
    assert finished.returncode == 0, finished.stderr
    assert list(tmp_path.iterdir()) == []


def _wait_for_the_fork_server(session: int) -> int:
    """The pid of a process of ``session`` running multiprocessing's fork server, once there is one
    (it then imports torch for seconds); fail after 60 s, skip where /proc does not list processes."""
    import time
    from pathlib import Path

    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to find the fork server")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) == session and b"forkserver" in (stat.parent / "cmdline").read_bytes():
                    return int(stat.parent.name)
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
        time.sleep(0.01)
    pytest.fail("no fork server started within 60 s")


def test_a_rank_whose_folder_is_gone_ends_without_a_word(tmp_path):
    """The launcher removes its folder when it gives up (Ctrl-C); a rank the fork server starts
    after that exits with status 1 and writes nothing (the traceback went to the terminal)."""
    pytest.importorskip("torch.distributed.pipelining")
    import multiprocessing

    from ppopt.run.worker import child

    error_file = tmp_path / "stderr.txt"
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=_child_with_stderr_in, args=(child, str(error_file), str(tmp_path / "gone")))
    process.start()
    process.join(timeout=120)
    assert process.exitcode == 1 and error_file.read_text() == ""


def _child_with_stderr_in(child, path, out_dir):
    """:func:`ppopt.run.worker.child` with this process's stderr in ``path`` (to read back)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(descriptor, 2)
    child("{}", 0, {}, out_dir)


def test_the_timeout_counts_from_the_first_rank_s_start(tmp_path, monkeypatch):
    """Starting 16 ranks takes seconds, and the deadline used to start only once all were running
    (`--timeout 3` finished after 9 s). Ranks that take the whole budget to start end the run before
    the next one starts. The first start is not counted: it waits for the fork server's `import
    torch` (2.4 s), which the help says comes before the timeout (`--timeout 2.5` failed a 40 ms
    run). No real process: each fake rank takes 0.2 s to start and never finishes."""
    pytest.importorskip("torch.distributed.pipelining")  # the launcher imports the worker
    import time

    import ppopt.run.launcher as launcher

    started = []

    class SlowRank:
        exitcode = None

        def __init__(self, **kwargs):
            self.pid = len(started)

        def start(self):
            time.sleep(0.2)
            started.append(self)

        def kill(self):
            self.exitcode = -9

        def join(self):
            pass

    class Context:
        Process = SlowRank

    monkeypatch.setattr(launcher, "_context", Context)
    spec = RunSpec((), 4, TINY, timeout_s=0.1)
    with pytest.raises(RunError, match=r"did not finish within 0.1 s \(--timeout\); stopped all ranks"):
        launcher.launch(spec)
    assert len(started) == 2 and all(rank.exitcode == -9 for rank in started)


def test_a_deadlocking_or_malformed_csv_is_refused_before_any_process_starts(tmp_path, monkeypatch):
    import ppopt.run.launcher as launcher

    monkeypatch.setattr(launcher, "launch", lambda *a, **k: pytest.fail("a process was started"))
    dead = tmp_path / "dead.csv"
    dead.write_text("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n")
    result = cli("run", dead)
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == f"error: {dead}: deadlock: device 0 waits at 0B0 for 1B0; device 1 waits at 1F1 for 0F1 (at row 0 (rank 0, line 1), cell 1)"
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0X0\n")
    result = cli("run", bad)
    assert result.exit_code == 1 and result.output.startswith(f"error: {bad}: row 0 (rank 0, line 1), cell 1: unknown action '0X0'")


def test_a_schedule_given_twice_runs_once(tmp_path, monkeypatch):
    import ppopt.run.execute as execute

    class Stop(Exception):
        """Stands for the launch of the ranks, which this test does not need."""

    def capture(schedules, spec):
        ran.extend(schedules)
        raise Stop

    ran: list = []
    monkeypatch.setattr(execute, "run_schedules", capture)
    monkeypatch.setattr("ppopt.run.require_torch", lambda: None)
    csv = tmp_path / "a.csv"
    csv.write_text("0F0,0B0\n1F0,1B0\n")
    result = cli("run", "-s", "1f1b", "-s", "gpipe", "-s", "1f1b", csv, csv, "-p", 2, "-m", 2, "-q")
    assert isinstance(result.exception, Stop)
    assert [s.name for s in ran] == ["a", "1f1b", "gpipe"]


def test_replicated_stages_and_bad_sizes_are_refused_in_one_line():
    result = cli("run", "-s", "chimera", "-p", 4, "-m", 4)
    assert result.exit_code == 1
    assert result.output == ("error: chimera: PyTorch's runtime cannot run replicated stages (stage 0 is on ranks 0, 3); "
                             "it places each stage on one rank\n")
    result = cli("run", "-s", "zb-v", "-p", 2, "-m", 4, "--layers", 3)
    assert result.exit_code == 1 and result.output == "error: --layers: the schedule has 4 stages, each needs a block: at least 4 layers\n"
    result = cli("run", "-s", "1f1b", "-p", 2, "-m", 4, "--hidden", 30, "--heads", 4)
    assert result.exit_code == 1 and result.output == "error: --hidden: hidden size 30 is not a multiple of 4 heads\n"
    result = cli("run", "-s", "1f1b", "-p", 2, "-m", 4, "--heads", 3)  # the flag given, not the default it meets
    assert result.exit_code == 1 and result.output == "error: --heads: hidden size 32 is not a multiple of 3 heads\n"


def test_a_last_stage_out_of_microbatch_order_is_refused(tmp_path):
    """The last stage running F1 before F0 meets every dependency (ppopt's validator accepts it), but
    PyTorch's runtime files the losses in the order the last stage's forwards run and looks them up by
    microbatch, so its backwards start from the wrong losses and the gradients differ from the
    non-pipelined model's (measured with `ppopt run`, float32 and float64 alike; also with every rank
    in the same order, 1 then 0). It is refused before any process starts, naming the two ops."""
    from ppopt.io.torch_csv import loss_order_message

    swapped = tmp_path / "swap.csv"
    swapped.write_text("0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\n1F1,1F0,1F2,1F3,1B0,1B1,1B2,1B3\n")
    result = cli("run", swapped)
    assert result.exit_code == 1
    assert result.output.startswith("error: swap: the last stage (1) runs 1F1 before 1F0; "), result.output
    same = tmp_path / "same.csv"
    same.write_text("0F1,0F0,0B1,0B0\n1F1,1F0,1B1,1B0\n")
    assert cli("run", same).output.startswith("error: same: the last stage (1) runs 1F1 before 1F0; ")
    # the middle stages may take their microbatches in another order than their neighbours, and the
    # last stage its backwards (it trains exactly: test_a_middle_stage_out_of_order_trains_exactly)
    assert loss_order_message(read_torch_csv_text(MIDDLE, tmp_path)) is None
    # every family that PyTorch's runtime can place runs its last stage's forwards in order
    checked = set()
    for name in names():
        for p, m in ((2, 4), (4, 8), (4, 12)):
            try:
                schedule = generate(name, p, m)
            except ScheduleError:  # a family's rule (e.g. DualPipe's m >= 2p)
                continue
            if all(len(set(holders)) == 1 for holders in schedule.placement):
                assert loss_order_message(schedule) is None, (name, p, m)
                checked.add(name)
    assert {"1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "dualpipev", "hanayo"} <= checked


def read_torch_csv_text(text: str, folder):
    path = folder / "schedule.csv"
    path.write_text(text)
    return read_torch_csv(path)


def test_a_rank_without_a_stage_is_refused_before_any_process_starts(tmp_path):
    """An empty line of a CSV is a rank with no op; PyTorch's runtime failed inside the ranks after
    seconds ("Pipeline group size 3 cannot be larger than number of stages 2")."""
    idle = tmp_path / "idle.csv"
    idle.write_text("0F0,0B0\n\n1F0,1B0\n")
    result = cli("run", idle)
    assert (result.exit_code, result.output) == (1, "error: idle: rank 1 holds no stage; PyTorch's runtime needs at least one "
                                                    "stage on every rank (its pipeline group of 3 ranks would be larger than "
                                                    "the 2 stages)\n")


def test_profile_sizes_are_refused_before_any_process_starts():
    for ranks in (1, 200):  # one range in one message (200 was refused as "from 1 to 64", 1 as "at least 2")
        assert cli("profile", "-p", ranks, "-o", "x.json").output == \
            f"error: --devices: must be from 2 to 64 ranks (a message needs two; processes on this machine), got {ranks}\n"
    assert cli("profile", "-v", 3, "-o", "x.json").output == "error: --chunks: must be 1 or 2 stages per rank, got 3\n"
    assert cli("profile", "-v", 2, "--layers", 3, "-o", "x.json").output.startswith("error: --layers: the schedule has 4 stages")


def test_without_torch_the_commands_say_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.distributed.pipelining", None)
    for args in (["run", "-s", "1f1b", "-p", 2, "-m", 2], ["profile", "-o", "x.json"]):
        result = cli(*args)
        assert result.exit_code == 1 and result.output == f"error: {INSTALL_HINT}\n"


def test_the_closed_form_parameter_count_is_the_model_s():
    torch = pytest.importorskip("torch")
    from ppopt.run.model import build_stages

    size = ModelSize(layers=5, hidden=24, heads=3, sequence=7, microbatch_size=1, vocab=11)
    modules = build_stages(size, 3, 0, torch.float32)
    assert size.stage_parameters(3) == [sum(p.numel() for p in m.parameters()) for m in modules]


def _costs():
    stage = StageCost(layers=1, forward_s=1.0, backward_s=2.0, input_grad_s=1.0, weight_grad_s=1.0,
                      activation_bytes=0.0, persistent_bytes=0.0, param_count=0.0, send_bytes=1e6)
    return Costs((stage, stage), 1, 4)


def test_a_cost_preset_round_trips_and_predicts_the_closed_form(tmp_path):
    from ppopt.config import LinkConfig
    from ppopt.run.compare import predict

    path = tmp_path / "costs.json"
    link = LinkConfig(bandwidth_bytes_per_s=1e6, latency_s=0.5)  # a 1 MB message takes 1.5 s
    write_cost_preset(path, _costs(), link, {"by": "test"})
    costs, read_link = read_cost_preset(path)
    assert costs == _costs() and read_link == link
    # p = 2, m = 4, F = 1, B = 2, free messages: (m + p - 1)(F + B) = 15 (Narayanan et al. 2021)
    assert predict(generate("1f1b", 2, 4), costs, None) == pytest.approx(15.0)
    # GPipe: the two messages on its critical path (0F0 -> 1F0, last 1B -> 0B) add 1.5 s each
    assert predict(generate("gpipe", 2, 4), costs, link) == pytest.approx(18.0)


def test_a_malformed_cost_preset_is_one_line(tmp_path):
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"format": "other"}))
    result = cli("run", "-s", "1f1b", "-p", 2, "-m", 2, "--compare", "--costs", path)
    assert result.exit_code == 1 and result.output.startswith("error: --costs: ") and "not a ppopt cost preset" in result.output
    write_cost_preset(path, _costs(), None, {})
    result = cli("run", "-s", "zb-v", "-p", 2, "-m", 2, "--compare", "--costs", path)
    assert result.exit_code == 1 and result.output == "error: --costs: the cost preset describes 2 stages, zb-v has 4\n"
    write_cost_preset(path, _costs(), None, {"dtype": "float64"})
    result = cli("run", "-s", "1f1b", "-p", 2, "-m", 2, "--compare", "--costs", path)
    assert result.exit_code == 1 and result.output.startswith(f"error: --costs: {path} was measured with dtype float64, this run uses float32")
    write_cost_preset(path, _costs(), None, {"dtype": "float32", "threads": 2})
    result = cli("run", "-s", "1f1b", "-p", 2, "-m", 2, "--compare", "--costs", path)
    assert result.exit_code == 1 and result.output.startswith(f"error: --costs: {path} was measured with threads 2, this run uses 1; "
                                                              "give the same --threads or profile again")
    # another model: the options that differ named, not both models' dicts printed whole
    model = dataclasses.asdict(ModelSize())
    write_cost_preset(path, _costs(), None, {"dtype": "float32", "threads": 1, "model": {**model, "hidden": 2 * model["hidden"]}})
    result = cli("run", "-s", "1f1b", "-p", 2, "-m", 2, "--compare", "--costs", path)
    assert (result.exit_code, result.output) == (1, f"error: --costs: {path} was measured with another model (hidden "
                                                     f"{2 * model['hidden']} vs {model['hidden']}: the preset's vs this run's); "
                                                     "give the same model options or profile again\n")
    data = json.loads(path.read_text())  # a part freed at I larger than the activation: StageCost's own check, one line
    data["stages"][0]["input_grad_release_bytes"] = 2 * data["stages"][0]["activation_bytes"] + 1
    path.write_text(json.dumps(data))
    result = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 2, "--costs", path)
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1
    assert "stage 0: input_grad_release_bytes must lie between 0 and activation_bytes" in result.output


def test_a_cost_preset_of_another_rank_count_is_noted(tmp_path, capsys):
    """Two stages profiled on 1 rank (chunks 2) and run on 2: the cores are shared differently."""
    from ppopt.cli.run import _presets

    path = tmp_path / "costs.json"
    schedules = [generate("1f1b", 2, 4)]
    settings = RunSpec((), 2, TINY)
    write_cost_preset(path, _costs(), None, {"devices": 1, "threads": 1})
    assert set(_presets(schedules, path, settings)) == {2}
    assert capsys.readouterr().err == (f"note: {path} was measured on 1 rank, this run uses 2: the ranks share this machine's "
                                       "cores differently, so its op times may not hold here\n")
    _presets(schedules, path, settings, quiet=True)  # a note on the result: said with -q too (-q's help promises it)
    assert capsys.readouterr().err.startswith(f"note: {path} was measured on 1 rank, this run uses 2")
    write_cost_preset(path, _costs(), None, {"devices": 2, "threads": 1})
    _presets(schedules, path, settings)
    assert capsys.readouterr().err == ""


def test_costs_from_measured_ops_fill_the_missing_backward_form():
    from ppopt.run.profile import costs_from_ops

    settings = RunSpec((), 2, TINY, dtype="float64")
    full = {(0, "F"): 1.0, (0, "B"): 3.0, (1, "F"): 2.0, (1, "B"): 4.0}
    split = {(0, "F"): 3.0, (0, "I"): 0.5, (0, "W"): 2.0, (1, "F"): 2.0, (1, "I"): 1.0, (1, "W"): 2.0}
    both = costs_from_ops(settings, 2, 4, full, split)
    assert [(c.forward_s, c.backward_s, c.input_grad_s, c.weight_grad_s) for c in both.stages] == [(2.0, 3.0, 0.5, 2.0), (2.0, 4.0, 1.0, 2.0)]
    only_full = costs_from_ops(settings, 2, 4, full)
    assert (only_full[0].input_grad_s, only_full[0].weight_grad_s) == (1.5, 1.5)
    only_split = costs_from_ops(settings, 2, 4, split)
    assert only_split[1].backward_s == 3.0
    assert only_split[0].send_bytes == TINY.microbatch_size * TINY.sequence * TINY.hidden * 8


def test_evaluate_simulates_with_a_measured_cost_preset(tmp_path):
    path = tmp_path / "costs.json"
    write_cost_preset(path, _costs(), None, {})
    result = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", path, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    simulation = data["simulation"]
    assert simulation["step_time_s"] == pytest.approx(15.0)  # (m + p - 1)(F + B)
    # evaluate --json's object, as without --costs: sizes, the table layer (unit slots), the preset named
    plain = json.loads(cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--json").stdout)
    assert set(plain) <= set(data) and (data["devices"], data["microbatches"], data["table"]) == (2, 4, plain["table"])
    assert data["formula"] == plain["formula"] and data["formula"]["length"] == 15  # 1F1B's closed form, as without --costs
    assert data["costs"] == str(path)
    # a timing profile measures no activation: its memory is unknown, not 0 bytes
    assert simulation["peak_activation_bytes"] is None and simulation["peak_memory_bytes"] is None
    # nor does a preset give a memory capacity: the simulation's keys are those of a modelled one, null
    modelled = json.loads(cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--model", "study", "--system", "mid-mid",
                              "--json").stdout)["simulation"]
    assert set(simulation) == set(modelled) - {"job"} and simulation["memory_capacity_bytes"] is None  # no job to describe
    sized = tmp_path / "sized.json"
    stage = replace(_costs().stages[0], activation_bytes=1e9)
    write_cost_preset(sized, Costs((stage, stage), 1, 4), None, {})
    peaks = json.loads(cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", sized, "--json").stdout)["simulation"]
    assert peaks["peak_activation_bytes"] == [2e9, 1e9]  # 1F1B keeps p - r microbatches on device r
    result = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", path, "--model", "study")
    assert result.exit_code == 1 and result.output.startswith("error: --costs: replaces --model/--system")


def test_a_layer_split_is_refused_with_a_cost_preset(tmp_path):
    """chimera-asym's --split weighs the stages' layers, which a measured preset already fixes: it was
    silently ignored (the same step as --split 1:1 and as chimera)."""
    path = tmp_path / "costs.json"
    write_cost_preset(path, _costs(), None, {})
    for command in (["evaluate", "-s", "chimera-asym"], ["compare"]):
        result = cli(*command, "-p", 2, "-m", 8, "--costs", path, "--split", "1:3")
        assert (result.exit_code, result.output) == (1, "error: --split: does not apply with --costs: the preset's measured "
                                                        "stage costs fix how the layers are split\n")


def test_evaluate_and_compare_with_a_cost_preset_write_csv_and_markdown_as_without_one(tmp_path):
    """With --costs, compare's CSV began with its context line and held "15 s" in the step cell, and
    evaluate ignored --format; without --costs both write one table of bare numbers in CSV (the unit
    in the header) and markdown tables."""
    import csv
    import io

    path = tmp_path / "costs.json"
    write_cost_preset(path, _costs(), None, {})
    evaluated = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", path, "--format", "csv")
    assert evaluated.exit_code == 0, evaluated.output
    assert list(csv.reader(io.StringIO(evaluated.stdout))) == [["schedule", "step s", "idle ratio"], ["1f1b", "15", "0.2"]]  # ten digits, as every CSV
    compared = cli("compare", "-p", 2, "-m", 4, "--costs", path, "--format", "csv")
    assert compared.exit_code == 0, compared.output
    rows = list(csv.reader(io.StringIO(compared.stdout)))
    assert rows[0] == ["rank", "schedule", "step s", "idle ratio"]
    assert ["1f1b", "15"] in [row[1:3] for row in rows[1:]] and all(float(row[2]) > 0 for row in rows[1:])
    markdown = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", path, "--format", "markdown")
    assert markdown.stdout.splitlines()[1:] == ["| schedule | step | idle ratio |", "|---|---|---|", "| 1f1b | 15 s | 0.2000 |"]
    text = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", path)
    assert text.stdout == f"1f1b: simulated with the measured costs of {path}: step 15 s, idle ratio 0.2000\n"
    # a family not defined at the size is skipped with the generator's words, as evaluate -s all says them
    # (they read "devices: chimera needs ..." with the error's field in front)
    three = tmp_path / "three.json"
    write_cost_preset(three, Costs((_costs().stages[0],) * 3, 1, 4), None, {})
    skipped = cli("compare", "-p", 3, "-m", 4, "--costs", three).stderr.splitlines()
    assert "skipped chimera: chimera needs an even number of devices, got 3" in skipped


def test_search_runs_the_schedule_it_found():
    pytest.importorskip("torch.distributed.pipelining")
    result = cli("search", "-p", 2, "-m", 2, "--unit", "--space", "placement=linear,backward=split", "-q", "--no-grid",
                 "--run")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("search "))
    assert row.split()[1:3] == ["2", "2"] and "equal (max abs" in row
    result = cli("search", "-p", 2, "-m", 2, "--unit", "--run", "--json")
    assert result.exit_code == 1 and result.output.startswith("error: --run: prints the run's table")


def test_the_profile_as_unit_model_flags():
    from ppopt.config import LinkConfig
    from ppopt.run.profile import unit_flags

    stage = StageCost(layers=1, forward_s=2.0, backward_s=5.0, input_grad_s=2.0, weight_grad_s=4.0,
                      activation_bytes=0.0, persistent_bytes=0.0, param_count=0.0, send_bytes=1e5)
    link = LinkConfig(bandwidth_bytes_per_s=1e6, latency_s=0.1)  # 0.1 + 0.1 s = 0.1 slot of F = 2 s
    assert unit_flags(Costs((stage, stage), 1, 4), link) == {"forward": 1.0, "backward": 3.0, "weight": 2.0, "comm": 0.1}
    idle = dataclasses.replace(stage, forward_s=0.0)  # no slot to measure in: an error, not a division by zero
    with pytest.raises(ConfigError, match="every forward_s is 0") as error:
        unit_flags(Costs((idle, idle), 1, 4), link)
    assert error.value.field == "costs"


def test_search_with_a_cost_preset_is_unit_mode_with_its_ratios(tmp_path):
    from ppopt.config import LinkConfig

    path = tmp_path / "costs.json"
    stage = StageCost(layers=1, forward_s=2.0, backward_s=5.0, input_grad_s=2.0, weight_grad_s=4.0,
                      activation_bytes=0.0, persistent_bytes=0.0, param_count=0.0, send_bytes=1e5)
    write_cost_preset(path, Costs((stage, stage), 1, 4), LinkConfig(bandwidth_bytes_per_s=1e6, latency_s=0.1), {})
    args = ["search", "-p", 2, "-m", 4, "--space", "placement=linear,backward=split", "-q", "--json"]
    with_preset = json.loads(cli(*args, "--costs", path).stdout)
    with_flags = json.loads(cli(*args, "--unit", "--forward", 1, "--backward", 3, "--weight", 2, "--comm", 0.1).stdout)
    assert with_preset["step_time_s"] == with_flags["step_time_s"] and with_preset["schedule"] == with_flags["schedule"]
    assert with_preset["status"] == "optimal"
    result = cli("search", "-p", 2, "-m", 4, "--costs", path, "--model", "study")
    assert result.exit_code == 1 and result.output.startswith("error: --costs: replaces --model/--system")


def test_compare_ranks_the_schedules_with_a_cost_preset(tmp_path):
    path = tmp_path / "costs.json"
    write_cost_preset(path, _costs(), None, {})  # F = I = W = 1, B = 2, free messages
    result = cli("compare", "-p", 2, "-m", 4, "--costs", path, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    steps = {row["schedule"]: row["simulation"]["step_time_s"] for row in rows if "skipped" not in row}
    # 1F1B: (m + p - 1)(F + B) = 15; ZB-H1 (Qi et al. 2024, §3.1): m(F + B) + (p - 1)(F + I - W) = 13
    assert steps["1f1b"] == pytest.approx(15.0) and steps["zb-h1"] == pytest.approx(13.0)
    assert "zb-v" not in steps and "interleaved-1f1b" not in steps  # 4 stages: not in a 2-stage preset
    assert list(steps).index("zb-h1") < list(steps).index("1f1b")
    # the families skipped follow the ranking, with the reason stderr gives, as in compare --json
    skipped = {row["schedule"]: row["skipped"] for row in rows if "skipped" in row}
    assert skipped["zb-v"] == "4 stages, the cost preset describes 2" and f"skipped zb-v: {skipped['zb-v']}" in result.stderr
    assert set(steps) | set(skipped) == set(names())


def test_search_runs_a_schedule_with_more_stages_than_the_default_layers():
    """V at p = 3 has 6 stages, `ppopt run`'s default model 4 layers: search --run searched, wrote
    its CSV, then failed on "at least 6 layers", a flag search does not have. It now runs the
    schedule with one block per stage."""
    pytest.importorskip("torch.distributed.pipelining")
    result = cli("search", "-p", 3, "-m", 3, "--unit", "--space", "placement=v,backward=split", "-q", "--no-grid", "--run",
                 "--time-limit", 20)
    assert result.exit_code == 0, result.output
    assert "local ranks (gloo, 127.0.0.1), 6 layers" in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("search "))
    assert "equal (max abs" in row


def test_search_run_without_torch_is_refused_before_the_search(tmp_path, monkeypatch):
    """Without torch, search --run searched and overwrote --csv before saying torch was missing."""
    import ppopt.run
    import ppopt.solve.search

    def missing() -> None:
        raise RunError("needs PyTorch")

    monkeypatch.setattr(ppopt.run, "require_torch", missing)
    monkeypatch.setattr(ppopt.solve.search, "search", lambda *a, **k: pytest.fail("searched first"))
    kept = tmp_path / "kept.csv"
    kept.write_text("before\n")
    result = cli("search", "-p", 2, "-m", 2, "--unit", "--run", "--csv", kept)
    assert (result.exit_code, result.output) == (1, "error: needs PyTorch\n")
    assert kept.read_text() == "before\n"


@pytest.mark.parametrize("flags", [["--tp", 4], ["--dp", 2], ["--recompute", "full"], ["--tp", 2, "--sequence-parallel"],
                                   ["--dp", 2, "--distributed-optimizer"], ["--micro-batch", 7], ["--forward", 3], ["--global-batch", 8]])
def test_flags_a_cost_preset_would_ignore_are_refused(tmp_path, flags):
    """evaluate and compare with --costs took the job fields and the unit model's durations and
    printed the same result as without them; search, gap and frontier refused the job fields as
    "need --model and --system, not unit mode", which is not what is wrong with --costs."""
    path = tmp_path / "costs.json"
    write_cost_preset(path, _costs(), None, {})
    field = flags[0]
    for command in (["evaluate", "-s", "1f1b"], ["compare"], ["search"], ["gap"], ["frontier"]):
        result = cli(*command, "-p", 2, "-m", 4, "--costs", path, *flags)
        assert result.exit_code == 1, result.output
        assert result.output.startswith(f"error: {field}: ") and "--costs" in result.output


def test_search_run_of_too_many_ranks_is_refused_before_the_search(tmp_path, monkeypatch):
    """`search -p 65 --run --csv k.csv` searched, wrote k.csv, then refused the 65 ranks."""
    import ppopt.run
    import ppopt.solve.search

    monkeypatch.setattr(ppopt.run, "require_torch", lambda: None)  # the refusal does not depend on torch
    monkeypatch.setattr(ppopt.solve.search, "search", lambda *a, **k: pytest.fail("searched first"))
    result = cli("search", "-p", 65, "-m", 2, "--unit", "--run", "--csv", tmp_path / "k.csv")
    assert (result.exit_code, result.output) == (
        1, "error: --devices: must be from 1 to 64 ranks (processes on this machine), got 65\n")
    assert not (tmp_path / "k.csv").exists()


def test_run_reads_the_legacy_spelling_its_error_points_to(tmp_path):
    """The error on a 'BW' cell says to use --legacy-backward, which `run` did not have."""
    from ppopt.cli.run import _schedules
    from ppopt.ir import Kind

    legacy = tmp_path / "legacy.csv"
    legacy.write_text("0F0,0BW0\n1F0,1BW0\n")
    refused = cli("run", legacy)
    assert refused.exit_code == 1 and "(--legacy-backward)" in refused.output
    (schedule,) = _schedules((str(legacy),), (), None, None, None, legacy_backward=True)
    assert {op.kind for op in schedule.ops()} == {Kind.F, Kind.B}
    alone = cli("run", "-s", "1f1b", "-p", 2, "-m", 2, "--legacy-backward")
    assert (alone.exit_code, alone.output) == (1, "error: --legacy-backward: only applies to schedule files (the spelling of "
                                                  "their backwards)\n")


def test_a_rank_killed_by_a_signal_is_not_named_by_a_library_s_warning(tmp_path):
    """A killed rank was reported with the last line of torch's UserWarning in its stderr."""
    from ppopt.run.launcher import _last_line

    err = tmp_path / "rank1.err"
    err.write_text("/x/torch/_tensor.py:1: UserWarning: Converting a tensor that requires grad\n  reference_loss = float(loss)\n")
    assert _last_line(err, killed=True) == "no message"
    assert _last_line(err, killed=False) == "reference_loss = float(loss)"  # an exit before its own line: the traceback's tail
    err.write_text("warning\nrank 1: RuntimeError: boom\n")
    assert _last_line(err, killed=True) == "rank 1: RuntimeError: boom"


def test_profile_measures_a_preset_that_evaluate_then_simulates_with(tmp_path):
    """`ppopt profile` end to end (ranks launched, ops and a message timed, the preset written), then
    read back and simulated: the op costs are the measured ones, positive, and 1F1B's step at p = 2,
    m = 4 is at least each device's load through them, m (F + B) of its stage, and one microbatch's
    path through both stages."""
    pytest.importorskip("torch.distributed.pipelining")
    path = tmp_path / "profile.json"
    result = cli("profile", "-p", 2, "-m", 2, "--steps", 1, "--warmup", 0, "-o", path, "-q", "--timeout", 120)
    assert result.exit_code == 0, result.output
    costs, link = read_cost_preset(path)
    assert len(costs.stages) == 2 and all(c.forward_s > 0 and c.backward_s > 0 for c in costs.stages)
    assert link is not None and link.latency_s >= 0
    simulated = cli("evaluate", "-s", "1f1b", "-p", 2, "-m", 4, "--costs", path, "--json")
    assert simulated.exit_code == 0, simulated.output
    step = json.loads(simulated.stdout)["simulation"]["step_time_s"]
    load = max(4 * (c.forward_s + c.backward_s) for c in costs.stages)
    path_one = sum(c.forward_s + c.backward_s for c in costs.stages)
    assert step >= max(load, path_one) * (1 - 1e-9)


def test_solver_commands_say_what_a_slot_of_a_cost_preset_is(tmp_path):
    """search/gap/frontier --costs print times in slots of the unit model (one slot = the preset's
    mean forward): a note gives that slot in seconds and the other durations in slots. Here F = 1 s,
    I = W = 1 s and a 1 MB message over 1 MB/s + 0.5 s: B = 2, W = 1, comm = 1.5 slots of 1,000 ms;
    at p = 4 a slot is a quarter of the model's forward, half of the preset's 2-stage one."""
    from ppopt.config import LinkConfig

    path = tmp_path / "costs.json"
    write_cost_preset(path, _costs(), LinkConfig(bandwidth_bytes_per_s=1e6, latency_s=0.5), {"by": "test"})
    note = (f"note: {path} enters as the unit model: B = 2, W = 1, comm = 1.5 slots, one slot being its mean forward, "
            "1000 ms, on its 2 stages")
    for command in ("search", "gap", "frontier"):
        result = cli(command, "-p", 2, "-m", 4, "--costs", path, "--time-limit", 10, "-q")
        assert result.exit_code == 0 and note + "\n" in result.stderr, (command, result.stderr)
    # at p = 4 the slot is half the measured stage forward, so the same 1.5 s message is 3 slots (it
    # stayed 1.5: every message at half its measured time)
    other = cli("search", "-p", 4, "-m", 4, "--costs", path, "--time-limit", 10, "-q")
    assert (f"note: {path} enters as the unit model: B = 2, W = 1, comm = 3 slots, one slot being a 1/4 share's forward, "
            "2/4 of its mean stage forward (1000 ms on its 2 stages): about 500 ms if time scales with the layers") in other.stderr


def test_profile_prints_the_flags_of_the_ranks_it_profiled():
    """A profile of 2 ranks with 2 stages each printed its flags "at p = 4" (the stage count), and
    their comm was twice what `search -p 2 --costs` takes. Here 4 stages of F = 1 s and a 1.5 s
    message: at p = 2 a slot is 2 stage forwards, so comm = 0.75 slot."""
    from ppopt.config import LinkConfig
    from ppopt.report.run import profile_text

    stages = Costs(_costs().stages * 2, 1, 4)
    link = LinkConfig(bandwidth_bytes_per_s=1e6, latency_s=0.5)
    assert profile_text(stages, link, 2).endswith("(search, table; at p = 2, one slot = 2 mean stage F): --forward 1 "
                                                  "--backward 2 --weight 1 --comm 0.75")
    assert profile_text(stages, link).endswith("at p = 4, one slot = mean F): --forward 1 --backward 2 --weight 1 --comm 1.5")


def test_a_profile_s_link_is_one_its_cost_file_can_hold():
    """Two noisy timings fitted 0.69 MB/s, which the profile wrote and every --costs reader refused
    (a file's least bandwidth is 1 MB/s): a fit under it is noise on one machine, taken as no cost
    per byte, as when the larger message was not slower."""
    from ppopt.config import FILE_MINIMA
    from ppopt.run.profile import NO_SIZE_COST, _link

    noisy = _link({"small": {"bytes": 4, "one_way_s": 1e-4}, "activation": {"bytes": 4096, "one_way_s": 6e-3}})
    assert noisy.bandwidth_bytes_per_s == NO_SIZE_COST and noisy.latency_s == 1e-4
    real = _link({"small": {"bytes": 4, "one_way_s": 1e-4}, "activation": {"bytes": 4_000_004, "one_way_s": 1.1e-3}})
    assert real.bandwidth_bytes_per_s == pytest.approx(4e9) and real.bandwidth_bytes_per_s > FILE_MINIMA["bandwidth_bytes_per_s"][0]


def test_files_named_alike_are_told_apart_and_one_file_runs_once(tmp_path, monkeypatch):
    """a/x.csv and b/x.csv were two rows named x, and x.csv beside ./x.csv ran the same file twice."""
    from ppopt.cli.run import _schedules
    from ppopt.io.torch_csv import write_torch_csv

    monkeypatch.chdir(tmp_path)
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        write_torch_csv(generate("1f1b", 2, 2), tmp_path / folder / "x.csv")
    write_torch_csv(generate("gpipe", 2, 2), tmp_path / "y.csv")
    assert [s.name for s in _schedules(("a/x.csv", "b/x.csv", "y.csv", "./y.csv"), (), None, None, None)] == \
        ["a/x.csv", "b/x.csv", "y"]
    # a file named as a family run beside it (1f1b.csv holding zb-h1, and -s 1f1b): its path tells it apart
    write_torch_csv(generate("zb-h1", 2, 2), tmp_path / "1f1b.csv")
    assert [s.name for s in _schedules(("1f1b.csv",), ("1f1b",), 2, 2, None)] == ["1f1b.csv", "1f1b"]


def test_a_ctrl_c_during_the_launch_stops_the_fork_server(monkeypatch):
    """The fork server ignores Ctrl-C, so one still importing torch ran on at a full core after
    'aborted' (and the command took 3.3 s to exit): the launch stops it on a KeyboardInterrupt
    (the end-to-end test above cannot catch a server that happened to finish its import in time)."""
    pytest.importorskip("torch")  # the launch imports the ranks' worker
    import ppopt.run.launcher as launcher

    stopped = []
    monkeypatch.setattr(launcher, "_stop_server", lambda: stopped.append(True))

    def interrupted(spec, child, on_started):
        raise KeyboardInterrupt

    monkeypatch.setattr(launcher, "_launch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        launcher.launch(None)
    assert stopped == [True]


def test_stopping_the_fork_server_kills_and_reaps_it():
    """:func:`ppopt.run.launcher._stop_server` at once: no server left running, nor a zombie."""
    import multiprocessing.forkserver

    from ppopt.run.launcher import _stop_server

    if not Path("/proc/self").exists():
        pytest.skip("needs /proc to see the server")
    multiprocessing.forkserver.ensure_running()
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    assert server and os.path.exists(f"/proc/{server}")
    _stop_server()
    assert not os.path.exists(f"/proc/{server}")
