"""One placement function per style, shared by the generators and the solver's spaces."""

import pytest

from ppopt.errors import ScheduleError
from ppopt.generators import generate
from ppopt.placement import STYLES, placement
from ppopt.solve.space import parse_space, placement_of

GENERATED = [  # (style, options, the schedule built on it)
    ("linear", {}, "1f1b"),
    ("linear", {}, "zb-h1"),
    ("looped", {"chunks": 3}, "interleaved-1f1b"),
    ("v", {}, "zb-v"),
    ("zigzag", {"waves": 2}, "hanayo"),
    ("bidirectional", {}, "chimera"),
]


@pytest.mark.parametrize("style, options, name", GENERATED)
def test_generators_and_spaces_use_the_style_placement(style, options, name):
    p = 4
    expected = placement(style, p, **options)
    assert generate(name, p, 2 * p, **options).placement == expected
    spec = ",".join([f"placement={style}", *(f"{k}={v}" for k, v in options.items())])
    assert placement_of(parse_space(spec), p) == expected


def test_every_style_places_each_stage_on_valid_devices():
    for style in STYLES:
        for holders in placement(style, 4, chunks=2, waves=2):
            assert holders and all(0 <= d < 4 for d in holders)


def test_v_and_bidirectional_by_hand():
    assert placement("v", 3) == ((0,), (1,), (2,), (2,), (1,), (0,))
    assert placement("bidirectional", 4) == ((0, 3), (1, 2), (2, 1), (3, 0))


@pytest.mark.parametrize("style, p, field", [("bidirectional", 3, "devices"), ("diagonal", 4, "placement")])
def test_bad_placements_name_their_field(style, p, field):
    with pytest.raises(ScheduleError) as error:
        placement(style, p)
    assert error.value.field == field
