"""PyTorch schedule CSV: round trips, the legacy spelling, malformed files, refusals, the CLI, and
(opt-in, when torch is installed) PyTorch's own loader on the files ppopt writes."""

import csv
import io
import json
import os
import threading

import pytest
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ppopt.cli import main
from ppopt.errors import ScheduleError
from ppopt.generators import generate, names
from ppopt.io.torch_csv import format_torch_csv, parse_torch_csv, read_torch_csv, write_torch_csv
from ppopt.ir import Kind
from ppopt.simulate import simulate
from ppopt.solve.instance import unit_instance
from ppopt.units import UnitCosts
from ppopt.validation import ScheduleValidationError

ROUND_TRIPS = [
    ("gpipe", 1, 1, {}), ("gpipe", 3, 5, {}), ("1f1b", 2, 2, {}), ("1f1b", 4, 9, {}),
    ("interleaved-1f1b", 2, 4, {}), ("interleaved-1f1b", 4, 8, {}), ("interleaved-1f1b", 3, 6, {"chunks": 3}),
    ("zb-h1", 3, 3, {}), ("zb-h1", 4, 10, {}), ("zb-v", 2, 2, {}), ("zb-v", 4, 9, {}),
    ("hanayo", 4, 4, {}), ("hanayo", 3, 6, {"waves": 2}),
]


@pytest.mark.parametrize("name,p,m,options", ROUND_TRIPS)
def test_round_trip_keeps_orders_and_placement(tmp_path, name, p, m, options):
    schedule = generate(name, p, m, **options)
    path = tmp_path / f"{name}.csv"
    write_torch_csv(schedule, path)
    back = read_torch_csv(path)
    assert back.orders == schedule.orders
    assert back.placement == schedule.placement
    assert (back.devices, back.microbatches, back.stages) == (p, m, schedule.stages)
    assert back.name == name
    # rows are ranks, cells are action strings, no header
    rows = list(csv.reader(io.StringIO(path.read_text())))
    assert len(rows) == p and rows[0][0] == str(schedule.orders[0][0])


def _exportable(name, p, m):
    """The family's schedule for p x m, or None when it has no such shape or replicates a stage."""
    try:
        schedule = generate(name, p, m)
    except ScheduleError:
        return None
    return schedule if schedule.replicas == 1 else None


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(names()), p=st.integers(1, 6), m=st.integers(1, 12), crlf=st.booleans(), quoted=st.booleans())
def test_round_trip_of_any_family_gives_the_same_schedule(name, p, m, crlf, quoted):
    """Export then import gives the same devices, placement, orders and overlapped pairs, whether the
    file is read by the fast path (plain text) or through ``csv`` (carriage returns, quoted cells)."""
    schedule = _exportable(name, p, m)
    assume(schedule is not None)
    text = format_torch_csv(schedule)
    if crlf or quoted:
        buffer = io.StringIO()
        writer = csv.writer(buffer, quoting=csv.QUOTE_ALL if quoted else csv.QUOTE_MINIMAL, lineterminator="\r\n" if crlf else "\n")
        writer.writerows(line.split(",") for line in text.splitlines())
        text = buffer.getvalue()
    back = parse_torch_csv(text, schedule.name)
    assert back.orders == schedule.orders
    assert back.placement == schedule.placement
    assert back.overlapped == schedule.overlapped
    assert (back.devices, back.microbatches) == (schedule.devices, schedule.microbatches)


def test_write_orders_by_start_times():
    schedule = generate("1f1b", 2, 2)
    order = schedule.orders[0]
    start = {op: float(i) for d in schedule.orders for i, op in enumerate(d)}
    start[order[0]], start[order[1]] = start[order[1]], start[order[0]]  # 0F1 "starts" before 0F0
    text = format_torch_csv(schedule, {**start})
    assert text.splitlines()[0].split(",")[:2] == ["0F1", "0F0"]
    missing = dict(start)
    del missing[order[0]]
    with pytest.raises(ScheduleError, match="no start time for op 0F0"):
        format_torch_csv(schedule, missing)
    per_device = [[start[op] for op in d] for d in schedule.orders]  # the same times, in each device's order
    assert format_torch_csv(schedule, per_device) == text
    with pytest.raises(ScheduleError, match=r"start times for \[4, 3\] ops per device, the schedule has \[4, 4\]"):
        format_torch_csv(schedule, [per_device[0], per_device[1][:3]])


