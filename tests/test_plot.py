"""Schedule pictures, checked on matplotlib's Figure objects (no pixels): every generator draws,
memory lines are distinguishable, messages and the memory limit are drawn; PNG and SVG files; bad suffixes."""

import os

import pytest
from click.testing import CliRunner

pytest.importorskip("matplotlib")

from matplotlib.collections import LineCollection  # noqa: E402

import ppopt.report.plot as plot  # noqa: E402
from ppopt.cli import main  # noqa: E402
from ppopt.costs import StageCost  # noqa: E402
from ppopt.errors import ScheduleError  # noqa: E402
from ppopt.generators import REGISTRY, generate, names  # noqa: E402
from ppopt.report.plot import (  # noqa: E402
    Panel,
    _memory_scale,
    compare_figure,
    live_curves,
    plot_compare,
    plot_schedule,
    schedule_figure,
    simulated_transfers,
)
from ppopt.simulate import simulate  # noqa: E402
from ppopt.solve.instance import InstanceSpec  # noqa: E402
from ppopt.table import build_table  # noqa: E402
from ppopt.units import UnitCosts  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# one small instance every registered family accepts (the same as the registry walk in test_registry.py)
P, M = 2, 4


def table_times(schedule):
    table = build_table(schedule)
    return table.start, {op: table.end(op) for op in table.start}


def unit_simulation(schedule, comm=0.5):
    instance = InstanceSpec(schedule.devices, schedule.microbatches, UnitCosts(comm=comm)).instance(schedule.stages, None)
    return simulate(schedule, instance.costs, instance.system)


def device_lines(ax):
    return [line for line in ax.get_lines() if line.get_label().startswith("device ")]


def transfer_segments(ax):
    found = [c for c in ax.collections if isinstance(c, LineCollection) and c.get_gid() == "transfers"]
    return found[0].get_segments() if found else []


@pytest.fixture
def captured(monkeypatch):
    """The Figures the CLI saves, in order (nothing is written)."""
    figures = []

    def keep(fig, path, fmt):
        figures.append(fig)
        return path

    monkeypatch.setattr(plot, "_save", keep)
    return figures


@pytest.mark.parametrize("name", names())
def test_every_generator_draws_one_box_per_op_and_one_line_per_device(name):
    schedule = generate(name, P, M)
    fig = schedule_figure(schedule, *table_times(schedule))
    gantt, memory = fig.axes[:2]
    collections = [collection for collection in gantt.collections if collection.get_gid() == "boxes"]
    assert sum(len(collection.get_paths()) for collection in collections) == sum(len(order) for order in schedule.orders)
    # the ops of a later chunk or of the up direction are the hatched ones, and only they
    secondary = sum(plot._secondary(schedule, op, schedule.device_of(op)) for order in schedule.orders for op in order)
    assert sum(len(c.get_paths()) for c in collections if c.get_hatch() == "///") == secondary
    assert all(c.get_hatch() in ("///", None) for c in collections)
    assert len(device_lines(memory)) == P
    assert transfer_segments(gantt) == []  # a table has no messages


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_pictures_are_written_whole(tmp_path, suffix):
    schedule = generate("zb-h1", 2, 2)
    path = tmp_path / f"zbh1{suffix}"
    assert plot_schedule(schedule, *table_times(schedule), path, memory=suffix == ".png") == path
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) if suffix == ".png" else b"<svg" in data[:2000]
    assert os.listdir(tmp_path) == [path.name]  # no temporary file left


def test_memory_lines_of_every_device_are_distinguishable():
    # gpipe: every device holds all m activations, so the lines lie on top of each other
    schedule = generate("gpipe", 8, 4)
    lines = device_lines(schedule_figure(schedule, *table_times(schedule)).axes[1])
    assert len(lines) == 8
    assert len({(line.get_color(), line.get_linestyle()) for line in lines}) == 8
    assert len({line.get_linestyle() for line in lines}) == 4  # not only colours: dash patterns too
    widths = [line.get_linewidth() for line in lines]
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]  # a covered line shows as a rim
    for d in range(28):  # no two devices share colour and dash below 28
        assert sum(plot.device_style(d, 28)["color"] == plot.device_style(e, 28)["color"]
                   and plot.device_style(d, 28)["linestyle"] == plot.device_style(e, 28)["linestyle"] for e in range(28)) == 1


