"""Schedule pictures: PNG and SVG for every generator and for a simulated step; bad suffixes."""

import os

import pytest
from click.testing import CliRunner

pytest.importorskip("matplotlib")

from ppopt.cli import main  # noqa: E402
from ppopt.errors import ScheduleError  # noqa: E402
from ppopt.generators import generate, names  # noqa: E402
from ppopt.report.plot import _memory_scale, live_curves, plot_compare, plot_schedule  # noqa: E402
from ppopt.simulate import simulate  # noqa: E402
from ppopt.solve.instance import InstanceSpec  # noqa: E402
from ppopt.table import build_table  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SIZES = {"chimera": (2, 2), "chimera-asym": (2, 2), "interleaved-1f1b": (2, 2), "zb-v": (2, 2)}


def table_times(schedule):
    table = build_table(schedule)
    return table.start, {op: table.end(op) for op in table.start}


def assert_picture(path, suffix):
    data = path.read_bytes()
    assert data
    if suffix == ".png":
        assert data.startswith(PNG_MAGIC)
    else:
        assert b"<svg" in data[:2000]


@pytest.mark.parametrize("name", names())
def test_every_generator_draws_as_png_and_svg(tmp_path, name):
    p, m = SIZES.get(name, (2, 3))
    schedule = generate(name, p, m)
    start, end = table_times(schedule)
    for suffix in (".png", ".svg"):
        path = tmp_path / f"{name}{suffix}"
        assert plot_schedule(schedule, start, end, path, memory=suffix == ".png") == path
        assert_picture(path, suffix)
    assert sorted(os.listdir(tmp_path)) == [f"{name}.png", f"{name}.svg"]  # no temporary files left


def test_simulated_timeline_draws_with_bytes(tmp_path):
    schedule = generate("zb-v", 4, 4)
    instance = InstanceSpec(4, 4, model="llama3-8b", system="dgx-h100").instance(schedule.stages, None)
    simulation = simulate(schedule, instance.costs, instance.system)
    path = tmp_path / "step.svg"
    plot_schedule(schedule, simulation.start_s, simulation.end_s, path, title="zb-v simulated", time_unit="s",
                  activation_size=lambda s: instance.costs.stages[s].activation_bytes, memory_unit="bytes")
    assert_picture(path, ".svg")
    assert _memory_scale(3 * 2**30, "bytes") == (2**30, "live activations (GiB)")
    assert _memory_scale(5.0, "activations") == (1.0, "live activations")


def test_compare_stacks_schedules(tmp_path):
    items = []
    for name in ("1f1b", "zb-h1", "chimera"):
        schedule = generate(name, 2, 2)
        items.append((name, schedule, *table_times(schedule)))
    path = tmp_path / "compare.png"
    plot_compare(items, path, title="p=2, m=2")
    assert_picture(path, ".png")
    with pytest.raises(ScheduleError, match="nothing to compare"):
        plot_compare([], tmp_path / "empty.png")


@pytest.mark.parametrize("bad", ["out.pdf", "out.jpg", "out"])
def test_bad_suffix_is_an_error_naming_it(tmp_path, bad):
    schedule = generate("1f1b", 2, 2)
    with pytest.raises(ScheduleError) as caught:
        plot_schedule(schedule, *table_times(schedule), tmp_path / bad)
    suffix = os.path.splitext(bad)[1]
    assert (f"'{suffix}'" if suffix else "no suffix") in str(caught.value) and ".png or .svg" in str(caught.value)
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
    with pytest.raises(ScheduleError, match=r"^--plot needs matplotlib: pip install 'ppopt\[plot\]'$"):
        plot_schedule(schedule, *table_times(schedule), tmp_path / "x.png")


def test_live_curves_follow_the_table_peaks():
    schedule = generate("1f1b", 4, 6)
    table = build_table(schedule)
    curves = live_curves(schedule, *table_times(schedule))
    assert tuple(max(levels) for _, levels in curves) == table.peak_activations
    assert all(levels[-1] == 0 for _, levels in curves)


def test_cli_export_pictures(tmp_path):
    runner = CliRunner()
    png = tmp_path / "zbh1.png"
    result = runner.invoke(main, ["export", "-s", "zb-h1", "-p", "2", "-m", "2", "--comm", "0.5", "-o", str(png)])
    assert result.exit_code == 0, result.output
    assert_picture(png, ".png")
    svg = tmp_path / "chimera.svg"
    result = runner.invoke(main, ["export", "-s", "chimera", "-p", "2", "-m", "2", "--format", "svg", "-o", str(svg)])
    assert result.exit_code == 0, result.output
    assert_picture(svg, ".svg")
    result = runner.invoke(main, ["export", "-s", "1f1b", "-p", "2", "-m", "2", "--format", "png", "-o", str(tmp_path / "x.svg")])
    assert result.exit_code == 1 and result.output.startswith("error: --format png writes a .png file")
