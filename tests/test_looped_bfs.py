"""Looped BFS: PyTorch's ScheduleLoopedBFS order, and Lamy-Poirier 2023's closed forms."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.evaluate import evaluate
from ppopt.generators import generate
from ppopt.units import UnitCosts
from ppopt.validation import validate


class _Stage:
    """What ScheduleLoopedBFS reads from its stages to build its order (no model, no process group)."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int):
        self.stage_index, self.num_stages, self.group_size = stage_index, num_stages, group_size
        self.group_rank = 0
        self.stage_index_to_group_rank: dict = {}
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1
        self.submod = None


@pytest.mark.parametrize("p, m, v", [(2, 2, 2), (4, 8, 2), (3, 5, 3), (4, 3, 2), (2, 4, 1)])
def test_order_is_pytorchs(p, m, v):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    stages = v * p
    pytorch = schedules.ScheduleLoopedBFS([_Stage(s, stages, p) for s in range(0, stages, p)], m)
    theirs = {rank: [str(a) for a in actions if a is not None] for rank, actions in pytorch.pipeline_order.items()}
    ours = generate("looped-bfs", p, m, chunks=v)
    assert theirs == {d: [str(op) for op in order] for d, order in enumerate(ours.orders)}


def test_hand_computed_p2_m2_v2():
    """p = 2, v = 2 (stages 0, 2 on rank 0; 1, 3 on rank 1), F = B = 1: rank 0 runs 0F0 0F1 2F0 2F1
    in slots 0-3, rank 1 runs 1F0 1F1 (1-2), 3F0 3F1 (3-4), then 3B1 3B0 1B1 1B0 (5-8); rank 0's 2B1
    waits for 3B1 (slot 5) and ends at slot 10 = (1+1)(2·2 + 2 - 1)."""
    e = evaluate("looped-bfs", 2, 2, UnitCosts(backward=1), chunks=2)
    assert e.formula is not None and e.formula.valid
    assert e.table.length == e.formula.length == 10 / 2  # chunk slots over v: slots of a 1/p share
    assert e.table.peak_activations == (4, 4)


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 6), m=st.integers(1, 14), v=st.integers(1, 3), b=st.sampled_from([1, 2]))
def test_table_equals_formula_from_m_at_least_p(p, m, v, b):
    validate(generate("looped-bfs", p, m, chunks=v))
    e = evaluate("looped-bfs", p, m, UnitCosts(backward=b), chunks=v)
    f, t = e.formula, e.table
    assert f is not None
    assert f.valid == (m >= p or v == 1)
    if f.valid:
        assert f.length == pytest.approx(t.length) and f.bubble_ratio == pytest.approx(t.bubble_ratio)
        assert f.peak_activations == t.peak_activations == (v * m,) * p
    else:
        assert t.length > f.length  # the order waits between chunks when m < p