@pytest.mark.parametrize("name", ["1f1b", "zb-v", "dualpipev", "interleaved-1f1b"])
def test_simulated_start_times_per_device_are_those_by_op(name):
    """export and search --csv pass the simulation's start times per device (no dictionary keyed by
    op): each device's list is its ops' start times in its order, with one-slot messages."""
    schedule = generate(name, 4, 8)
    instance = unit_instance(4, 8, schedule.stages, UnitCosts(comm=1))
    simulation = simulate(schedule, instance.costs, instance.system)
    by_op = simulation.start_s
    assert simulation.device_starts() == [[by_op[op] for op in order] for order in schedule.orders]


def test_write_to_an_open_file_and_read_from_text_and_file_objects():
    schedule = generate("zb-h1", 2, 3)
    buffer = io.StringIO()
    write_torch_csv(schedule, buffer)
    text = buffer.getvalue()
    assert read_torch_csv(text).orders == schedule.orders
    assert read_torch_csv(io.StringIO(text)).orders == schedule.orders


def test_idle_cells_and_communication_actions_are_skipped():
    text = (
        "0F0,,0SEND_F0,0F1,0SEND_F1,   ,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD\n"
        "1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1RESHARD\n"
    )
    schedule = read_torch_csv(text)
    assert [str(op) for op in schedule.orders[0]] == ["0F0", "0F1", "0B0", "0B1"]
    assert [str(op) for op in schedule.orders[1]] == ["1F0", "1B0", "1F1", "1B1"]
    assert schedule.placement == ((0,), (1,))


@pytest.mark.parametrize(("row0", "message"), [
    ("0F0,0F1,0SEND_F9,0B0,0B1", "cell 2: 0SEND_F9 names microbatch 9, but the file's microbatches are 0..1"),
    ("0F0,0F1,0SEND_F2,0B0,0B1", "cell 2: 0SEND_F2 names microbatch 2, but the file's microbatches are 0..1"),  # one past
    ("0F0,0F1,1SEND_F0,0B0,0B1", "cell 2: 1SEND_F0 names stage 1, which this rank does not hold (stage 1 is on row 1)"),
    ("0F0,7UNSHARD,0F1,0B0,0B1", "cell 1: 7UNSHARD names stage 7, which this rank does not hold (no row computes stage 7)"),
])
def test_a_communication_action_names_a_stage_of_its_rank_and_a_microbatch_of_the_file(row0, message):
    """PyTorch puts a send on the sending stage's rank and a receive on the receiving stage's
    (``_add_send_recv``): ppopt skips them, but a file PyTorch would refuse is not read silently."""
    assert _one_line_error(row0 + "\n1F0,1F1,1B0,1B1\n") == "torch-csv: row 0 (rank 0, line 1), " + message


def test_a_file_s_mistakes_are_named_with_their_likely_cause():
    hint = "; cells are separated by commas)"
    assert _one_line_error("0F0\t0F1,0B0,0B1\n").endswith(hint) and _one_line_error("0F0;0F1,0B0,0B1\n").endswith(hint)
    assert not _one_line_error("0X0,0B0\n").endswith(hint)
    assert _one_line_error("0F0,0B0,0W0\n") == (
        "torch-csv: row 0 (rank 0, line 1), cell 2: W actions beside B and no I: in the spelling of torch <= 2.5 B was the "
        "input backward; read the file with legacy_backward=True (--legacy-backward)")
    assert read_torch_csv("0F0,0B0,0W0\n", legacy_backward=True).split_pairs == {(0, 0)}  # the flag reads it
    assert _one_line_error("1F0,1B0\n2F0,2B0\n").endswith("stage 0 appears in no row, but stages up to 2 do (stages are "
                                                         "numbered from 0)")
    assert _one_line_error("rank 0 actions\n0F0,0B0\n").endswith("(a header row? the file has none: row r is rank r)")
    assert "header" not in _one_line_error("0F0,0B0\nrank 1\n")  # only the first row can be one


def test_overlap_f_b_expands_in_order():
    text = "0F0,0F1,(0F2;0B0)OVERLAP_F_B,0B1,0B2\n"
    assert [str(op) for op in read_torch_csv(text).orders[0]] == ["0F0", "0F1", "0F2", "0B0", "0B1", "0B2"]


def test_full_backward_in_a_split_schedule_is_kept_per_microbatch():
    text = "0F0,0F1,0I0,0W0,0B1\n"
    schedule = read_torch_csv(text)
    assert [str(op) for op in schedule.orders[0]] == ["0F0", "0F1", "0I0", "0W0", "0B1"]
    assert schedule.split_pairs == {(0, 0)}


