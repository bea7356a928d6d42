"""The CLI under hostile conditions: devices and FIFOs as outputs, failed writes, a full or closed
stdout, usage errors, non-finite JSON, options a schedule would ignore."""

import errno
import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import ppopt.io
from ppopt.cli import main
from ppopt.errors import PpoptError
from ppopt.io import atomic_write_text, json_bytes, write_json

ROOT = Path(__file__).resolve().parent.parent
HAS_DEV_FULL = os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error_line(result) -> str:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# -- defect 1: the writer never replaces what is not a regular file ---------------------------------


def read_fifo(path: Path, into: list[bytes]) -> threading.Thread:
    def reader():
        with open(path, "rb") as handle:
            into.append(handle.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    return thread


def test_a_fifo_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    thread = read_fifo(fifo, received)
    result = run("export", "-s", "1f1b", "-p", 2, "-m", 3, "-o", fifo, "--format", "torch-csv")
    thread.join(timeout=10)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert received == [b"0F0,0F1,0B0,0F2,0B1,0B2\n1F0,1B0,1F1,1B1,1F2,1B2\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="needs /dev/stdout")
def test_an_output_named_dev_stdout_adds_to_a_redirected_file(tmp_path):
    """`( echo BEFORE; ppopt search ... --csv /dev/stdout; echo AFTER ) > log` left the CSV alone in
    log: /dev/stdout opened anew reopens the file at its start, and the rename replaced it whole.
    The file is written through the open descriptor, after the report and what came before."""
    log = tmp_path / "log"
    with open(log, "wb") as out:
        out.write(b"BEFORE\n")
        out.flush()
        process = ppopt_process(["search", "--unit", "-p", "2", "-m", "2", "-q", "--time-limit", "20", "--no-grid", "--csv",
                                 "/dev/stdout"], out)
        process.communicate(timeout=120)
        out.write(b"AFTER\n")
    lines = log.read_text().splitlines()
    assert process.returncode == 0 and lines[0] == "BEFORE" and lines[-1] == "AFTER"
    assert lines[1].startswith("space: placement=linear") and lines[-3:-1] == ["0F0,0F1,0B0,0B1", "1F0,1F1,1B0,1B1"]


@pytest.mark.skipif(not HAS_DEV_FULL, reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ["export", "-s", "1f1b", "-p", 4, "-m", 8, "-o", "/dev/full", "--format", "torch-csv"],
        ["export", "-s", "1f1b", "-p", 4, "-m", 8, "-o", "/dev/full", "--format", "chrome-trace"],
        ["evaluate", "-s", "1f1b", "-p", 2, "-m", 2, "--model", "study", "--system", "mid-mid", "--trace", "/dev/full"],
        ["search", "-p", 2, "-m", 2, "--unit", "--time-limit", 1, "-q", "--csv", "/dev/full"],
    ],
)
def test_a_full_device_is_one_line_and_stays_a_device(args):
    line = one_error_line(run(*args))
    assert line == "error: cannot write /dev/full: No space left on device"
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_picture_goes_through_the_same_writer(tmp_path):
    pytest.importorskip("matplotlib")
    fifo = tmp_path / "pipe.svg"
    os.mkfifo(fifo)
    received: list[bytes] = []
    thread = read_fifo(fifo, received)
    result = run("table", "-s", "1f1b", "-p", 2, "-m", 2, "--plot", fifo)
    thread.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert received and received[0].lstrip().startswith(b"<?xml")


def test_a_failed_write_leaves_the_previous_file_intact(tmp_path, monkeypatch):
    target = tmp_path / "old.csv"
    target.write_text("previous\n")

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ppopt.io.os, "fsync", full_disk)
    line = one_error_line(run("export", "-s", "1f1b", "-p", 4, "-m", 8, "-o", target))
    assert line == f"error: cannot write {target}: No space left on device"
    assert target.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["old.csv"]  # no temporary file left behind


def test_replacing_a_file_keeps_its_permissions_and_a_link_stays_a_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}\n")
    real.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_json({"a": 1}, link)
    assert link.is_symlink() and json.loads(real.read_text()) == {"a": 1}
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(PpoptError, match="it is a directory"):
        atomic_write_text(tmp_path, "x")


# -- defect 4: standard output that cannot be written, strict JSON ----------------------------------


def ppopt_process(args, stdout):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "ppopt", *args], stdout=stdout, stderr=subprocess.PIPE, env=env, cwd=ROOT)


@pytest.mark.skipif(not HAS_DEV_FULL, reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [["list"], ["table", "-s", "1f1b", "-p", "4", "-m", "8"], ["evaluate", "-s", "1f1b", "-p", "4", "-m", "8", "--json"],
     ["export", "-s", "1f1b", "-p", "4", "-m", "8", "-o", "-"]],
)
def test_a_full_stdout_is_one_line_and_exit_1(args):
    with open("/dev/full", "w") as full:
        process = ppopt_process(args, full)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert stderr.decode() == "error: cannot write to standard output: No space left on device\n"


@pytest.mark.skipif(not HAS_DEV_FULL, reason="needs /dev/full")
@pytest.mark.parametrize(("command", "option", "suffix"), [("calibrate", "-o", ".toml"), ("validate", "--plot", ".png")])
def test_a_full_stdout_leaves_the_output_file_as_it_was(tmp_path, command, option, suffix):
    """calibrate replaced its -o file, and validate wrote its --plot, before failing on a full
    standard output (exit 1): the results come first, the file only once they are out."""
    if suffix == ".png":
        pytest.importorskip("matplotlib")
    rows = tmp_path / "rows.csv"
    rows.write_text("".join((ROOT / "data" / "measured" / "vtrain-single-node.csv").read_text().splitlines(keepends=True)[:4]))
    output = tmp_path / f"out{suffix}"
    if suffix == ".toml":
        output.write_text("KEEP\n")
    with open("/dev/full", "w") as full:
        process = ppopt_process([command, str(rows), option, str(output), "-q"], full)
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1 and "error: cannot write to standard output" in stderr.decode()
    assert output.read_text() == "KEEP\n" if suffix == ".toml" else not output.exists()


def test_a_closed_stdout_is_one_line_and_exit_1():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    closed = subprocess.run(f"{sys.executable} -m ppopt list >&-", shell=True, env=env, cwd=ROOT, capture_output=True, timeout=60)
    assert closed.returncode == 1
    assert closed.stderr.decode() == "error: cannot write to standard output: Bad file descriptor\n"


