"""Table layer: closed forms of GPipe and 1F1B hold exactly, for every p and m tried."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppopt.errors import ScheduleError
from ppopt.evaluate import table_of
from ppopt.formula import formula
from ppopt.ir import Kind
from ppopt.units import UnitCosts

sizes = st.tuples(st.integers(1, 12), st.integers(1, 40))


@settings(max_examples=80, deadline=None)
@given(sizes, st.sampled_from(["gpipe", "1f1b"]), st.sampled_from([1, 2]))
def test_linear_bubble_is_exact(size, name, backward):
    p, m = size
    table = table_of(name, p, m, UnitCosts(backward=backward))
    assert table.length == (m + p - 1) * (1 + backward)
    idle = p * table.length - p * m * (1 + backward)
    assert Fraction(idle, p * table.length) == Fraction(p - 1, m + p - 1)
    assert table.bubble_ratio == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(sizes, st.sampled_from([1, 2]))
def test_peak_activations(size, backward):
    p, m = size
    units = UnitCosts(backward=backward)
    assert table_of("gpipe", p, m, units).peak_activations == (m,) * p
    assert table_of("1f1b", p, m, units).peak_activations == tuple(min(m, p - r) for r in range(p))


@settings(max_examples=40, deadline=None)
@given(sizes, st.sampled_from(["gpipe", "1f1b"]), st.sampled_from([1, 2]))
def test_formula_and_table_agree_for_linear_schedules(size, name, backward):
    p, m = size
    table = table_of(name, p, m, UnitCosts(backward=backward))
    closed = formula(name, p, m, UnitCosts(backward=backward))
    assert closed.length == table.length
    assert closed.bubble_ratio == pytest.approx(table.bubble_ratio, abs=1e-12)
    assert closed.peak_activations == table.peak_activations


def test_cells_hold_every_op_for_its_duration():
    table = table_of("1f1b", 3, 4, UnitCosts(backward=2))
    cells = table.cells()
    busy = sum(cell is not None for row in cells for cell in row)
    assert busy == 3 * 4 * 3
    assert all(len(row) == table.length for row in cells)


def test_interleaved_lengths_are_in_slots_of_a_1_over_p_share_and_cells_on_the_chunk_grid():
    # v = 2 chunks per device: a chunk forward is 1/2 slot, a chunk backward 1 slot (default B = 2).
    table = table_of("interleaved-1f1b", 4, 8, chunks=2)
    assert table.durations[Kind.F] == 0.5 and table.durations[Kind.B] == 1
    assert table.length == Fraction(3 * (2 * 8 + 4 - 1), 2)  # (F + B)(v m + p - 1) chunk slots of 1/2 slot
    assert table.tick == Fraction(1, 2)
    cells = table.cells()  # one column per chunk forward
    assert all(len(row) == 2 * table.length for row in cells)
    assert sum(cell is not None for row in cells for cell in row) == 4 * 8 * 2 * 3
    assert table.bubble_ratio == pytest.approx(3 / (2 * 8 + 3))


def test_non_integer_durations_keep_exact_lengths():
    # F = 1, B = 5/2: the tick is gcd(1, 5/2) = 1/2 slot and the length stays exact.
    table = table_of("1f1b", 3, 5, UnitCosts(backward=2.5))
    assert table.tick == Fraction(1, 2)
    assert table.length == (5 + 3 - 1) * 3.5


def test_cells_refuse_a_grid_over_the_limit(monkeypatch):
    import ppopt.table

    table = table_of("gpipe", 4, 4)
    monkeypatch.setattr(ppopt.table, "MAX_CELLS", 4 * table.length - 1)
    with pytest.raises(ScheduleError, match="too large to draw"):
        table.cells()


def test_text_grid_of_a_huge_table_is_cut_to_a_window(monkeypatch):
    import ppopt.report.text
    from ppopt.report.text import grid

    monkeypatch.setattr(ppopt.report.text, "MAX_GRID_CELLS", 100)
    monkeypatch.setattr(ppopt.report.text, "MAX_GRID_DEVICES", 4)
    text = grid(table_of("gpipe", 10, 4, UnitCosts(backward=1)))  # 10 devices x 26 slots
    lines = text.splitlines()
    assert len(lines) == 5  # 4 device rows and the note
    assert lines[-1] == "(grid cut to devices 0..3 of 10 and columns 0..24 of 26: 260 cells are over the 100 drawn)"
    assert lines[0].startswith("device 0 | F0 F1 F2 F3")


def test_cut_grid_keeps_lines_readable_and_counts_in_full(monkeypatch):
    """Cut, a grid keeps at most MAX_CUT_COLUMNS columns however few its rows (one device of 3,000
    slots was one line of the whole 3,000 cells), and the summary gives its length as a whole
    number (3e+06 slots before)."""
    import ppopt.report.text
    from ppopt.report.text import amount, grid, table_summary

    monkeypatch.setattr(ppopt.report.text, "MAX_GRID_CELLS", 1_000)
    monkeypatch.setattr(ppopt.report.text, "MAX_CUT_COLUMNS", 40)
    table = table_of("1f1b", 1, 1500, UnitCosts(backward=2))  # one device, 4,500 slots
    lines = grid(table).splitlines()
    assert lines[-1] == "(grid cut to devices 0..0 of 1 and columns 0..39 of 4500: 4,500 cells are over the 1,000 drawn)"
    assert len(lines[0].split(" | ")[1].split()) == 40
    assert table_summary(table).startswith("length 4500 slots,")
    assert [amount(v) for v in (3_000_001, 1603.5, 2 / 3)] == ["3000001", "1603.5", "0.667"]


@pytest.mark.parametrize("name", ["1f1b", "zb-v", "chimera"])
def test_cut_timeline_grid_is_the_full_grids_first_columns(monkeypatch, name):
    """A simulated schedule's grid cut to a window shows exactly the first columns of the uncut grid:
    only the ops that start in the window become spans, and an op running past its edge is drawn up
    to the edge (one-slot messages, so ops do not start at every column)."""
    import ppopt.report.text
    from ppopt.generators import generate
    from ppopt.report.text import timeline_grid
    from ppopt.simulate import simulate
    from ppopt.solve.instance import InstanceSpec

    schedule = generate(name, 4, 8)
    instance = InstanceSpec(4, 8, UnitCosts(1.0, 2.0, 1.0 if name == "zb-v" else None, 1.0)).instance(schedule.stages)
    simulation = simulate(schedule, instance.costs, instance.system)
    full = timeline_grid(schedule, *simulation.op_times()).splitlines()
    monkeypatch.setattr(ppopt.report.text, "MAX_GRID_CELLS", 4 * 13)
    cut = timeline_grid(schedule, *simulation.op_times()).splitlines()
    assert len(cut) == 5 and cut[-1].startswith("(grid cut to devices 0..3 of 4 and columns 0..12 of ")
    width = max(len(cell) for line in cut[:4] for cell in line.split(" | ")[1].split())
    for shown, whole in zip(cut[:4], full):
        label, cells = whole.split(" | ")
        first = " ".join(f"{c:<{width}}" for c in cells.split()[:13]).rstrip()
        assert shown == f"{label} | {first}"


def test_generate_refuses_schedules_over_the_size_limit_before_building():
    from ppopt.generators import generate

    with pytest.raises(ScheduleError, match=r"^schedule too large: gpipe with 100000 devices, 100 microbatches make "
                                            r"20,000,000 ops .*the limit is 10,000,000 ops$"):
        generate("gpipe", 100_000, 100)
    # the option that makes it large is named (it was left out, so the message blamed p and m)
    with pytest.raises(ScheduleError, match="interleaved-1f1b with 4 devices, 4 microbatches, chunks 1000000 make 32,000,000 ops"):
        generate("interleaved-1f1b", 4, 4, chunks=1_000_000)
    with pytest.raises(ScheduleError, match="zb-v with 2000 devices, 2000 microbatches make 24,000,000 ops"):
        generate("zb-v", 2000, 2000)
    with pytest.raises(ScheduleError, match="hanayo with 1000 devices, 1000 microbatches, waves 2 make 8,000,000 ops"):
        import ppopt.ir

        limit, ppopt.ir.MAX_OPS = ppopt.ir.MAX_OPS, 7_999_999
        try:
            generate("hanayo", 1000, 1000, waves=2)
        finally:
            ppopt.ir.MAX_OPS = limit


def test_evaluate_flattens_each_schedule_once_and_shares_it(monkeypatch):
    import sys

    from ppopt.config import load_model, load_system
    from ppopt.evaluate import evaluate
    from ppopt.flat import flatten

    calls = []

    def counting(schedule):
        calls.append(schedule.name)
        return flatten(schedule)

    monkeypatch.setattr(sys.modules["ppopt.validation"], "flatten", counting)
    result = evaluate("zb-v", 4, 8, model=load_model("study"), system=load_system("mid-mid"))
    assert calls == ["zb-v"]  # validation, the table and the simulation share one flat form
    assert result.table.length == (6 * 8 + 4 - 1) / 2
    assert result.simulation is not None and result.simulation.step_time_s > 0


def test_the_formula_length_keeps_a_tiny_forward():
    """1F1B at p = 4, m = 8: (m + p - 1)(F + B) = 11 (F + B). With the smallest forward the unit
    model takes, F = 1e-6 slots, the length is 11 · (1e-6 + 2) = 22.000011 in the formula and the
    table alike, and a decimal F keeps its value exactly: F = 0.1, B = 0.2 gives 3.3. (Below 1e-6
    the table's resolution, a forward is refused: tests/test_cli.py.)"""
    from ppopt.units import MIN_SLOTS

    units = UnitCosts(forward=MIN_SLOTS, backward=2.0)
    tiny = formula("1f1b", 4, 8, units)
    assert tiny is not None and tiny.length == pytest.approx(22.000011, rel=1e-12)
    assert table_of("1f1b", 4, 8, units).length == pytest.approx(22.000011, rel=1e-12)
    tenth = formula("1f1b", 4, 8, UnitCosts(forward=0.1, backward=0.2))
    assert tenth is not None and tenth.length == pytest.approx(3.3, rel=1e-15)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["gpipe", "1f1b", "zb-h1", "interleaved-1f1b"]), comm=st.sampled_from([0.5, 0.25, 0.75, 1.5]),
       p=st.integers(2, 4))
def test_the_text_grid_draws_every_op_at_its_start_when_messages_take_part_of_a_slot(name, comm, p):
    """With one-slot columns, --comm 0.5 put 1F0 at 1.5 and 1B0 at 2.5 into one cell: the F vanished
    and the B was drawn half a slot early. Each op now starts its own column at exactly its start."""
    from ppopt.report.text import grid

    options = {"chunks": 2} if name == "interleaved-1f1b" else {}
    table = table_of(name, p, 2 * p, UnitCosts(comm=comm), **options)
    column = table.column
    rows = [line.split("|", 1)[1].split() for line in grid(table).splitlines() if line.startswith("device")]
    drawn = {(d, c) for d, row in enumerate(rows) for c, cell in enumerate(row) if cell not in (".", "-")}
    starts = {(device, start / column) for _, device, start, _ in table.spans()}
    assert len(starts) == len(table.spans())  # one column per op start
    assert {(d, float(c)) for d, c in drawn} == starts
