"""Handcrafted schedules fitted to a memory cap (ppopt.solve.fitted): every one returned is a valid
schedule within the cap that keeps the handcrafted per-device order of forwards and of gradient ops;
interleaved 1F1B fitted under a cap it exceeds keeps its own length, the analytic bound."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.generators import generate
from ppopt.ir import Kind
from ppopt.simulate import simulate
from ppopt.solve.fitted import fitted_schedule
from ppopt.solve.greedy import best_greedy_schedule
from ppopt.solve.instance import unit_instance
from ppopt.solve.space import with_backward
from ppopt.units import UnitCosts
from ppopt.validation import validate


def _instance(schedule, comm: float, limit: float | None, split: bool = False, forward: float = 1.0):
    units = UnitCosts(forward, 2 * forward, forward if split else None, comm)
    return unit_instance(schedule.devices, schedule.microbatches, len(schedule.placement), units, memory_limit=limit)


def _simulated(schedule, instance):
    return simulate(validate(schedule), instance.costs, instance.system)


def test_interleaved_1f1b_fitted_to_a_cap_it_exceeds_keeps_its_length():
    """p = 16, m = 64, two chunks, F = 1, B = 2 without messages: interleaved 1F1B lasts
    (1 + B)(v·m + p - 1) chunk slots of p/S = 1/2 slot, 3 · 143 / 2 = 214.5 slots (Narayanan et al.
    2021), and peaks at (v - 1)p + 2(p - 1) + 1 = 47 chunk activations of half a share, 23.5, on
    device 0. Under a cap of 16 the fitted one still takes 214.5 slots, the looped space's analytic
    bound (so it is optimal), where the greedy list schedule takes longer."""
    interleaved = generate("interleaved-1f1b", 16, 64, chunks=2)
    instance = _instance(interleaved, comm=0.0, limit=16.0)
    own = _simulated(interleaved, instance)
    assert own.step_time_s == 3 * (2 * 64 + 16 - 1) / 2 == 214.5 and max(own.peak_activation_bytes) == 23.5
    fitted = fitted_schedule(interleaved, instance)
    assert fitted is not None and fitted.name == "fitted interleaved-1f1b"
    simulation = _simulated(fitted, instance)
    assert simulation.step_time_s == 214.5 and max(simulation.peak_activation_bytes) <= 16.0
    greedy = best_greedy_schedule(instance, interleaved.placement, False)
    assert greedy is not None and _simulated(greedy, instance).step_time_s > 214.5


def test_the_search_takes_the_fitted_schedule_and_proves_it_optimal():
    """The same instance through `search`: the fitted hint meets the analytic bound, so the search
    reports it as optimal at once and names it as ppopt's own hint, not a handcrafted schedule."""
    from ppopt.report.solve import search_text
    from ppopt.solve.instance import InstanceSpec
    from ppopt.solve.options import SolveOptions
    from ppopt.solve.search import search

    result = search(InstanceSpec(16, 64, UnitCosts(1, 2, None, 0), memory_limit=16.0), "placement=looped,chunks=2",
                    SolveOptions(30, workers=1, seed=0))
    assert result.status == "optimal" and result.step_time == result.bound == 214.5
    assert result.hint == "fitted interleaved-1f1b" and result.hint_own
    # the handcrafted ones are the space's two families; the greedy and fitted hints are not among them
    assert sorted(c.name for c in result.handcrafted) == ["interleaved-1f1b", "looped-bfs"]
    assert "best from ppopt's fitted interleaved-1f1b schedule" in search_text(result)


def test_a_dispatch_that_cannot_progress_returns_none():
    """Looped BFS runs every microbatch's first chunk before any second chunk: under a cap of 16
    activations (32 chunks) device 0 fills with first-chunk activations whose second chunks wait
    behind the blocked forward, so no fitted schedule exists in its order."""
    bfs = generate("looped-bfs", 16, 64, chunks=2)
    assert fitted_schedule(bfs, _instance(bfs, comm=0.0, limit=16.0)) is None


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v", "v-half", "hanayo"]),
       p=st.integers(2, 6), rounds=st.integers(1, 4), comm=st.sampled_from([0.0, 1.0, 2.0]),
       cap=st.sampled_from([1.0, 1.5, 2.0, 3.0, "p"]))
def test_a_fitted_schedule_is_valid_keeps_the_cap_and_the_handcrafted_orders(name, p, rounds, comm, cap):
    """For every family and cap: a fitted schedule that exists runs every op once in dependency order
    (validate), holds at most the cap on every device, and runs each device's forwards in the
    handcrafted order, and its B and I ops too (a W may go ahead of them when a forward waits for room)."""
    m = p * rounds if name != "zb-v" else max(p, p * rounds)
    options = {"chunks": 2} if name == "interleaved-1f1b" else {}
    split = name.startswith("zb") or name == "v-half"
    handcrafted = with_backward(generate(name, p, m, **options), split)
    limit = float(p) if cap == "p" else float(cap)
    instance = _instance(handcrafted, comm, limit, split)
    fitted = fitted_schedule(handcrafted, instance)
    if fitted is None:
        return
    assert max(_simulated(fitted, instance).peak_activation_bytes) <= limit + 1e-9
    for own, new in zip(handcrafted.orders, fitted.orders):
        assert sorted(own) == sorted(new)
        for kinds in ((Kind.F,), (Kind.B, Kind.I)):
            assert [op for op in new if op.kind in kinds] == [op for op in own if op.kind in kinds]


def test_own_hints_are_told_apart_by_their_mark_not_their_name():
    """ppopt's own hints were recognised by name (greedy, periodic, a 'fitted ' prefix), so a user's
    schedule named greedy.csv was dropped from the handcrafted ones and reported as ppopt's own.
    Candidates now carry the mark: the user's 'greedy' stays a given, handcrafted schedule."""
    from dataclasses import replace

    from ppopt.solve.instance import InstanceSpec
    from ppopt.solve.options import SolveOptions
    from ppopt.solve.search import search

    users = replace(generate("1f1b", 4, 8), name="greedy")
    result = search(InstanceSpec(4, 8, UnitCosts(1, 2, None, 1), memory_limit=4.0), "placement=linear",
                    SolveOptions(10, workers=1, seed=0), hints=(users,))
    given = [c for c in result.handcrafted if c.given]
    assert [c.name for c in given] == ["greedy"] and not given[0].own
    assert all(not c.own for c in result.handcrafted)
