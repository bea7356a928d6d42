"""A sweep's time limit: points that cannot finish are not started, running ones are stopped at the
deadline, the rows so far are kept whole and a rerun resumes to the rows of an unhurried run."""

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.errors import PpoptError
from ppopt.ir import MAX_OPS
from ppopt.sweep import LocalExecutor, load_spec, read_rows, run_sweep
from ppopt.sweep.executors import TimeLimitReached, alarm_at, uninterrupted
from ppopt.sweep.run import item_seconds
from ppopt.sweep.spec import GapItem, expand

SMALL = """
schedules = ["gpipe", "1f1b"]
devices = [2, 4]
microbatches = [4, 8]
models = ["study"]
systems = ["mid-mid"]
global_batch = 64

[solver]
schedules = ["1f1b"]
devices = [2]
microbatches = [4]
memory_limits = ["none"]
time_limit_s = 20
deterministic_time = 10
"""

# one point of 64 x 2,048 with two chunks per device: about 260,000 ops, seconds to evaluate
LONG = """
schedules = ["interleaved-1f1b"]
devices = [64]
microbatches = [2048]
models = ["study"]
systems = ["mid-mid"]
global_batch = 4096

[options]
chunks = 2
"""


def spec(tmp_path: Path, text: str):
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return load_spec(path)


@pytest.fixture
def clock(still_clock, monkeypatch):
    """The sweep's clock stands still and its alarm is not armed: every evaluation point runs and a
    search runs only if its time limit fits, whatever the machine's speed or load."""
    monkeypatch.setattr("ppopt.sweep.executors.MAX_ALARM_S", 0.0)
    return still_clock("ppopt.sweep.run", "ppopt.sweep.executors", "ppopt.cli.options", "ppopt.cli.sweep")


def test_a_search_starts_only_when_its_own_time_limit_fits(tmp_path, clock):
    """The evaluation points run; the search (time_limit_s 20) does not start with 5 s left, as it
    would have to stop early and write a row an unhurried run would not."""
    loaded = spec(tmp_path, SMALL)
    result = run_sweep(loaded, tmp_path / "out", deadline=clock.now + 5.0)
    assert result.time_limit_reached
    assert result.missing == 1 and result.computed == 8  # 2 schedules x 2 x 2 evaluations; 1 search row
    assert all(r["kind"] == "evaluate" for r in result.rows)
    search = [item for item in expand(loaded) if isinstance(item, GapItem)]
    assert len(search) == 1 and result.search_s > item_seconds(search[0]) > 20  # plus listing, rows.csv
    resumed = run_sweep(loaded, tmp_path / "out")
    assert resumed.missing == 0 and not resumed.time_limit_reached and resumed.reused == 8


def test_the_deadline_stops_a_running_evaluation_and_keeps_the_files_whole(tmp_path, monkeypatch):
    """The alarm at the deadline (a real one, 2 s away: listing the points must fit before it on a
    loaded machine) stops an evaluation that would take a
    minute, however fast the machine (its estimate, 1.2 s, taken as 0: an estimate may be short)."""
    monkeypatch.setattr("ppopt.sweep.run._run_eval", lambda item: time.sleep(60))
    monkeypatch.setattr("ppopt.evaluate.EVALUATE_S_PER_OP", 0.0)
    loaded = spec(tmp_path, LONG)
    out = tmp_path / "out"
    result = run_sweep(loaded, out, deadline=time.monotonic() + 2.0)
    assert result.time_limit_reached and result.missing == 1 and result.rows == ()
    assert (out / "rows.jsonl").read_bytes() == b""  # nothing half-written
    assert (out / "rows.csv").read_text().count("\n") == 1  # the header: rows.csv is written on the way out


def test_a_pool_is_stopped_at_the_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr("ppopt.evaluate.EVALUATE_S_PER_OP", 0.0)  # started, though estimated past the deadline
    loaded = spec(tmp_path, LONG.replace("[2048]", "[1024, 2048]"))
    with LocalExecutor(2) as pool:
        result = run_sweep(loaded, tmp_path / "out", pool, deadline=time.monotonic() + 0.5)
    assert result.time_limit_reached and result.missing == 2
    assert multiprocessing.active_children() == []  # no worker left behind


