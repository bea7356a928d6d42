"""The capped warm-up bound on multi-stage devices: hand-computed values, <= proven optima (<= every
schedule of V and looped placements: tests/test_bounds.py, which checks the best of all bounds)."""

from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from ppopt.placement import placement
from ppopt.solve.capped_warmup import forward_room
from ppopt.solve.instance import InstanceSpec, unit_instance
from ppopt.solve.model import Frame, build_model
from ppopt.solve.options import SolveOptions
from ppopt.solve.search import _serial_horizon, _ticks, analytic_bounds, minimum_memory, search
from ppopt.solve.space import parse_space
from ppopt.units import UnitCosts
from tests.test_bounds import _optimum


def test_forward_room_by_hand():
    # one cap of 3.5 over two stages of forwards 1 and 2: the three longest, 2 + 2 + 1 (two microbatches)
    assert forward_room([1.0, 2.0], [3.5, 3.5], 2) == 5.0
    # different caps, fractional: stage 1 gives 2 x 3 = 6 per unit of room, stage 0 gives 1 x 4 = 4;
    # two forwards of stage 1 take 2/3 of the room, the last third holds 4/3 forwards of stage 0
    assert abs(forward_room([1.0, 2.0], [4.0, 3.0], 2) - (4.0 + 4.0 / 3)) < 1e-12
    # a stage without a cap can run all its forwards
    assert forward_room([1.0, 2.0], [None, 1.0], 5) == 5.0 + 2.0


def test_v_acceptance_instance_is_optimal_at_124():
    """p = 8, m = 16, F = 2, B = 4 (chunk ops 1 and 2 slots), cap 8 (16 chunk activations), V, full
    backward. Device 7 (stages 7 and 8) starts at 7 at the earliest; its first backward, B(8, 0),
    waits for F(7..15) and B(15..9): 7 + 1 + 1 + 7 * 1 + 7 * 2 = 30; before it at most 16 forwards
    (16 slots) fit; its load is 16 * 2 * 3 = 96; after its last op (a B of stage 7) the backwards of
    stages 6..0 take 14 slots. So T >= 30 + 96 - 16 + 14 = 124, and ZB-V with merged backward takes
    124: the search proves it at once."""
    instance = unit_instance(8, 16, 16, UnitCosts(2, 4), memory_limit=8)
    bounds = analytic_bounds(instance, placement("v", 8), False)
    assert bounds.capped_warmup == 124
    assert bounds.device_load == 117
    spec = InstanceSpec(8, 16, UnitCosts(2, 4), memory_limit=8)
    result = search(spec, parse_space("placement=v"), SolveOptions(10))
    assert result.status == "optimal" and result.step_time == 124 and result.bound == 124


@settings(max_examples=10, deadline=None)
@given(p=st.integers(2, 3), m=st.integers(1, 4), cap=st.sampled_from([None, 1, 1.5, 2, 3]), comm=st.sampled_from([0, 1]),
       style=st.sampled_from(["v", "looped"]), split=st.booleans())
def test_below_proven_optimum(p, m, cap, comm, style, split):
    """V and looped (2 chunks) placements: a chunk op lasts 1/2 of F = 2, B = 4 (W = 2), so every op is a
    whole slot; a chunk activation counts 1/2, so a cap of 1.5 holds three."""
    units = UnitCosts(2, 4, 2 if split else None, comm)
    where = placement(style, p, chunks=2)
    instance = unit_instance(p, m, len(where), units, memory_limit=cap)
    bounds = analytic_bounds(instance, where, split)
    space = f"placement={style}" + (",chunks=2" if style == "looped" else "") + (",backward=split" if split else "")
    optimum = _optimum(instance, space)
    assert bounds.capped_warmup <= optimum + 1e-9
    assert bounds.best <= optimum + 1e-9


def test_below_proven_optimum_in_bytes():
    """llama3-8b on dgx-h100, V, p = 2, m = 3, a limit a little above the least any schedule needs:
    the persistent state of both stages on a device leaves room for few activations. In ticks, the
    bound exceeds the device-load bound (the cap binds) and stays below CP-SAT's proven optimum, with
    full and split backward."""
    for split in (False, True):
        space = parse_space("placement=v" + (",backward=split" if split else ""))
        spec = InstanceSpec(2, 3, model="llama3-8b", system="dgx-h100", global_batch=3)
        least = minimum_memory(spec.instance(4), space, placement("v", 2))[0]
        activation = max(c.activation_bytes for c in spec.instance(4).costs.stages)
        for extra in (0.2, 0.8):  # of the largest stage activation (the last stage's, with its fp32 softmax)
            instance = spec.with_limit(least + extra * activation).instance(4)
            tick, duration, delay, _ = _ticks(instance)
            bounds = analytic_bounds(instance, placement("v", 2), split, ticked=(duration, delay))
            bound = bounds.capped_warmup
            assert bound > bounds.device_load  # the limit is tight enough that the cap binds: not a vacuous check
            built = build_model(instance, space, Frame(tick, _serial_horizon(instance, tick, split), 0))
            solver = cp_model.CpSolver()
            solver.parameters.num_workers = 1
            assert solver.solve(built.model) == cp_model.OPTIMAL
            assert bound <= solver.objective_value + 1e-9