def test_a_closed_pipe_ends_quietly():
    process = ppopt_process(["table", "-s", "1f1b", "-p", "8", "-m", "64"], subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first write
    stderr = process.stderr.read()
    process.wait(timeout=60)
    assert process.returncode == 1
    assert stderr == b""


@pytest.mark.parametrize("args", [["table", "-s", "1f1b", "-p", "40", "-m", "1024", "--json", "--quiet"],
                                  ["export", "-s", "1f1b", "-p", "40", "-m", "256", "--unit", "--format", "chrome-trace", "-o", "-",
                                   "--quiet"]])  # on a loaded machine a progress line after 1 s is not an error
def test_a_reader_that_leaves_mid_output_is_not_a_success(args):
    """Megabytes printed in one write to a pipe whose reader leaves after a few bytes: the write
    returned short and Python's buffered stdout dropped the rest silently, so the command exited 0
    with its output cut. Each write now completes or fails, and the closed pipe ends it quietly with 1."""
    process = ppopt_process(args, subprocess.PIPE)
    expected = b'{"schedule' if args[0] == "table" else b'{"traceEve'
    assert process.stdout.read(10) == expected
    process.stdout.close()
    stderr = process.stderr.read()
    process.wait(timeout=120)
    assert (process.returncode, stderr) == (1, b"")


@pytest.mark.parametrize("args, said", [
    *((f"{command} --unit --schedule-file -", "standard input: cannot read") for command in ("search", "gap", "frontier")),
    ("evaluate --schedule-file - -q", "standard input: cannot read"),
    ("plan --system dgx-h100 --candidates -", "--candidates: standard input: cannot read file")])
def test_a_time_limit_covers_the_wait_for_standard_input(args, said):
    """`--schedule-file -` (and `plan --candidates -`) read standard input until its end, however
    long: a pipe whose writer never closed it held the command past its --time-limit, forever. It
    now ends with the limit."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "ppopt", *args.split(), "--time-limit", "2"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        process.stdin.write(b"0F0")  # a start, and then nothing: the writer holds the pipe open
        process.stdin.flush()
        process.wait(timeout=120)  # (communicate would close standard input first)
        out, err = process.stdout.read(), process.stderr.read()
    finally:
        process.kill()
        process.stdin.close()
    assert process.returncode == 1 and out == b""
    assert err.decode() == f"error: {said} (the time limit ended before the input did)\n"


def test_json_is_strict_and_names_the_non_finite_number(tmp_path):
    assert json_bytes({"a": [1, None]}) == b'{"a":[1,null]}'
    with pytest.raises(PpoptError, match=r"non-finite number inf at a\[1\]"):
        json_bytes({"a": [1, float("inf")]})
    with pytest.raises(PpoptError, match="non-finite number nan at top level"):
        json_bytes(float("nan"))
    with pytest.raises(PpoptError, match=r"non-finite number nan at x\.y\[2\]"):
        json_bytes({"x": {"y": [None, 1.5, np.float32("nan")]}})
    with pytest.raises(PpoptError, match=r"non-finite number inf at big\[1\]"):  # the standard library's path
        json_bytes({"big": [2**70, float("inf")]})
    with pytest.raises(PpoptError, match=r"non-finite number nan at a\[1\]\[0\]"):  # orjson writes arrays too
        json_bytes({"a": [None, np.array([np.nan, 1.0])]})
    target = tmp_path / "x.json"
    with pytest.raises(PpoptError, match=r"non-finite number -inf at \[0\]\.b"):
        write_json([{"b": float("-inf")}], target)
    assert not target.exists()


def json_values(leaves):
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                        max_leaves=20)


EXACT_LEAVES = st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | st.text()
"""Values the standard library and orjson spell alike (floats differ: 1e-05 against 0.00001)."""


@given(json_values(EXACT_LEAVES), st.booleans(), st.booleans())
def test_json_is_written_as_the_standard_library_writes_it(value, pretty, sort_keys):
    """Compact JSON without spaces, or indented by two: byte for byte what the standard library
    writes with those separators (ints beyond 64 bits take its path; the others orjson's)."""
    standard = json.dumps(value, indent=2 if pretty else None, separators=(",", ": ") if pretty else (",", ":"),
                          sort_keys=sort_keys, ensure_ascii=False)
    assert json_bytes(value, pretty=pretty, sort_keys=sort_keys) == standard.encode("utf-8")


@given(json_values(EXACT_LEAVES | st.floats(allow_nan=False, allow_infinity=False)), st.booleans())
def test_json_with_floats_reads_back_as_written(value, pretty):
    assert json.loads(json_bytes(value, pretty=pretty)) == value


def test_command_line_json_goes_through_the_strict_helper(monkeypatch):
    import ppopt.report.evaluation as evaluation

    real = evaluation.evaluation_json
    monkeypatch.setattr(evaluation, "evaluation_json", lambda r, units: {**real(r, units), "broken": float("nan")})
    line = one_error_line(run("evaluate", "-s", "1f1b", "-p", 2, "-m", 2, "--json"))
    assert line == "error: not valid JSON: non-finite number nan at broken"


# -- defect 5: usage errors are one line and exit 1 --------------------------------------------------


@pytest.mark.parametrize(
    "args, message, command",
    [
        (["table", "-s", "gpipe", "-p", "4.5", "-m", "4"], "'4.5' is not a valid integer", "ppopt table"),
        # Python's int and float read these as 40, 4 and 10
        (["table", "-s", "gpipe", "-p", "4_0", "-m", "4"], "'4_0' is not a valid integer", "ppopt table"),
        (["table", "-s", "gpipe", "-p", "\u0664", "-m", "4"], "'\u0664' is not a valid integer", "ppopt table"),
        (["table", "-s", "gpipe", "-p", "4", "-m", "4", "--backward", "1_0"], "'1_0' is not a valid float", "ppopt table"),
        (["search", "-p", "4", "-m", "4", "--unit", "--seed", "1_0"], "'1_0' is not a valid integer", "ppopt search"),
        (["evaluate", "--bogus"], "No such option '--bogus'", "ppopt evaluate"),
        (["list", "--format", "x"], "'x' is not one of 'text', 'markdown', 'csv'", "ppopt list"),
        (["export", "-s", "1f1b", "-p", "2", "-m", "2", "--format", "gif", "-o", "x.gif"], "'gif' is not one of", "ppopt export"),
        (["export", "-s", "1f1b", "-p", "2", "-m", "2"], "Missing option '--output'", "ppopt export"),
        (["table", "-s", "1f1b", "-p", "4"], "missing --microbatches (needed with --schedule)", "ppopt table"),
        (["evaluate", "-s", "1f1b"], "missing --devices and --microbatches", "ppopt evaluate"),
        # a second --schedule used to replace the first without a word
        (["evaluate", "-s", "1f1b", "-s", "zb-h1", "-p", "4", "-m", "8"], "given 2 times (1f1b, zb-h1): give one schedule",
         "ppopt evaluate"),
        (["nonsense"], "No such command 'nonsense'", "ppopt"),
        (["--bogus"], "No such option '--bogus'", "ppopt"),
        # missing or conflicting options named in ppopt's own words: usage errors too
        (["table"], "give exactly one of --schedule NAME and --schedule-file FILE.csv", "ppopt table"),
        (["export", "-o", "x.csv"], "give exactly one of --schedule NAME and --schedule-file FILE.csv", "ppopt export"),
        (["evaluate", "-s", "1f1b", "-p", "2", "-m", "2", "--model", "study"], "give both --model and --system",
         "ppopt evaluate"),
        (["study", "--quick", "--spec", "paper", "-o", "x"], "give --quick or --spec, not both", "ppopt study"),
        (["run"], "give schedule CSV files and/or --schedule NAME", "ppopt run"),
    ],
)
def test_usage_errors_are_one_line_with_a_help_hint(args, message, command):
    line = one_error_line(run(*args))
    assert message in line
    assert line.endswith(f"(see '{command} --help')")


@pytest.mark.parametrize("args, shown", [
    (["--help"], "Commands:"), ([], "Commands:"), (["table", "--help"], "Print a schedule's unit-slot table"),
])
def test_help_and_version_exit_0(args, shown):
    result = run(*args)
    assert result.exit_code == 0 and shown in result.stdout and result.stdout.lstrip().startswith("Usage:")
    if shown == "Commands:":  # every registered command is listed
        assert all(f"  {name} " in result.stdout for name in main.commands)


def test_version_is_the_package_s():
    from ppopt import __version__

    result = run("--version")
    assert result.exit_code == 0 and result.stdout.strip().endswith(f"version {__version__}")


# -- defect 6: options a schedule would ignore; table's -s help; table --json ------------------------


def test_an_option_the_schedule_does_not_take_is_refused():
    line = one_error_line(run("table", "-s", "gpipe", "-p", 4, "-m", 4, "--chunks", 4, "--waves", 2))
    assert line == "error: --chunks: schedule gpipe does not take it (only interleaved-1f1b, looped-bfs)"
    line = one_error_line(run("evaluate", "-s", "1f1b", "-p", 4, "-m", 4, "--waves", 2))
    assert line == "error: --waves: schedule 1f1b does not take it (only hanayo)"
    line = one_error_line(run("export", "-s", "zb-v", "-p", 4, "-m", 4, "--split", "1:3", "-o", "-"))
    assert line == "error: --split: schedule zb-v does not take it (only chimera-asym)"


def test_an_option_applies_to_the_schedules_that_take_it_over_all():
    result = run("evaluate", "-s", "all", "-p", 4, "-m", 8, "--chunks", 4, "--json")
    assert result.exit_code == 0, result.output
    by_name = {row["schedule"]: row for row in json.loads(result.stdout)}
    assert by_name["interleaved-1f1b"]["options"]["chunks"] == 4
    assert "gpipe" in by_name


def test_a_schedule_file_takes_no_schedule_option(tmp_path):
    csv = tmp_path / "s.csv"
    csv.write_text("0F0,0B0\n1F0,1B0\n")
    line = one_error_line(run("table", "--schedule-file", csv, "--waves", 2))
    assert line == "error: --waves: a --schedule-file sets it itself; only generated schedules take it (hanayo)"


@pytest.mark.parametrize(
    "args, line",
    [
        (["table", "-s", "1f1b", "-p", 2, "-m", 2, "--legacy-backward"], "error: --legacy-backward: only applies to --schedule-file"),
        (["evaluate", "-s", "all", "-p", 2, "-m", 2, "--legacy-backward"], "error: --legacy-backward: only applies to --schedule-file"),
        (["evaluate", "-s", "all", "-p", 2, "-m", 2, "--schedule-file", "x.csv"], "error: give exactly one of --schedule NAME and"),
    ],
)
def test_inputs_a_command_would_ignore_are_refused(args, line):
    assert one_error_line(run(*args)).startswith(line)


def test_table_takes_one_schedule_and_says_so():
    assert "or 'all'" not in run("table", "--help").stdout
    assert "or 'all'" in run("evaluate", "--help").stdout
    line = one_error_line(run("table", "-s", "all", "-p", 4, "-m", 4))
    assert line.startswith("error: --schedule: 'all' is for `ppopt evaluate`, `gap` and `plan` (`ppopt compare` ranks them all)")


def test_table_json_gives_the_metrics_and_every_op_slot():
    result = run("table", "-s", "1f1b", "-p", 2, "-m", 2, "--backward", 1, "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert (data["schedule"], data["devices"], data["stages"], data["microbatches"]) == ("1f1b", 2, 2, 2)
    assert data["length"] == 6 and data["bubble_ratio"] == pytest.approx(1 / 3)
    assert data["peak_activations"] == [2, 1]
    assert data["durations"] == {"F": 1, "B": 1, "I": 0.5, "W": 0.5}
    # device 0 | F0 F1 .  B0 .  B1  (the grid of test_cli.test_table_prints_the_grid)
    assert data["ops"][0] == [
        {"op": "0F0", "start": 0, "end": 1}, {"op": "0F1", "start": 1, "end": 2},
        {"op": "0B0", "start": 3, "end": 4}, {"op": "0B1", "start": 5, "end": 6},
    ]
    assert [op["op"] for op in data["ops"][1]] == ["1F0", "1B0", "1F1", "1B1"]
    two = json.loads(run("table", "-s", "1f1b", "-p", 2, "-m", 2, "--json").stdout)  # the default B = 2
    assert two["durations"]["B"] == 2 and two["ops"][1][1] == {"op": "1B0", "start": 2, "end": 4}
    assert data["comm"] == two["comm"] == 0
    # p = 2, m = 2, one-slot messages: 1F1B's (m + p - 1)(F + B) = 9 slots plus the 2 messages on the
    # critical path (0F0 -> 1F0 and 1B1 -> 0B1); the length depends on comm, so the JSON gives it
    messages = json.loads(run("table", "-s", "1f1b", "-p", 2, "-m", 2, "--comm", 1, "--json").stdout)
    assert (messages["comm"], messages["length"]) == (1, 11)


@pytest.mark.parametrize("args, reason", [
    (["evaluate", "-s", "1f1b", "-p", "2", "-m", "2", "--model", "{zero}", "--system", "mid-mid"], "not a text file: NUL byte at byte 0"),
    (["sweep", "{zero}", "-q", "-o", "{dir}/out"], "not a text file: NUL byte at byte 0"),
    (["validate", "{zero}", "--system", "mid-mid"], "not a text file: NUL byte at byte 0"),
    (["import", "{zero}"], "not a text file: NUL byte at byte 0"),
], ids=lambda value: value[0] if isinstance(value, list) else "")
def test_an_endless_input_is_refused_at_once(tmp_path, args, reason):
    # A file name with the right suffix that is /dev/zero: sweep and validate read until memory ran out.
    zero = tmp_path / "zero.toml"
    zero.symlink_to("/dev/zero")
    argv = [a.replace("{zero}", str(zero)).replace("{dir}", str(tmp_path)) for a in args]
    line = one_error_line(run(*argv))
    assert reason in line, line


@pytest.mark.parametrize(
    "args, flag",
    [
        (["search", "-p", 4, "-m", 8, "--unit", "--csv", "{missing}/out.csv"], "'--csv' / '--torch-csv'"),
        (["search", "-p", 4, "-m", 8, "--unit", "--trace", "{dir}"], "'--trace'"),
        (["search", "-p", 4, "-m", 8, "--unit", "--plot", "{missing}/out.png"], "'--plot'"),
        (["calibrate", str(ROOT / "data" / "measured" / "vtrain-multi-node-small.csv"), "--system", "a100-vtrain",
          "-o", "{missing}/fit.toml"], "'--output' / '-o'"),
        (["export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", "{missing}/x.csv"], "'--output' / '-o'"),
        (["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", 8, "--torch-csv", "{missing}/x.csv"], "'--torch-csv' / '--csv'"),
        # these four said click's "File '...' is a directory." where the others say "cannot write ...: it is a directory"
        (["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", 8, "--torch-csv", "{dir}"], "'--torch-csv' / '--csv'"),
        (["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", 8, "--plot", "{dir}"], "'--plot'"),
        (["validate", str(ROOT / "data" / "measured" / "vtrain-multi-node-small.csv"), "--plot", "{dir}"], "'--plot'"),
        (["calibrate", str(ROOT / "data" / "measured" / "vtrain-multi-node-small.csv"), "--system", "a100-vtrain",
          "-o", "{dir}"], "'--output' / '-o'"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_any_work(tmp_path, args, flag):
    """A search or a calibration can take minutes: a file to write in a missing directory, or a
    directory given as the file, is refused at once (one line, exit 1, no progress printed)."""
    missing = tmp_path / "missing"
    filled = [str(a).format(missing=missing, dir=tmp_path) for a in args]
    line = one_error_line(run(*filled))
    target = next(a for a in filled if a.startswith(str(tmp_path)))
    reason = "it is a directory" if target == str(tmp_path) else f"no directory {missing}"
    assert line.startswith(f"error: Invalid value for {flag}: cannot write {target}: {reason}")
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, flag",
    [
        (["search", "-p", 2, "-m", 2, "--unit", "--csv", "-"], "'--csv' / '--torch-csv'"),
        (["search", "-p", 2, "-m", 2, "--unit", "--trace", "-"], "'--trace'"),
        (["evaluate", "-s", "1f1b", "-p", 2, "-m", 2, "--model", "study", "--system", "mid-mid", "--trace", "-"], "'--trace'"),
        (["calibrate", str(ROOT / "data" / "measured" / "vtrain-multi-node-small.csv"), "--system", "a100-vtrain",
          "-o", "-"], "'--output' / '-o'"),
        (["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", 4, "--search", 0, "--torch-csv", "-"], "'--torch-csv' / '--csv'"),
        (["evaluate", "-s", "1f1b", "-p", 2, "-m", 2, "--plot", "-"], "'--plot'"),
    ],
)
def test_a_dash_where_stdout_carries_the_report_is_refused_not_written_as_a_file(tmp_path, monkeypatch, args, flag):
    """'-' means standard output only where the command prints nothing else there (export): elsewhere
    it is refused at once instead of becoming a file named '-' in the working directory."""
    monkeypatch.chdir(tmp_path)
    result = run(*args)
    assert one_error_line(result).startswith(f"error: Invalid value for {flag}: '-' (standard output)")
    assert result.stdout == ""
    assert sorted(tmp_path.iterdir()) == []


def test_export_writes_a_dash_to_stdout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("export", "-s", "1f1b", "-p", 2, "-m", 1, "-o", "-")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["0F0,0B0", "1F0,1B0"]
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["evaluate", "-s", "1f1b", "-p", 2, "-m", 2], ["search", "-p", 2, "-m", 2, "--unit"]])
def test_a_picture_path_without_a_picture_suffix_is_refused_before_the_report(tmp_path, command):
    result = run(*command, "--plot", tmp_path / "steps.pdf")
    line = one_error_line(result)
    assert f"cannot draw to {tmp_path / 'steps.pdf'}: '.pdf' is not a picture format (use .png or .svg)" in line  # the path as given
    assert result.stdout == ""
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["evaluate", "compare"])
def test_every_schedule_at_once_is_sized_by_the_sum_before_the_first(command):
    """Each schedule at 64 x 40,000 is under the one-schedule limit, but the report keeps them all:
    their sum (2 ops per stage and microbatch for gpipe, ...) is refused before any is built."""
    from ppopt.generators import get, names
    from ppopt.ir import MAX_OPS, MAX_TOTAL_OPS

    sizes = [get(name).ops(64, 40_000, {}) for name in names()]
    assert all(size is not None for size in sizes)
    total = sum(size for size in sizes if size <= MAX_OPS)  # type: ignore[operator]
    assert total > MAX_TOTAL_OPS and get("gpipe").ops(64, 40_000, {}) == 64 * 40_000 * 2
    extra = ["-s", "all"] if command == "evaluate" else ["--model", "study", "--system", "mid-mid", "--global-batch", 40_000]
    line = one_error_line(run(command, *extra, "-p", 64, "-m", 40_000))
    assert line == (f"error: input too large: the {len(sizes)} schedules at p = 64, m = 40000 make {total:,} ops to "
                    f"simulate in all (stages x microbatches x kinds, summed); the limit is {MAX_TOTAL_OPS:,}")


@pytest.mark.parametrize("command", [["table"], ["evaluate"], ["export", "-o", "out.csv"]])
def test_sizes_that_contradict_the_schedule_file_are_refused(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "two.csv").write_text("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n")
    line = one_error_line(run(*command, "--schedule-file", "two.csv", "-p", 8, "-m", 2))
    assert line == "error: --devices: 8 differs from the 2 of two.csv (a schedule file gives its own sizes)"
    line = one_error_line(run(*command, "--schedule-file", "two.csv", "-m", 64))
    assert line == "error: --microbatches: 64 differs from the 2 of two.csv (a schedule file gives its own sizes)"
    assert run(*command, "--schedule-file", "two.csv", "-p", 2, "-m", 2).exit_code == 0
    piped = CliRunner().invoke(main, [*command, "--schedule-file", "-", "-p", "8"], input=(tmp_path / "two.csv").read_text())
    assert one_error_line(piped) == "error: --devices: 8 differs from the 2 of standard input (a schedule file gives its own sizes)"


def test_the_command_line_ends_without_the_interpreters_teardown_and_loses_no_output():
    """A finished command exits at once (freeing a plan's objects one by one took most of a second
    past its --time-limit): no exit handler runs, and stdout and stderr arrive complete."""
    probe = ("import atexit, sys; atexit.register(lambda: print('teardown ran', file=sys.stderr)); "
             "from ppopt.cli import main; main()")
    done = subprocess.run([sys.executable, "-c", probe, "list"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "teardown ran" not in done.stderr
    assert done.stdout == run("list").stdout
    failed = subprocess.run([sys.executable, "-c", probe, "evaluate", "-s", "nope", "-p", "2", "-m", "2"],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and failed.stderr.startswith("error: unknown schedule 'nope'")
    assert "teardown ran" not in failed.stderr


@pytest.mark.parametrize("args, flag", [(["export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", ""], "'--output' / '-o'"),
                                        (["search", "-p", 2, "-m", 2, "--unit", "--csv", ""], "'--csv' / '--torch-csv'")])
def test_an_empty_output_name_is_named_as_such(tmp_path, monkeypatch, args, flag):
    monkeypatch.chdir(tmp_path)
    line = one_error_line(run(*args))
    assert line.startswith(f"error: Invalid value for {flag}: cannot write {args[-1]!r}: empty file name")
    assert sorted(tmp_path.iterdir()) == []


# -- every schedule skipped: one error line, not a traceback or an empty report ----------------------


@pytest.mark.parametrize("args", [
    ["evaluate", "-s", "all", "-p", 64, "-m", 100_000],
    ["evaluate", "-s", "all", "-p", 64, "-m", 100_000, "--json"],
    ["compare", "-p", 128, "-m", 100_000, "--model", "study", "--system", "mid-mid", "--global-batch", 100_000],
])
def test_a_request_every_schedule_skips_is_one_error(args):
    """Every family is over the op limit here (the smallest, GPipe, makes 12.8 million ops at
    p = 64, m = 100,000; with the study's 128 layers at p = 128 those of two stages per device are
    skipped for their 256 stages): the reason of the first and a count of the others, exit 1."""
    line = one_error_line(run(*args))
    p, m = args[args.index("-p") + 1], args[args.index("-m") + 1]
    assert line.startswith(f"error: no schedule applies at p = {p}, m = {m} (gpipe: schedule too large")
    assert line.endswith("; 13 more skipped)")


# -- Ctrl-C stops a search at once ------------------------------------------------------------------


def test_ctrl_c_during_a_search_aborts_the_command():
    """CP-SAT's own SIGINT handler ended only the running solve, so the search went on to its time
    limit, printed a result and exited 0. Now the command stops: no result, `aborted`, exit 1. The
    signal comes inside one whole-model solve (--method cp) with a budget of 600 s: without the
    watcher that stops it, Python would raise only when that solve returned, after the 120 s this
    test waits."""
    import signal

    args = [sys.executable, "-m", "ppopt", "search", "-p", "8", "-m", "32", "--unit", "--memory-limit", "5", "--comm", "1",
            "--space", "placement=bidirectional,directions=free", "--time-limit", "600", "--method", "cp", "--no-grid"]
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert child.stderr is not None
        for line in child.stderr:  # the whole-model solve has started
            if line.startswith("searching "):
                break
        else:
            raise AssertionError("the search never started its solve")
        threading.Event().wait(1.0)  # well inside it
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert (child.returncode, out) == (1, "")
    assert err.splitlines()[-1] == "aborted"


def test_kill_while_a_file_is_written_leaves_no_temporary_file(tmp_path):
    """SIGTERM (`kill`, `timeout`, a batch scheduler) ended the process at once: an export caught
    while writing left its hidden temporary file (12 MB of a 1,000,000-microbatch CSV) beside the
    target. It now stops the command as Ctrl-C does: `aborted`, exit 1, nothing left. The signal is
    sent from inside the write (at its fsync), so the test does not race the write."""
    import signal

    script = (
        "import os, signal, sys\n"
        "sync = os.fsync\n"
        "def killed_at_fsync(fd):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    sync(fd)\n"
        "os.fsync = killed_at_fsync\n"
        "sys.argv = ['ppopt', 'export', '-s', '1f1b', '-p', '2', '-m', '4', '-o', 'out.csv']\n"
        "from ppopt.entry import main\n"
        "main()\n"
    )
    for sigint in (signal.SIG_DFL, signal.SIG_IGN):  # also in a script's background job, which ignores Ctrl-C
        ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=lambda sigint=sigint: signal.signal(signal.SIGINT, sigint))
        assert (ran.returncode, ran.stdout, ran.stderr) == (1, "", "\naborted\n")
        assert list(tmp_path.iterdir()) == []


def test_a_picture_is_the_same_file_on_every_run(tmp_path):
    """matplotlib salts an SVG's element ids at random: two identical exports differed in 632 lines."""
    for name in ("a.svg", "b.svg"):
        assert run("export", "-s", "1f1b", "-p", 4, "-m", 8, "-o", tmp_path / name).exit_code == 0
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


@pytest.mark.parametrize("command, first, second", [
    (["search", "--unit", "-p", 4, "-m", 8, "-q", "--no-grid"], "--csv", "--trace"),
    (["evaluate", "-s", "1f1b", "-p", 2, "-m", 2, "--model", "study", "--system", "mid-mid"], "--plot", "--trace"),
    (["plan", "--model", "llama3-8b", "--gpus", 4, "--system", "dgx-h100", "--global-batch", 8, "--search", 0, "-q"],
     "--plot", "--torch-csv"),
])
def test_outputs_of_one_command_are_written_all_or_none(tmp_path, command, first, second):
    """`search --csv k.csv --trace X`, where X cannot be written (a full disk), replaced k.csv and
    then failed; the outputs of one command now replace their files together or not at all."""
    kept = tmp_path / ("kept.png" if first == "--plot" else "kept.csv")
    kept.write_text("previous\n")
    result = run(*command, first, kept, second, "/dev/full")
    assert one_error_line(result) == "error: cannot write /dev/full: No space left on device"
    assert kept.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == [kept.name]  # no temporary file left behind
    other = tmp_path / ("s.csv" if second == "--torch-csv" else "t.json")
    result = run(*command, first, kept, second, other)
    assert result.exit_code == 0, result.output
    assert kept.read_bytes() != b"previous\n" and other.stat().st_size > 0
    if second == "--trace":
        assert json.loads(other.read_text())["traceEvents"]
    assert f"wrote {kept}" in result.output and f"wrote {other}" in result.output


def test_an_output_group_replaces_its_files_only_when_it_ends_well(tmp_path):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("old a\n")
    with pytest.raises(RuntimeError), ppopt.io.output_group():
        atomic_write_text(first, "new a\n")
        atomic_write_text(second, "new b\n")
        assert first.read_text() == "old a\n" and not second.exists()  # staged until the group ends
        raise RuntimeError("a later step failed")
    assert first.read_text() == "old a\n" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    with ppopt.io.output_group():
        atomic_write_text(first, "new a\n")
        with ppopt.io.output_group():  # an inner group belongs to the outer one
            atomic_write_text(second, "new b\n")
        assert not second.exists()
    assert (first.read_text(), second.read_text()) == ("new a\n", "new b\n")
    atomic_write_text(first, "at once\n")  # outside a group: replaced at once
    assert first.read_text() == "at once\n"


def test_messages_say_what_is_actually_wrong(tmp_path, monkeypatch):
    """Each of these named another problem than the one the input has (found by an audit)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cal.toml").write_text("")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "m5.csv").write_text("0F0,0F1,0F2,0F3,0F4,0B0,0B1,0B2,0B3,0B4\n")  # one rank, 5 microbatches
    cases = [
        # blamed --microbatches, which a schedule file sets
        (["evaluate", "--schedule-file", "m5.csv", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", 8],
         "error: --global-batch: global batch of 8 sequences is not divisible by 5 microbatches, and m5.csv sets the "
         "microbatches: give another global batch"),
        (["study", "--spec", "/dev/zero", "-o", "out"], "error: /dev/zero: cannot read file (not a text file: NUL byte at byte 0)"),
        (["table", "-s", "1f1b", "-p", 2, "-m", 2, "--plot", "picture"],
         "error: Invalid value for '--plot': cannot draw to picture: the name needs a picture suffix, .png or .svg "
         "(see 'ppopt table --help')"),
        (["evaluate", "-s", "all", "-p", 2, "-m", 2, "--plot", "e.png"],
         "error: --plot draws one schedule: give --schedule NAME (or use `ppopt compare --plot`)"),
        (["evaluate", "-s", "all", "-p", 2, "-m", 2, "--model", "study", "--system", "mid-mid", "--trace", "e.json"],
         "error: --trace writes one schedule's step: give --schedule NAME"),
        (["calibrate", "empty.csv", "-o", "cal.toml/x.toml"],
         "error: Invalid value for '--output' / '-o': cannot write cal.toml/x.toml: cal.toml is a file, not a directory "
         "(see 'ppopt calibrate --help')"),
        (["published", "empty.csv"], "error: empty.csv: empty file (expected a header row)"),
        (["sweep", ""], "error: empty file name: give a study spec (a .toml file, or a name such as paper)"),  # was ".: cannot read spec (Is a directory)"
        (["study", "--spec", "", "-o", "out"], "error: empty file name: give a study spec (a .toml file, or a name such as paper)"),  # ran the paper's study
        # pointed to 'ppopt --help', which does not list the command's options
        (["table", "-s"], "error: Option '-s' requires an argument. (see 'ppopt table --help')"),
        (["job", "--model"], "error: Option '--model' requires an argument. (see 'ppopt job --help')"),
        # said "(no --plot)" when no --plot was given
        (["compare", "-p", 4, "-m", 8, "--costs", "c.json", "--model", "llama3-8b", "--system", "dgx-a100"],
         "error: --costs: replaces --model/--system: give one or the other"),
        (["evaluate", "-s", "1f1b", "-p", 4, "-m", 8, "--costs", "c.json", "--trace", "t.json"], "error: --costs: does not take --trace"),
        (["evaluate", "-s", "all", "-p", 4, "-m", 8, "--costs", "c.json"], "error: --costs: takes one schedule, not -s all"),
    ]
    for args, line in cases:
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        assert one_error_line(result) == line, args


def _named(flag: str) -> str:
    """A flag as click's errors name it: every name of its option (the PyTorch CSV has two)."""
    names = {"--csv": ["--csv", "--torch-csv"], "--torch-csv": ["--torch-csv", "--csv"]}.get(flag, [flag])
    return " / ".join(f"'{name}'" for name in names)


@pytest.mark.parametrize("args, flag, name", [
    (["search", "--unit", "-p", 4, "-m", 8], "--csv", "a.png"),
    (["search", "--unit", "-p", 4, "-m", 8], "--trace", "t.csv"),
    (["evaluate", "-s", "1f1b", "-p", 2, "-m", 2, "--model", "study", "--system", "mid-mid"], "--trace", "t.svg"),
    (["plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100"], "--torch-csv", "s.json"),
])
def test_an_output_named_as_another_format_is_refused_before_any_work(tmp_path, monkeypatch, args, flag, name):
    """`search --csv a.png` wrote a CSV into a.png: flags swapped, most likely. A name with another
    of ppopt's output suffixes is refused; any other name is the user's to choose."""
    monkeypatch.chdir(tmp_path)
    line = one_error_line(run(*args, flag, name))
    assert line.startswith(f"error: Invalid value for {_named(flag)}: {name} looks like ") and "give a name ending in" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, flag, name", [
    (["search", "--unit", "-p", 4, "-m", 8], "--csv", "s.csv.gz"),
    (["plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100"], "--torch-csv", "plan.csv.gz"),
])
def test_a_gz_name_for_an_output_never_compressed_is_refused(tmp_path, monkeypatch, args, flag, name):
    """`search --csv s.csv.gz` wrote plain text under a gzip name (export refused the same name)."""
    monkeypatch.chdir(tmp_path)
    line = one_error_line(run(*args, flag, name))
    assert line.startswith(f"error: Invalid value for {_named(flag)}: {name} ends in .gz, but ") and "written uncompressed" in line
    assert list(tmp_path.iterdir()) == []


def test_a_trace_named_gz_is_compressed_and_checked_by_the_suffix_before(tmp_path, monkeypatch):
    """`evaluate --trace t.csv.gz` passed the check (its suffix was .gz) and wrote a gzip trace named
    as a CSV; t.json.gz is the trace, compressed."""
    import gzip

    monkeypatch.chdir(tmp_path)
    job = ["evaluate", "-s", "1f1b", "-p", 2, "-m", 2, "--model", "study", "--system", "mid-mid", "-q"]
    line = one_error_line(run(*job, "--trace", "t.csv.gz"))
    assert line.startswith("error: Invalid value for '--trace': t.csv.gz looks like a CSV file's name")
    assert list(tmp_path.iterdir()) == []
    assert run(*job, "--trace", "t.json.gz").exit_code == 0
    assert "traceEvents" in json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes()))