def test_legacy_spelling():
    # torch <= 2.5: BW = full backward; B = input backward where the schedule has W, else full.
    split = read_torch_csv("0F0,0F1,0B0,0W0,0B1,0W1\n1F0,1BW0,1F1,1BW1\n", legacy_backward=True)
    assert [op.kind for op in split.orders[0]] == [Kind.F, Kind.F, Kind.I, Kind.W, Kind.I, Kind.W]
    assert [str(op) for op in split.orders[1]] == ["1F0", "1B0", "1F1", "1B1"]  # BW is a full B, kept per microbatch
    full = read_torch_csv("0F0,0BW0,0F1,0B1\n", legacy_backward=True)
    assert [str(op) for op in full.orders[0]] == ["0F0", "0B0", "0F1", "0B1"]
    with pytest.raises(ScheduleError, match=r"row 0 \(rank 0, line 1\), cell 1: 'BW' is the legacy spelling.*--legacy-backward"):
        read_torch_csv("0F0,0BW0\n")


def _one_line_error(text: str, **kwargs) -> str:
    with pytest.raises(ScheduleError) as caught:
        read_torch_csv(text, **kwargs) if text.strip() else parse_torch_csv(text, "empty")
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_malformed_files_give_one_line_errors_naming_the_place():
    assert _one_line_error("0F0,0B0\n1F0,1X0,1B0\n") == (
        "torch-csv: row 1 (rank 1, line 2), cell 1: unknown action '1X0' (expected <stage><F|I|W|B><microbatch>, e.g. 3F12)"
    )
    assert "stage 1 is on two ranks: row 0 (rank 0, line 1), cell 2 and row 1 (rank 1, line 2), cell 0" in _one_line_error(
        "0F0,0F1,1F1,1B1\n1F0,1B0,0B0,0B1\n"
    )
    assert "op 0F1 is missing" in _one_line_error("0F0,0B0,0B1\n")
    # Microbatches are indexed by what the file names: a gap is an error at the action beyond it.
    assert _one_line_error("0F0,0B0,0F2,0B2\n") == (
        "torch-csv: row 0 (rank 0, line 1), cell 2: action 0F2 names microbatch 2, but the file names 2 distinct "
        "microbatch(es), so they must be 0..1 (microbatch 1 appears nowhere)"
    )
    assert "empty file" in _one_line_error("")
    assert "empty file" in _one_line_error("\n\n")
    assert "has no microbatch" in _one_line_error("0F0,0B\n")
    assert "cell 2: action 0F0 appears twice" in _one_line_error("0F0,0B0,0F0\n")
    assert "no compute action" in _one_line_error("0UNSHARD,0RESHARD\n")
    assert "stage 1 appears in no row" in _one_line_error("0F0,2F0,2B0,0B0\n")
    assert "unknown action group type 'OVERLAP_X'" in _one_line_error("(0F0;0B0)OVERLAP_X\n")


def test_a_rank_numbered_off_by_one_is_named_at_its_first_odd_action():
    # PyTorch 2.13's 1F1B CSV at p = 4, m = 8: the last rank numbers its forwards 1..8. The cause is
    # 3F8 on rank 3 (its 15th cell), not the "0F8 is missing" the dependency check would report.
    rows = [
        "0F0,0F1,0F2,0F3,0B0,0F4,0B1,0F5,0B2,0F6,0B3,0F7,0B4,0B5,0B6,0B7",
        "1F0,1F1,1F2,1B0,1F3,1B1,1F4,1B2,1F5,1B3,1F6,1B4,1F7,1B5,1B6,1B7",
        "2F0,2F1,2B0,2F2,2B1,2F3,2B2,2F4,2B3,2F5,2B4,2F6,2B5,2F7,2B6,2B7",
        "3F1,3B0,3F2,3B1,3F3,3B2,3F4,3B3,3F5,3B4,3F6,3B5,3F7,3B6,3F8,3B7",
    ]
    message = _one_line_error("\n".join(rows) + "\n")
    assert message.startswith("torch-csv: row 3 (rank 3, line 4), cell 14: action 3F8 names microbatch 8"), message
    assert "most run microbatches 0..7" in message
    # Only a backward dropped: named by its stage, rank and kind.
    rows[3] = "3F0,3F1,3F2,3B1,3F3,3B2,3F4,3B3,3F5,3B4,3F6,3B5,3F7,3B6,3B7"
    assert _one_line_error("\n".join(rows) + "\n").startswith(
        "torch-csv: stage 3 (rank 3, line 4) has no B of microbatch 0 (3B0)"
    )


