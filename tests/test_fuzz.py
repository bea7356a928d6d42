"""Every command driven with random flags, values, config files and CSVs.

Whatever the input, a command ends with exit status 0 or 1, never a traceback; an error is one
``error:`` line on stderr (a schedule validation error may add its order grid, lines ``device N:``);
no temporary file is left behind, and an output file that existed before holds either its previous
content or a complete new one.

Sizes are small (p, m <= 8; <= 3 for the solver commands, whose time limit is fixed and short) or
huge: every integer flag, junk value and CSV index is sometimes :data:`HUGE`, so large that any
schedule using it is over the documented op limit (:data:`ppopt.ir.MAX_OPS`) and must be refused
up front, in one line, within the few milliseconds an example takes. Sizes between the two (a
valid schedule of millions of ops) are left to the benchmarks: they are allowed to take seconds.
"""

from __future__ import annotations

import copy
import errno
import json
import math
import os
import re
import tempfile
from pathlib import Path
from unittest import mock

import hypothesis.strategies as st
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings

import ppopt.io
from ppopt.cli import main
from ppopt.generators import names

HUGE = [10_000_000, 2**31, 2**63, 10**20]
"""Integers over the op limit whatever they size (devices, microbatches, chunks, waves, a stage or
microbatch index), and over int64 and C int ranges."""

FUZZ = settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
PREVIOUS = "previous content\n"

# -- values ------------------------------------------------------------------------------------------