def test_a_read_only_output_file_is_refused_and_kept(tmp_path, monkeypatch):
    """The file went in by rename, which asks the directory, not the file: a write-protected output
    was replaced. os.access is consulted as the shell's redirection would be (root may write anyway,
    so the test makes the file read-only to ppopt's check)."""
    import ppopt.cli.options as options

    monkeypatch.chdir(tmp_path)
    kept = tmp_path / "ro.csv"
    kept.write_text("old\n")
    real = os.access
    monkeypatch.setattr(options.os, "access", lambda path, mode: False if Path(path).resolve() == kept and mode == os.W_OK else real(path, mode))
    line = one_error_line(run("export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", "ro.csv"))
    assert line.startswith("error: Invalid value for '--output' / '-o': cannot write ro.csv: the file is read-only")
    assert kept.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["ro.csv"]


def test_a_picture_to_standard_output_says_it_needs_a_file():
    assert one_error_line(run("export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", "-", "--format", "png")) == \
        "error: --format png needs a file: --output - (stdout) is for torch-csv and chrome-trace"


def test_an_output_name_ending_in_a_slash_is_refused(tmp_path, monkeypatch):
    """`export -o out.csv/` (and `out.csv/.`) wrote a file out.csv and exited 0."""
    monkeypatch.chdir(tmp_path)
    for name in ("out.csv/", "out.csv/."):
        line = one_error_line(run("export", "-s", "1f1b", "-p", 2, "-m", 3, "-o", name))
        assert line == (f"error: Invalid value for '--output' / '-o': cannot write {name}: it names a directory; give a "
                        "file name (see 'ppopt export --help')")
    assert list(tmp_path.iterdir()) == []
    line = one_error_line(run("export", "-s", "1f1b", "-p", 2, "-m", 3, "--format", "chrome-trace", "-o", "t.csv"))
    assert line == "error: --format chrome-trace writes a .json file, but --output 't.csv' looks like a CSV file's name"
    assert list(tmp_path.iterdir()) == []
    assert run("search", "--unit", "-p", 4, "-m", 8, "-q", "--no-grid", "--csv", "found.txt").exit_code == 0
    assert (tmp_path / "found.txt").read_text().startswith("0F0,")  # a name of the user's own: written


