"""`gap --schedule-file`: a user's own schedule against the relaxed space of its placement and
backward (ppopt.solve.space.space_of), searched with it as a hint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.generators import generate, names
from ppopt.io.torch_csv import format_torch_csv
from ppopt.solve.space import family_space, placement_of, space_of

UNIT = ["--unit", "--time-limit", "20", "-q"]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def gap_json(*args):
    result = run("gap", *UNIT, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", [n for n in names() if generate(n, 4, 8).replicas == 1])
def test_a_family_s_schedule_is_a_point_of_its_own_family_s_space(name):
    """space_of finds the placement map and backward the registry gives each family (Hanayo's W = 1
    zig-zag is the V map)."""
    schedule = generate(name, 4, 8)
    found, family = space_of(schedule), family_space(name, {})
    assert placement_of(found, 4) == placement_of(family, 4) == schedule.placement
    assert found.backward == family.backward and found.order == "free"


def test_a_family_s_file_has_the_family_s_gap(tmp_path):
    """Hanayo at p = 4, m = 8 takes 33 slots where its space's optimum is 28.5 (interleaved 1F1B's
    (m + (p - 1)/2)(F + B) = 9.5 x 3): as a file, the same figures as `gap -s hanayo`."""
    path = tmp_path / "mine.csv"
    path.write_text(format_torch_csv(generate("hanayo", 4, 8)))
    [row] = gap_json("--schedule-file", path)["schedules"]
    [family] = gap_json("-s", "hanayo", "-p", 4, "-m", 8)["schedules"]
    assert (row["schedule"], row["space"]) == ("mine", "placement=v,backward=full,order=free")
    assert (row["step_time_s"], row["best_found_s"], row["bound_s"]) == (33, 28.5, 28.5)
    assert [row[k] for k in ("step_time_s", "best_found_s", "bound_s", "gap")] == \
        [family[k] for k in ("step_time_s", "best_found_s", "bound_s", "gap")]


def test_a_serial_order_is_measured_against_the_linear_space(tmp_path):
    """Each microbatch's round trip before the next one enters (F0 B0 F1 B1 ... on both devices) at
    p = 2, m = 4: 4 x (F + F + B + B) = 24 slots against the space's optimum (m + p - 1)(F + B) = 15,
    a gap of 9/15; the search, hinted with the file, finds the optimum."""
    path = tmp_path / "serial.csv"
    path.write_text("0F0,0B0,0F1,0B1,0F2,0B2,0F3,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n")
    [row] = gap_json("--schedule-file", path)["schedules"]
    assert row["space"] == "placement=linear,backward=full,order=free"
    assert (row["step_time_s"], row["best_found_s"], row["bound_s"], row["status"]) == (24, 15, 15, "optimal")
    assert row["gap"] == pytest.approx(9 / 15)


def test_a_file_on_a_map_of_no_family_is_measured_against_the_free_placement(tmp_path):
    """Six chunks on three devices: F 1/2 slot, B 1 slot, no messages. Microbatch 1's forward
    reaches stage 5 at 3 (5F1 ends at 3.5), 5B0 runs next, and from 4.5 microbatch 1's six
    backwards run back to back, each right after the device's backward of microbatch 0: 10.5."""
    path = tmp_path / "odd.csv"  # devices hold (0, 4), (1, 3), (2, 5): no family's map
    path.write_text("0F0,0F1,4F0,4F1,4B0,4B1,0B0,0B1\n1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1\n2F0,2F1,5F0,5F1,5B0,5B1,2B0,2B1\n")
    [row] = gap_json("--schedule-file", path)["schedules"]
    assert row["space"] == "placement=any,chunks=2,backward=full,order=free"
    assert row["bound_s"] <= row["best_found_s"] <= row["step_time_s"] == 10.5


def test_a_file_is_simulated_with_the_model_as_evaluate_simulates_it(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(format_torch_csv(generate("1f1b", 2, 4)))
    model = ["--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", 8]
    result = run("gap", "--schedule-file", path, *model, "--time-limit", 20, "-q", "--json")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)["schedules"]
    evaluated = json.loads(run("evaluate", "--schedule-file", path, *model, "--json").stdout)
    assert row["step_time_s"] == evaluated["simulation"]["step_time_s"]
    assert row["bound_s"] <= row["best_found_s"] <= row["step_time_s"]