def test_without_a_deadline_nothing_changes(tmp_path):
    result = run_sweep(spec(tmp_path, SMALL.split("[solver]")[0]), tmp_path / "out")
    assert result.missing == 0 and not result.time_limit_reached and result.search_s == 0
    assert len(read_rows(tmp_path / "out" / "rows.jsonl")) == 8


def test_the_alarm_waits_for_an_uninterrupted_section():
    """A search in this process (CP-SAT cannot be stopped cleanly from a signal handler) runs to
    its own time limit; the points after it are then left for the next run."""
    with alarm_at(time.monotonic() + 1.0), uninterrupted():  # a second to enter the section, whatever the load
        time.sleep(2.0)  # the alarm rings in here and is let pass
    with pytest.raises(TimeLimitReached), alarm_at(time.monotonic() - 1):
        pass  # a deadline already past stops at once


def test_the_alarm_interrupts_outside_such_a_section():
    with pytest.raises(TimeLimitReached), alarm_at(time.monotonic() + 0.05):
        time.sleep(5)


def test_with_a_deadline_a_pool_draws_an_item_only_when_a_worker_starts_it():
    """Else a search drawn into the queue early could start later without the time it needs."""
    drawn = []

    def items():
        for i in range(100):
            drawn.append(i)
            yield -i

    with LocalExecutor(2) as pool:
        results = pool.map_unordered(abs, items(), time.monotonic() + 600)
        got = [next(results) for _ in range(3)]
        results.close()
    assert len(set(got)) == 3
    assert len(drawn) <= 2 + 3  # one per worker, plus one refill per result taken (4 per worker without a deadline)