@pytest.mark.parametrize("command", [["evaluate", "-s", "1f1b"], ["compare"], ["search"], ["gap"], ["frontier"],
                                     ["export", "-s", "1f1b", "-o", "x.csv"]])
def test_a_model_without_a_system_is_the_same_usage_error_everywhere(command):
    """search, gap, frontier and export named `--unit`, a flag the user had not given."""
    line = one_error_line(run(*command, "-p", 2, "-m", 2, "--model", "study"))
    assert line == f"error: give both --model and --system (see 'ppopt {command[0]} --help')"


def test_more_stages_than_layers_names_the_flag_in_every_command(tmp_path):
    """search, frontier and export said "cannot split 4 layers over 8 stages" and named no flag;
    evaluate and job named one. Each names the flag that made the stages now, before any work.
    placement=family, whose members have p to 2p stages, failed whole when one did not fit."""
    preset = (Path(__file__).resolve().parents[1] / "models" / "llama3-8b.toml").read_text()
    model = tmp_path / "four.toml"
    model.write_text(preset.replace('name = "llama3-8b"', 'name = "four"').replace("num_layers = 32", "num_layers = 4"))
    common = ["-p", 4, "-m", 8, "--model", model, "--system", "dgx-h100"]
    cases = [
        (["search", *common, "--space", "placement=v"],
         "error: --space: 8 stages (placement=v,backward=full,order=free on 4 devices) exceed the model's 4 layers"),
        (["frontier", *common, "--space", "placement=looped"],
         "error: --space: 8 stages (placement=looped,chunks=2,backward=full,order=free on 4 devices) exceed the model's 4 layers"),
        (["search", *common, "--space", "fixed:zb-v"], "error: --space: 8 stages (4 devices x 2 under zb-v) exceed the model's 4 layers"),
        (["export", "-s", "zb-v", *common, "-o", tmp_path / "z.csv"],
         "error: --devices: 8 stages (4 devices x 2 under zb-v) exceed the model's 4 layers"),
        (["evaluate", "-s", "interleaved-1f1b", "--chunks", 3, *common],
         "error: --chunks: 12 stages (4 devices x 3 under interleaved-1f1b) exceed the model's 4 layers"),
        (["search", *common, "--space", "placement=any"],
         "error: --space: 8 stages (placement=any,chunks=2,backward=full,order=free on 4 devices) exceed the model's 4 layers"),
        (["search", *common[:1], 5, *common[2:], "--space", "placement=family"],
         "error: --space: every placement of placement=family,backward=full,order=free has at least 5 stages on 5 devices, "
         "more than the model's 4 layers"),
    ]
    for args, line in cases:
        assert one_error_line(run(*args)) == line, args
    assert not (tmp_path / "z.csv").exists()
    # placement=family searches the members that fit: on 4 devices only the linear one (4 stages) does
    family = run("search", *common, "--space", "placement=family", "--time-limit", 10, "--json")
    assert family.exit_code == 0, family.output
    for member in ("looped", "v", "zigzag"):
        assert f"skipped placement={member}: its 8 stages exceed the model's 4 layers" in family.stderr
    linear = run("search", *common, "--space", "placement=linear", "--time-limit", 10, "--json")
    assert json.loads(family.stdout)["step_time_s"] == json.loads(linear.stdout)["step_time_s"]


