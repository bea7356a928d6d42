"""The validator accepts every generator's output and rejects broken tables with a readable message."""

import dataclasses

import pytest

from ppopt.errors import ScheduleError
from ppopt.generators import generate, names
from ppopt.ir import Kind, Op
from ppopt.validation import ScheduleValidationError, validate


def _replace_order(schedule, device, order):
    orders = list(schedule.orders)
    orders[device] = tuple(order)
    return dataclasses.replace(schedule, orders=tuple(orders))


def outside_rules(name: str, devices: int, microbatches: int) -> bool:
    """True when (p, m) breaks a rule the registry states for family ``name`` with its default
    options (``ppopt list``'s rules column): the only sizes its generator may refuse."""
    p, m = devices, microbatches
    rules = {
        "interleaved-1f1b": m % p != 0,  # m a multiple of p when v >= 2 (the default v is 2)
        "chimera": p % 2 != 0 or m % p != 0,  # p even, m a multiple of p
        "chimera-asym": p % 2 != 0 or m % p != 0,
        "zb-h1": m < p,
        "zb-v": m < p,
        "dualpipev": m < 2 * p,
        "dualpipe": p % 2 != 0 or m % 2 != 0 or m < 2 * p,  # p even, m even, m >= 2p
    }
    return rules.get(name, False)  # the other families are defined at any p, m >= 1


@pytest.mark.parametrize("name", names())
def test_every_generator_output_validates(name):
    checked = 0
    for devices in range(1, 9):
        for microbatches in range(1, 4 * devices + 1):
            if outside_rules(name, devices, microbatches):
                with pytest.raises(ScheduleError):  # refused by the generator, with a reason
                    generate(name, devices, microbatches)
                continue
            schedule = generate(name, devices, microbatches)  # a size within the rules is never refused
            assert validate(schedule) is schedule
            checked += 1
    # the fewest sizes are Chimera's (p even, m a multiple of p): m = p, 2p, 3p, 4p for p = 2, 4, 6, 8,
    # 16 sizes; DualPipe's leave the p + 1 even m in [2p, 4p], 3 + 5 + 7 + 9 = 24; the others more
    assert checked >= 16


def test_missing_op_is_named():
    schedule = generate("1f1b", 4, 4)
    broken = _replace_order(schedule, 2, [op for op in schedule.orders[2] if op != Op(2, Kind.B, 1)])
    with pytest.raises(ScheduleValidationError, match="op 2B1 is missing"):
        validate(broken)


def test_duplicate_op_is_marked_in_the_grid():
    schedule = generate("gpipe", 2, 2)
    broken = _replace_order(schedule, 0, schedule.orders[0] + (Op(0, Kind.F, 0),))
    with pytest.raises(ScheduleValidationError) as error:
        validate(broken)
    assert "op 0F0 appears 2 times" in str(error.value)
    assert ">0F0<" in error.value.details
    assert "\n" not in str(error.value)


def test_a_repeated_op_is_marked_at_its_first_repeat():
    """Three copies of 0F0: the mark is on the second (the cell a file reader's message names), not
    on the last."""
    schedule = generate("gpipe", 2, 2)
    extra = (Op(0, Kind.F, 0),) * 2
    broken = _replace_order(schedule, 0, schedule.orders[0][:1] + extra + schedule.orders[0][1:])
    with pytest.raises(ScheduleValidationError) as error:
        validate(broken)
    assert "op 0F0 appears 3 times" in str(error.value)
    marked = error.value.details.splitlines()[0].split()
    assert marked[2:5] == ["0F0", ">0F0<", "0F0"]


def test_the_grid_shows_nine_devices_around_the_fault():
    """At 64 devices the grid after the error line was 64 lines: now the marked device, four on
    each side and a count of the others."""
    schedule = generate("1f1b", 64, 4)
    order = schedule.orders[30]
    broken = _replace_order(schedule, 30, (order[-1],) + order[:-1])  # 30B3 first
    with pytest.raises(ScheduleValidationError, match="op 30B3 runs before its dependency 30F3") as error:
        validate(broken)
    rows = error.value.details.splitlines()
    assert [row.split(":")[0] for row in rows[:-1]] == [f"device {d}" for d in range(26, 35)]
    assert ">30B3<" in rows[4] and rows[-1] == "(55 more devices not shown)"
    # a missing op marks no cell: the grid is centred on the device it belongs on
    order = schedule.orders[40]
    with pytest.raises(ScheduleValidationError, match="op 40B3 is missing") as error:
        validate(_replace_order(schedule, 40, order[:-1]))
    assert [row.split(":")[0] for row in error.value.details.splitlines()[:-1]] == [f"device {d}" for d in range(36, 45)]


def test_op_on_wrong_device_is_rejected():
    schedule = generate("gpipe", 2, 1)
    broken = dataclasses.replace(schedule, orders=(schedule.orders[0] + (Op(1, Kind.F, 0),), schedule.orders[1][1:]))
    with pytest.raises(ScheduleValidationError, match="op 1F0 is on device 0, but its placement says device 1"):
        validate(broken)


