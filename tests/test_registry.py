"""The registry is the single source of truth: every entry through every command, and closed forms
outside their range shown as "n/a (reason)" and never ranked."""

import json

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ppopt.cli import main
from ppopt.errors import ScheduleError
from ppopt.evaluate import evaluate, evaluate_all, rank_layers
from ppopt.generators import REGISTRY, ClosedForms, Family, generate
from ppopt.io.torch_csv import read_torch_csv
from ppopt.ir import parse_action
from ppopt.report.evaluation import compare_json, evaluation_text
from ppopt.solve.gap import family_space
from ppopt.solve.space import handcrafted_in, placement_of
from ppopt.table import build_table
from ppopt.units import UnitCosts

# a small instance every family accepts: p even (chimera), m a multiple of p, m >= 2p - 1 (zb-v's forms)
P, M = 2, 4
UNIT = ["-p", P, "-m", M, "--unit", "--time-limit", "10", "-q"]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module", params=list(REGISTRY))
def family(request) -> Family:
    return REGISTRY[request.param]


def test_entry_is_complete(family):
    schedule = generate(family.name, P, M)
    assert schedule.name == family.name
    assert family.ops(P, M, {}) == sum(len(order) for order in schedule.orders)
    assert (family.closed_forms is None) != (not family.no_closed_forms)
    # the family's own schedule is a point of its relaxed space: same placement, same backward kind
    space = family_space(family.name, {})
    assert placement_of(space, P) == schedule.placement
    assert space.split_backward == schedule.split_backward
    # PyTorch's CSV holds one rank per stage: exactly the families without replicas export
    assert family.torch == all(len(set(holders)) == 1 for holders in schedule.placement)