def test_a_dash_is_no_results_directory(tmp_path, monkeypatch):
    """`sweep SPEC -o -` made a directory named '-'."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text('schedules = ["1f1b"]\ndevices = [2]\nmicrobatches = [2]\nmodels = ["study"]\n'
                                     'systems = ["mid-mid"]\n')
    line = one_error_line(run("sweep", "s.toml", "-o", "-"))
    assert line.startswith("error: Invalid value for '--output' / '-o': '-' (standard output) cannot hold a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


@pytest.mark.parametrize("args, flag", [
    (["evaluate", "-s", "1f1b", "-p", "2", "-m", "4", "-p", "3"], "--devices/-p/--pp is given 2 times"),
    (["search", "-p", "2", "-m", "4", "--unit", "--time-limit", "5", "--time-limit", "6", "--time-limit", "7"],
     "--time-limit is given 3 times"),
    (["search", "-p", "2", "-m", "4", "--unit", "--grid", "--no-grid"], "--grid/--no-grid is given 2 times"),
])
def test_an_option_that_takes_one_value_is_refused_when_repeated(args, flag):
    """click keeps the last of ``-p 2 -p 3`` without a word, so a user who meant the first gets
    another job: refused in one line that names the option. A plain flag given twice means the
    same as once, and is taken."""
    line = one_error_line(run(*args))
    assert flag in line and "give it once" in line
    twice = run("evaluate", "-s", "1f1b", "-p", "2", "-m", "4", "--json", "--json")
    assert twice.exit_code == 0 and twice.stdout == run("evaluate", "-s", "1f1b", "-p", "2", "-m", "4", "--json").stdout


def test_repeatable_options_still_repeat():
    """Options declared repeatable (gap's -s) take every value given."""
    result = run("gap", "-p", "4", "-m", "8", "--unit", "-s", "1f1b", "-s", "gpipe", "--time-limit", "5", "-q", "--json")
    assert result.exit_code == 0, result.output
    assert {row["schedule"] for row in json.loads(result.stdout)["schedules"]} == {"1f1b", "gpipe"}


def test_a_repeatable_option_given_one_value_twice_takes_it_once():
    """Every command's repeatable option merges a repeated value (compared once converted, so
    --micro-batch 1 and 01 are one), keeping the order of first appearance: plan planned every job
    twice; published and gap merged theirs each in its own way, now the parser's."""
    published = ["published", str(Path(__file__).resolve().parents[1] / "data" / "published" / "megatron-lm-2021.csv"), "--json"]
    once = run(*published, "--system", "dgx-a100")
    twice = run(*published, "--system", "dgx-a100", "--system", "dgx-a100")
    assert once.exit_code == 0 and twice.stdout == once.stdout
    plan = ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--gpus", 8, "--search", 0, "-q", "--json",
            "--recompute", "full", "--schedule", "1f1b"]
    assert run(*plan, "--micro-batch", 1, "--micro-batch", "01", "--micro-batch", 2).stdout == \
        run(*plan, "--micro-batch", 1, "--micro-batch", 2).stdout
    gap = run("gap", "-p", "4", "-m", "8", "--unit", "-s", "gpipe", "-s", "1f1b", "-s", "gpipe", "--time-limit", "5", "-q", "--json")
    assert [row["schedule"] for row in json.loads(gap.stdout)["schedules"]] == ["gpipe", "1f1b"]