def test_bad_requests_with_a_file_are_one_line(tmp_path):
    uneven = tmp_path / "uneven.csv"
    uneven.write_text("0F0,0F1,1F0,1F1,1B0,1B1,0B0,0B1\n2F0,2F1,2B0,2B1\n")
    result = run("gap", *UNIT, "--schedule-file", uneven)
    assert (result.exit_code, result.stderr) == (1, "error: --schedule-file: uneven's devices hold unequal numbers of "
                                                    "stages (2,1); the relaxed spaces give every device the same number\n")
    plain = tmp_path / "plain.csv"
    plain.write_text(format_torch_csv(generate("1f1b", 2, 4)))
    assert run("gap", *UNIT, "--schedule-file", plain, "-s", "1f1b").stderr == \
        "error: give --schedule or --schedule-file, not both (see 'ppopt gap --help')\n"
    assert run("gap", *UNIT, "--schedule-file", plain, "-p", 3).stderr == \
        f"error: --devices: 3 differs from the 2 of {plain} (a schedule file gives its own sizes)\n"
    assert run("gap", *UNIT, "--schedule-file", plain, "-v", 2).stderr.startswith("error: --chunks: a --schedule-file sets it")
    assert run("gap", *UNIT, "-m", 8).stderr == \
        "error: Missing option '--devices' / '-p' (or give --schedule-file FILE.csv) (see 'ppopt gap --help')\n"


def test_a_file_too_large_for_this_machine_names_the_file(tmp_path, monkeypatch):
    import ppopt.host as host

    path = tmp_path / "big.csv"
    path.write_text(format_torch_csv(generate("1f1b", 4, 40_000)))
    monkeypatch.setattr(host, "available_memory_bytes", lambda: 10**8)
    result = run("gap", *UNIT, "--schedule-file", path)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: --schedule-file: not enough memory: a search of 4 devices, 40000 microbatches")


def test_a_hint_or_a_given_schedule_outside_the_space_is_refused():
    """space_of names no space for uneven layer shares (the spaces' instances split the layers
    evenly, so a bound of theirs would not hold for it), and search refuses a hint of another space."""
    from dataclasses import replace

    from ppopt.errors import ConfigError, ScheduleError
    from ppopt.solve.instance import InstanceSpec
    from ppopt.solve.options import SolveOptions
    from ppopt.solve.search import search
    from ppopt.units import UnitCosts

    weighted = replace(generate("1f1b", 4, 8), stage_weights=(9 / 32, 9 / 32, 9 / 32, 5 / 32))
    with pytest.raises(ScheduleError, match="splits the layers unevenly over its stages"):
        space_of(weighted)
    interleaved = generate("interleaved-1f1b", 4, 8)
    with pytest.raises(ConfigError, match=r"^hints: hint interleaved-1f1b is not a schedule of the space placement=linear"):
        search(InstanceSpec(4, 8, UnitCosts()), space_of(generate("1f1b", 4, 8)), SolveOptions(time_limit_s=10),
               hints=(interleaved,))
    # a fixed or family space searches its own schedules: a hint was dropped there without a word
    for space in ("fixed:1f1b", "placement=family"):
        with pytest.raises(ConfigError, match=r"searches its own schedules only: hints need a relaxed space"):
            search(InstanceSpec(4, 8, UnitCosts()), space, SolveOptions(time_limit_s=10), hints=(generate("1f1b", 4, 8),))


def test_the_readme_example_of_a_file_prints_what_the_readme_says(tmp_path, monkeypatch):
    import shlex

    csv_text, command, expected = readme_warm()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "warm.csv").write_text(csv_text)
    result = run("gap", *shlex.split(command))
    assert result.exit_code == 0 and result.stdout == expected


