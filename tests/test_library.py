"""ppopt from Python: the package's names, evaluation of built schedules, preset names where configs
go, short representations, and the README's example run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import ppopt
from ppopt.config import load_model, load_system
from ppopt.errors import ConfigError, ScheduleError
from ppopt.evaluate import evaluate, evaluate_schedule, table_of
from ppopt.formula import formula
from ppopt.generators import generate, names
from ppopt.io.torch_csv import read_torch_csv, write_torch_csv
from ppopt.ir import Kind, Op
from ppopt.job import Job, evaluate_job
from ppopt.solve.options import SolveOptions
from ppopt.solve.space import parse_space
from ppopt.units import UnitCosts

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_names_stay_functions_after_their_modules_are_imported():
    """A submodule named like an exported function would replace it on the package once imported
    (``ppopt.validate`` became the module after the first evaluation)."""
    import ppopt.evaluate  # noqa: F401  (imports the validator's module)
    import ppopt.generators  # noqa: F401

    schedule = ppopt.generate("1f1b", 4, 8)
    assert ppopt.validate(schedule) is schedule
    assert ppopt.validate(schedule) is schedule  # and again
    assert set(ppopt.__all__) <= set(dir(ppopt))


def test_a_built_schedule_gets_the_closed_form_of_its_own_options():
    """interleaved-1f1b with v = 4 at p = 4, m = 8: 26.25 slots, Narayanan et al.'s (p - 1)(F + B)/v
    bubble over m(F + B): 8 x 3 + 3 x 3 / 4 = 26.25 (the default v = 2 gives 28.5)."""
    schedule = ppopt.generate("interleaved-1f1b", 4, 8, chunks=4)
    result = evaluate_schedule(schedule, with_formula=True)
    assert result.formula is not None and result.formula.length == result.table.length == 8 * 3 + 3 * 3 / 4
    assert result.formula == formula("interleaved-1f1b", 4, 8, chunks=4)
    assert evaluate_schedule(schedule).formula is None  # not asked: a file's or a search's schedule has none
    renamed = ppopt.Schedule("my-own", schedule.devices, schedule.microbatches, schedule.placement, schedule.orders)
    assert evaluate_schedule(renamed).table.length == 26.25  # no family of that name: no error without a formula


def test_a_closed_form_is_refused_for_a_schedule_its_family_did_not_build():
    """A ZB-V written to 1f1b.csv, interleaved-1f1b with v = 4 read back (its options lost) and a
    search's result would get another schedule's forms (1F1B's 33 slots beside ZB-V's 25.5; v = 2's
    28.5 beside 26.25): refused, naming the field; the generated schedules still get theirs."""
    zb_v, interleaved = ppopt.generate("zb-v", 4, 8), ppopt.generate("interleaved-1f1b", 4, 8, chunks=4)
    zb_h1 = ppopt.generate("zb-h1", 4, 8)  # 1F1B's placement, its backward split: more ops
    for name, built in (("1f1b", zb_v), ("interleaved-1f1b", interleaved), ("search", zb_v), ("1f1b", zb_h1)):
        read_back = ppopt.Schedule(name, built.devices, built.microbatches, built.placement, built.orders)
        with pytest.raises(ScheduleError, match="with_formula") as raised:
            evaluate_schedule(read_back, with_formula=True)
        assert raised.value.field == "with_formula"
        assert evaluate_schedule(read_back).table.length == evaluate_schedule(built).table.length
    assert evaluate_schedule(zb_v, with_formula=True).formula.length == 25.5


def test_models_and_systems_are_taken_by_preset_name_as_by_config():
    by_name = evaluate("1f1b", 4, 8, model="llama3-8b", system="dgx-a100", global_batch=8)
    by_config = evaluate("1f1b", 4, 8, model=load_model("llama3-8b"), system=load_system("dgx-a100"), global_batch=8)
    assert by_name.simulation is not None and by_name.simulation == by_config.simulation
    named = evaluate_job(Job("llama3-70b", "dgx-h100", tp=8, pp=4, dp=2))
    assert named == evaluate_job(Job(load_model("llama3-70b"), load_system("dgx-h100"), tp=8, pp=4, dp=2))
    with pytest.raises(ConfigError, match="unknown model preset 'llama-8b'"):
        Job("llama-8b", "dgx-h100")


@pytest.mark.parametrize(("given", "field"), [({"model": "llama3-8b"}, "system"), ({"system": "dgx-a100"}, "model")])
def test_a_model_without_a_system_is_an_error_not_a_silent_table(given, field):
    with pytest.raises(ConfigError) as raised:
        evaluate("1f1b", 4, 8, **given)
    assert raised.value.field == field and raised.value.reason == "give both a model and a system, or neither"


def test_a_large_schedule_prints_as_one_short_line():
    table = table_of("1f1b", 16, 128)
    assert repr(table) == ("Table(Schedule(name='1f1b', devices=16, microbatches=128, stages=16, ops=4096), length=429, "
                           "bubble_ratio=0.1049)")  # (m + p - 1)(F + B) = 143 x 3 slots
    assert repr(ppopt.generate("hanayo", 4, 8, waves=2)) == \
        "Schedule(name='hanayo', devices=4, microbatches=8, stages=16, waves=2, ops=256)"


def test_the_readme_example_prints_what_the_readme_says(tmp_path):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Using ppopt from Python", 1)[1]
    code, output = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)[:2]
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == output
    assert (tmp_path / "found.csv").is_file()


def test_the_readme_s_plan_and_validate_example_prints_what_the_readme_says():
    """The section's second example (plan, validate, calibrate from Python), run from the
    repository as it says, for the data file's path."""
    section = (ROOT / "README.md").read_text().split("## Using ppopt from Python", 1)[1].split("\n## ", 1)[0]
    code, output = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)[2:4]
    ran = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == output