def test_an_output_never_replaces_an_input(tmp_path, monkeypatch):
    """`plan --candidates c.csv --torch-csv c.csv` replaced the measured data with a schedule,
    `search --costs c.json --trace c.json` the cost preset with a trace, and `calibrate --system
    base.toml -o base.toml` the base system: refused before any work, the input
    left as it was."""
    root = Path(__file__).resolve().parents[1]
    data = tmp_path / "rows.csv"
    data.write_bytes((root / "data" / "measured" / "vtrain-multi-node-small.csv").read_bytes())
    base = tmp_path / "base.toml"
    base.write_bytes((root / "configs" / "a100-vtrain.toml").read_bytes())
    preset = tmp_path / "costs.json"
    preset.write_text("{}")  # refused before it is read
    before = data.read_bytes(), base.read_bytes()
    cases = [
        (["plan", "--candidates", data, "--system", "a100-vtrain", "--search", "0", "-q", "--torch-csv", data],
         f"--torch-csv would replace the --candidates input {data}"),
        (["calibrate", data, "--system", base, "-o", base, "-q"], f"--output would replace the --system input {base}"),
        (["search", "-p", 2, "-m", 4, "--costs", preset, "--trace", preset, "--time-limit", 5],
         f"--trace would replace the --costs input {preset}"),
    ]
    for args, reason in cases:
        line = one_error_line(run(*args))
        assert reason in line, line
    # spelled differently, each path is named as it was given for its own flag (the input's spelling
    # was shown as the output's)
    monkeypatch.chdir(tmp_path)
    line = one_error_line(run("calibrate", data, "--system", "./base.toml", "-o", "base.toml", "-q"))
    assert "--output would replace the --system input ./base.toml" in line, line
    assert (data.read_bytes(), base.read_bytes(), preset.read_text()) == (*before, "{}")


def test_second_audit_inputs_are_one_line_naming_the_real_problem(tmp_path, monkeypatch):
    """Found by a fuzzing audit: a traceback (chimera-asym on one device: a ZeroDivisionError in
    the split's weights), an error naming no flag (a split whose parts are 1e308 apart), and a
    reason that was false (plan with --micro-batch blamed the layers; dualpipe needs an even m)."""
    monkeypatch.chdir(tmp_path)
    cases = [
        (["job", "--model", "llama3-8b", "--system", "dgx-a100", "--schedule", "chimera-asym"],
         "error: --schedule: chimera-asym is not defined for 1 device: an A:B split of the layers between the "
         "pipeline's halves needs an even number of devices, got 1"),
        (["evaluate", "-s", "chimera-asym", "-p", 2, "-m", 2, "--split", "1e308:1e-308", "--model", "study", "--system", "mid-mid"],
         "error: --split: the parts of '1e308:1e-308' are too far apart: one side would get no layers"),
        (["plan", "-q", "--model", "llama3-8b", "--system", "dgx-a100", "--gpus", 2, "--schedule", "dualpipe",
          "--micro-batch", 256, "--search", 0],
         "error: --schedule: no job of the schedules dualpipe is defined on 2 GPUs; at p = 2, m = 1: dualpipe needs an "
         "even number of microbatches (half enter from each end), got 1"),
    ]
    for args, line in cases:
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        assert one_error_line(result) == line, args
    # a schedule file with more stages than the model's layers named no flag
    (tmp_path / "tiny.toml").write_text('name = "tiny"\nnum_layers = 1\nhidden_size = 64\nffn_hidden_size = 256\n'
                                        'num_attention_heads = 2\nvocab_size = 128\nseq_length = 32\nglobal_batch_size = 8\n')
    assert run("export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", "two.csv").exit_code == 0
    line = one_error_line(run("evaluate", "--schedule-file", "two.csv", "--model", "tiny.toml", "--system", "dgx-a100"))
    assert line == "error: --model: cannot split 1 layer over 2 stages (every stage needs at least one layer)"
    # a global batch beyond the limit was called indivisible by m
    line = one_error_line(run("evaluate", "-s", "1f1b", "-p", 2, "-m", 8, "--model", "study", "--system", "mid-mid",
                              "--global-batch", "99999999999999999999"))
    assert line == "error: --global-batch: must be a positive integer of at most 1073741824, got 99999999999999999999"
    # parts that are each finite but whose sum overflows still split evenly
    result = run("job", "--model", "llama3-8b", "--system", "dgx-a100", "--pp", 2, "--schedule", "chimera-asym",
                 "--split", "1e308:1e308")
    even = run("job", "--model", "llama3-8b", "--system", "dgx-a100", "--pp", 2, "--schedule", "chimera-asym", "--split", "1:1")
    assert result.exit_code == 0 and even.exit_code == 0
    assert result.stdout.splitlines()[1:] == even.stdout.splitlines()[1:]


def test_a_time_limit_shorter_than_the_start_up_is_refused_naming_it():
    """--time-limit counts from ppopt's imports, which take a good part of a second: a limit that the
    start-up alone uses up is refused with the least limit, start-up included (0.01 s was accepted
    and the command took 1.35 s)."""
    process = ppopt_process(["search", "--unit", "-p", "4", "-m", "8", "--time-limit", "0.01"], subprocess.PIPE)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 1 and stdout == b""
    line = stderr.decode()
    assert line.count("\n") == 1 and line.startswith("error: --time-limit: 0.01 s is too short for 4 devices, 8 microbatches")
    assert re.search(r"takes up to [\d.]+ s, the command's start-up \([\d.e-]+ s\) included; give at least that", line)


