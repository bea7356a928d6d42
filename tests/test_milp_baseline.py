"""The MILP baseline (benchmarks/milp_baseline.py) and CP-SAT solve the same integer problem.

On small unit-mode instances both prove optimality and agree on the optimum. In unit mode ticks
are exact and latency does not hold a link, so CP-SAT's step time is its optimum in ticks (also when
a hint that meets the analytic bound makes the solve unnecessary).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("highspy")

from ppopt.solve.instance import InstanceSpec  # noqa: E402
from ppopt.solve.options import SolveOptions  # noqa: E402
from ppopt.solve.search import search  # noqa: E402
from ppopt.solve.space import parse_space, stage_count  # noqa: E402
from ppopt.units import UnitCosts  # noqa: E402

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "milp_baseline.py"
_SPEC = importlib.util.spec_from_file_location("milp_baseline", _PATH)
milp_baseline = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("milp_baseline", milp_baseline)
_SPEC.loader.exec_module(milp_baseline)

CASES = [
    # spec, p, m, comm, cap
    ("placement=linear", 2, 2, 0.0, None),
    ("placement=linear", 3, 4, 0.0, None),
    ("placement=linear", 3, 4, 1.0, None),
    ("placement=linear", 3, 4, 0.0, 2),
    ("placement=linear", 3, 4, 1.0, 2),
    ("placement=linear", 2, 4, 1.0, 1),
    ("placement=linear,backward=split", 3, 3, 0.0, 3),
    ("placement=linear,backward=split", 3, 4, 1.0, 2),
    ("placement=linear,backward=split", 2, 4, 0.0, None),
    ("placement=looped", 2, 4, 1.0, None),
    ("placement=v", 2, 3, 1.0, None),
]


@pytest.mark.parametrize("spec, p, m, comm, cap", CASES)
def test_milp_optimum_equals_cp_sat_optimum(spec, p, m, comm, cap):
    space = parse_space(spec)
    weight = 1.0 if space.split_backward else None
    spec = InstanceSpec(p, m, UnitCosts(1.0, 2.0, weight, comm), memory_limit=cap)
    cp = search(spec, space, SolveOptions(10, workers=1, seed=0, deterministic_time=5.0))
    milp = milp_baseline.milp_solve(spec.instance(stage_count(space, p)), space, time_limit_s=10)
    assert cp.status == "optimal"
    assert milp["status"] == "optimal"
    assert milp["objective"] == pytest.approx(cp.step_time)
    if cp.solver_objective is not None:
        assert cp.solver_objective == pytest.approx(cp.step_time)
    assert milp["bound"] == pytest.approx(milp["objective"])


def test_milp_without_hint_reaches_the_same_optimum():
    space = parse_space("placement=linear")
    factory = InstanceSpec(3, 4, UnitCosts(comm=1.0), memory_limit=3).instance
    with_hint = milp_baseline.milp_solve(factory(3, None), space, 10)
    without = milp_baseline.milp_solve(factory(3, None), space, 10, hint=False)
    assert with_hint["hint_makespan"] is not None and without["hint_makespan"] is None
    assert without["status"] == with_hint["status"] == "optimal"
    assert without["objective"] == with_hint["objective"]


def test_cap_on_a_multi_stage_device_is_refused():
    space = parse_space("placement=v")
    factory = InstanceSpec(2, 3, UnitCosts(), memory_limit=3).instance
    with pytest.raises(NotImplementedError, match="cumulative"):
        milp_baseline.milp_solve(factory(4, None), space, 5)


def test_cap_below_one_activation_is_infeasible():
    space = parse_space("placement=linear")
    factory = InstanceSpec(2, 3, UnitCosts(), memory_limit=0.5).instance
    assert milp_baseline.milp_solve(factory(2, None), space, 5)["status"] == "infeasible"
