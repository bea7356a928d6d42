"""DualPipe (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024, §3.2.1, Table 2): the order of the
reference's eight phases, its rules, Table 2's closed forms against ppopt's table, and its gap."""

import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.cli import main
from ppopt.errors import ScheduleError
from ppopt.formula import formula
from ppopt.generators import REGISTRY, generate
from ppopt.generators.dualpipe import dualpipe_formula
from ppopt.ir import Kind, Op, Schedule, dependencies
from ppopt.simulate import simulate
from ppopt.table import build_table
from ppopt.units import UnitCosts
from ppopt.validation import validate
from tests.test_simulate import unit_stage_costs


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_order_of_the_eight_phases_at_p4_m8():
    """Written out by hand from the phases of ``DualPipe.step`` (github.com/deepseek-ai/DualPipe) with
    P = 2 half ranks, n = 4 microbatches per direction (down 0-3, up 4-7). Device 0 (h = 0; early stage 0 down, late stage 3 up):
    nF0 0F0 0F1 | nF0F1 0F2 3F4 | nB1W1F1 3I4 3W4 3F5 | main loop once (0F3+3B5) (3F6+0B0) |
    nB1F1B0 3B6 (3F7+0B1) | nB1B0 3B7 0I2 (split from the early backward, h even) | nWB0 0W2 0I3 | nW 0W3.
    Device 1 (h = 1, a middle rank; early stage 1 down, late stage 2 up): nF0F1 twice | main loop twice,
    the first pair run apart: 1F2 2B4 (2F6+1B0) (1F3+2B5) (2F7+1B1) | nB1B0 2B6 1B2 2I7 1I3 (split from
    step 1's late backward, h odd) | nW 2W7 1W3. Devices 3 and 2 run the mirror images, up and down swapped."""
    schedule = validate(generate("dualpipe", 4, 8))
    down = {0: "0F0 0F1 0F2 3F4 3I4 3W4 3F5 0F3 3B5 3F6 0B0 3B6 3F7 0B1 3B7 0I2 0W2 0I3 0W3",
            1: "1F0 2F4 1F1 2F5 1F2 2B4 2F6 1B0 1F3 2B5 2F7 1B1 2B6 1B2 2I7 1I3 2W7 1W3"}
    mirror = {3: 0, 2: 1}
    for r, text in down.items():
        assert " ".join(map(str, schedule.orders[r])) == text
        flipped = [Op(op.stage, op.kind, (op.microbatch + 4) % 8) for op in schedule.orders[r]]
        assert schedule.orders[next(d for d, src in mirror.items() if src == r)] == tuple(flipped)
    assert {(str(f), str(b)) for f, b in schedule.overlapped if schedule.device_of(f) in (0, 1)} == {
        ("0F3", "3B5"), ("3F6", "0B0"), ("3F7", "0B1"), ("2F6", "1B0"), ("1F3", "2B5"), ("2F7", "1B1")}
    assert schedule.replica_of == (0, 0, 0, 0, 1, 1, 1, 1)
    assert schedule.placement == ((0, 3), (1, 2), (2, 1), (3, 0))


@pytest.mark.parametrize("p, m, flag, message", [
    (3, 6, "--devices", "dualpipe needs an even number of devices, got 3"),
    (4, 9, "--microbatches", "dualpipe needs an even number of microbatches"),
    (4, 6, "--microbatches", "dualpipe needs m >= 2p .* the minimum is m = 8"),
])
def test_rules_of_the_reference(p, m, flag, message):
    """The reference asserts num_ranks even, num_chunks even and num_chunks >= 2 num_ranks."""
    with pytest.raises(ScheduleError, match=message):
        generate("dualpipe", p, m)
    result = run("table", "-s", "dualpipe", "-p", p, "-m", m)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith(f"error: {flag}: dualpipe needs") and result.stderr.count("\n") == 1


def test_torch_csv_is_refused_in_one_line(tmp_path):
    out = tmp_path / "d.csv"
    result = run("export", "--format", "torch-csv", "-s", "dualpipe", "-p", 4, "-m", 8, "-o", out)
    assert result.exit_code == 1 and not out.exists()
    assert result.stderr == "error: PyTorch's schedule CSV holds one rank per stage; dualpipe places stage 0 on ranks 0 and 3\n"
    assert not REGISTRY["dualpipe"].torch


@settings(max_examples=30, deadline=None)
@given(half=st.integers(1, 5), extra=st.integers(0, 4), backward=st.sampled_from([1, 2]))
def test_table_length_peaks_and_the_simulator(half, extra, backward):
    """At F = 1, B = b (I = W = b/2), b = 1 or 2: length m(1 + b) + p/2 - 1 (each device works
    m(1 + b) slots and the middle ones idle only until the first forward reaches them), peak p + 1
    activations on every device (Table 2's "PP+1"), and the simulator with unit costs agrees."""
    p, m = 2 * half, 2 * (2 * half + extra)
    schedule = validate(generate("dualpipe", p, m))
    assert REGISTRY["dualpipe"].ops(p, m, {}) == sum(map(len, schedule.orders))
    unit = UnitCosts(backward=backward)
    table = build_table(schedule, unit)
    assert table.length == m * (1 + backward) + p // 2 - 1
    assert table.peak_activations == (p + 1,) * p
    sim = simulate(schedule, unit_stage_costs(schedule, unit))
    assert sim.step_time_s == table.length
    assert sim.peak_activation_bytes == (float(p + 1),) * p