def test_backward_before_forward_on_same_device_is_rejected():
    schedule = generate("1f1b", 2, 2)
    order = list(schedule.orders[1])
    order[0], order[1] = order[1], order[0]  # 1B0 before 1F0
    with pytest.raises(ScheduleValidationError, match="op 1B0 runs before its dependency 1F0 on device 1"):
        validate(_replace_order(schedule, 1, order))


def test_cross_device_deadlock_names_the_waits():
    schedule = generate("gpipe", 2, 2)
    # device 0: 0B0 waits for 1B0, behind 1F1 on device 1, which waits for 0F1, behind 0B0.
    first = _replace_order(schedule, 0, [Op(0, Kind.F, 0), Op(0, Kind.B, 0), Op(0, Kind.F, 1), Op(0, Kind.B, 1)])
    broken = _replace_order(first, 1, [Op(1, Kind.F, 1), Op(1, Kind.F, 0), Op(1, Kind.B, 0), Op(1, Kind.B, 1)])
    with pytest.raises(ScheduleValidationError) as error:
        validate(broken)
    message = str(error.value)
    assert message.startswith("deadlock:")
    assert "device 0 waits at 0B0 for 1B0" in message and "device 1 waits at 1F1 for 0F1" in message


def test_backward_both_full_and_split_is_rejected():
    # The backward kind is per (stage, microbatch): stage 1 split and stage 0 full is valid, but one
    # stage and microbatch holding B and I, W (or a W without its I) is not.
    schedule = generate("1f1b", 2, 1)
    validate(_replace_order(schedule, 1, [Op(1, Kind.F, 0), Op(1, Kind.I, 0), Op(1, Kind.W, 0)]))
    both = [Op(1, Kind.F, 0), Op(1, Kind.B, 0), Op(1, Kind.I, 0), Op(1, Kind.W, 0)]
    with pytest.raises(ScheduleValidationError, match="full backward, but stage 1 also splits microbatch 0"):
        validate(_replace_order(schedule, 1, both))
    with pytest.raises(ScheduleValidationError, match="1W0 is a weight-gradient W, but stage 1 has no I"):
        validate(_replace_order(schedule, 1, [Op(1, Kind.F, 0), Op(1, Kind.B, 0), Op(1, Kind.W, 0)]))


def test_placement_outside_devices_is_rejected():
    schedule = generate("gpipe", 2, 1)
    broken = dataclasses.replace(schedule, placement=((0,), (5,)))
    with pytest.raises(ScheduleValidationError, match="stage 1 is placed on device 5"):
        validate(broken)


def test_weight_gradient_without_split_backward_is_rejected():
    schedule = generate("1f1b", 2, 1)
    broken = _replace_order(schedule, 1, schedule.orders[1] + (Op(1, Kind.W, 0),))
    with pytest.raises(ScheduleValidationError, match="op 1W0 is a weight-gradient W"):
        validate(broken)


def test_indices_one_past_the_end_are_rejected():
    """The first index outside each range (device p, replica R, stage S, a replica_of list one short)
    is named, not let through to a later check or a crash."""
    schedule = generate("gpipe", 2, 1)
    with pytest.raises(ScheduleValidationError, match="stage 1 is placed on device 2, outside 0..1"):
        validate(dataclasses.replace(schedule, placement=((0,), (2,))))
    with pytest.raises(ScheduleValidationError, match="op 2F0 on device 1 names a stage or microbatch outside the schedule"):
        validate(_replace_order(schedule, 1, schedule.orders[1] + (Op(2, Kind.F, 0),)))
    chimera = generate("chimera", 2, 2)  # every stage on two devices: replicas 0 and 1
    with pytest.raises(ScheduleValidationError, match="microbatch 1 belongs to replica 2, but stage 0 has 2 replicas"):
        validate(dataclasses.replace(chimera, replica_of=(0, 2)))
    with pytest.raises(ScheduleValidationError, match="replica_of has 1 entries for 2 microbatches"):
        validate(dataclasses.replace(chimera, replica_of=(0,)))


def test_a_deadlock_marks_the_first_device_that_waits():
    """Both devices wait (0B0 for 1B0, 1F1 for 0F1): the grid's marker is on device 0's 0B0, the
    first stuck op read device by device, as the message lists them."""
    schedule = generate("gpipe", 2, 2)
    first = _replace_order(schedule, 0, [Op(0, Kind.F, 0), Op(0, Kind.B, 0), Op(0, Kind.F, 1), Op(0, Kind.B, 1)])
    broken = _replace_order(first, 1, [Op(1, Kind.F, 1), Op(1, Kind.F, 0), Op(1, Kind.B, 0), Op(1, Kind.B, 1)])
    with pytest.raises(ScheduleValidationError) as error:
        validate(broken)
    rows = error.value.details.splitlines()
    assert ">0B0<" in rows[0] and "<" not in rows[1]