def test_a_huge_index_in_a_tiny_file_allocates_nothing():
    # 90 bytes naming microbatch 10^20 - 1: refused at once, without a list sized by the index.
    text = "0F0,0B0,0F99999999999999999999,0B99999999999999999999\n1F0,1B0\n".ljust(90)
    message = _one_line_error(text)
    assert "cell 2: action 0F99999999999999999999 names microbatch 99999999999999999999" in message
    assert "must be 0..1" in message
    message = _one_line_error("0F0,0B0\n99999999999999999999F0,99999999999999999999B0\n")
    assert "stage 1 appears in no row, but stages up to 99999999999999999999 do" in message


def test_files_over_the_size_limit_are_refused(monkeypatch):
    monkeypatch.setattr("ppopt.ir.MAX_OPS", 3)
    assert _one_line_error("0F0,0B0\n1F0,1B0\n") == (
        "schedule too large: torch-csv: the compute actions of rows 0..1 make 4 ops (stages x microbatches x kinds); "
        "the limit is 3 ops"
    )
    # 3 actions, but 2 stages x 1 microbatch x 2 kinds = 4 ops needed: refused before validation.
    assert "torch-csv: 2 stages x 1 microbatches make 4 ops" in _one_line_error("0F0\n1F0,1B0\n")


def test_unbounded_inputs_are_refused_before_they_fill_memory(tmp_path, monkeypatch):
    # /dev/zero never ends: refused at its first byte (NUL: not text), not read until memory runs out.
    with pytest.raises(ScheduleError, match=r"^/dev/zero: cannot read file \(not a text file: NUL byte at byte 0\)$"):
        read_torch_csv("/dev/zero")
    # A pipe that has no size is read up to the byte limit (lowered here), then refused.
    monkeypatch.setattr("ppopt.io.torch_csv.MAX_BYTES", 1000)
    monkeypatch.setattr("ppopt.io._CHUNK", 100)
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)

    def feed():
        try:
            with open(fifo, "w") as pipe:
                pipe.write("0F0," * 10_000)  # 40 kB, 40 times the limit
        except BrokenPipeError:
            pass  # the reader stopped early, as it should

    writer = threading.Thread(target=feed)
    writer.start()
    with pytest.raises(ScheduleError, match=r"pipe.csv: cannot read file \(input too large: over 1,000 bytes read; "
                                            r"the limit is 1,000 bytes \(10,000,000 ops\)\)$"):
        read_torch_csv(fifo)
    writer.join(timeout=5)
    # A regular file is refused by its size, before reading.
    big = tmp_path / "big.csv"
    big.write_text("0F0,0B0\n" * 200)
    with pytest.raises(ScheduleError, match=r"big.csv: cannot read file \(file too large: 1,600 bytes; the limit is 1,000 bytes"):
        read_torch_csv(big)


def test_validation_errors_carry_the_file_name_the_place_and_the_grid(tmp_path):
    path = tmp_path / "broken.csv"
    path.write_text("0B0,0F0\n")
    with pytest.raises(ScheduleValidationError) as caught:
        read_torch_csv(path)
    assert str(caught.value).startswith(f"{path}: op 0B0 runs before its dependency 0F0")  # the path as given, not its stem
    assert "row 0 (rank 0, line 1), cell 0" in str(caught.value)
    assert ">0B0<" in caught.value.details
    with pytest.raises(ScheduleError, match="no such file"):
        read_torch_csv(tmp_path / "absent.csv")


@pytest.mark.parametrize("name", ["chimera", "chimera-asym"])
def test_replicated_stages_are_refused_and_nothing_is_written(tmp_path, name):
    path = tmp_path / "out.csv"
    with pytest.raises(ScheduleError) as caught:
        write_torch_csv(generate(name, 4, 4), path)
    assert str(caught.value) == f"PyTorch's schedule CSV holds one rank per stage; {name} places stage 0 on ranks 0 and 3"
    assert not path.exists() and os.listdir(tmp_path) == []