def test_simulated_messages_are_drawn_one_line_each():
    schedule = generate("interleaved-1f1b", 2, 4)
    simulation = unit_simulation(schedule)
    transfers = simulated_transfers(simulation)
    assert len(transfers) == len([e for e in simulation.events("transfer") if e.where[0] != e.where[1]]) > 0
    fig = schedule_figure(schedule, simulation.start_s, simulation.end_s, transfers=transfers)
    segments = transfer_segments(fig.axes[0])
    assert len(segments) == len(transfers)
    (x0, y0), (x1, y1) = segments[0]
    source, destination, leaves, arrives = transfers[0]
    assert (x0, x1) == pytest.approx((leaves, arrives))
    assert abs(y0 - source) < 0.5 and abs(y1 - destination) < 0.5
    assert "message (send → arrival)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_memory_limit_is_a_line_at_its_value():
    schedule = generate("1f1b", 4, 6)
    fig = schedule_figure(schedule, *table_times(schedule), memory_limit=3)
    limit = [line for line in fig.axes[1].get_lines() if line.get_gid() == "memory limit"]
    assert len(limit) == 1 and set(limit[0].get_ydata()) == {3}
    # in bytes, on top of persistent memory: the limit in the panel's unit, lines from their base
    gib = 2**30
    fig = schedule_figure(schedule, *table_times(schedule), stage_costs=[StageCost(1, 1.0, 2.0, 1.0, 1.0, 2 * gib, 0.0, 0.0, 0.0)] * 4,
                          memory_unit="bytes",
                          memory_base=[10 * gib] * 4, memory_limit=20 * gib)
    ax = fig.axes[1]
    assert ax.get_ylabel() == "memory (GiB)"
    assert [set(line.get_ydata()) for line in ax.get_lines() if line.get_gid() == "memory limit"] == [{20}]
    assert [min(line.get_ydata()) for line in device_lines(ax)] == [10] * 4
    assert max(device_lines(ax)[0].get_ydata()) == 10 + 2 * 4  # device 0 of 1F1B holds p = 4 activations


def test_cli_search_plot_draws_the_memory_limit_and_messages(captured):
    result = CliRunner().invoke(main, ["search", "-p", "2", "-m", "4", "--unit", "--comm", "0.5", "--memory-limit", "2",
                                       "--time-limit", "5", "-q", "--no-grid", "--plot", "x.png"])
    assert result.exit_code == 0, result.output
    (fig,) = captured
    gantt, memory = fig.axes[:2]
    assert [set(line.get_ydata()) for line in memory.get_lines() if line.get_gid() == "memory limit"] == [{2}]
    assert len(transfer_segments(gantt)) > 0


def test_cli_export_draws_the_messages_the_help_promises(captured):
    result = CliRunner().invoke(main, ["export", "-s", "1f1b", "-p", "3", "-m", "2", "--comm", "0.5", "-o", "x.png"])
    assert result.exit_code == 0, result.output
    (fig,) = captured
    # 1F1B on 3 devices, 2 microbatches: 2 forward and 2 backward messages per device boundary
    assert len(transfer_segments(fig.axes[0])) == 2 * 2 * 2


def test_table_and_export_pictures_name_the_activation_they_count(captured):
    """`table --plot` counts stage chunks and `export` (unit mode) 1/p model shares: interleaved
    1F1B on 2 devices, 4 microbatches peaks at 5 chunks and at 2.5 shares, and both panels read
    "live activations" alone."""
    args = ["-s", "interleaved-1f1b", "-p", "2", "-m", "4"]
    for command in (["table", *args, "--plot", "x.png"], ["export", *args, "-o", "x.png"]):
        assert CliRunner().invoke(main, command).exit_code == 0
    (_, table_memory, *_), (_, export_memory, *_) = (fig.axes for fig in captured)
    assert max(max(line.get_ydata()) for line in device_lines(table_memory)) == 5
    assert table_memory.get_ylabel() == "live activations (stage chunks, 1/4 of the model)"
    assert max(max(line.get_ydata()) for line in device_lines(export_memory)) == 2.5
    assert export_memory.get_ylabel() == "live activations (1/p model shares)"


