"""V-Min (Qi, Wan, Amar, Lin, "Pipeline Parallelism with Controllable Memory", NeurIPS 2024)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.evaluate import evaluate
from ppopt.generators import generate
from ppopt.generators.v_min import INTERVAL, block
from ppopt.ir import Kind
from ppopt.validation import validate


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
    """p = 8, m = 32: peak 8 chunks = 4 microbatches = (8+4)//3 (1F1B: 8); bubble 1 - 96/109.5 = 0.1233
    (1F1B 7/39 = 0.1795).

    Length, in chunk-op slots (F = I = W = 1 per chunk, half a slot each). The block's forwards and
    input backwards are a chain at offsets 0..31: F of stage s at s, I of stage s at 31 - s, since
    device r's four residues mod 6, r, 15 - r, 16 + r and 31 - r, are distinct (any two equal would
    need 2r to be odd mod 6, or 16 = 0 mod 6); W of stage 0 then takes offset 32. The critical path:
    F of stages 0-10 of microbatch 0 and 5-15 of microbatch 1 (device 5 runs F(5, 1) at block slot 11
    right after F(10, 0) at 10), I and W of stage 15 on device 0: 24 ops, ending where F(0, 4) starts
    (6·4 = 24: device 0's next op in the repeated blocks); from F(0, j) the same 16 F, I and W of
    stage 15 (18 ops) lead to F(0, j + 3), so F(0, 31) starts at 24 + 9·18 = 186 = 6·31; then
    microbatch 31's chain, 16 F, 16 I and W of stage 0, 33 ops: 219. No op ends later: the repeated
    blocks are one valid timing of these orders, where every op ends by 6·31 + 33 = 219 except W of
    stages 1 and 2 of microbatch 31 (offset 33), and those are their devices' last ops, right after
    their I's (offsets 30 and 29), so they end by 218 in the table. 219 chunk-op slots are 109.5
    slots; each device is busy 32 microbatches x 6 ops x 1/2 = 96 of them."""
    t = evaluate("v-min", 8, 32).table
    offsets = block(8)
    assert [offsets[s, Kind.F] for s in range(16)] + [offsets[s, Kind.I] for s in reversed(range(16))] == list(range(32))
    assert offsets[0, Kind.W] == 32
    assert max(t.peak_activations) == 8
    assert t.length == (24 + 9 * 18 + 33) / 2 == 109.5
    assert t.bubble_ratio == pytest.approx(1 - 32 * 6 / 2 / 109.5)
    assert evaluate("1f1b", 8, 32).table.bubble_ratio == pytest.approx(7 / 39)


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 9), m=st.integers(1, 24))
def test_valid_and_never_above_the_papers_memory(p, m):
    validate(generate("v-min", p, m))
    peak = max(evaluate("v-min", p, m).table.peak_activations)
    assert peak <= 2 * ((p + 4) // 3)
    if m >= p:
        assert peak == min(2 * m, 2 * ((p + 4) // 3))