def test_an_invalid_schedule_is_refused_and_nothing_is_written(tmp_path):
    """write_torch_csv wrote 0B0,0F0 (a backward before its forward), which ppopt's import refuses."""
    from ppopt.ir import Op, Schedule

    backwards_first = Schedule(name="x", devices=2, microbatches=1, placement=((0,), (1,)),
                               orders=((Op(0, Kind.B, 0), Op(0, Kind.F, 0)), (Op(1, Kind.F, 0), Op(1, Kind.B, 0))))
    path = tmp_path / "out.csv"
    with pytest.raises(ScheduleValidationError):
        write_torch_csv(backwards_first, path)
    assert os.listdir(tmp_path) == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "out.csv"
    path.write_text("old\n")
    import ppopt.io as pio

    def explode(handle):
        handle.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        pio.atomic_writer(path, explode)
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["out.csv"]


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_export_then_import(tmp_path):
    path = tmp_path / "zbv.csv"
    result = run("export", "-s", "zb-v", "-p", 4, "-m", 8, "--format", "torch-csv", "--output", path)
    assert result.exit_code == 0, result.output
    assert read_torch_csv(path).orders == generate("zb-v", 4, 8).orders
    result = run("import", path)
    assert result.exit_code == 0, result.output
    assert "zbv: 4 devices, 8 stages, 8 microbatches, split (I, W) backward" in result.output
    assert "device 0 |" in result.output and "length" in result.output and "bubble ratio" in result.output
    data = run("import", path, "--json")
    import json

    payload = json.loads(data.stdout)
    assert payload["devices"] == 4 and payload["stages"] == 8 and payload["microbatches"] == 8
    assert payload["placement"] == [[0], [1], [2], [3], [3], [2], [1], [0]]  # each stage's devices, as search --json
    assert set(payload["table"]) == {"length", "bubble_ratio", "peak_activations"}


@pytest.mark.parametrize("name, kinds, said", [("1f1b", {"B"}, "full (B)"), ("zb-h1", {"I", "W"}, "split (I, W)"),
                                               ("dualpipev", {"B", "I", "W"}, "mixed (B, and I, W)")])
def test_import_names_the_backward_kinds_the_file_holds(tmp_path, name, kinds, said):
    """DualPipeV's file holds full B actions beside I and W ones: "split" would misdescribe it."""
    path = tmp_path / "s.csv"
    write_torch_csv(generate(name, 2, 4), path)
    held = {op.kind.value for order in read_torch_csv(path).orders for op in order} - {"F"}
    assert held == kinds
    assert f"microbatches, {said} backward" in run("import", path).output
    import json

    payload = json.loads(run("import", path, "--json").stdout)
    assert payload["backward"] == said.split()[0] and payload["split_backward"] == ("I" in kinds)


def test_cli_import_matches_the_table_command(tmp_path):
    path = tmp_path / "one.csv"
    write_torch_csv(generate("1f1b", 2, 2), path)
    imported = run("import", path).output.split("\n", 2)[2]
    assert imported == run("table", "-s", "1f1b", "-p", 2, "-m", 2).output


def test_cli_export_infers_the_format_and_writes_stdout(tmp_path):
    result = run("export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", tmp_path / "a.csv")
    assert result.exit_code == 0 and (tmp_path / "a.csv").read_text().startswith("0F0,0F1,0B0")
    result = run("export", "-s", "1f1b", "-p", 2, "-m", 2, "--format", "torch-csv", "-o", "-")
    assert result.exit_code == 0 and result.output.startswith("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n")


def test_cli_errors_are_one_line_with_exit_status_1(tmp_path):
    result = run("export", "-s", "chimera", "-p", 4, "-m", 4, "--format", "torch-csv", "-o", tmp_path / "c.csv")
    assert result.exit_code == 1
    assert result.output.strip() == "error: PyTorch's schedule CSV holds one rank per stage; chimera places stage 0 on ranks 0 and 3"
    assert not (tmp_path / "c.csv").exists()
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0BW0\n")
    result = run("import", bad)
    assert result.exit_code == 1 and result.output.startswith(f"error: {bad}: row 0 (rank 0, line 1), cell 1: 'BW'")
    assert run("import", bad, "--legacy-backward").exit_code == 0
    result = run("import", tmp_path / "absent.csv")
    assert result.exit_code == 1 and "no such file" in result.output
    result = run("export", "-s", "1f1b", "-p", 2, "-m", 2, "-o", tmp_path / "x.pdf")
    assert result.exit_code == 1 and "cannot tell the format" in result.output


# ------------------------------------------------------------------------------------------------
# Opt-in: PyTorch's own loader (torch is not a dependency; skipped unless installed)
# ------------------------------------------------------------------------------------------------