@pytest.mark.parametrize(("call", "field", "reason"), [
    (lambda: load_model(42), "model", "must be a preset name, a .toml/.json file, a ModelConfig or a mapping of its fields, got 42"),
    (lambda: load_system(None), "system", "must be a preset name, a .toml/.json file, a SystemConfig or a mapping of its fields, got None"),
])
def test_a_config_of_the_wrong_type_is_a_ppopt_error(call, field, reason):
    with pytest.raises(ConfigError) as raised:
        call()
    assert (raised.value.field, raised.value.reason) == (field, reason)


def _job(**fields):
    return Job("llama3-8b", "dgx-h100", **fields)


def _plan_request(**fields):
    from ppopt.plan import PlanRequest

    return PlanRequest("llama3-8b", "dgx-h100", gpus=2, **fields)


def _gap(**fields):
    from ppopt.solve.gap import gap_report
    from ppopt.solve.instance import InstanceSpec
    from ppopt.units import UnitCosts

    return gap_report(InstanceSpec(2, 4, UnitCosts()), **fields)


def _frontier(limits):
    from ppopt.solve.gap import frontier
    from ppopt.solve.instance import InstanceSpec
    from ppopt.units import UnitCosts

    return frontier(InstanceSpec(2, 4, UnitCosts()), "placement=linear", limits=limits)


