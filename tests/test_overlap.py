"""Overlapped F&B pairs (PyTorch's OVERLAP_F_B): validation, table, simulator, CSV and traces."""

from __future__ import annotations

import dataclasses

import pytest

from ppopt.generators import generate
from ppopt.io.torch_csv import format_torch_csv, read_torch_csv
from ppopt.ir import Kind, Op, Schedule
from ppopt.report.trace import chrome_trace
from ppopt.simulate import simulate
from ppopt.solve.space import with_backward
from ppopt.table import build_table
from ppopt.validation import ScheduleValidationError, validate
from tests.test_simulate import system, uniform

PAIR = (Op(1, Kind.F, 2), Op(1, Kind.B, 1))


def _paired(*pairs: tuple[Op, Op]) -> Schedule:
    """1F1B at p = 3, m = 4; device 1 runs 1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3, so 1F2 and 1B1 are adjacent."""
    return dataclasses.replace(generate("1f1b", 3, 4), overlapped=pairs)


def test_table_counts_a_pair_as_its_two_ops():
    plain, paired = build_table(generate("1f1b", 3, 4)), build_table(validate(_paired(PAIR)))
    assert paired.start == plain.start and paired.length == plain.length


@pytest.mark.parametrize("pair, reason", [
    ((Op(1, Kind.F, 3), Op(1, Kind.B, 1)), "consecutive"),
    ((Op(1, Kind.F, 1), Op(1, Kind.B, 0)), None),  # valid: 1F1 is right before 1B0
    ((Op(1, Kind.B, 0), Op(1, Kind.F, 2)), "forward F and a full backward B"),
    ((Op(1, Kind.F, 2), Op(1, Kind.B, 7)), "names an op the schedule does not run"),
])
def test_pairs_are_validated(pair, reason):
    if reason is None:
        validate(_paired(pair))
        return
    with pytest.raises(ScheduleValidationError, match=reason):
        validate(_paired(pair))
    with pytest.raises(ScheduleValidationError, match="shares an op"):
        validate(_paired(PAIR, PAIR))


def test_simulator_shortens_the_pair_by_the_share_of_its_communication():
    """F = 1 s, B = 2 s, 0.5 bytes per message on 1 byte/s links: both ops of the pair on the middle stage
    send a 0.5 s message, so the B part lasts 2 − share · 0.5 s; with share 1 the saving, 0.5 s, is less
    than either op, so it is not capped. An op outside the pair keeps its time."""
    costs = uniform(3, send=0.5)
    for share, b_time in [(0.0, 2.0), (0.4, 1.8), (1.0, 1.5)]:
        sim = simulate(validate(_paired(PAIR)), costs, system(overlap_f_b_share=share))
        assert sim.end_s[PAIR[1]] - sim.start_s[PAIR[1]] == pytest.approx(b_time)
        assert sim.end_s[PAIR[0]] - sim.start_s[PAIR[0]] == pytest.approx(1.0)
        other = Op(1, Kind.B, 0)
        assert sim.end_s[other] - sim.start_s[other] == pytest.approx(2.0)
    # the share only acts on pairs
    assert simulate(generate("1f1b", 3, 4), costs, system(overlap_f_b_share=1.0)).step_time_s == \
        simulate(generate("1f1b", 3, 4), costs, system()).step_time_s
    # stage 0's B sends nothing (no stage below): a pair there hides no message, whatever its F sends
    # (device 0 runs 0F0 0F1 0F2 0B0 0F3 ..., so 0F2 and 0B0 are adjacent)
    bottom = (Op(0, Kind.F, 2), Op(0, Kind.B, 0))
    sim = simulate(validate(_paired(bottom)), costs, system(overlap_f_b_share=1.0))
    assert sim.end_s[bottom[1]] - sim.start_s[bottom[1]] == pytest.approx(2.0)
    # the cap: with huge messages the pair never gets shorter than its longer op (B keeps F's 1 s less)
    sim = simulate(validate(_paired(PAIR)), uniform(3, send=100.0), system(overlap_f_b_share=1.0))
    assert sim.end_s[PAIR[1]] - sim.start_s[PAIR[1]] == pytest.approx(1.0)


def test_csv_round_trip_and_trace():
    schedule = validate(_paired(PAIR))
    text = format_torch_csv(schedule)
    assert text.splitlines()[1] == "1F0,1F1,1B0,(1F2;1B1)OVERLAP_F_B,1F3,1B2,1B3"
    back = read_torch_csv(text)
    assert back.orders == schedule.orders and back.overlapped == (PAIR,)
    events = chrome_trace(schedule, simulate(schedule, uniform(3)), uniform(3))["traceEvents"]
    marked = {e["name"]: e["args"]["overlapped_with"] for e in events if "overlapped_with" in e.get("args", {})}
    assert marked == {"1F2": "1B1", "1B1": "1F2"}


def test_solver_sees_a_pair_as_two_ops():
    split = with_backward(validate(_paired(PAIR)), True)
    assert split.overlapped == () and validate(split).split_backward


def test_pytorch_loads_an_overlapped_csv(tmp_path):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    from tests.test_torch_csv import _MockStage

    path = tmp_path / "paired.csv"
    path.write_text(format_torch_csv(validate(_paired(PAIR))))
    runtime = schedules._PipelineScheduleRuntime([_MockStage(0, 3, 3)], 4)
    runtime._load_csv(str(path))
    assert str(runtime.pipeline_order[1][3]) == "(1F2;1B1)OVERLAP_F_B"