def readme_warm() -> tuple[str, str, str]:
    """The README's example of a file of one's own: its CSV text, the gap command's arguments and
    their printed output."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = readme.split("$ cat warm.csv\n", 1)[1].split("```", 1)[0]
    csv_text, rest = block.split("$ ppopt gap ", 1)
    command, expected = rest.split("\n", 1)
    return csv_text, command, expected


WARM = readme_warm()[0]
"""1F1B at p = 4, m = 8 with one more warm-up forward on devices 0-2: 44 slots with one-slot
messages, peaks 5,4,3,1."""


def test_search_improves_a_file_and_writes_the_better_schedule(tmp_path):
    """Hinted with the file, the search of its own space finds the optimum, 43 slots under a cap of
    5 (gap's 'best found'), and writes it: a valid schedule of 43 slots within the cap."""
    (tmp_path / "warm.csv").write_text(WARM)
    better = tmp_path / "better.csv"
    result = run("search", "--schedule-file", tmp_path / "warm.csv", "--unit", "--comm", 1, "--memory-limit", 5,
                 "--time-limit", 20, "-q", "--json", "--csv", better)
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert found["space"] == "placement=linear,backward=full,order=free"
    assert {"schedule": "warm", "step_time_s": 44, "fits": True, "gap": 1 / 43} in found["handcrafted"]  # the file, a hint
    assert found["hint_step_time_s"] <= 44 and (found["step_time_s"], found["status"]) == (43, "optimal")
    imported = json.loads(run("import", better, "--comm", 1, "--json", "-q").stdout)
    assert imported["table"]["length"] == 43 and max(imported["table"]["peak_activations"]) <= 5


def test_search_refuses_a_file_outside_the_space_given(tmp_path):
    (tmp_path / "warm.csv").write_text(WARM)
    args = ["search", "--schedule-file", tmp_path / "warm.csv", "--unit", "--time-limit", 10, "-q"]
    assert run(*args, "--space", "placement=v").stderr == (
        "error: --space: warm is not searched in placement=v,backward=full,order=free: its stages or their devices differ; "
        "its own space is placement=linear,backward=full,order=free (leave --space out)\n")
    assert run(*args, "--space", "fixed:1f1b").stderr.startswith("error: --space: warm is not searched in fixed:1f1b: a fixed "
                                                                 "space takes no hint; its own space is placement=linear")


def test_frontier_places_a_file_among_the_handcrafted_schedules(tmp_path):
    """The README's file (peak 5, 44 slots) on the frontier of its own space: dominated by the 43
    slots proven under a limit of 5; a file outside a --space given is refused as search refuses it."""
    (tmp_path / "warm.csv").write_text(WARM)
    result = run("frontier", "--schedule-file", tmp_path / "warm.csv", "--unit", "--comm", 1, "--time-limit", 30, "-q", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["space"] == "placement=linear,backward=full,order=free"
    assert {"schedule": "warm", "peak_memory": 5, "step_time_s": 44, "on_frontier": False, "over_memory": None} in data["handcrafted"]
    [at_five] = [p for p in data["points"] if p["memory_limit"] == 5]
    assert (at_five["step_time_s"], at_five["status"]) == (43, "optimal")
    refused = run("frontier", "--schedule-file", tmp_path / "warm.csv", "--unit", "--space", "placement=v", "-q")
    assert refused.stderr == ("error: --space: warm is not searched in placement=v,backward=full,order=free: its stages or "
                              "their devices differ; its own space is placement=linear,backward=full,order=free (leave --space "
                              "out)\n")


def test_a_file_is_searched_only_in_a_space_it_is_a_point_of_as_it_is(tmp_path):
    """A split-backward file in a full-backward --space was merged into another schedule (41 slots in
    gap became 49 in frontier, and search answered 46, slower than the file); a family space left the
    file out. Both are refused naming the file's own space; a full file in a split space stays (each
    B as I then W is the same schedule or a faster one)."""
    path = tmp_path / "zb.csv"
    path.write_text(format_torch_csv(generate("zb-h1", 4, 8)))
    for command in ("search", "frontier"):
        refused = run(command, "--schedule-file", path, "--unit", "--space", "placement=linear", "--time-limit", 10, "-q")
        assert refused.stderr == ("error: --space: zb is not searched in placement=linear,backward=full,order=free: a full "
                                  "backward would merge its I and W into another schedule; its own space is "
                                  "placement=linear,backward=split,order=free (leave --space out)\n")
        family = run(command, "--schedule-file", path, "--unit", "--space", "placement=family", "--time-limit", 10, "-q")
        assert "a family space searches several placements" in family.stderr
    (tmp_path / "warm.csv").write_text(WARM)
    split = run("search", "--schedule-file", tmp_path / "warm.csv", "--unit", "--comm", 1, "--space", "placement=linear,backward=split",
                "--time-limit", 20, "-q", "--json")
    assert split.exit_code == 0 and json.loads(split.stdout)["step_time_s"] <= 44
    # frontier lists it as that space runs it, named as the handcrafted ones converted beside it: without
    # messages 33 slots as written (the table of the file), 30 with each B as I then W, as 1F1B's 33 is 30
    frontier = run("frontier", "--schedule-file", tmp_path / "warm.csv", "--unit", "--space", "placement=linear,backward=split",
                   "--time-limit", 10, "-q", "--json")
    listed = {h["schedule"]: h["step_time_s"] for h in json.loads(frontier.stdout)["handcrafted"]}
    assert listed["warm+split"] == listed["1f1b+split"] == 30 and "warm" not in listed


def test_frontier_places_a_mixed_file_as_it_is(tmp_path):
    """DualPipeV's file mixes B and I + W: its point is its own 45 slots (as gap says), not its hint's
    41 with every B split."""
    path = tmp_path / "dv.csv"
    path.write_text(format_torch_csv(generate("dualpipev", 4, 8)))
    gap = gap_json("--schedule-file", path, "--comm", 1)["schedules"][0]
    result = run("frontier", "--schedule-file", path, "--unit", "--comm", 1, "--time-limit", 30, "-q", "--json")
    assert result.exit_code == 0, result.output
    [mine] = [h for h in json.loads(result.stdout)["handcrafted"] if h["schedule"].startswith("dv")]
    assert (mine["schedule"], mine["step_time_s"], mine["peak_memory"]) == ("dv", gap["step_time_s"], gap["peak_memory"]) == \
        ("dv", 45, 4.5)


def test_a_file_with_more_stages_than_the_model_has_layers_is_named_as_the_file(tmp_path):
    path = tmp_path / "deep.csv"
    path.write_text(format_torch_csv(generate("looped-bfs", 8, 8, chunks=8)))
    model = ["--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", 8, "--time-limit", 10, "-q"]
    for command in ("search", "frontier", "gap"):
        result = run(command, "--schedule-file", path, *model)
        assert result.exit_code == 1 and result.stderr.startswith("error: --schedule-file: "), (command, result.stderr)


def test_a_file_with_pairs_the_system_overlaps_is_refused_by_every_command_naming_it(tmp_path):
    """As gap skips dualpipev's family with overlap_f_b_share > 0, a file of its overlapped pairs is
    refused by gap, search and frontier alike (search and frontier timed it as plain ops)."""
    text = (Path(__file__).parents[1] / "configs" / "fast-slow.toml").read_text()
    system = tmp_path / "overlap.toml"
    system.write_text(text.replace("overlap_comm_compute = true", "overlap_comm_compute = true\noverlap_f_b_share = 1.0"))
    path = tmp_path / "dv.csv"
    path.write_text(format_torch_csv(generate("dualpipev", 2, 16)))
    model = ["--model", "llama3-8b", "--system", system, "--micro-batch", 1, "--time-limit", 10, "-q"]
    for command in ("gap", "search", "frontier"):
        result = run(command, "--schedule-file", path, *model)
        assert result.exit_code == 1
        assert result.stderr.startswith("error: --schedule-file: dv runs overlapped F&B pairs, which the system's "
                                        "overlap_f_b_share = 1 shortens"), (command, result.stderr)
    # the library refuses it as well (gap_report returned an empty report, the reason only in skipped)
    from ppopt.config import load_system
    from ppopt.errors import ConfigError
    from ppopt.solve.gap import gap_report
    from ppopt.solve.instance import InstanceSpec

    spec = InstanceSpec(2, 16, model="llama3-8b", system=load_system(system), global_batch=16)
    with pytest.raises(ConfigError, match="^given: dualpipev runs overlapped F&B pairs, which the system's overlap_f_b_share"):
        gap_report(spec, given=generate("dualpipev", 2, 16))


def test_a_file_named_after_a_family_sits_beside_that_family_on_the_frontier(tmp_path):
    """The file's point replaced every handcrafted entry of its name: the README's file saved as
    1f1b.csv showed one 1f1b at (5, 44) and the real 1F1B (4 activations, 49 slots) was gone."""
    (tmp_path / "1f1b.csv").write_text(WARM)
    result = run("frontier", "--schedule-file", tmp_path / "1f1b.csv", "--unit", "--comm", 1, "--time-limit", 30, "-q", "--json")
    assert result.exit_code == 0, result.output
    points = [(h["schedule"], h["peak_memory"], h["step_time_s"]) for h in json.loads(result.stdout)["handcrafted"]]
    assert ("1f1b", 5, 44) in points and ("1f1b", 4, 49) in points and ("gpipe", 8, 39) in points
