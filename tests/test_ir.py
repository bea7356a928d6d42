import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ppopt.errors import ScheduleError
from ppopt.generators import generate, names
from ppopt.ir import Kind, Op, dependencies, parse_action


@given(st.integers(0, 999), st.sampled_from(list(Kind)), st.integers(0, 9999))
def test_action_string_round_trips(stage, kind, microbatch):
    op = Op(stage, kind, microbatch)
    assert parse_action(str(op)) == op


def test_action_string_is_pytorch_form():
    assert str(Op(3, Kind.F, 12)) == "3F12"
    assert str(Op(7, Kind.W, 0)) == "7W0"


@pytest.mark.parametrize("text", ["", "F3", "3X1", "3F", "-1F2", "3SEND_F1"])
def test_parse_rejects_non_compute_actions(text):
    with pytest.raises(ScheduleError, match="not a compute action"):
        parse_action(text)


def test_dependencies_follow_the_pipeline():
    assert dependencies(Op(0, Kind.F, 2), 4, False) == ()
    assert dependencies(Op(2, Kind.F, 2), 4, False) == (Op(1, Kind.F, 2),)
    assert dependencies(Op(3, Kind.B, 2), 4, False) == (Op(3, Kind.F, 2),)
    assert dependencies(Op(1, Kind.B, 2), 4, False) == (Op(1, Kind.F, 2), Op(2, Kind.B, 2))
    assert dependencies(Op(1, Kind.I, 2), 4, True) == (Op(1, Kind.F, 2), Op(2, Kind.I, 2))
    assert dependencies(Op(1, Kind.W, 2), 4, True) == (Op(1, Kind.I, 2),)


@pytest.mark.parametrize("name", names())
def test_stages_by_device_is_stages_on_of_every_device(name):
    checked = 0
    for devices, microbatches in ((2, 4), (4, 8), (8, 8)):
        try:
            schedule = generate(name, devices, microbatches)
        except ScheduleError:
            continue  # the family needs other sizes (dualpipe and dualpipev: m >= 2p)
        assert schedule.stages_by_device() == tuple(schedule.stages_on(d) for d in range(devices))
        checked += 1
    assert checked >= 2  # every family is defined at (2, 4) and (4, 8)


@pytest.mark.parametrize("mend, said", [
    (lambda s: dict(orders=[[Op(o.stage, o.kind, 1.9 if o.microbatch else 0) for o in r] for r in s.orders]), "op 0F1 is missing"),
    (lambda s: dict(orders=[[Op(o.stage, str(o.kind), o.microbatch) for o in r] for r in s.orders]), "is not an op"),
    (lambda s: dict(orders=[[Op(o.stage, None, o.microbatch) for o in r] for r in s.orders]), "is not an op"),
    (lambda s: dict(devices="2"), "devices and microbatches must be integers, got '2' and 2"),
    (lambda s: dict(devices=2.0), "devices and microbatches must be integers, got 2.0 and 2"),
    (lambda s: dict(placement=((0,), ("1",))), "the placement names a device that is not an integer"),
])
def test_ops_and_sizes_of_other_types_are_refused(mend, said):
    """A microbatch of 1.9 passed as 1 (the flat arrays truncate it), a kind given as the string
    'I' as Kind.I, and the torch CSV writer then failed or wrote cells it cannot read; devices as
    '2' failed with a TypeError deep in the checks. Each is now a one-line validation error."""
    from dataclasses import replace

    from ppopt.validation import ScheduleValidationError, validate

    base = generate("1f1b", 2, 2)
    with pytest.raises(ScheduleValidationError, match=re.escape(said)):
        validate(replace(base, **mend(base)))


def test_schedules_hash_and_their_options_cannot_change():
    """A frozen schedule held its options in a plain dict: hash() failed (a set of schedules could
    not be built) and `schedule.options["chunks"] = 99` changed what it reported."""
    import copy
    import json
    import pickle

    one, two = generate("interleaved-1f1b", 4, 8, chunks=2), generate("interleaved-1f1b", 4, 8, chunks=2)
    assert one == two and hash(one) == hash(two) and len({one, two}) == 1
    assert hash(one) != hash(generate("interleaved-1f1b", 4, 8, chunks=4))
    with pytest.raises(TypeError, match="options cannot be changed"):
        one.options["chunks"] = 99
    assert one.options == {"chunks": 2} and json.dumps(one.options) == '{"chunks": 2}'
    assert pickle.loads(pickle.dumps(one)) == one and hash(copy.deepcopy(one)) == hash(one)


@pytest.mark.parametrize("given, field", [(dict(placement=(0, 1)), "placement"), (dict(orders=None), "orders"),
                                          (dict(overlapped=(1,)), "overlapped"), (dict(options=5), "options"),
                                          (dict(stage_weights=5), "stage_weights"), (dict(stage_weights="ab"), "stage_weights"),
                                          (dict(stage_weights=(1.0,)), "stage_weights"),
                                          (dict(stage_weights=(1.0, float("nan"))), "stage_weights")])
def test_a_schedule_of_fields_that_are_not_sequences_is_refused_naming_the_field(given, field):
    """A placement of (0, 1) or orders of None raised TypeError: 'int' object is not iterable; stage
    weights "ab" passed validation and failed in the cost model with a ValueError."""
    from ppopt.ir import Schedule

    base = generate("1f1b", 2, 2)
    args = dict(name="x", devices=2, microbatches=2, placement=base.placement, orders=base.orders) | given
    with pytest.raises(ScheduleError) as raised:
        Schedule(**args)
    assert raised.value.field == field


def test_numpy_counts_build_a_schedule_of_python_ints():
    """generate took numpy's integers (p and m from an array) and kept them in the schedule, which
    validation then refused: "devices and microbatches must be integers, got np.int64(4)"."""
    import numpy as np

    from ppopt.validation import validate

    schedule = generate("1f1b", np.int64(4), np.int64(8))
    assert type(schedule.devices) is int and type(schedule.microbatches) is int
    assert validate(schedule) == generate("1f1b", 4, 8)