@pytest.mark.parametrize(("call", "error", "field", "reason"), [
    # text is a true value to Python: "no" switched sequence parallelism on without a word
    (lambda: _job(tp=2, sequence_parallel="no"), ConfigError, "sequence_parallel", "must be True or False, got 'no'"),
    (lambda: _job(dp=2, distributed_optimizer=1), ConfigError, "distributed_optimizer", "must be True or False, got 1"),
    (lambda: _plan_request(overlap_gradient_sync="yes"), ConfigError, "overlap_gradient_sync", "must be True or False, got 'yes'"),
    (lambda: _plan_request(split=("16", "16")), ConfigError, "layers_per_stage",
     "must be even, balanced or counts like 7,8,8,7, got ('16', '16')"),
    # a string was read character by character: "got 1,6,,,1,6"
    (lambda: _job(pp=2, layers="16,16"), ConfigError, "layers_per_stage", "must be a tuple of counts, one per stage, got '16,16'"),
    (lambda: _plan_request(micro_batches=("2",)), ConfigError, "micro_batches", "must be positive integers, got '2'"),
    (lambda: _plan_request(schedules=[]), ConfigError, "schedules", f"must name at least one schedule (known: {', '.join(names())})"),
    (lambda: _plan_request(schedules=[None]), ConfigError, "schedules",
     f"a schedule is given by its name (known: {', '.join(names())}), got None"),
    (lambda: generate(None, 4, 8), ScheduleError, "schedule", f"a schedule is given by its name (known: {', '.join(names())}), got None"),
    # the devices were weighed against the model's layers first: TypeError
    (lambda: evaluate("1f1b", "4", 8, model="llama3-8b", system="dgx-h100"), ScheduleError, "devices", "must be an integer >= 1, got '4'"),
    (lambda: evaluate("1f1b", 4, 8, units=None), ConfigError, "units", "must be a UnitCosts, got None"),
    # a float batch was named as the micro batch it made ("micro_batch: ... got 4.0")
    (lambda: evaluate("1f1b", 4, 8, model="llama3-8b", system="dgx-h100", global_batch=32.0), ConfigError, "global_batch",
     "must be a positive integer of at most 1073741824, got 32.0"),
    (lambda: _gap(schedules=["zbv"]), ScheduleError, None,
     f"unknown schedule 'zbv' (known: {', '.join(names())}); did you mean 'zb-v'?"),
    (lambda: _gap(schedule_options={"bogus": 1}), ScheduleError, "schedule_options",
     "unknown schedule option(s): bogus (known: chunks, waves, split)"),
    (lambda: _frontier([]), ConfigError, "limits", "must hold at least one memory limit (None: the default ones)"),
    (lambda: _frontier(["x"]), ConfigError, "limits", "must be positive numbers, got 'x'"),
    (lambda: _frontier(4), ConfigError, "limits", "must be a list of memory limits (None: the default ones), got 4"),
    (lambda: load_system({"peak_flops": 1e15, "memory_bandwidth_bytes_per_s": 1e12, "memory_capacity_bytes": 8e10,
                          "intra_node": {"bandwidth_bytes_per_s": 1e11, "latency_s": 1e-6},
                          "inter_node": {"bandwidth_bytes_per_s": 1e10, "latency_s": 1e-5}, "compute_efficiency": float("nan")}),
     ConfigError, "system", "field 'compute_efficiency': must be a finite number, got nan"),
    (lambda: UnitCosts("1"), ConfigError, "forward", "must be a number of slots, got '1'"),  # a TypeError in math.isfinite
    (lambda: SolveOptions(time_limit_s="60"), ConfigError, "time_limit_s", "must be a finite number of seconds > 0, got '60'"),
    (lambda: parse_space(None), ScheduleError, "space", "must be a space's text such as 'placement=linear', got None"),
    (lambda: ppopt.validate("1f1b"), ScheduleError, None, "schedule: must be a Schedule (ppopt.generate builds one by name), got '1f1b'"),
])
def test_bad_library_arguments_are_one_line_errors_naming_the_field(call, error, field, reason):
    with pytest.raises(error) as raised:
        call()
    assert (raised.value.field, raised.value.reason) == (field, reason)


def test_the_library_takes_lists_strings_and_mappings_where_it_takes_tuples_spaces_and_configs():
    """A list of layer counts was ignored (planned as 'balanced'); a space's text and a mapping of a
    config file's fields are taken as the command line's flags and files are."""
    assert _plan_request(split=[16, 16]).split == (16, 16)
    assert _plan_request(split=[16, 16]) == _plan_request(split=(16, 16))
    assert _gap(schedules="1f1b").rows[0].schedule == "1f1b"  # one name, not its letters
    assert [point.memory_limit for point in _frontier([4, 2, 4]).points] == [2, 4]
    assert [point.memory_limit for point in _frontier(x for x in (4, 2)).points] == [2, 4]  # a generator, read once
    system = load_system("dgx-h100").model_dump() | {"memory_capacity_bytes": 40e9}
    job = Job({**load_model("llama3-8b").model_dump(), "name": "mine"}, system, pp=2)
    assert (job.model.name, job.system.name, job.system.memory_capacity_bytes) == ("mine", "dgx-h100", 40e9)
    assert load_model({"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000,
                       "seq_length": 128}).name == "custom"