@pytest.mark.parametrize("args, what", [
    (["import", "{d}"], "a PyTorch schedule CSV file"),
    (["table", "--schedule-file", "{d}"], "a PyTorch schedule CSV file"),
    (["run", "{d}"], "a PyTorch schedule CSV file"),
    (["validate", "{d}", "--system", "a100-vtrain"], "a measured-data CSV file"),
    (["calibrate", "{d}", "-o", "{d}/out.toml"], "a measured-data CSV file"),
    (["plan", "--candidates", "{d}", "--system", "a100-vtrain"], "a measured-data CSV file"),
    (["published", "{d}"], "a published-throughput CSV file"),
    (["evaluate", "-s", "1f1b", "-p", "2", "-m", "2", "--costs", "{d}"], "a cost preset file (.json)"),
    (["sweep", "{d}"], "a study spec (a .toml file, or a name such as paper)"),
    (["evaluate", "-s", "1f1b", "-p", "2", "-m", "2", "--model", "{d}", "--system", "dgx-h100"], "a model file (.toml or .json)"),
])
def test_every_reader_names_a_directory_given_as_its_input_in_the_same_words(tmp_path, args, what):
    """Some said click's "Invalid value for 'DATA...': File '...' is a directory.", some "cannot
    read: Is a directory", some "no such spec file"; every reader now says what it wanted."""
    line = one_error_line(run(*[a.format(d=tmp_path) for a in args]))
    assert line.endswith(f"{tmp_path}: is a directory, not {what}"), line
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_the_command_line_is_imported_prints_aborted(monkeypatch, capsys):
    """Importing ppopt.cli takes about half a second; Ctrl-C then printed a traceback of the import,
    since the command's own handling was not in place yet. The console script's entry catches it."""
    import importlib.abc

    from ppopt.entry import main as entry

    class Interrupted(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "ppopt.cli":
                raise KeyboardInterrupt
            return None

    monkeypatch.delitem(sys.modules, "ppopt.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Interrupted(), *sys.meta_path])
    with pytest.raises(SystemExit) as exited:
        entry()
    assert exited.value.code == 1 and capsys.readouterr().err == "\naborted\n"


def test_the_budget_counts_from_the_process_start(monkeypatch):
    """`--time-limit` covers the interpreter's start too: ``startup_s`` counts from the process's
    start (Linux's /proc/self/stat), which came before ppopt's import in this process, and never
    less than the time since the import; from Python (not the command line) it is 0."""
    import time

    import ppopt
    from ppopt.cli import process_age_s, startup_s

    assert startup_s() == 0.0
    monkeypatch.setattr("ppopt.cli._FROM_COMMAND_LINE", True)
    since_import = time.monotonic() - ppopt.IMPORTED_AT
    age = process_age_s()
    counted = startup_s()
    assert counted >= since_import
    if age is None:
        pytest.skip("the system does not give the process's start time")
    assert since_import <= age < time.clock_gettime(time.CLOCK_BOOTTIME)  # started before the import, after the boot
    assert counted >= age  # the budget began with the process, not with the import


@pytest.mark.parametrize("args", [
    ["evaluate", "-s", "1f1b", "-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "{name}.toml"],
    ["evaluate", "-s", "1f1b", "-p", "4", "-m", "8", "--model", "{name}", "--system", "dgx-a100"],
    ["sweep", "{name}.toml"],
    ["study", "--spec", "{name}.toml"],
    ["validate", str(Path(__file__).parents[1] / "data" / "measured" / "vtrain-multi-node-small.csv"), "--system", "{name}"],
])
def test_a_preset_or_spec_name_too_long_for_a_file_is_one_line(args):
    """Over 255 bytes the system refuses the name (ENAMETOOLONG), which the preset and spec readers
    let through as a traceback: every other reader said "cannot read file (File name too long)"."""
    name = "x" * 300
    line = one_error_line(run(*[a.format(name=name) for a in args]))
    assert line.startswith(f"error: {name}") and line.endswith(": cannot read file (File name too long)"), line


def test_a_loop_of_links_is_not_called_a_broken_link(tmp_path):
    """A model file or spec that links to itself through another link read as "no such file (a
    broken symbolic link to l2.toml)" or "no such spec file"; it exists, and cannot be followed."""
    (tmp_path / "l1.toml").symlink_to(tmp_path / "l2.toml")
    (tmp_path / "l2.toml").symlink_to(tmp_path / "l1.toml")
    loop = str(tmp_path / "l1.toml")
    for args in (["evaluate", "-s", "1f1b", "-p", "4", "-m", "8", "--model", "llama3-8b", "--system", loop], ["sweep", loop]):
        assert one_error_line(run(*args)) == f"error: {loop}: cannot read file (Too many levels of symbolic links)"


@pytest.mark.parametrize("args, line", [
    (["evaluate", "-s", "1f1b", "-p", "4", "-m", "8", "--model", "a\nb", "--system", "dgx-a100"],
     "error: unknown model preset 'a\\nb' (known: gpt3-175b, llama3-70b, llama3-8b, study)"),
    (["import", "x\ty\r.csv"], "error: x\\ty\\r.csv: no such file"),
])
def test_a_control_character_in_a_name_keeps_the_error_on_one_line(args, line):
    """A line break in a preset or file name used to split the error in two lines; it is escaped."""
    assert one_error_line(run(*args)) == line


def test_search_says_when_its_schedule_exceeds_the_gpu_s_memory():
    """Without --memory-limit the search is not bound by the GPU's memory: llama3-8b on 4 A100s
    (8 microbatches of its default global batch) peaks at about 2.7 TB on the last device, which
    the report printed as optimal without a word, where `evaluate` marks it. It now says so."""
    text = run("search", "--model", "llama3-8b", "--system", "dgx-a100", "-p", 4, "-m", 8, "--time-limit", 20).stdout
    lines = [line for line in text.splitlines() if line.startswith("memory ")]
    assert len(lines) == 1 and "over the system's 74.51 GiB (80 GB) per device; give --memory-limit" in lines[0], text
    name = text.split("(best from handcrafted ", 1)[1].split(")", 1)[0]
    evaluated = run("evaluate", "-s", name, "--model", "llama3-8b", "--system", "dgx-a100", "-p", 4, "-m", 8).stdout
    device = lines[0].split()[2]
    assert f"{name}: device {device} peaks at" in evaluated  # the same device evaluate names for the same schedule
    fitting = run("search", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", 8, "-p", 4, "-m", 8, "--global-batch", 8,
                  "--time-limit", 20).stdout  # one sequence per microbatch, eight-way tensor parallel: 29 GiB at most
    assert "step time" in fitting and not any(line.startswith("memory ") for line in fitting.splitlines())
    # with a --memory-limit above the GPU's memory, the line says so instead of asking for one
    limited = run("search", "--model", "llama3-8b", "--system", "dgx-h100", "-p", 4, "-m", 8, "--global-batch", 32,
                  "--memory-limit", "150GiB", "--time-limit", 20).stdout
    lines = [line for line in limited.splitlines() if line.startswith("memory ")]
    assert len(lines) == 1 and lines[0].endswith("per device; the search's --memory-limit of 150 GiB is above it"), limited


def test_unit_mode_with_a_model_is_named_before_the_memory_limit_is_read():
    """`--unit --model M --memory-limit 20GiB` said the limit must be a number of live activations:
    the limit was read in the unit mode's unit before the clash of modes was found."""
    for command in ("search", "gap"):
        result = run(command, "--unit", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-a100", "--memory-limit", "20GiB")
        assert one_error_line(result) == "error: --unit: give either unit mode or a model and a system, not both"
    # with a global batch too, the error blamed it for lacking the --model and --system it had
    for command in ("search", "gap", "export"):
        result = run(command, "--unit", "-p", 4, "-m", 8, "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", 8,
                     *(["-s", "1f1b", "-o", "x.csv"] if command == "export" else []))
        assert one_error_line(result) == "error: --unit: give either unit mode or a model and a system, not both", command


def test_a_sweep_folder_that_cannot_be_made_names_the_flag():
    """/proc exists and is a directory, so --output passes its check, and only making the folder
    fails: the line said "cannot create /proc/foo: ..." without naming --output."""
    if not Path("/proc/self").is_dir():
        pytest.skip("needs /proc")
    assert one_error_line(run("sweep", "quick", "-o", "/proc/ppopt-sweep", "-q")) == (
        "error: --output: cannot create /proc/ppopt-sweep: No such file or directory")


def test_an_output_that_is_a_loop_of_links_is_refused_before_the_work(tmp_path, monkeypatch):
    """calibrate fitted for seconds, then could not write through l1 -> l2 -> l1; it is refused first."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "l1.toml").symlink_to("l2.toml")
    (tmp_path / "l2.toml").symlink_to("l1.toml")
    monkeypatch.setattr("ppopt.calibrate.calibrate", lambda *a, **k: pytest.fail("the fit ran"))
    data = Path(__file__).parents[1] / "data" / "measured" / "vtrain-multi-node-small.csv"
    line = one_error_line(run("calibrate", data, "-o", "l1.toml"))
    assert line == ("error: Invalid value for '--output' / '-o': cannot write l1.toml: Too many levels of symbolic links "
                    "(see 'ppopt calibrate --help')")


def test_an_output_linked_into_a_missing_directory_is_refused_before_the_work(tmp_path, monkeypatch):
    """A link whose target's directory does not exist passed the check (its own directory exists):
    calibrate fitted, printed its report, and only then failed to write."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fit.toml").symlink_to(tmp_path / "missing" / "fit.toml")
    monkeypatch.setattr("ppopt.calibrate.calibrate", lambda *a, **k: pytest.fail("the fit ran"))
    data = Path(__file__).parents[1] / "data" / "measured" / "vtrain-multi-node-small.csv"
    line = one_error_line(run("calibrate", data, "-o", "fit.toml"))
    assert line == (f"error: Invalid value for '--output' / '-o': cannot write fit.toml: no directory {tmp_path / 'missing'} "
                    "(where the link fit.toml points) (see 'ppopt calibrate --help')")


def test_an_output_name_too_long_for_the_temporary_file_is_refused_before_the_work(tmp_path, monkeypatch):
    """The file goes in through a temporary one named 14 characters longer, so a name of 242 to 255
    bytes is legal yet cannot be written: it failed only after the work."""
    monkeypatch.chdir(tmp_path)
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    name = "y" * (limit - 10) + ".csv"  # fits the directory, its temporary file does not
    line = one_error_line(run("export", "-s", "1f1b", "-p", "2", "-m", "4", "--unit", "-o", name))
    assert line.endswith("the name is too long for its directory (ppopt writes through a temporary file named 14 "
                         "characters longer) (see 'ppopt export --help')")
    assert list(tmp_path.iterdir()) == []
    fitting = "y" * (limit - 18) + ".csv"
    assert run("export", "-s", "1f1b", "-p", "2", "-m", "4", "--unit", "-o", fitting).exit_code == 0
    assert (tmp_path / fitting).is_file()


def test_a_sweep_output_that_is_a_dangling_link_says_so(tmp_path, monkeypatch):
    """mkdir on a dangling link said only "File exists"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").symlink_to(tmp_path / "gone")
    line = one_error_line(run("sweep", "quick", "-o", "out", "-q"))
    assert line == (f"error: Invalid value for '--output' / '-o': cannot create out: it is a link to {tmp_path / 'gone'}, "
                    "which does not exist (see 'ppopt sweep --help')")


def test_a_link_to_a_device_is_written_in_place_whatever_its_directory_allows(tmp_path, monkeypatch):
    """A device is written in place, so its directory need not take new files; checking the link's
    target's directory refused `out.csv -> /dev/null` for a user who cannot write /dev."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nul.csv").symlink_to("/dev/null")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == "/dev" else real_access(path, mode))
    result = run("export", "-s", "1f1b", "-p", "2", "-m", "4", "--unit", "-o", "nul.csv")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "nul.csv").is_symlink() and os.readlink(tmp_path / "nul.csv") == "/dev/null"


def test_a_sweep_directory_that_is_a_loop_of_links_or_under_a_dangling_one_says_so(tmp_path, monkeypatch):
    """A loop was described as a link to a missing directory, and the default output under a
    dangling `out` said only "File exists"."""
    from ppopt.sweep import load_spec, run_sweep

    monkeypatch.chdir(tmp_path)
    (tmp_path / "l1").symlink_to("l2")
    (tmp_path / "l2").symlink_to("l1")
    line = one_error_line(run("sweep", "quick", "-o", "l1", "-q"))
    assert line == "error: Invalid value for '--output' / '-o': cannot create l1: Too many levels of symbolic links (see 'ppopt sweep --help')"
    (tmp_path / "out").symlink_to(tmp_path / "gone")
    spec = tmp_path / "small.toml"
    spec.write_text('devices = [2]\nmicrobatches = [4]\nschedules = ["1f1b"]\nmodels = ["study"]\nsystems = ["mid-mid"]\n')
    with pytest.raises(PpoptError) as refused:
        run_sweep(load_spec(spec), Path("out") / "small")
    assert refused.value.reason == f"cannot create out/small: out: it is a link to {tmp_path / 'gone'}, which does not exist"


def test_a_link_to_a_name_too_long_names_the_target(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    long_name = "z" * (os.pathconf(tmp_path, "PC_NAME_MAX") - 6) + ".csv"
    (tmp_path / "short.csv").symlink_to(long_name)
    line = one_error_line(run("export", "-s", "1f1b", "-p", "2", "-m", "4", "--unit", "-o", "short.csv"))
    assert line.startswith(f"error: Invalid value for '--output' / '-o': cannot write short.csv: the name it links to, {long_name}, "
                           "is too long for its directory")


def test_a_command_that_ends_at_once_releases_its_process_pools_semaphores(tmp_path):
    """The command line ends with os._exit (ppopt.cli._exit_now), which skipped the finalizers that
    unlink multiprocessing's semaphores: after a pool was aborted (SIGTERM during `sweep -j 2`) the
    resource tracker, which outlives the process and shares its stderr, warned of them as leaked."""
    script = tmp_path / "pool.py"
    script.write_text(
        "import multiprocessing\n"
        "import ppopt.cli\n"
        "if __name__ == '__main__':\n"
        "    queue = multiprocessing.get_context('spawn').Queue()  # its semaphores are tracked, as a pool's are\n"
        "    ppopt.cli._exit_now(0)\n")
    # stderr reaches its end when the tracker, which inherits it, has ended too
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")


def test_a_bug_is_one_line_from_the_command_line_and_a_traceback_on_request(tmp_path):
    """A size check or a conversion that misses a case (CP-SAT's 64-bit overflow printed 62 lines)
    is one line saying it is ppopt's bug, exit 1; PPOPT_DEBUG=1 shows the traceback."""
    import os
    import subprocess
    import sys

    script = ("import sys, ppopt.report.text as t\n"
              "def broken(*args, **kwargs): raise RuntimeError('Unable to cast\\nPython instance')\n"
              "t.render_table = broken\n"
              "sys.argv = ['ppopt', 'list']\n"
              "from ppopt.cli import main\n"
              "main()\n")
    env = {k: v for k, v in os.environ.items() if k != "PPOPT_DEBUG"}
    plain = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**env, "PPOPT_DEBUG": "0"},
                           timeout=60)
    assert (plain.returncode, plain.stdout) == (1, "")
    assert plain.stderr == ("error: internal error (RuntimeError: Unable to cast Python instance): a bug in ppopt, not in your "
                            "input; PPOPT_DEBUG=1 shows where\n")
    debug = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**env, "PPOPT_DEBUG": "1"},
                           timeout=60)
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr and "RuntimeError" in debug.stderr


