"""V-Min (Qi, Wan, Amar, Lin, "Pipeline Parallelism with Controllable Memory", NeurIPS 2024)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.evaluate import evaluate
from ppopt.generators import generate
from ppopt.generators.v_min import INTERVAL, block
from ppopt.validate import validate


def test_block_residues_are_distinct_per_device():
    p = 8
    offsets = block(p)
    for r in range(p):
        mine = [slot % INTERVAL for (s, _), slot in offsets.items() if r in (s, 2 * p - 1 - s)]
        assert sorted(mine) == list(range(INTERVAL))


@pytest.mark.parametrize("p", [3, 4, 5, 6, 8, 10, 12])
def test_peak_is_a_third_of_1f1b(p):
    """Abstract: the V-shape blocks "can reduce the peak activation memory to 1/2 of 1F1B without
    sacrificing efficiency, and even to 1/3 with comparable throughput"; the authors' table gives
    the activation memory "(by #micro-batch)" as p for 1F1B and (p+4)//3 for V-Min. A chunk
    activation is half a microbatch's activation on a stage, so V-Min holds 2·((p+4)//3) chunks."""
    m = 4 * p
    one_f_one_b = max(evaluate("1f1b", p, m).table.peak_activations)
    v_min = evaluate("v-min", p, m).table
    assert one_f_one_b == p
    assert max(v_min.peak_activations) / 2 == (p + 4) // 3
    # "comparable throughput": at equal F, I, W the table's bubble is below 1F1B's
    assert v_min.bubble_ratio < evaluate("1f1b", p, m).table.bubble_ratio


def test_figures_at_p8_m32():
    """p = 8, m = 32: peak 8 chunks = 4 microbatches = (8+4)//3 (1F1B: 8); bubble 0.1233 (1F1B 7/39 = 0.1795)."""
    t = evaluate("v-min", 8, 32).table
    assert max(t.peak_activations) == 8
    assert t.bubble_ratio == pytest.approx(0.1233, abs=5e-5)
    assert evaluate("1f1b", 8, 32).table.bubble_ratio == pytest.approx(7 / 39)


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 9), m=st.integers(1, 24))
def test_valid_and_never_above_the_papers_memory(p, m):
    validate(generate("v-min", p, m))
    peak = max(evaluate("v-min", p, m).table.peak_activations)
    assert peak <= 2 * ((p + 4) // 3)
    if m >= p:
        assert peak == min(2 * m, 2 * ((p + 4) // 3))