class _MockStage:
    """The attributes PipelineScheduleMulti reads from its stages to load a CSV (no model, no
    process group)."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int):
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = 0
        self.stage_index_to_group_rank: dict = {}
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.submod = None


TORCH_CASES = [("gpipe", 3, 5), ("1f1b", 4, 8), ("interleaved-1f1b", 4, 8), ("hanayo", 4, 4), ("zb-h1", 4, 6), ("zb-v", 4, 8),
               ("looped-bfs", 4, 6), ("zb-h2", 4, 6), ("v-min", 4, 8), ("v-half", 4, 8)]


@pytest.mark.parametrize("name,p,m", TORCH_CASES)
def test_pytorch_loads_and_lowers_what_ppopt_writes(tmp_path, name, p, m):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    schedule = generate(name, p, m)
    path = tmp_path / f"{name}.csv"
    write_torch_csv(schedule, path)

    runtime = schedules._PipelineScheduleRuntime([_MockStage(0, schedule.stages, p)], m)
    runtime._load_csv(str(path))  # parses with _Action.from_str, validates (_validate_schedule), lowers with comms
    assert runtime.stage_index_to_group_rank == {s: holders[0] for s, holders in enumerate(schedule.placement)}
    assert {rank: [str(a) for a in actions if a is not None] for rank, actions in runtime.pipeline_order.items()} == {
        d: [str(op) for op in order] for d, order in enumerate(schedule.orders)
    }
    # The lowered schedule (sends and receives added) runs without deadlock in PyTorch's dry run.
    runtime_only = {schedules.UNSHARD, schedules.RESHARD, schedules.REDUCE_GRAD}
    lowered = {
        rank: [a for a in actions if a.computation_type not in runtime_only]
        for rank, actions in runtime.pipeline_order_with_comms.items()
    }
    simulated = schedules._simulate_comms_compute(lowered, lambda s: runtime.stage_index_to_group_rank[s], schedule.stages)
    assert sum(a is not None for actions in simulated.values() for a in actions) == sum(map(len, lowered.values()))


def test_ppopt_reads_what_pytorch_writes(tmp_path):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    p, m = 4, 8
    for cls, local in [
        (schedules.ScheduleInterleaved1F1B, (0, 4)),
        (schedules.ScheduleInterleavedZeroBubble, (0, 4)),
        (schedules.ScheduleZBVZeroBubble, (0, 7)),
        (schedules.ScheduleDualPipeV, (0, 7)),  # OVERLAP_F_B groups and mixed B / I+W backwards
    ]:
        pytorch = cls([_MockStage(s, 2 * p, p) for s in local], m)
        path = tmp_path / f"{cls.__name__}.csv"
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            for rank in sorted(pytorch.pipeline_order):
                writer.writerow(pytorch.pipeline_order[rank])
        schedule = read_torch_csv(path)
        assert (schedule.devices, schedule.stages, schedule.microbatches) == (p, 2 * p, m)
        assert {s: h[0] for s, h in enumerate(schedule.placement)} == {
            s: r for r, actions in pytorch.pipeline_order.items() for a in actions if a is not None
            for s in ([a.stage_index] if a.sub_actions is None else [x.stage_index for x in a.sub_actions])
        }
        # each rank's compute actions in PyTorch's order, idle steps (None) dropped and an
        # OVERLAP_F_B group taken as its sub-actions, one by one; the groups are the overlapped pairs
        computed = {rank: [a for a in actions if a is not None] for rank, actions in pytorch.pipeline_order.items()}
        assert {d: [str(op) for op in order] for d, order in enumerate(schedule.orders)} == {
            rank: [str(x) for a in actions for x in (a.sub_actions or (a,))] for rank, actions in computed.items()
        }
        assert {(str(f), str(b)) for f, b in schedule.overlapped} == {
            tuple(map(str, a.sub_actions)) for actions in computed.values() for a in actions if a.sub_actions
        }
        assert bool(schedule.overlapped) == (cls is schedules.ScheduleDualPipeV)


def test_written_files_get_the_usual_permissions(tmp_path):
    import os
    import stat

    from ppopt.io import atomic_write_text

    mask = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "x.txt", "hello\n")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_more_lines_than_ops_is_refused_before_the_rows_are_split(monkeypatch):
    """10,000,001 one-action rows (a 100 MB file) were split and parsed for 40 to 60 s and 5 GB
    before the op limit refused them: one row per rank, and a schedule has no more ranks than ops,
    so the line count refuses them first (the limit is lowered here to keep the text small)."""
    import ppopt.io.torch_csv as torch_csv

    monkeypatch.setattr(torch_csv, "MAX_OPS", 4)
    monkeypatch.setattr(torch_csv, "_rows", lambda *a: pytest.fail("the rows were split"))
    with pytest.raises(ScheduleError, match="^big: 5 lines: more rank rows than the 4 ops a schedule may hold$"):
        torch_csv.parse_torch_csv("0F0\n" * 5, "big")


def test_a_schedule_piped_from_export_reads_as_its_file_does(tmp_path):
    """`-` for `import` and `--schedule-file` is standard input, as `-o -` is standard output for
    `export`: a schedule piped from one process to another evaluates as the same file does. In real
    processes, since standard input is read by file descriptor; NUL bytes there are refused in one line."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}

    def ppopt(*args, stdin=None):
        return subprocess.run([sys.executable, "-m", "ppopt", *args], input=stdin, capture_output=True, env=env,
                              cwd=tmp_path, timeout=120)

    exported = ppopt("export", "-s", "zb-h1", "-p", "4", "-m", "8", "-o", "-")
    assert exported.returncode == 0, exported.stderr
    (tmp_path / "zb.csv").write_bytes(exported.stdout)
    args = ["evaluate", "-p", "4", "-m", "8", "--json", "--schedule-file"]
    piped, filed = ppopt(*args, "-", stdin=exported.stdout), ppopt(*args, "zb.csv")
    assert piped.returncode == filed.returncode == 0, piped.stderr
    piped_json, filed_json = json.loads(piped.stdout), json.loads(filed.stdout)
    assert piped_json.pop("schedule") == "stdin" and filed_json.pop("schedule") == "zb"
    assert piped_json == filed_json
    imported = ppopt("import", "-", stdin=exported.stdout)
    assert imported.returncode == 0 and imported.stdout.startswith(b"stdin: 4 devices, 4 stages, 8 microbatches")
    refused = ppopt("import", "-", stdin=b"\0" * 100)
    assert (refused.returncode, refused.stderr) == (1, b"error: standard input: cannot read (not a text file: NUL byte at byte 0)\n")
    malformed = ppopt("import", "-", stdin=b"0F0,0X0\n")  # its errors are standard input's too, not "torch-csv"'s
    assert malformed.returncode == 1 and malformed.stderr.startswith(b"error: standard input: row 0 (rank 0, line 1), cell 1: ")