def test_a_torch_csv_file_name_with_a_comma_is_read_as_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    schedule = generate("1f1b", 2, 2)
    write_torch_csv(schedule, "p2,m2.csv")
    assert read_torch_csv("p2,m2.csv").orders == schedule.orders
    assert read_torch_csv("0F0,0B0").orders == ((Op(0, Kind.F, 0), Op(0, Kind.B, 0)),)  # no such file: the text


def test_a_memory_limit_with_a_unit_is_refused_with_the_unit_the_library_takes():
    """The command line reads "60GiB"; the library takes bytes (or live activations in unit mode)."""
    from ppopt.solve.instance import InstanceSpec
    from ppopt.units import UnitCosts

    with pytest.raises(ConfigError, match=r"^memory_limit: must be a finite number > 0 \(bytes, e\.g\. 60 \* 2\*\*30\), got '60GiB'$"):
        InstanceSpec(4, 16, model="llama3-8b", system="dgx-h100", global_batch=16, memory_limit="60GiB")
    with pytest.raises(ConfigError, match=r"\(live activations\), got nan$"):
        InstanceSpec(4, 16, units=UnitCosts(), memory_limit=float("nan"))


def test_a_numpy_memory_limit_is_a_number():
    import numpy as np

    from ppopt.solve.instance import InstanceSpec
    from ppopt.units import UnitCosts

    assert InstanceSpec(4, 8, UnitCosts(), memory_limit=np.int64(4)).memory_limit == 4
    assert InstanceSpec(4, 8, UnitCosts(), memory_limit=np.float32(2.5)).memory_limit == 2.5



def test_a_plan_takes_preset_names_and_one_schedule_given_alone():
    from ppopt.plan import PlanRequest

    request = PlanRequest("llama3-8b", "dgx-h100", gpus=8, schedules="1f1b", recompute="full")
    assert request.model == load_model("llama3-8b") and request.system == load_system("dgx-h100")
    assert (request.schedules, request.recompute) == (("1f1b",), ("full",))  # not the letters 1, f, 1, b


def test_costs_and_a_calibration_take_a_system_by_name():
    from ppopt.calibrate import calibrate
    from ppopt.evaluate import schedule_costs
    from ppopt.io.measured import read_measured

    schedule = ppopt.generate("1f1b", 4, 8)
    assert schedule_costs(schedule, "llama3-8b", "dgx-a100", 8) == schedule_costs(schedule, load_model("llama3-8b"),
                                                                                   load_system("dgx-a100"), 8)
    rows, _ = read_measured(ROOT / "data" / "measured" / "vtrain-multi-node-small.csv", load_system("a100-vtrain"))
    by_name = calibrate(rows[:6], "a100-vtrain", restarts=1, iterations=40)
    assert by_name == calibrate(rows[:6], load_system("a100-vtrain"), restarts=1, iterations=40)  # deterministic, the same fit


def test_a_schedule_built_with_lists_is_the_schedule_built_with_tuples():
    """A hand-built Schedule with lists was not the same as with tuples: space_of compared its list
    placement with the linear map's tuples and fell back to the free placement."""
    from ppopt.ir import Kind, Op
    from ppopt.solve.space import space_of

    orders = [[Op(0, Kind.F, 0), Op(0, Kind.B, 0)], [Op(1, Kind.F, 0), Op(1, Kind.B, 0)]]
    listed = ppopt.Schedule("mine", 2, 1, [[0], [1]], orders)
    assert listed == ppopt.Schedule("mine", 2, 1, ((0,), (1,)), tuple(map(tuple, orders)))
    assert space_of(listed).placement == "linear"


def test_search_gap_and_units_take_what_a_notebook_gives_them():
    from ppopt.errors import ScheduleError
    from ppopt.solve.gap import gap_report
    from ppopt.solve.instance import InstanceSpec
    from ppopt.solve.options import SolveOptions
    from ppopt.solve.search import search
    from ppopt.units import UnitCosts

    spec = InstanceSpec(4, 8, UnitCosts())
    one = ppopt.generate("1f1b", 4, 8)
    found = search(spec, "placement=linear", SolveOptions(time_limit_s=10), hints=one)  # a space's text, one hint
    assert found.step_time == 33 and found.status == "optimal"  # (m + p - 1)(F + B)
    with pytest.raises(ScheduleError, match="places a stage on several devices"):  # not an empty report
        gap_report(spec, given=ppopt.generate("chimera", 4, 8))
    with pytest.raises(ConfigError, match=r"^units: must be a ppopt\.units\.UnitCosts, got '1,2'$"):
        InstanceSpec(4, 8, units="1,2")