def test_all_in_other_letter_case_is_suggested_where_all_is_a_name():
    """`evaluate -s ALL` (and gap, plan) said only 'unknown schedule' with the families listed, where a
    misspelt family gets "did you mean"; 'all' is one of their names too."""
    message = ("error: --schedule: unknown schedule 'ALL' (known: all, gpipe, 1f1b, interleaved-1f1b, looped-bfs, chimera, "
               "chimera-asym, hanayo, zb-h1, zb-h2, zb-v, v-min, v-half, dualpipev, dualpipe); did you mean 'all'?")
    for typed, args in (("ALL", ["evaluate", "-s", "ALL", "-p", 4, "-m", 8]), ("All", ["gap", "-s", "All", "-p", 4, "-m", 8, "--unit"]),
                        ("ALL", ["plan", "--model", "llama3-8b", "--gpus", 8, "--system", "dgx-h100", "-s", "ALL", "--search", 0])):
        assert one_error_line(run(*args)) == message.replace("'ALL'", f"'{typed}'"), args


@pytest.mark.parametrize("flag, name, says", [
    ("--trace", "t.json.bz2", "t.json.bz2 ends in .bz2, but a Chrome trace (JSON) is written compressed by gzip alone (.gz)"),
    ("--csv", "s.csv.xz", "s.csv.xz ends in .xz, but PyTorch's schedule CSV is written uncompressed"),
])
def test_an_output_named_for_another_compressor_is_refused(tmp_path, flag, name, says):
    """``--trace t.json.bz2`` wrote plain JSON and said "wrote t.json.bz2": only .gz is compressed."""
    result = CliRunner().invoke(main, ["search", "--unit", "-p", "2", "-m", "2", "-q", "--no-grid", flag, str(tmp_path / name)])
    assert result.exit_code == 1 and says in result.output and not (tmp_path / name).exists()


def test_a_file_name_with_undecodable_bytes_is_written_as_escapes(tmp_path):
    """A schedule or data file whose name holds the byte 0xff ended every JSON output, trace and
    picture naming it in "internal error" (the name is a lone surrogate in Python): its escape is
    written instead, and the JSON reads back as the same name."""
    good = tmp_path / "good.csv"
    assert run("export", "-s", "1f1b", "-p", 2, "-m", 2, "--unit", "-o", good).exit_code == 0
    bad = tmp_path / os.fsdecode(b"bad\xff.csv")
    try:
        bad.write_bytes(good.read_bytes())
    except (OSError, UnicodeError):
        pytest.skip("the file system takes no such name")
    imported = run("import", bad, "--json")
    assert imported.exit_code == 0, imported.output
    read = json.loads(imported.stdout)
    assert read["file"] == str(bad) and read["schedule"] == "bad\\udcff"
    assert run("export", "--schedule-file", bad, "-o", tmp_path / "trace.json", "-q").exit_code == 0
    assert json.loads((tmp_path / "trace.json").read_bytes())["traceEvents"]
    rows = tmp_path / os.fsdecode(b"rows\xff.csv")
    rows.write_text("".join((ROOT / "data" / "measured" / "vtrain-multi-node-small.csv").read_text().splitlines(keepends=True)[:6]))
    calibrated = run("calibrate", rows, "-o", tmp_path / "fit.toml", "-q", "--json")
    assert calibrated.exit_code == 0, calibrated.output
    assert "# (rows\\uFFFD.csv)" in (tmp_path / "fit.toml").read_text()  # the comment shows the byte as U+FFFD
    if importlib.util.find_spec("matplotlib"):
        assert run("table", "--schedule-file", bad, "--plot", tmp_path / "t.png", "-q").exit_code == 0