LAST_STAGE_SWAPPED = "0F0,0F1,0B0,0B1\n1F1,1F0,1B1,1B0\n"
"""Valid for ppopt's validator, but PyTorch's runtime would give 1B0 the loss of microbatch 1
(ppopt.io.torch_csv.loss_order_message; measured with `ppopt run` in tests/test_run.py)."""


def test_a_schedule_pytorch_would_train_wrongly_is_not_written_as_its_csv(tmp_path):
    schedule = parse_torch_csv(LAST_STAGE_SWAPPED, "swapped")
    with pytest.raises(ScheduleError, match=r"^swapped: the last stage \(1\) runs 1F1 before 1F0; PyTorch's runtime"):
        format_torch_csv(schedule)
    # nor when the given start times put the last stage's forwards out of order
    in_order = parse_torch_csv("0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n", "in-order")
    starts = {op: float(i) for order in in_order.orders for i, op in enumerate(order)}
    starts[in_order.orders[1][0]], starts[in_order.orders[1][1]] = 1.0, 0.0
    with pytest.raises(ScheduleError, match=r"runs 1F1 before 1F0"):
        format_torch_csv(in_order, starts)
    path = tmp_path / "swapped.csv"
    path.write_text(LAST_STAGE_SWAPPED)
    out = tmp_path / "out.csv"
    result = run("export", "--schedule-file", path, "-o", out)
    assert result.exit_code == 1 and result.stdout == "" and not out.exists()
    assert result.stderr.endswith("error: swapped: the last stage (1) runs 1F1 before 1F0; PyTorch's runtime looks up each "
                                  "microbatch's loss by the order the last stage's forwards ran, so its backwards would start "
                                  "from another microbatch's loss: run the last stage's forwards in microbatch order\n")


