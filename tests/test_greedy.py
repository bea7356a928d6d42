"""The greedy hint (ppopt.solve.greedy): its variants keep the memory limit and the dependencies, and
the spaced one shortens the hint where devices hold several stages."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.placement import placement
from ppopt.simulate import simulate
from ppopt.solve.greedy import ENTRY_SPACINGS, best_greedy_schedule, greedy_schedule
from ppopt.solve.instance import unit_instance
from ppopt.units import UnitCosts
from ppopt.validation import validate


def _step_and_peak(schedule, instance) -> tuple[float, float]:
    simulation = simulate(validate(schedule), instance.costs, instance.system)
    return simulation.step_time_s, max(simulation.peak_activation_bytes)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 6), extra=st.integers(0, 10), style=st.sampled_from(["linear", "looped", "v", "zigzag"]),
       cap=st.sampled_from([1, 1.5, 2, "p"]), comm=st.sampled_from([0, 1, 2]), split=st.booleans(),
       reserve=st.booleans(), multiple=st.sampled_from(ENTRY_SPACINGS))
def test_every_variant_is_valid_and_keeps_the_limit(p, extra, style, cap, comm, split, reserve, multiple):
    """Whatever it admits and however it spaces entries, a greedy schedule it returns runs every op
    once in dependency order (validate) and never holds more than the limit on a device; the default
    (all room reserved at admission) always returns one when one activation of each stage fits."""
    m = p + extra
    where = placement(style, p, chunks=2, waves=2)
    limit = float(p) if cap == "p" else float(cap)
    instance = unit_instance(p, m, len(where), UnitCosts(1, 2, None, comm), memory_limit=limit)
    schedule = greedy_schedule(instance, where, split, reserve=reserve, spacing=multiple * 3.0)
    sizes, _ = instance.memory_counts()
    needs = max(sum(sizes[s] for s in range(len(where)) if where[s][0] == d) for d in range(p))
    if reserve and needs <= limit:
        assert schedule is not None
    if schedule is not None:
        assert _step_and_peak(schedule, instance)[1] <= limit + 1e-9


def test_spaced_entries_shorten_the_hint_on_devices_holding_several_stages():
    """V, looped and zig-zag placements under a cap of p (F = 1, B = 2, one-slot messages): the
    shortest variant is shorter than the default, which reserves a microbatch's later activations from
    its admission on and so keeps fewer microbatches in flight than the room allows, and it keeps
    the cap."""
    for style, p, m in (("v", 8, 32), ("looped", 8, 64), ("zigzag", 8, 40)):
        where = placement(style, p, chunks=2, waves=2)
        instance = unit_instance(p, m, len(where), UnitCosts(1, 2, None, 1), memory_limit=float(p))
        default = greedy_schedule(instance, where, False)
        best = best_greedy_schedule(instance, where, False)
        assert default is not None and best is not None
        (default_step, _), (best_step, best_peak) = _step_and_peak(default, instance), _step_and_peak(best, instance)
        assert best_step < default_step, style
        assert best_peak <= p


def test_only_the_default_variant_when_time_is_short():
    """``affordable`` False: the variants are skipped, so the result is the default schedule."""
    where = placement("v", 4)
    instance = unit_instance(4, 16, len(where), UnitCosts(1, 2, None, 1), memory_limit=4.0)
    default, only = greedy_schedule(instance, where, False), best_greedy_schedule(instance, where, False, lambda: False)
    assert default is not None and only is not None and only.orders == default.orders


def test_the_search_builds_variants_only_within_their_share_of_the_time_left(monkeypatch):
    """At 1.57 M ops a variant takes about 12 s: the search asks for one only while it costs at most
    GREEDY_VARIANT_SHARE of the time left (here a greedy schedule priced at half of a 10 s limit)."""
    import ppopt.solve.search as searching
    from ppopt.solve.instance import InstanceSpec
    from ppopt.solve.options import SolveOptions
    from ppopt.solve.space import parse_space

    asked: list[bool] = []
    real = searching.best_greedy_schedule

    def spy(instance, where, split, affordable):
        asked.append(affordable())
        return real(instance, where, split, affordable)

    monkeypatch.setattr(searching, "best_greedy_schedule", spy)
    spec = InstanceSpec(8, 32, UnitCosts(1, 2, None, 1), memory_limit=8.0)  # V: 16 stages, 1,024 ops
    for price, expected in ((None, True), (5.0 / 1024, False)):
        if price is not None:
            monkeypatch.setattr(searching, "GREEDY_S_PER_OP", price)
        asked.clear()
        searching.search(spec, parse_space("placement=v"), SolveOptions(10, deterministic_time=0.5))
        assert asked == [expected]


def test_the_default_variant_fits_a_limit_set_at_one_activation_beside_fractional_state():
    """Llama 3 8B, d = 40 with a distributed optimizer (its state a fractional byte count), p = 4:
    a limit of exactly the last stage's state and one activation. The greedy subtracted the state
    rounded up to whole bytes, 0.2 bytes short of the activation, and returned no schedule."""
    from dataclasses import replace

    from ppopt.job import Parallelism
    from ppopt.solve.instance import InstanceSpec

    where = placement("linear", 4)
    spec = InstanceSpec(4, 8, model="llama3-8b", system="dgx-h100", global_batch=320,
                        parallel=Parallelism(dp=40, distributed_optimizer=True))
    last = spec.instance(4, placement=where).costs.stages[3]
    assert last.persistent_bytes != round(last.persistent_bytes)
    instance = replace(spec, memory_limit=last.persistent_bytes + last.activation_bytes).instance(4, placement=where)
    for build in (greedy_schedule, best_greedy_schedule):
        schedule = build(instance, where, False)
        assert schedule is not None
        assert max(simulate(validate(schedule), instance.costs, instance.system).peak_memory_bytes) <= instance.room([]) + 1e-9