def block_layout(schedule: Schedule, duration: dict[Kind, float], pair: float) -> float:
    """Length of ``schedule`` when each overlapped pair runs as one block of ``pair`` slots, the report's
    accounting: the block starts once its device is free and both its ops' inputs have arrived, and both
    ops end (and send) at its end. Other ops start as early as their inputs and device order allow."""
    first = {f: b for f, b in schedule.overlapped}
    blocks = []
    for order in schedule.orders:
        ops = [op for op in order if op not in first.values()]
        blocks.append([(op, first[op]) if op in first else (op,) for op in ops])
    split, end = schedule.split_pairs, {}
    free, position = [0.0] * schedule.devices, [0] * schedule.devices
    while any(position[d] < len(blocks[d]) for d in range(schedule.devices)):
        moved = False
        for d, device_blocks in enumerate(blocks):
            while position[d] < len(device_blocks):
                block = device_blocks[position[d]]
                needs = [dep for op in block for dep in dependencies(op, schedule.stages, split) if dep not in block]
                if any(dep not in end for dep in needs):
                    break
                start = max([free[d], *(end[dep] for dep in needs)])
                free[d] = start + (pair if len(block) == 2 else duration[block[0].kind])
                end.update(dict.fromkeys(block, free[d]))
                position[d] += 1
                moved = True
        assert moved, "deadlock"
    return max(free)


@pytest.mark.parametrize("p", [2, 4, 6, 8])
@pytest.mark.parametrize("pair", [3, 2.5, 2])
def test_table_2_bubble_holds_with_pairs_as_blocks(p, pair):
    """DeepSeek-V3 report, Table 2: "DualPipe | (PP/2-1)(F&B+B-3W) | 2x | PP+1", F&B the time of an
    overlapped pair. With F = 1, B = 2, W = 1 and pairs run as one block of F&B slots the busiest device
    idles exactly that long (every device at F&B = F + B = 3); ppopt's table, which runs a pair's F then
    its B, idles p/2 - 1 slots, below the formula's p - 2 for p > 2."""
    m = 2 * p + 4
    schedule = generate("dualpipe", p, m)
    F, B, W = 1, 2, 1
    pairs_on = [sum(schedule.device_of(f) == d for f, _ in schedule.overlapped) for d in range(p)]
    length = block_layout(schedule, {Kind.F: F, Kind.B: B, Kind.I: B - W, Kind.W: W}, pair)
    idle = [length - (m * (F + B) - k * (F + B - pair)) for k in pairs_on]
    assert max(idle) == (p / 2 - 1) * (pair + B - 3 * W)
    if pair == F + B:
        assert idle == [(p / 2 - 1) * (pair + B - 3 * W)] * p
    table = build_table(schedule)
    assert table.length - m * (F + B) == p / 2 - 1 <= (p / 2 - 1) * (F + B + B - 3 * W)


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (6, 14)])
def test_formula_layer_is_table_2(p, m):
    """Unit slots F = 1, B = 2 (W = 1), F&B = F + B: bubble (p/2 - 1)(3 + 2 - 3) = p - 2 slots per device,
    length 3m + p - 2; at p = 2 that is the table's m(1 + b) + p/2 - 1 too. Two weight copies, p + 1 peaks."""
    f = formula("dualpipe", p, m)
    assert f is not None and f.valid
    assert f.length == 3 * m + p - 2 and f.bubble_ratio == pytest.approx((p - 2) / (3 * m + p - 2))
    assert f.peak_activations == (p + 1,) * p and f.weight_copies == (2,) * p
    assert (f.length == build_table(generate("dualpipe", p, m)).length) == (p == 2)
    assert dualpipe_formula(p, m, backward=1).length == 2 * m + (p / 2 - 1) * 1.5


@pytest.mark.parametrize("weight, length", [(0.5, 58.5), (1, 54), (1.5, 49.5)])
def test_formula_layer_takes_the_weight_gradient(weight, length):
    """Table 2's bubble has W: (p/2 - 1)(F&B + B - 3W). At p = 8, m = 16, F = 1, B = 2, F&B = 3:
    3 · (5 - 3W) idle slots after 16 · 3 = 48 busy, so 58.5, 54 and 49.5 slots at W = 0.5, 1, 1.5."""
    f = formula("dualpipe", 8, 16, UnitCosts(weight=weight))
    assert f is not None and f.valid and f.length == length
    assert f.bubble_ratio == pytest.approx((length - 48) / length)


@pytest.mark.parametrize("p, m, step", [(4, 8, 25), (6, 12, 38)])
def test_gap_is_proven_zero_in_its_space(p, m, step):
    """Unit costs, no messages. Any schedule of the bidirectional split space takes at least
    3m + p/2 - 1 slots: device p/2 - 1 holds stage p/2 - 1 going down (p/2 - 1 forwards before it) and
    stage p/2 going up (p/2 before it), so it can start no op before slot p/2 - 1, and it then works
    m(F + I + W) = 3m slots. DualPipe's table meets that bound (test above), so the optimum is
    3m + p/2 - 1 (25 at p = 4, m = 8; 38 at p = 6, m = 12) and the gap 0."""
    assert step == 3 * m + p // 2 - 1
    result = run("gap", "-p", p, "-m", m, "--unit", "--time-limit", "10", "-q", "-s", "dualpipe", "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["schedules"]
    assert row["space"] == "placement=bidirectional,backward=split,order=free,directions=even"
    assert row["status"] == "optimal"
    assert row["step_time_s"] == row["bound_s"] == step and row["gap"] == 0