@pytest.mark.parametrize("command", [["import"], ["evaluate", "--schedule-file"], ["export", "-o", "trace.json", "--schedule-file"]])
def test_reading_such_a_schedule_says_pytorch_would_train_it_wrongly(tmp_path, monkeypatch, command):
    """ppopt evaluates it (its table and simulation hold), with a note on stderr."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "swapped.csv").write_text(LAST_STAGE_SWAPPED)
    result = run(*command, "swapped.csv", "-q")
    assert result.exit_code == 0
    assert "note: swapped.csv: the last stage (1) runs 1F1 before 1F0; " in result.stderr
    assert "(`ppopt run` and `export --format torch-csv` refuse it)\n" in result.stderr
    (tmp_path / "ordered.csv").write_text("0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n")
    assert "note" not in run(*command, "ordered.csv", "-q").stderr


def test_an_empty_row_is_an_idle_rank_that_is_evaluated_noted_and_not_exported(tmp_path, monkeypatch):
    """An empty line between rows is rank 1 with no stage (as PyTorch's reader reads it): ppopt's
    layers take it (3 devices, the idle one counted in the bubble), with a note, but PyTorch's
    runtime cannot run it, so no PyTorch CSV of it is written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gap.csv").write_text("0F0,0F1,0B0,0B1\n\n1F0,1F1,1B0,1B1\n")
    result = run("import", "gap.csv", "--json", "-q")
    assert result.exit_code == 0 and json.loads(result.stdout)["devices"] == 3
    assert result.stderr == ("note: gap.csv: rank 1 holds no stage; PyTorch's runtime needs at least one stage on every rank "
                             "(its pipeline group of 3 ranks would be larger than the 2 stages) (`ppopt run` and `export "
                             "--format torch-csv` refuse it)\n")
    result = run("export", "--schedule-file", "gap.csv", "-o", "out.csv", "-q")
    assert result.exit_code == 1 and result.stderr == ("error: gap: rank 1 holds no stage; PyTorch's runtime needs at least one "
                                                       "stage on every rank (its pipeline group of 3 ranks would be larger "
                                                       "than the 2 stages)\n")  # the reason once, as the error: no note
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("trailer, devices", [(",,,\n", 3), ("\n\n", 2), ("  \n", 2), ('"",""\n', 3)])
def test_a_last_row_of_empty_cells_is_an_idle_rank_and_blank_lines_are_not(tmp_path, trailer, devices):
    """A last row of empty cells (a spreadsheet's idle rank) is a rank, as PyTorch's reader counts it,
    and is noted: it was dropped as if it were a blank line, changing the device count silently.
    Trailing blank lines (an editor's) are still ignored."""
    path = tmp_path / "last.csv"
    path.write_text("0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n" + trailer)
    result = run("import", str(path), "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["devices"] == devices
    assert ("rank 2 holds no stage" in result.stderr) == (devices == 3)


def test_import_json_keeps_the_overlapped_pairs(tmp_path):
    """The JSON orders spelt DualPipeV's '(0F5;5B2)OVERLAP_F_B' as two plain ops: the schedule could
    not be rebuilt from the JSON. ``overlapped`` lists the pairs as the generator holds them."""
    from ppopt.generators import generate

    path = tmp_path / "dpv.csv"
    assert run("export", "-s", "dualpipev", "-p", 3, "-m", 6, "--unit", "-o", path).exit_code == 0
    data = json.loads(run("import", path, "--json").stdout)
    expected = generate("dualpipev", 3, 6)
    assert data["overlapped"] == [[str(f), str(b)] for f, b in expected.overlapped] and data["overlapped"]
    assert data["orders"] == [[str(op) for op in order] for order in expected.orders]


def test_an_idle_rank_beside_one_holding_every_stage_names_that_rank(tmp_path):
    """With as many ranks as stages, a rank is idle because another holds two stages: the note said
    the pipeline group of 2 ranks "would be larger than the 2 stages", which is false; it now names
    the rank holding both."""
    path = tmp_path / "idle.csv"
    path.write_text("\n0F0,1F0,1B0,0B0\n")  # rank 0 empty, rank 1 runs stages 0 and 1
    result = run("import", str(path), "-q")
    assert result.exit_code == 0
    assert "rank 0 holds no stage; PyTorch's runtime needs at least one stage on every rank (rank 1 holds 2 of the 2 " \
           "stages, rank 0 none)" in result.stderr


def test_an_output_named_by_its_suffix_alone_is_written_in_that_format(tmp_path, monkeypatch):
    """``-o .csv`` was refused with "give ... an output ending in .csv": Python reads ``.csv`` as a
    hidden file with no suffix. It is a torch-csv file named ``.csv``."""
    monkeypatch.chdir(tmp_path)
    result = run("export", "-s", "1f1b", "-p", "2", "-m", "2", "-o", ".csv", "-q")
    assert result.exit_code == 0, result.output
    assert (tmp_path / ".csv").read_text().splitlines()[0].startswith("0F0")