def test_cli_compare_plot_has_step_times_and_memory_panels(captured):
    result = CliRunner().invoke(main, ["compare", "-p", "2", "-m", "2", "--model", "study", "--system", "mid-mid", "--plot", "x.png"])
    assert result.exit_code == 0, result.output
    (fig,) = captured
    titles = [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")]
    assert len(titles) >= 3 and all(": step " in t and t.endswith(" s") for t in titles)
    steps = [float(t.split(": step ")[1][:-2]) for t in titles]
    assert steps == sorted(steps)  # fastest first
    memory = [ax for ax in fig.axes if device_lines(ax)]
    assert len(memory) == len(titles) and all(len(device_lines(ax)) == 2 for ax in memory)
    assert len({ax.get_ylim() for ax in memory}) == 1  # one scale: heights compare across schedules


def test_compare_stacks_schedules(tmp_path):
    items = []
    for name in ("1f1b", "chimera"):
        schedule = generate(name, 2, 2)
        items.append((name, schedule, *table_times(schedule)))
    fig = compare_figure(items, title="p=2, m=2")
    assert [ax.get_title(loc="left") for ax in fig.axes[::2]] == [f"{name}: step {build_table(s).length} slots" for name, s, _, _ in items]
    assert [len(device_lines(ax)) for ax in fig.axes[1::2]] == [2, 2]
    path = tmp_path / "compare.png"
    plot_compare([Panel(*items[0])], path, memory=False)
    assert path.read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(ScheduleError, match="nothing to compare"):
        plot_compare([], tmp_path / "empty.png")


def test_simulated_timeline_in_bytes():
    schedule = generate("zb-v", 2, 4)
    instance = InstanceSpec(2, 4, model="llama3-8b", system="dgx-h100").instance(schedule.stages, None)
    simulation = simulate(schedule, instance.costs, instance.system)
    fig = schedule_figure(schedule, simulation.start_s, simulation.end_s, "zb-v simulated", time_unit="s",
                          stage_costs=instance.costs.stages, memory_unit="bytes",
                          transfers=simulated_transfers(simulation))
    assert fig.axes[1].get_ylabel().startswith("live activations (")
    assert len(transfer_segments(fig.axes[0])) == len(simulated_transfers(simulation)) > 0
    assert _memory_scale(3 * 2**30, "bytes") == (2**30, "live activations (GiB)")
    assert _memory_scale(3 * 2**30, "bytes", whole=True) == (2**30, "memory (GiB)")
    assert _memory_scale(5.0, "activations") == (1.0, "live activations")


@pytest.mark.parametrize("bad", ["out.pdf", "out.jpg", "out"])
def test_bad_suffix_is_an_error_naming_it(tmp_path, bad):
    schedule = generate("1f1b", 2, 2)
    with pytest.raises(ScheduleError) as caught:
        plot_schedule(schedule, *table_times(schedule), tmp_path / bad)
    suffix = os.path.splitext(bad)[1]
    assert (f"'{suffix}'" if suffix else "needs a picture suffix") in str(caught.value) and ".png or .svg" in str(caught.value)
    assert os.listdir(tmp_path) == []


def test_missing_matplotlib_is_a_one_line_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    schedule = generate("1f1b", 2, 2)
    with pytest.raises(ScheduleError, match=r"^plot: needs matplotlib: pip install 'matplotlib>=3.8' \(ppopt's plot extra\)$"):
        plot_schedule(schedule, *table_times(schedule), tmp_path / "x.png")
    # on the command line the --plot flag is checked before any work: no table printed, one line
    for args in (["evaluate", "-s", "1f1b", "-p", "2", "-m", "2"], ["table", "-s", "1f1b", "-p", "2", "-m", "2"],
                 ["search", "-p", "2", "-m", "2", "--unit"]):
        result = CliRunner().invoke(main, [*args, "--plot", str(tmp_path / "x.png")])
        assert result.exit_code == 1 and result.stdout == ""
        assert result.stderr.startswith("error: Invalid value for '--plot': needs matplotlib: pip install 'matplotlib>=3.8'")
        assert len(result.stderr.splitlines()) == 1
    assert os.listdir(tmp_path) == []


def test_live_curves_follow_the_table_peaks():
    schedule = generate("1f1b", 4, 6)
    table = build_table(schedule)
    curves = live_curves(schedule, *table_times(schedule))
    assert tuple(max(levels) for _, levels in curves) == table.peak_activations
    assert all(levels[-1] == 0 for _, levels in curves)


def test_live_curves_free_the_part_a_split_backward_frees_at_i():
    """ZB-H1 on llama3-8b: the last stage's loss softmax goes at each I; the memory panel's curves
    peak where the simulator's peaks are (freed whole at W they peaked higher on the last device)."""
    schedule = generate("zb-h1", 4, 8)
    instance = InstanceSpec(4, 8, model="llama3-8b", system="dgx-h100", global_batch=32).instance(schedule.stages, None)
    assert instance.costs.stages[-1].input_grad_release_bytes > 0
    simulation = simulate(schedule, instance.costs, instance.system)
    curves = live_curves(schedule, simulation.start_s, simulation.end_s, instance.costs.stages)
    assert [max(levels) for _, levels in curves] == pytest.approx(list(simulation.peak_activation_bytes), rel=1e-12)
    assert all(levels[-1] == pytest.approx(0, abs=1e-3) for _, levels in curves)


def test_cli_export_pictures(tmp_path):
    runner = CliRunner()
    svg = tmp_path / "chimera.svg"
    result = runner.invoke(main, ["export", "-s", "chimera", "-p", "2", "-m", "2", "--format", "svg", "-o", str(svg)])
    assert result.exit_code == 0, result.output
    assert b"<svg" in svg.read_bytes()[:2000]
    result = runner.invoke(main, ["export", "-s", "1f1b", "-p", "2", "-m", "2", "--format", "png", "-o", str(tmp_path / "x.svg")])
    assert result.exit_code == 1 and result.output.startswith("error: --format png writes a .png file")


def test_a_picture_over_the_drawable_size_is_refused_before_simulating(tmp_path, monkeypatch):
    """1F1B at 64 x 1,024 is 131,072 ops: drawing took minutes. Refused in one line, nothing written."""
    import ppopt.cli.outputs
    import ppopt.simulate as simulating

    monkeypatch.setattr(simulating, "simulate", lambda *a, **k: pytest.fail("simulated"))  # export imports it when run
    # a named schedule is sized from (p, m) before it is built (4 s at 1,000 x 1,000)
    monkeypatch.setattr(ppopt.cli.outputs, "resolve_schedule", lambda *a, **k: pytest.fail("built the schedule"))
    result = CliRunner().invoke(main, ["export", "-s", "1f1b", "-p", "64", "-m", "1024", "-o", str(tmp_path / "x.png")])
    assert (result.exit_code, result.output) == (
        1, "error: a picture of 131,072 ops would have boxes too small to read; it draws at most 40,000: export "
           "torch-csv or chrome-trace instead, or fewer microbatches\n")
    assert not list(tmp_path.iterdir())


def test_search_refuses_a_picture_too_large_before_searching(tmp_path, monkeypatch):
    """8 x 2,600 is 41,600 ops: the picture was refused only after the search (and before the trace)."""
    import ppopt.plan_search  # noqa: F401  (these bind `search` when first imported: not to the stand-in)
    import ppopt.solve.gap  # noqa: F401
    import ppopt.solve.search as searching

    monkeypatch.setattr(searching, "search", lambda *a, **k: pytest.fail("searched"))
    result = CliRunner().invoke(main, ["search", "--unit", "-p", "8", "-m", "2600", "--time-limit", "5",
                                       "--plot", str(tmp_path / "x.png"), "--trace", str(tmp_path / "t.json")])
    assert (result.exit_code, result.output) == (
        1, "error: a picture of 41,600 ops would have boxes too small to read; it draws at most 40,000: export "
           "torch-csv or chrome-trace instead, or fewer microbatches\n")
    assert not list(tmp_path.iterdir())


# Op kinds per (stage, microbatch) x stages per device, for each family with its default options:
# F and B (2), or F, I and W (3); two chunks for interleaved-1f1b and looped-bfs (v = 2), Hanayo (2W, W = 1)
# and the V schedules. DualPipe and DualPipeV split the backward of some (stage, microbatch) pairs only:
# their ops are counted on the built schedules.
OPS_PER_DEVICE_AND_MICROBATCH = {
    "gpipe": 2, "1f1b": 2, "interleaved-1f1b": 2 * 2, "looped-bfs": 2 * 2, "chimera": 2, "chimera-asym": 2,
    "hanayo": 2 * 2, "zb-h1": 3, "zb-h2": 3, "zb-v": 3 * 2, "v-min": 3 * 2, "v-half": 3 * 2,
}


def family_op_count(devices, microbatches, families):
    """Ops of ``families``' schedules at (p, m) together, from their op counts."""
    built = [n for n in families if n not in OPS_PER_DEVICE_AND_MICROBATCH]
    assert set(built) <= {"dualpipe", "dualpipev"}
    return (sum(OPS_PER_DEVICE_AND_MICROBATCH.get(n, 0) for n in families) * devices * microbatches
            + sum(len(order) for n in built for order in generate(n, devices, microbatches).orders))


@pytest.mark.parametrize("args, ops", [
    (["table", "-s", "1f1b", "-p", "64", "-m", "1000"], lambda: f"{2 * 64 * 1000:,}"),  # 1F1B: an F and a B per stage and microbatch
    (["evaluate", "-s", "1f1b", "-p", "64", "-m", "1000"], lambda: f"{2 * 64 * 1000:,}"),
    # every family together is over ten times the limit (828,352 ops at 64 x 256): refused before evaluating
    (["compare", "-p", "64", "-m", "256", "--model", "study", "--system", "mid-mid"],
     lambda: f"up to {family_op_count(64, 256, list(REGISTRY)):,}"),
])
def test_table_evaluate_and_compare_refuse_a_picture_too_large_before_the_work(tmp_path, monkeypatch, args, ops):
    """These printed the whole report first (table, evaluate) or drew for minutes (compare); a named
    schedule is now sized before it is even built."""
    ops = ops()
    import ppopt.cli.schedules
    import ppopt.evaluate as evaluating
    import ppopt.table as tables

    monkeypatch.setattr(tables, "build_table", lambda *a, **k: pytest.fail("built the table"))
    monkeypatch.setattr(ppopt.cli.schedules, "resolve_schedule", lambda *a, **k: pytest.fail("built the schedule"))
    monkeypatch.setattr(evaluating, "evaluate_schedule", lambda *a, **k: pytest.fail("evaluated"))
    monkeypatch.setattr(evaluating, "evaluate_all", lambda *a, **k: pytest.fail("evaluated"))
    result = CliRunner().invoke(main, [*args, "--plot", str(tmp_path / "x.png")])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (f"error: a picture of {ops} ops would have boxes too small to read; it draws at most "
                             "40,000: export torch-csv or chrome-trace instead, or fewer microbatches\n")
    assert not list(tmp_path.iterdir())


def test_compare_counts_only_the_schedules_that_apply(tmp_path, captured):
    """At 16 x 64 every family applies, 51,760 ops in all: under ten times the limit, so the count is
    checked after evaluating, and refused before any report. At 8 x 100 interleaved and Chimera do
    not apply: the 33,736 ops of those that do are drawable, where the sum over every family (40,136)
    was refused."""
    from ppopt.cli.options import family_ops

    result = CliRunner().invoke(main, ["compare", "-p", "16", "-m", "64", "--model", "study", "--system", "mid-mid",
                                       "--plot", str(tmp_path / "x.png"), "-q"])
    assert (result.exit_code, result.stdout) == (1, "")
    every = family_op_count(16, 64, list(REGISTRY))
    assert 40_000 < every < 10 * 40_000
    assert result.stderr.startswith(f"error: a picture of {every:,} ops would have boxes too small to read")
    applying = [n for n in REGISTRY if n not in ("interleaved-1f1b", "chimera", "chimera-asym")]
    assert family_ops(8, 100, {}, list(REGISTRY)) == family_op_count(8, 100, list(REGISTRY)) > 40_000
    assert family_ops(8, 100, {}, applying) == family_op_count(8, 100, applying) <= 40_000
    result = CliRunner().invoke(main, ["compare", "-p", "8", "-m", "100", "--global-batch", "200", "--model", "study",
                                       "--system", "mid-mid", "--plot", str(tmp_path / "x.png"), "-q"])
    assert result.exit_code == 0, result.output
    boxes = sum(len(collection.get_paths()) for axes in captured[0].axes for collection in axes.collections
                if collection.get_gid() == "boxes")
    assert boxes == family_op_count(8, 100, applying)  # the picture drawn holds the ops of those that apply


def test_plot_compare_refuses_panels_over_the_drawable_size_together(tmp_path):
    """Each panel alone is drawable; stacked they are not (2 x 20,480 ops of 1F1B at 16 x 640)."""
    from ppopt.report.plot import plot_compare

    table = build_table(generate("1f1b", 16, 640))
    end = {op: table.end(op) for op in table.start}
    panel = ("1f1b", table.schedule, table.start, end)
    with pytest.raises(ScheduleError, match="a picture of 40,960 ops"):
        plot_compare([panel, panel], tmp_path / "x.png")
    assert not list(tmp_path.iterdir())
