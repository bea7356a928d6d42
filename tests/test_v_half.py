"""V-Half (Qi, Wan, Amar, Lin, "Pipeline Parallelism with Controllable Memory", NeurIPS 2024)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.evaluate import evaluate
from ppopt.generators import generate
from ppopt.generators.v_half import INTERVAL, block
from ppopt.ir import Kind
from ppopt.simulate import simulate
from ppopt.table import build_table
from ppopt.units import UnitCosts
from ppopt.validation import validate
from tests.test_simulate import unit_stage_costs


@pytest.mark.parametrize("p", range(1, 14))
def test_block_repeats_without_collision(p):
    """Each device's four F/I offsets are distinct mod 6 (two free slots per interval for the W's),
    and every op of the block comes after its predecessor."""
    offsets = block(p)
    for r in range(p):
        mine = [slot % INTERVAL for (s, _), slot in offsets.items() if r in (s, 2 * p - 1 - s)]
        assert len(mine) == len(set(mine)) == 4
    forward = [offsets[s, Kind.F] for s in range(2 * p)]
    backward = [offsets[s, Kind.I] for s in reversed(range(2 * p))]
    chain = forward + backward
    assert all(b > a for a, b in zip(chain, chain[1:]))


def test_block_at_p4_by_hand():
    """p = 4 (even: pause 3): F of stages 0..3 at 0, 2, 4, 6 and of 4..7 at 7, 8, 9, 10; I of stages
    7..4 at 14, 16, 18, 20 and of 3..0 at 22, 23, 24, 25."""
    offsets = block(4)
    assert [offsets[s, Kind.F] for s in range(8)] == [0, 2, 4, 6, 7, 8, 9, 10]
    assert [offsets[s, Kind.I] for s in reversed(range(8))] == [14, 16, 18, 20, 22, 23, 24, 25]


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 8, 10, 12])
def test_peak_is_half_of_1f1b(p):
    """Abstract: the V-shape blocks "can reduce the peak activation memory to 1/2 of 1F1B without
    sacrificing efficiency, and even to 1/3 with comparable throughput"; the authors' summary table
    (their Hugging Face space sail/pipeline-parallelism-with-controllable-memory) gives
    the activation memory "(by #micro-batch)" as p for 1F1B and (p+2)//2 for V-Half. A chunk
    activation is half a microbatch's activation on a stage, so V-Half holds 2·((p+2)//2) chunks."""
    m = 4 * p
    one_f_one_b = evaluate("1f1b", p, m).table
    v_half = evaluate("v-half", p, m).table
    assert max(one_f_one_b.peak_activations) == p
    assert max(v_half.peak_activations) / 2 == (p + 2) // 2
    # "without sacrificing efficiency": at equal F, I, W the table's bubble is below 1F1B's
    assert v_half.bubble_ratio < one_f_one_b.bubble_ratio


def test_figures_at_p8_m32():
    """p = 8, m = 32: peak 10 chunks = 5 microbatches = (8+2)//2 on every device (V-Min: 8 chunks,
    1F1B: 8 stages = 16 chunks). Each device works 32·3 = 96 slots; the table takes 109, bubble
    13/109 = 0.1193 (1F1B 7/39 = 0.1795)."""
    t = evaluate("v-half", 8, 32).table
    assert t.peak_activations == (10,) * 8
    assert t.length == 109 and t.bubble_ratio == pytest.approx(13 / 109)
    assert max(evaluate("v-min", 8, 32).table.peak_activations) == 8


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 9), m=st.integers(1, 24))
def test_valid_and_never_above_the_papers_memory(p, m):
    validate(generate("v-half", p, m))
    peak = max(evaluate("v-half", p, m).table.peak_activations)
    assert peak <= 2 * ((p + 2) // 2)
    if m >= p:
        assert peak == 2 * ((p + 2) // 2)


@settings(max_examples=25, deadline=None)
@given(p=st.integers(1, 7), m=st.integers(1, 16), backward=st.sampled_from([1.0, 2.0]))
def test_table_equals_simulator(p, m, backward):
    schedule = generate("v-half", p, m)
    unit = UnitCosts(backward=backward)
    table = build_table(schedule, unit)
    sim = simulate(schedule, unit_stage_costs(schedule, unit))
    assert sim.step_time_s == pytest.approx(table.length)
    assert sim.peak_activation_bytes == tuple(float(x) for x in table.peak_activations)