JUNK = st.one_of(
    st.sampled_from(["", " ", "x", "nan", "inf", "-inf", "-1", "0", "2.5", "1e3", "1:2:3", "a:b", "--", "-", "all", "None", "0x10", "½",
                     "nope", "{dir}", "{dir}/missing/out.csv", "{dir}/out.txt", "1e400", "-1e400",
                     *map(str, HUGE), "-9223372036854775809"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=6),
)


def ints(low: int, high: int) -> st.SearchStrategy[str]:
    """A small integer in [low, high], or (one time in about five) a :data:`HUGE` one."""
    return st.one_of(*[st.integers(low, high)] * 4, st.sampled_from(HUGE)).map(str)


def floats(low: float, high: float) -> st.SearchStrategy[str]:
    return st.floats(low, high).map(lambda x: f"{x:g}")


SPLIT = st.sampled_from(["1:2", "2:1", "1:1", "3:5"])
FORMAT = st.sampled_from(["text", "markdown", "csv"])
MODEL_ARG = st.sampled_from(["study", "{model}"])
SYSTEM_ARG = st.sampled_from(["mid-mid", "fast-slow", "{system}"])
OUTPUT = st.sampled_from(["{dir}/out.csv", "{dir}/out.json", "{dir}/new.csv", "-"])

SIZE = {"-p": ints(1, 8), "-m": ints(1, 8)}
TINY = {"-p": ints(1, 3), "-m": ints(1, 3)}
SCHEDULE = {"-s": st.sampled_from(names())}
OPTIONS = {"--chunks": ints(1, 4), "--waves": ints(1, 3), "--split": SPLIT}
PRESETS = {"--model": MODEL_ARG, "--system": SYSTEM_ARG, "--global-batch": ints(1, 64)}
JOB_FIELDS = {"--tp": ints(1, 2), "--dp": ints(1, 2), "--micro-batch": ints(1, 4), "--recompute": st.sampled_from(["none", "selective", "full"]),
              "--sequence-parallel": None, "--distributed-optimizer": None}
UNIT = {"--unit": None, "--forward": floats(0.5, 3), "--backward": floats(0.5, 3), "--weight": floats(0.5, 2), "--comm": floats(0, 2)}
SOLVE = ["--time-limit", "0.2", "-q"]

#: Per command: fixed arguments, required flags, optional flags (a value strategy, or None for a
#: flag without value). A valid request has the required flags and valid values; a hostile one
#: drops flags, adds junk values and unknown flags.
COMMANDS: dict[str, tuple[list[str], dict, dict]] = {
    "list": ([], {}, {"--json": None, "--format": FORMAT}),
    "table": ([], {**SCHEDULE, **SIZE}, {**OPTIONS, "--backward": ints(1, 2), "--schedule-file": st.just("{csv}"),
                                        "--legacy-backward": None, "--json": None}),
    "evaluate": ([], {"-s": st.sampled_from([*names(), "all"]), **SIZE},
                 {**OPTIONS, "--backward": ints(1, 2), "--schedule-file": st.just("{csv}"), **PRESETS, **JOB_FIELDS, "--trace": OUTPUT,
                  "--json": None, "--format": FORMAT}),
    "compare": ([], {**SIZE, "--model": MODEL_ARG, "--system": SYSTEM_ARG},
                {**OPTIONS, "--backward": ints(1, 2), "--global-batch": ints(1, 64), **JOB_FIELDS, "--json": None, "--format": FORMAT}),
    "export": ([], {**SCHEDULE, **SIZE, "-o": OUTPUT},
               {**OPTIONS, "--schedule-file": st.just("{csv}"), **UNIT, **PRESETS,
                "--format": st.sampled_from(["torch-csv", "chrome-trace"])}),
    "import": (["{csv}"], {}, {"--legacy-backward": None, "--backward": ints(1, 2), "--json": None}),
    "search": (SOLVE, TINY, {**OPTIONS, **UNIT, **PRESETS, "--csv": OUTPUT, "--trace": OUTPUT, "--json": None, "--no-grid": None,
                             "--space": st.sampled_from(["placement=linear", "fixed:1f1b", "placement=any,backward=split"])}),
    "gap": (SOLVE, TINY, {**OPTIONS, **UNIT, **PRESETS, **JOB_FIELDS, **SCHEDULE, "--json": None}),
    "frontier": (SOLVE, TINY, {**OPTIONS, **UNIT, **PRESETS, "--limits": st.sampled_from(["1,2", "3", "4,8"]), "--json": None}),
    "sweep": (["{spec}", "-q", "-o", "{dir}/sweep"], {}, {"--json": None}),
    "validate": (["{measured}"], {"--system": st.sampled_from(["a100-vtrain", "{system}"])}, {"--json": None, "--format": FORMAT}),
    "calibrate": (["{measured}"], {"-o": st.sampled_from(["{dir}/out.toml", "{dir}/missing/out.toml"])},
                  {"--system": st.sampled_from(["a100-vtrain", "{system}"]), "--json": None}),
    "job": ([], {"--model": MODEL_ARG, "--system": SYSTEM_ARG},
            {"--tp": ints(1, 4), "--pp": ints(1, 4), "--dp": ints(1, 4), "--micro-batch": ints(1, 4), "--global-batch": ints(1, 64),
             "--recompute": st.sampled_from(["none", "selective", "full"]), "--sequence-parallel": None,
             "--distributed-optimizer": None, "--overlap-grad-sync": None, "--schedule": st.sampled_from(names()), **OPTIONS,
             "--layers-per-stage": st.sampled_from(["1,1,1,1", "2,2", "4", "1,2,1", "0,4"]), "--json": None}),
    "plan": (["-q", "--search", "0"], {"--model": st.just("{model}"), "--gpus": ints(1, 4), "--system": SYSTEM_ARG},
             {"--global-batch": ints(1, 16), "--schedule": st.sampled_from([*names(), "all"]), "--micro-batch": ints(1, 4),
              "--recompute": st.sampled_from(["none", "selective", "full"]), "--memory-limit": st.sampled_from(["1GiB", "80GiB", "1e3"]),
              "--layers-per-stage": st.sampled_from(["even", "balanced", "1,1,1,1", "2,2", "1,3"]), "--top": ints(1, 3),
              "--json": None, "--format": FORMAT}),
}

# -- files -------------------------------------------------------------------------------------------

MODEL = {"name": "m", "num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 1000, "seq_length": 128,
         "global_batch_size": 8}
SYSTEM = {"name": "s", "peak_flops": 1e15, "memory_bandwidth_bytes_per_s": 3e12, "memory_capacity_bytes": 8e10,
          "intra_node": {"bandwidth_bytes_per_s": 4.5e11, "latency_s": 1e-6},
          "inter_node": {"bandwidth_bytes_per_s": 5e10, "latency_s": 5e-6},
          "op_time_rule": "additive", "kernel_host_s": 1e-5, "op_accounting": "kernels"}
SPEC = {"schedules": ["1f1b", "gpipe"], "devices": [2], "microbatches": [2], "models": ["study"], "systems": ["mid-mid"]}
ODD_VALUES = st.sampled_from([math.inf, -math.inf, math.nan, -1, 0, 0.5, 1e-30, 3, "x", "", True, [], [1, "a"], {}, 1000, 1e300,
                              *HUGE[:2], [HUGE[0]]])


def mutated(base: dict) -> st.SearchStrategy[dict]:
    """``base`` with a few fields deleted, set to odd values, or added."""

    @st.composite
    def build(draw) -> dict:
        data = json.loads(json.dumps(base))
        for _ in range(draw(st.integers(0, 3))):
            target = data
            keys = [k for k in data if isinstance(data[k], dict)]
            if keys and draw(st.booleans()):
                target = data[draw(st.sampled_from(keys))]
            key = draw(st.sampled_from([*target, "bogus"]))
            if draw(st.integers(0, 3)) == 0:
                target.pop(key, None)
            else:
                target[key] = copy.deepcopy(draw(ODD_VALUES))  # the lists and dicts are shared
        return data

    return build()


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{}"


def toml_text(data: dict) -> str:
    lines = [f"{key} = {toml_value(value)}" for key, value in data.items() if not isinstance(value, dict) or not value]
    for key, table in data.items():
        if isinstance(table, dict) and table:
            lines += [f"[{key}]", *(f"{k} = {toml_value(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"


JUNK_FILE = st.one_of(st.sampled_from(["", "num_layers = = 3", "{not json", "[1, 2]", "\x00\x01", "name = 'x'"]), st.text(max_size=30))


def config_file(base: dict) -> st.SearchStrategy[tuple[str, str]]:
    """(suffix, text) of a model/system/spec file: mostly mutated fields, sometimes junk."""
    fields = mutated(base)
    return st.one_of(
        fields.map(lambda d: (".toml", toml_text(d))),
        fields.map(lambda d: (".json", json.dumps(d))),
        JUNK_FILE.map(lambda text: (".toml", text)),
        JUNK_FILE.map(lambda text: (".json", text)),
    )


CELL = st.one_of(
    st.builds(lambda s, k, m: f"{s}{k}{m}", st.one_of(st.integers(0, 4), st.sampled_from(HUGE)), st.sampled_from("FBIWX"),
              st.one_of(st.integers(0, 6), st.sampled_from(HUGE))),
    st.sampled_from(["", " ", "F0", "0F", "-1F0", "0F-1", "0BW0", "x"]),
)
CSV = st.one_of(
    st.sampled_from(["0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n", "0F0,0B0\n\n1F0,1B0\n", "0F0,0I0,0W0\n1F0,1I0,1W0\n", ""]),
    st.lists(st.lists(CELL, max_size=6).map(",".join), max_size=4).map(lambda rows: "\n".join(rows) + "\n"),
)

MEASURED_HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
                   "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)")
#: A row of small plausible values (t, d, p in 1..2 on t·d·p GPUs), then junk cells now and then.
MEASURED_ROW = st.builds(
    lambda t, d, p, b, junk: ",".join([str(t * d * p), str(4 * d * b), str(b), "64", "4", "4", "32", str(t), str(d), str(p), "12.5"][:11 - junk]),
    st.integers(1, 2), st.integers(1, 2), st.integers(1, 2), st.integers(1, 2), st.integers(0, 1),
)
MEASURED_CELL = st.sampled_from(["", "x", "-1", "0", "3", "nan", "1e9", "2.5"])


@st.composite
def measured_csv(draw) -> str:
    """A measured-data CSV: the real header (sometimes a column dropped) and a few rows, some cells junk."""
    header = MEASURED_HEADER.split(",")
    if draw(st.integers(0, 4)) == 0:
        header.pop(draw(st.integers(0, len(header) - 1)))
    rows = []
    for row in draw(st.lists(MEASURED_ROW, min_size=draw(st.sampled_from([0, 1, 1, 1])), max_size=3)):
        cells = row.split(",")
        if cells and draw(st.integers(0, 3)) == 0:
            cells[draw(st.integers(0, len(cells) - 1))] = draw(MEASURED_CELL)
        rows.append(",".join(cells))
    return "\n".join([",".join(header), *rows]) + "\n"


# -- the checks --------------------------------------------------------------------------------------


def check(result, directory: Path) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 1), result.output
    if result.exit_code == 1:
        lines = result.stderr.splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        assert len(errors) == 1, result.stderr
        details = lines[lines.index(errors[0]) + 1:]
        assert all(re.match(r"device \d+: ", line) for line in details), result.stderr
    assert not list(directory.rglob("*.tmp")), "a temporary file was left behind"
    for name in ("out.csv", "out.json"):
        text = (directory / name).read_text()
        assert text == PREVIOUS or text.endswith("\n")  # as before, or rewritten completely


def fill(arguments: list[str], files: dict[str, str]) -> list[str]:
    """The arguments with ``{dir}``, ``{model}``... replaced by the paths of this example's files."""
    filled = []
    for argument in arguments:
        for key, path in files.items():
            argument = argument.replace("{" + key + "}", path)
        filled.append(argument)
    return filled


@st.composite
def command_line(draw, command: str) -> list[str]:
    fixed, required, optional = COMMANDS[command]
    hostile = draw(st.booleans())
    chosen = {flag: value for flag, value in required.items() if not hostile or draw(st.integers(0, 5))}
    chosen.update({flag: value for flag, value in optional.items() if draw(st.integers(0, 2)) == 0})
    if not hostile:  # one schedule takes only its own options, and a file replaces the name
        from ppopt.generators import REGISTRY

        flag = "--schedule" if command == "job" else "-s"
        name = draw(chosen[flag]) if flag in chosen else "1f1b" if command == "job" else None
        if flag in chosen:
            chosen[flag] = st.just(name)
        takes = REGISTRY[name].options if name in REGISTRY else tuple(OPTIONS) if name == "all" or command != "export" else ()
        if "--schedule-file" in chosen:
            chosen.pop("-s", None)
            takes = ()
        chosen = {flag: value for flag, value in chosen.items() if flag.lstrip("-") in takes or flag not in OPTIONS}
        if ("--model" in chosen or "--system" in chosen) and ("--model" in required or "--model" in optional):  # both, no unit mode
            chosen.update({flag: {**optional, **required}.get(flag, default) for flag, default in (("--model", MODEL_ARG), ("--system", SYSTEM_ARG))})
            chosen = {flag: value for flag, value in chosen.items() if flag not in UNIT}
        elif "--unit" in optional:
            chosen["--unit"] = None
    argv = [command, *fixed]
    for flag, value in chosen.items():
        if value is None:
            argv.append(flag)
        else:
            argv += [flag, draw(st.one_of(value, JUNK) if hostile else value)]
    if hostile and draw(st.integers(0, 3)) == 0:
        argv += draw(st.sampled_from([["--bogus"], ["extra"], ["-p"], ["--json", "x"]]))
    return argv


def run_fuzzed(data, command: str) -> None:
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        for output in ("out.csv", "out.json"):
            (directory / output).write_text(PREVIOUS)
        files = {"dir": str(directory)}
        for key, strategy in (("model", config_file(MODEL)), ("system", config_file(SYSTEM)), ("spec", config_file(SPEC))):
            suffix, text = data.draw(strategy, label=key)
            path = directory / f"{key}{suffix}"
            path.write_text(text)
            files[key] = str(path)
        csv = directory / "schedule.csv"
        csv.write_text(data.draw(CSV, label="csv"))
        files["csv"] = str(csv)
        measured = directory / "measured.csv"
        measured.write_text(data.draw(measured_csv(), label="measured"))
        files["measured"] = str(measured)
        argv = fill(data.draw(command_line(command), label="argv"), files)
        result = CliRunner().invoke(main, argv)
        event(f"{command}: exit {result.exit_code}")
        check(result, directory)


@FUZZ
@given(data=st.data())
def test_fuzz_list_table_import(data):
    run_fuzzed(data, data.draw(st.sampled_from(["list", "table", "import"])))


@FUZZ
@given(data=st.data())
def test_fuzz_evaluate_compare(data):
    run_fuzzed(data, data.draw(st.sampled_from(["evaluate", "compare"])))


@FUZZ
@given(data=st.data())
def test_fuzz_export(data):
    run_fuzzed(data, "export")


@FUZZ
@given(data=st.data())
def test_fuzz_solver_commands(data):
    run_fuzzed(data, data.draw(st.sampled_from(["search", "gap", "frontier"])))


@FUZZ
@given(data=st.data())
def test_fuzz_sweep(data):
    run_fuzzed(data, "sweep")


@settings(FUZZ, max_examples=20)
@given(data=st.data())
def test_fuzz_measured_commands(data):
    run_fuzzed(data, data.draw(st.sampled_from(["validate", "calibrate", "job"])))


@settings(FUZZ, max_examples=15)
@given(data=st.data())
def test_fuzz_plan(data):
    run_fuzzed(data, "plan")


class _FullAfter:
    """A file whose writes fail with ENOSPC once ``room`` bytes are written (a disk filling up)."""

    def __init__(self, handle, room: int):
        self.handle, self.room = handle, room

    def write(self, data) -> int:
        if len(data) > self.room:
            self.handle.write(data[: self.room])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.handle.close()


WRITERS = [
    ["export", "-s", "1f1b", "-p", "4", "-m", "8", "-o", "{dir}/out.csv"],
    ["export", "-s", "zb-v", "-p", "2", "-m", "4", "--format", "chrome-trace", "-o", "{dir}/out.json"],
    ["evaluate", "-s", "gpipe", "-p", "2", "-m", "2", "--model", "study", "--system", "mid-mid", "--trace", "{dir}/out.json"],
    ["search", "-p", "2", "-m", "2", "--unit", "--time-limit", "1", "-q", "--csv", "{dir}/out.csv"],
]


@pytest.mark.parametrize("step", ["write", "fsync", "chmod", "replace"])
@pytest.mark.parametrize("argv", WRITERS, ids=lambda argv: argv[0])
def test_a_failed_write_leaves_the_previous_file_intact(argv, step, room=16):
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        for output in ("out.csv", "out.json"):
            (directory / output).write_text(PREVIOUS)

        def fail(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        real_fdopen = os.fdopen
        broken = {"write": lambda fd, mode: _FullAfter(real_fdopen(fd, mode), room)}.get(step, fail)
        with mock.patch.object(ppopt.io.os, "fdopen" if step == "write" else step, broken):
            result = CliRunner().invoke(main, fill(argv, {"dir": name}))
        assert result.exit_code == 1, result.output
        assert result.stderr.splitlines()[-1].startswith("error: cannot write ")
        assert "No space left on device" in result.stderr
        assert (directory / "out.csv").read_text() == PREVIOUS
        assert (directory / "out.json").read_text() == PREVIOUS
        assert sorted(p.name for p in directory.iterdir()) == ["out.csv", "out.json"]
