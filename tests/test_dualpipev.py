"""DualPipeV: PyTorch's ScheduleDualPipeV order, mixed backward kinds and overlapped pairs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.errors import ScheduleError
from ppopt.generators import REGISTRY, generate
from ppopt.io.torch_csv import format_torch_csv, read_torch_csv
from ppopt.ir import Kind
from ppopt.simulate import simulate
from ppopt.table import build_table
from ppopt.units import UnitCosts
from ppopt.validation import validate
from tests.test_looped_bfs import _Stage
from tests.test_simulate import unit_stage_costs


def _cells(schedule) -> dict[int, list[str]]:
    return dict(enumerate(row.split(",") for row in format_torch_csv(schedule).strip().split("\n")))


@pytest.mark.parametrize("p, m", [(1, 2), (2, 4), (2, 7), (3, 6), (4, 8), (4, 11), (5, 12)])
def test_order_is_pytorchs(p, m):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    pytorch = schedules.ScheduleDualPipeV([_Stage(s, 2 * p, p) for s in (0, 2 * p - 1)], m)
    theirs = {rank: [str(a) for a in actions if a is not None] for rank, actions in pytorch.pipeline_order.items()}
    assert theirs == _cells(generate("dualpipev", p, m))


def test_pytorch_loads_the_exported_csv(tmp_path):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    from tests.test_torch_csv import _MockStage

    schedule = generate("dualpipev", 4, 8)
    path = tmp_path / "dualpipev.csv"
    path.write_text(format_torch_csv(schedule))
    runtime = schedules._PipelineScheduleRuntime([_MockStage(0, 8, 4)], 8)
    runtime._load_csv(str(path))  # parses, validates and lowers with communication
    assert {r: [str(a) for a in actions if a is not None] for r, actions in runtime.pipeline_order.items()} == _cells(schedule)
    back = read_torch_csv(path)
    assert back.orders == schedule.orders and set(back.overlapped) == set(schedule.overlapped)


def test_mixed_kinds_and_pairs_at_p2_m4():
    """Hand-derived from the phases (module docs). Device 0 (stages 0, 3): 0F0 0F1 | 0F2 3F0 | 3I0 3W0 3F1 |
    (0F3+3B1) (3F2+0B0) | 3B2 (3F3+0B1) | 3B3 0I2 (split from step 0's first chunk, even device) | 0W2 0I3 |
    0W3. Device 1 (stages 1, 2, the last): 1F0 2F0 1F1 2F1 | 1F2 2B0 apart, (2F2+1B0), (1F3+2B1) (2F3+1B1)
    | 2B2 1B2 2I3 1I3 (split from step 1, odd device) | 2W3 1W3."""
    schedule = validate(generate("dualpipev", 2, 4))
    assert schedule.split_pairs == {(3, 0), (0, 2), (0, 3), (2, 3), (1, 3)}
    assert REGISTRY["dualpipev"].ops(2, 4, {}) == sum(map(len, schedule.orders))
    assert {(str(f), str(b)) for f, b in schedule.overlapped} == {
        ("0F3", "3B1"), ("3F2", "0B0"), ("3F3", "0B1"), ("2F2", "1B0"), ("1F3", "2B1"), ("2F3", "1B1")}
    assert " ".join(map(str, schedule.orders[0])) == "0F0 0F1 0F2 3F0 3I0 3W0 3F1 0F3 3B1 3F2 0B0 3B2 3F3 0B1 3B3 0I2 0W2 0I3 0W3"


def test_needs_m_at_least_2p():
    with pytest.raises(ScheduleError, match="m >= 2p .* the minimum is m = 6"):
        generate("dualpipev", 3, 5)


@settings(max_examples=25, deadline=None)
@given(p=st.integers(1, 6), extra=st.integers(0, 8), backward=st.sampled_from([1.0, 2.0]))
def test_valid_and_table_equals_simulator(p, extra, backward):
    schedule = validate(generate("dualpipev", p, 2 * p + extra))
    assert {op.kind for op in schedule.ops()} >= {Kind.F, Kind.B}
    unit = UnitCosts(backward=backward)
    table = build_table(schedule, unit)
    sim = simulate(schedule, unit_stage_costs(schedule, unit))  # no system: overlap share 0
    assert sim.step_time_s == pytest.approx(table.length)
    assert sim.peak_activation_bytes == tuple(float(x) for x in table.peak_activations)


def test_split_pairs_in_closed_form_match_the_schedules():
    """The count the size check uses is the generated schedules' own, at every small size."""
    from ppopt.generators.dualpipe import split_pairs as dualpipe_pairs
    from ppopt.generators.dualpipev import split_pairs

    for p in range(1, 9):
        assert split_pairs(p, 2 * p) == len(generate("dualpipev", p, 2 * p).split_pairs), p
    for p in range(1, 500):  # the loop it replaces
        h = [(r + 1) // 2 for r in range(p)]
        assert split_pairs(p, 1) == sum(2 * (p - r - 1) + 2 * (r + 1 - h[r]) - (r % 2 == 0) for r in range(p)), p
    for p in (2, 4, 6, 8):
        assert dualpipe_pairs(p, 2 * p) == len(generate("dualpipe", p, 2 * p).split_pairs), p


@pytest.mark.parametrize("name", ["dualpipev", "dualpipe", "gpipe"])
def test_a_huge_pipeline_is_refused_at_once_as_every_family_refuses_it(name):
    """dualpipe(v)'s op count looped over the p devices: `evaluate -s dualpipev -p 1000000000 -m 8`
    ran for minutes before the size check that refuses `-s gpipe` at the same p in a moment. At
    p = 10**30 a loop over the devices would never end; the closed form answers at once (no timing
    asserted: the old code does not finish)."""
    with pytest.raises(ScheduleError, match="schedule too large"):
        generate(name, 10**30, 8)