def test_a_job_result_says_whether_it_fits_the_gpu():
    """Llama 3 70B interleaved over t8 p4 d2 with selective recomputation peaks above an H100's 80 GB."""
    big = evaluate_job(Job("llama3-70b", "dgx-h100", tp=8, pp=4, dp=2, schedule="interleaved-1f1b", recompute="selective"))
    small = evaluate_job(Job("llama3-70b", "dgx-h100", tp=8, pp=4, dp=2, recompute="full"))
    assert not big.fits_memory and big.peak_memory_bytes > 80e9
    assert small.fits_memory and small.peak_memory_bytes <= 80e9


def test_an_op_of_no_kind_is_named_as_such_not_as_a_missing_one():
    """Op(0, "X", 0) was reported as "op 0B0 is missing"."""
    from ppopt.ir import Kind, Op
    from ppopt.validation import ScheduleValidationError

    orders = [[Op(0, Kind.F, 0), Op(0, "X", 0)], [Op(1, Kind.F, 0), Op(1, Kind.B, 0)]]
    with pytest.raises(ScheduleValidationError, match=r"^Op\(stage=0, kind='X', microbatch=0\) on device 0 is not an op: "
                                                       r"build it as Op\(stage, Kind\.F\|B\|I\|W, microbatch\)"):
        ppopt.validate(ppopt.Schedule("mine", 2, 1, [[0], [1]], orders))


def test_steps_equal_but_for_float_noise_share_a_rank():
    """Sums of the same durations in another order differ in the last bits: such steps tie (within
    ppopt.evaluate.TIE), ranked "1, 1, 3"; a real difference still ranks."""
    from ppopt.evaluate import TIE, competition_ranks

    assert competition_ranks({"a": 3.0, "b": 3.0 * (1 + TIE / 10), "c": 4.0}) == {"a": 1, "b": 1, "c": 3}
    assert competition_ranks({"a": 3.0, "b": 3.0 * (1 + 10 * TIE)}) == {"a": 1, "b": 2}


def test_library_entry_points_name_an_argument_of_another_type():
    """evaluate_job(None), space_of("1f1b"), build_table(s, None), read_torch_csv(None) and
    write_torch_csv(None, f) raised AttributeError or TypeError from deep inside."""
    import io

    from ppopt.errors import PpoptError
    from ppopt.io.torch_csv import read_torch_csv, write_torch_csv
    from ppopt.job import evaluate_job
    from ppopt.solve.space import space_of
    from ppopt.table import build_table

    schedule = ppopt.generate("1f1b", 2, 2)
    for call, field in ((lambda: evaluate_job(None), "job"), (lambda: space_of("1f1b"), "schedule"),
                        (lambda: build_table(schedule, None), "units"), (lambda: read_torch_csv(3), "path_or_text"),
                        (lambda: write_torch_csv(None, io.StringIO()), "schedule")):
        with pytest.raises(PpoptError) as raised:
            call()
        assert raised.value.field == field


def test_jobs_and_solver_specs_print_their_configs_by_name():
    """A Job's repr printed every field of its model and system (1.3 kB); by name now."""
    from ppopt.job import Job
    from ppopt.solve.instance import InstanceSpec

    job = repr(Job("llama3-8b", "dgx-h100", pp=2))
    assert job.startswith("Job(model='llama3-8b', system='dgx-h100', tp=1, pp=2,") and len(job) < 400
    spec = repr(InstanceSpec(4, 8, model="llama3-8b", system="dgx-h100"))
    assert spec == ("InstanceSpec(devices=4, microbatches=8, units=None, model='llama3-8b', system='dgx-h100', "
                    "global_batch=None, memory_limit=None, parallel=None)")