def test_table_and_evaluate(family):
    table = run("table", "-s", family.name, "-p", P, "-m", M, "--json")
    assert table.exit_code == 0, table.output
    data = json.loads(table.stdout)
    assert data["schedule"] == family.name
    schedule = generate(family.name, P, M)
    # the table lists the generator's ops in its order, each device's row, and every op lasts its
    # kind's unit duration (F = 1, B = 2, I = W = 1 slot of a 1/p share, so a chunk op is scaled by p/S)
    assert [[cell["op"] for cell in row] for row in data["ops"]] == [[str(op) for op in order] for order in schedule.orders]
    scale = P / schedule.stages
    assert data["durations"] == {"F": scale, "B": 2 * scale, "I": scale, "W": scale}
    assert all(cell["end"] - cell["start"] == data["durations"][parse_action(cell["op"]).kind.value]
               for row in data["ops"] for cell in row)
    assert data["length"] == max(cell["end"] for row in data["ops"] for cell in row)
    result = run("evaluate", "-s", family.name, "-p", P, "-m", M, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["table"]["length"] == json.loads(table.stdout)["length"]
    assert (data["formula"] is None) == (family.closed_forms is None)
    # the weights each device holds, counted from the placement: the closed forms' count where the
    # family has forms (the evaluate table showed '-' for the families without)
    if data["formula"] is not None:
        assert data["table"]["weight_copies"] == data["formula"]["weight_copies"]
    replicated = any(len(holders) > 1 for holders in schedule.placement)
    assert data["table"]["weight_copies"] == [2 if replicated else 1] * P


def test_compare_ranks_every_family():
    result = run("compare", "-p", P, "-m", M, "--model", "study", "--system", "dgx-a100", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {row["schedule"] for row in rows} == set(REGISTRY)
    # competition ranking ("1, 2, 2, 4"): a family's rank is 1 + the number of families strictly
    # better, by table bubble ratio and by simulated step time
    ratios = [row["table"]["bubble_ratio"] for row in rows]
    steps = [row["simulation"]["step_time_s"] for row in rows]
    for row in rows:
        assert row["rank"]["table"] == 1 + sum(r < row["table"]["bubble_ratio"] - 1e-9 for r in ratios)
        assert row["rank"]["simulation"] == 1 + sum(s < row["simulation"]["step_time_s"] * (1 - 1e-9) for s in steps)


def test_gap_against_its_own_space(family):
    result = run("gap", *UNIT, "-s", family.name, "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["schedules"]
    assert row["schedule"] == family.name and row["space"] == family_space(family.name, {}).describe()
    # the step is the family's own table length at the default units; the space holds the family's
    # schedule, so nothing better than it need be found, and the bound is a lower bound of the space
    step = row["step_time_s"]
    assert step == build_table(generate(family.name, P, M)).length
    assert row["bound_s"] <= row["best_found_s"] <= step
    assert row["gap"] == pytest.approx(step / row["bound_s"] - 1)
    if family.name in ("1f1b", "gpipe"):
        # (m + p - 1)(F + B) = (4 + 2 - 1)(1 + 2) = 15, and no linear schedule is shorter: device p - 1
        # starts after p - 1 forwards, works m(F + B), and its last backward crosses p - 1 devices more
        assert step == row["bound_s"] == (M + P - 1) * (1 + 2) and row["status"] == "optimal"


def test_frontier_places_the_family_in_its_space(family):
    result = run("frontier", *UNIT, "--space", family.space({}), "--limits", "1000", "--json")
    assert result.exit_code == 0, result.output
    # a family mixing B and I + W per microbatch (dualpipev) enters its split space with every B split: name+split
    assert {family.name, f"{family.name}+split"} & {h["schedule"] for h in json.loads(result.stdout)["handcrafted"]}


def test_export(family, tmp_path):
    trace = tmp_path / "t.json"
    assert run("export", "-s", family.name, "-p", P, "-m", M, "-o", trace).exit_code == 0
    assert json.loads(trace.read_text())["traceEvents"]
    csv = tmp_path / "s.csv"
    result = run("export", "-s", family.name, "-p", P, "-m", M, "-o", csv)
    if not family.torch:
        assert result.exit_code == 1 and "one rank per stage" in result.stderr and not csv.exists()
        return
    assert result.exit_code == 0, result.output
    schedule = generate(family.name, P, M)
    read = read_torch_csv(csv)
    assert [sorted(map(str, o)) for o in read.orders] == [sorted(map(str, o)) for o in schedule.orders]


def test_hints_are_points_of_their_placement():
    """A family hinting a placement is tried there by search (its schedule lives in that placement)."""
    from ppopt.solve.space import parse_space

    for family in REGISTRY.values():
        for placement in family.hints:
            if placement == "any":
                continue
            names = [s.name.split("+")[0] for s in handcrafted_in(parse_space(f"placement={placement}"), P, M)]
            assert family.name in names


def test_an_entry_must_give_forms_or_the_reason():
    with pytest.raises(ValueError):
        Family("x", generate, "", lambda o: "placement=linear", None)
    with pytest.raises(ValueError):
        Family("x", generate, "", lambda o: "placement=linear", ClosedForms(lambda *a: None), no_closed_forms="why")


# ---------------------------------------------------------------------------------------------------
# Closed forms outside their range are shown as such and never ranked
# ---------------------------------------------------------------------------------------------------


def test_zb_v_outside_its_range_at_p_m_8():
    """ZB-V's forms (length 6m + p - 1, peak 2p: Qi et al. 2024) need m >= 2p - 1 for the peaks; at
    p = m = 8 the extrapolated length 55 chunk slots (27.5 slots of a 1/p share) is below the table's
    62 (31) and must not rank ZB-V first."""
    e = evaluate("zb-v", 8, 8)
    assert e.formula is not None and e.formula.outside == "m < 2p - 1" and e.formula.length == 27.5
    assert e.table.length == 31
    text = evaluation_text([e], UnitCosts())
    assert "n/a (m < 2p - 1)" in text and "27.5" not in text
    results, _ = evaluate_all(8, 8)
    ranking = rank_layers(results)
    assert "zb-v" not in ranking.formula
    assert next(r for r in compare_json(results, ranking, UnitCosts()) if r["schedule"] == "zb-v")["rank"]["formula"] is None


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 6), m=st.integers(1, 14))
def test_formula_layer_ranks_only_values_inside_their_range(p, m):
    units = UnitCosts()
    results, _ = evaluate_all(p, m, units)
    ranking = rank_layers(results)
    text = evaluation_text(results, units)
    for r in results:
        f = r.formula
        forms = REGISTRY[r.schedule].closed_forms
        if f is None or not f.valid:
            assert r.schedule not in ranking.formula
            if f is not None:
                assert f"n/a ({f.outside})" in next(line for line in text.splitlines() if line.startswith(r.schedule + " "))
            continue
        assert r.schedule in ranking.formula
        if forms is not None and forms.table_exact:  # inside the range the table agrees with the forms
            assert f.length == pytest.approx(r.table.length)
            assert f.bubble_ratio == pytest.approx(r.table.bubble_ratio)
            assert tuple(f.peak_activations) == tuple(r.table.peak_activations)


def test_unknown_family_still_refused():
    with pytest.raises(ScheduleError, match="unknown schedule"):
        generate("nope", 2, 2)


@pytest.mark.parametrize("name, step", [
    # v = 2 chunks, F = 1/2 and B = 1 per chunk op (slots of a 1/p share): device 1 starts after one
    # chunk forward (0.5), works 2·4·1.5 = 12, and device 0's last chunk backward follows (1): 13.5
    ("looped-bfs", 13.5),
    # F = I = W = 1: device 1 starts at 1 and works 3·4 = 12 slots: 13
    ("zb-h2", 13),
])
def test_new_families_are_proven_optimal_in_their_space(name, step):
    result = run("gap", "-p", 2, "-m", 4, "--unit", "--time-limit", "10", "-q", "-s", name, "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["schedules"]
    assert row["status"] == "optimal"
    assert row["step_time_s"] == row["bound_s"] == step and row["gap"] == 0


@pytest.mark.parametrize("name, limit, step", [
    # every device works 2 chunks x 4 microbatches x (F + I + W) = 2·4·1.5 = 12 slots and device 1
    # waits for one chunk forward (0.5): no schedule of the V space is under 12.5, and one meets it
    # even under the V schedules' own peak of 2 live activations (4 chunks) per device
    ("dualpipev", None, 12.5),  # PyTorch's order meets the bound
    ("v-min", 2, 13.5),  # the building block's warm-up and cool-down leave one slot: 8 %
    ("v-half", 2, 14.5),  # two slots (the unreordered warm-up and cool-down): 16 %
])
def test_v_families_against_the_proven_bound_of_their_space(name, limit, step):
    memory = [] if limit is None else ["--memory-limit", limit]
    result = run("gap", "-p", 2, "-m", 4, "--unit", "--time-limit", "10", "-q", "-s", name, *memory, "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["schedules"]
    assert row["status"] == "optimal" and row["bound_s"] == 12.5
    assert row["step_time_s"] == step and row["gap"] == pytest.approx(step / 12.5 - 1)


def test_evaluate_leaves_no_reference_cycle(family):
    """The flat form validated() keeps with a schedule has no way back to it: when it had, the cycle kept
    every op of every schedule `evaluate -s all` had seen in memory until a full garbage collection
    (2 GB at 64 x 2,048). With the collector off, nothing is left for it."""
    import gc

    from ppopt.validation import validated

    gc.collect()
    gc.disable()
    try:
        evaluate(family.name, P, M)
        left = gc.collect()
        schedule = generate(family.name, P, M)
        first, again = validated(schedule), validated(schedule)
        assert again.schedule is schedule and again.order is first.order  # kept: not flattened twice
        del schedule, first, again
        left_by_validated = gc.collect()
    finally:
        gc.enable()
    assert left == 0 and left_by_validated == 0


@pytest.mark.parametrize("family", list(REGISTRY))
@pytest.mark.parametrize("field, devices, microbatches", [
    ("devices", 0, 4), ("microbatches", 4, -2), ("devices", True, 4), ("devices", 4.0, 4), ("devices", "4", 4),
    ("microbatches", 4, True), ("microbatches", 4, 8.0),
])
def test_every_generator_checks_p_and_m_as_it_checks_its_options(family, field, devices, microbatches):
    """--chunks and --waves refuse True and 1.5 ("must be an integer >= 1"); p and m were only
    compared with 1, so generate('1f1b', True, 4) built a schedule, 4.0 devices a TypeError
    traceback (or, for dualpipev, 'the minimum is m = 8.0'), and '4' a TypeError."""
    value = devices if field == "devices" else microbatches
    with pytest.raises(ScheduleError) as raised:
        generate(family, devices, microbatches)
    assert (raised.value.field, raised.value.reason) == (field, f"must be an integer >= 1, got {value!r}")


def test_numpy_counts_are_still_taken():
    import numpy as np

    assert generate("1f1b", np.int64(2), np.int64(3)).devices == 2


@pytest.mark.parametrize("name", [n for n, f in REGISTRY.items() if f.closed_forms is not None and not f.closed_forms.table_exact])
def test_a_family_said_to_differ_from_its_closed_forms_does_somewhere_inside_their_range(name):
    """``ppopt list`` says where the table differs from the forms; the first point of a small grid
    where they differ (inside the range, family's rules met) shows it is said for a reason, and the
    direction ("longer", "shorter") is the one said."""
    forms = REGISTRY[name].closed_forms
    differing = []
    for p in (2, 4, 6):
        for m in (p, 2 * p, 3 * p):
            for backward in (1.0, 2.0):
                try:
                    e = evaluate(name, p, m, UnitCosts(backward=backward))
                except ScheduleError:
                    continue  # outside the family's rules (e.g. dualpipe's m >= 2p)
                if e.formula is not None and e.formula.valid and e.formula.length != e.table.length:
                    differing.append(e.table.length - e.formula.length)
    assert differing
    said = forms.table_differs
    assert all(d > 0 for d in differing) if "longer" in said else all(d < 0 for d in differing)
    row = next(line for line in run("list").output.splitlines() if line.startswith(name + " "))
    assert f"table {said}" in row


def test_families_whose_table_equals_their_closed_forms_carry_no_table_note():
    rows = run("list").output.splitlines()
    for name, family in REGISTRY.items():
        if family.closed_forms is not None and family.closed_forms.table_exact:
            row = next(line for line in rows if line.startswith(name + " "))
            assert f"{family.closed_forms.holds}  " in row and f"{family.closed_forms.holds}; table" not in row
    data = json.loads(run("list", "--json").stdout)
    assert {d["schedule"] for d in data if d["table_differs"]} == {n for n, f in REGISTRY.items() if f.closed_forms and not f.closed_forms.table_exact}


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(list(REGISTRY)), p=st.integers(1, 6), m=st.integers(1, 14), chunks=st.integers(1, 3),
       waves=st.integers(1, 3), split=st.sampled_from(["1:2", "1:1", "2:3"]))
def test_the_registry_counts_every_schedule_s_ops_before_it_is_built(name, p, m, chunks, waves, split):
    """Size limits are checked from ``Family.ops`` before a schedule is built (generate refuses an
    oversized one up front): the count must be the built schedule's, for every family and size it
    accepts."""
    options = {"chunks": chunks, "waves": waves, "split": split}
    try:
        schedule = generate(name, p, m, **options)
    except ScheduleError:
        return  # outside the family's rules: nothing built, nothing to count
    assert REGISTRY[name].ops(p, m, REGISTRY[name].taken(options)) == schedule.op_count == len(list(schedule.ops()))


@settings(max_examples=40, deadline=None)
@example(name="dualpipe", p=4, m=8, scale=2, weight=None)
@given(name=st.sampled_from([n for n, f in REGISTRY.items() if f.closed_forms is not None]), p=st.integers(2, 8),
       m=st.integers(1, 24), scale=st.sampled_from([2, 3, 0.5]), weight=st.sampled_from([None, 0.5, 1.0]))
def test_closed_forms_scale_with_the_slot(name, p, m, scale, weight):
    """Every op k times as long makes every closed-form length k times as long, with the same bubble
    ratio and peaks: the forms take B and W in units of F. (DualPipe's W was not divided by F: at
    p = 4, m = 8, F = 2, B = 4 its length read 46 instead of 52, its bubble -0.043.)"""
    from ppopt.formula import formula

    base = UnitCosts(1.0, 2.0, weight, 0.0)
    scaled = UnitCosts(scale, 2.0 * scale, None if weight is None else weight * scale, 0.0)
    try:
        one = formula(name, p, m, base)
    except ScheduleError:  # a size the family does not take (Chimera's odd p)
        return
    other = formula(name, p, m, scaled)
    assert other.length == pytest.approx(scale * one.length, rel=1e-9)
    assert other.bubble_ratio == pytest.approx(one.bubble_ratio, rel=1e-9, abs=1e-12)
    assert other.peak_activations == one.peak_activations