def test_a_deadline_too_close_to_list_the_points_is_refused_before_any_work(tmp_path):
    with pytest.raises(PpoptError) as error:
        run_sweep(spec(tmp_path, SMALL), tmp_path / "out", deadline=time.monotonic() + 1e-3)
    assert error.value.field == "time_limit" and "no point would run" in error.value.reason
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["sweep", "plan"])
def test_a_limit_that_starting_ray_would_use_up_is_refused_before_ray_starts(tmp_path, monkeypatch, command):
    """A local Ray takes seconds to start (RAY_START_S): sweep and plan refused a 1 s limit only once it
    had started, 5.9 to 7.9 s later."""
    import ppopt.sweep.executors as executors

    def never(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(executors, "RayExecutor", never)
    args = (["sweep", str(spec(tmp_path, SMALL).path), "-o", str(tmp_path / "out")] if command == "sweep" else
            ["plan", "--model", "llama3-8b", "--gpus", "8", "--system", "dgx-h100"])
    result = CliRunner().invoke(main, [*args, "--executor", "ray", "--time-limit", "1", "-q"])
    assert result.exit_code == 1, result.output
    line = result.output.strip()
    assert line.startswith("error: --time-limit: ") and f"at least {executors.RAY_START_S:.0f} s" in line
    assert "Ray was started" not in result.output and not (tmp_path / "out").exists()


def test_a_study_whose_limit_the_report_takes_is_refused(tmp_path):
    result = CliRunner().invoke(main, ["study", "--quick", "-o", str(tmp_path / "out"), "--time-limit", "8"])
    assert result.exit_code == 1
    assert result.output.strip() == ("error: --time-limit: 8 s leaves nothing for the points once 9 s are kept for report.md "
                                     "and its figures (--no-figures keeps 1 s)")
    assert not (tmp_path / "out").exists()


def test_a_time_limit_beyond_any_sweep_is_no_limit(tmp_path):
    """The system timer takes no 1e308 s; no sweep within the size limits runs 116 days anyway."""
    result = CliRunner().invoke(main, ["sweep", "quick", "-o", str(tmp_path / "out"), "--time-limit", "1e308", "-q",
                                       "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["missing"] == 0


@pytest.mark.parametrize("value, shown", [("0", "0.0"), ("-1", "-1.0"), ("nan", "nan"), ("inf", "a number too large to represent (inf)"),
                                         ("1e400", "a number too large to represent (inf)")])
def test_a_bad_time_limit_is_one_line(tmp_path, value, shown):
    result = CliRunner().invoke(main, ["sweep", "quick", "-o", str(tmp_path / "out"), "--time-limit", value])
    assert result.exit_code == 1
    assert result.output.strip() == f"error: --time-limit: must be a finite number of seconds > 0, got {shown}"
    assert not (tmp_path / "out").exists()


def test_the_cli_says_what_is_left_and_how_to_run_it(tmp_path, clock):
    """The quick study's searches keep 9.4 s each (2 units of deterministic time at 4 s, 5 % and 1 s
    of margin, within their 20 s): a 5 s limit computes its evaluation points and says the limit
    under which none of the searches runs; the quick study's nine searches end in well under a
    second each, so there that limit is enough for all of them."""
    result = CliRunner().invoke(main, ["sweep", "quick", "-o", str(tmp_path / "out"), "--time-limit", "5", "-q", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["time_limit_reached"] and summary["missing"] == 9 and summary["computed"] == 90  # the 9 rows of searches
    text = CliRunner().invoke(main, ["sweep", "quick", "-o", str(tmp_path / "text"), "--time-limit", "5", "-q"]).output
    head = "time limit reached: rerun the same command to compute the 9 missing; a --time-limit under "
    assert head in text and "cannot start the longest of them" in text
    needed = int(text.split(head)[1].split()[0])
    assert 10 <= needed <= 15  # 9.4 s, the listing and rows.csv
    with pytest.raises(PpoptError, match="cannot cover any of the 9 points"):  # under it no search starts: refused
        run_sweep_with_limit(tmp_path / "out", clock.now + needed - 2)
    assert run_sweep_with_limit(tmp_path / "enough", clock.now + needed).missing == 0  # and here that limit is enough


def test_a_study_out_of_time_still_writes_its_report_and_says_it_is_incomplete(tmp_path, clock):
    result = CliRunner().invoke(main, ["study", "--quick", "--no-figures", "-o", str(tmp_path / "out"), "--time-limit", "6", "-q"])
    assert result.exit_code == 0, result.output
    assert "time limit reached" in result.output
    assert "*Incomplete: 9 of 99 points are missing.*" in (tmp_path / "out" / "report.md").read_text()


def test_leaving_a_pool_on_an_error_stops_its_running_items():
    """SIGTERM (turned into KeyboardInterrupt), a deadline or an error leaves the pool's block: its
    running items are terminated, where they used to be waited for (a minute here)."""
    import signal

    with pytest.raises(RuntimeError), LocalExecutor(2) as pool:
        results = pool.map_unordered(time.sleep, [0, 60, 60])
        next(results)  # the first item is done; the others are running
        workers = list(pool._pool._processes.values())  # the pool's own record, to see how they ended
        raise RuntimeError("stop")
    assert workers and all(worker.exitcode == -signal.SIGTERM for worker in workers)  # ended, not finished
    assert multiprocessing.active_children() == []


def test_an_executor_whose_start_takes_the_budget_is_named(tmp_path, monkeypatch, clock):
    """A local Ray takes seconds to start, and its start cannot be cut short: when the time limit
    leaves points missing, the note says how much of it the start took."""
    import ppopt.sweep as sweep

    def slow_start(kind, jobs, address, deadline=None):
        clock.jump(1.2)
        return LocalExecutor(1)

    monkeypatch.setattr(sweep, "make_executor", slow_start)
    result = CliRunner().invoke(main, ["sweep", "quick", "-o", str(tmp_path / "out"), "--time-limit", "10", "-q",
                                       "--executor", "ray"])
    assert result.exit_code == 0, result.output
    assert "time limit reached" in result.stdout  # the quick spec's searches need 22 s
    note = result.stderr.strip().splitlines()[-1]
    assert note.startswith("note: starting Ray took ") and note.endswith(" s of the time limit")
    assert float(note.split(" took ")[1].split()[0]) == 1.2


def run_sweep_with_limit(out: Path, deadline: float):
    from ppopt.sweep import resolve_spec

    return run_sweep(load_spec(resolve_spec("quick")), out, deadline=deadline)


def test_a_signal_while_rows_csv_is_written_acts_after_it(tmp_path, monkeypatch):
    """SIGTERM at the deadline's shutdown left no rows.csv in 2 of 50 runs: the signal arrived while
    it was being written. It is now held until the file is whole."""
    import os
    import signal

    import ppopt.sweep.run as sweeping

    real = sweeping.rows_csv

    def rows_csv_then_signal(rows):
        os.kill(os.getpid(), signal.SIGINT)  # arrives while rows.csv is being made
        return real(rows)

    monkeypatch.setattr(sweeping, "rows_csv", rows_csv_then_signal)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec(tmp_path, SMALL.split("[solver]")[0]), tmp_path / "out")
    written = (tmp_path / "out" / "rows.csv").read_text().splitlines()
    assert len(written) == 1 + 8  # the header and every row


def test_a_worker_that_dies_is_one_error_line_not_a_broken_pool_traceback():
    with pytest.raises(PpoptError) as error, LocalExecutor(2) as pool:
        list(pool.map_unordered(os._exit, [3, 3]))  # each item ends its worker, as the OOM killer would
    assert error.value.field == "jobs" and "ended abruptly" in error.value.reason


def test_workers_of_a_parent_that_ignores_ctrl_c_ignore_it_too(tmp_path):
    """A background job of a script ignores SIGINT; a Ctrl-C to its process group ended its pool's
    workers, and the job failed on its broken pool."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "ignoring.py"
    script.write_text(
        "import pathlib, signal, sys, time\n"
        "from ppopt.sweep import LocalExecutor\n"
        "def item(marker):\n"
        "    pathlib.Path(marker).touch()\n"
        "    time.sleep(3)\n"
        "if __name__ == '__main__':\n"
        "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "    with LocalExecutor(2) as pool:\n"
        "        print(len(list(pool.map_unordered(item, sys.argv[1:]))))\n")
    markers = [tmp_path / "a", tmp_path / "b"]
    process = subprocess.Popen([sys.executable, str(script), *map(str, markers)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    waited = time.monotonic() + 60
    while not all(m.exists() for m in markers) and time.monotonic() < waited:  # both workers are in their items
        time.sleep(0.01)
    assert all(m.exists() for m in markers), "the workers never started their items"
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert (process.returncode, out.strip(), err) == (0, "2", "")


def test_a_signal_just_after_a_row_is_appended_leaves_it_in_rows_csv_too(tmp_path, monkeypatch):
    """SIGINT between appending a row to rows.jsonl and recording it left rows.csv one row short of
    rows.jsonl (55 against 54 in an interrupted sweep). The two steps are now one for a signal."""
    import signal

    import ppopt.sweep.run as sweeping

    real = sweeping._Appender.write
    written = []

    def write_then_signal(self, row):
        real(self, row)
        written.append(row["hash"])
        if len(written) == 3:
            os.kill(os.getpid(), signal.SIGINT)  # arrives right after the third row's append

    monkeypatch.setattr(sweeping._Appender, "write", write_then_signal)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec(tmp_path, SMALL.split("[solver]")[0]), tmp_path / "out")
    in_csv = (tmp_path / "out" / "rows.csv").read_text().splitlines()[1:]
    assert len(written) == 3 and len(read_rows(tmp_path / "out" / "rows.jsonl")) == 3 and len(in_csv) == 3


def test_a_rerun_that_can_make_no_progress_is_refused(tmp_path, clock):
    """The quick study's evaluation points done, a rerun under 5 s could start none of its nine
    searches (9.4 s kept each): it said "time limit reached" with exit 0 on every rerun. It is
    refused, with the time the quickest point needs, and the rows stay."""
    out = tmp_path / "out"
    first = CliRunner().invoke(main, ["sweep", "quick", "-o", str(out), "--time-limit", "5", "-q", "--json"])
    assert first.exit_code == 0 and json.loads(first.stdout)["missing"] == 9
    rows = (out / "rows.jsonl").read_bytes()
    again = CliRunner().invoke(main, ["sweep", "quick", "-o", str(out), "--time-limit", "5", "-q"])
    assert again.exit_code == 1
    assert again.output.startswith("error: --time-limit: ") and " s left, which cannot cover any of the 9 points: the shortest " \
        "needs about 9.4 s; give more, or make the points smaller" in again.output
    assert (out / "rows.jsonl").read_bytes() == rows


def test_a_search_point_with_a_deterministic_time_is_kept_its_worth_of_it(tmp_path, clock):
    """The quick study's searches (20 s, 2 units of deterministic time) took 0.1 s each, yet each kept
    its 20 s before the deadline, so every study --time-limit under 32 s left them all out: a search with a
    deterministic time keeps DETERMINISTIC_WALL_S per unit of it when that is less, with the margins."""
    from ppopt.sweep.run import DETERMINISTIC_WALL_S, SEARCH_MARGIN, SEARCH_START_S

    loaded = spec(tmp_path, SMALL.replace("deterministic_time = 10", "deterministic_time = 1"))  # time_limit_s 20
    (search,) = [item for item in expand(loaded) if isinstance(item, GapItem)]
    assert item_seconds(search) == SEARCH_START_S + SEARCH_MARGIN * DETERMINISTIC_WALL_S * 1 < 10
    result = run_sweep(loaded, tmp_path / "out", deadline=clock.now + 12.0)  # 5 s would not do (above), 12 s does
    assert result.missing == 0 and not result.time_limit_reached
    for text in (SMALL, SMALL.replace("deterministic_time = 10\n", "")):  # 10 units may take 40 s; none, any time
        (search,) = [item for item in expand(spec(tmp_path, text)) if isinstance(item, GapItem)]
        assert item_seconds(search) == SEARCH_START_S + SEARCH_MARGIN * 20


def test_an_evaluation_point_too_long_for_the_limit_is_not_started(tmp_path):
    """A single point estimated past the limit ran into the deadline on every rerun (4.8 million ops
    under 8 s): it is refused before any work, and no output directory is left."""
    from ppopt.evaluate import EVALUATE_S_PER_OP

    loaded = spec(tmp_path, LONG)
    (item,) = expand(loaded)
    assert item_seconds(item) == EVALUATE_S_PER_OP * item.cost > 0.3
    with pytest.raises(PpoptError) as error:
        run_sweep(loaded, tmp_path / "out", deadline=time.monotonic() + 0.3)
    assert error.value.field == "time_limit" and "cannot cover any of the 1 point" in error.value.reason
    assert not (tmp_path / "out").exists()


def test_a_point_over_the_op_limit_is_a_skipped_row_under_a_time_limit_too(tmp_path):
    """A point over MAX_OPS is refused at once (a 'skipped' row): under a time limit its 10 million
    ops were charged 46 s, and the run was refused instead of writing that row."""
    loaded = spec(tmp_path, LONG.replace("[2048]", "[40000]").replace("4096", "80000"))
    (item,) = expand(loaded)
    assert item.cost > MAX_OPS and item_seconds(item) == 0.0
    result = run_sweep(loaded, tmp_path / "out", deadline=time.monotonic() + 20)
    assert result.skipped == 1 and result.missing == 0 and not result.time_limit_reached


def test_a_spent_or_long_time_limit_is_worded_without_zeros_or_exponents():
    """'0.0 s left cannot cover ...: the shortest needs about 0.0 s' and '1.5e+03 s left' were the
    refusals of a sweep whose start-up took the whole limit, or of one of long searches."""
    from ppopt.report.text import time_left

    assert time_left(-0.3) == time_left(0.0) == "no time is left"
    assert (time_left(0.044), time_left(1500.0), time_left(12.34)) == ("44 ms left", "1,500.0 s left", "12.3 s left")
