"""Results whose per-device peak exceeds the system's memory are marked."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.config import load_system
from ppopt.evaluate import evaluate, memory_over
from ppopt.sweep.run import run_item
from ppopt.sweep.spec import EvalItem

OVER = ["-p", "8", "-m", "64", "--model", "llama3-70b", "--system", "dgx-h100", "--global-batch", "64"]


def run(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_memory_over_picks_the_worst_device():
    assert memory_over([10.0, 30.0, 30.0, 5.0], 20.0).device == 1  # the first of the equal worst
    assert memory_over([10.0, 30.0], 20.0).excess_bytes == 10.0
    assert memory_over([10.0, 20.0], 20.0) is None  # at capacity fits


def test_evaluate_marks_llama3_70b_on_eight_h100s():
    data = json.loads(run("evaluate", "-s", "1f1b", *OVER, "--json"))
    sim = data["simulation"]
    peaks = sim["peak_memory_bytes"]
    worst = max(peaks)
    assert sim["memory_capacity_bytes"] == load_system("dgx-h100").memory_capacity_bytes == 80e9
    assert sim["over_memory"] is True
    assert sim["memory_excess_bytes"] == worst - 80e9
    assert sim["over_memory_device"] == peaks.index(worst)
    text = run("evaluate", "-s", "1f1b", *OVER)
    table_row = next(line for line in text.splitlines() if line.startswith("1f1b"))
    assert table_row.endswith(" #")
    footnote = next(line for line in text.splitlines() if line.startswith("# 1f1b"))
    # 80e9 bytes, which reads as a wrong preset when given in GiB alone: the GB it is sold as beside
    assert f"device {peaks.index(worst)} peaks at" in footnote and "over the system's 74.51 GiB (80 GB) per device" in footnote


def test_a_run_that_fits_is_not_marked():
    args = ["-p", "4", "-m", "8", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "8"]
    data = json.loads(run("evaluate", "-s", "1f1b", *args, "--json"))
    assert data["simulation"]["over_memory"] is False and data["simulation"]["memory_excess_bytes"] == 0
    assert "#" not in run("evaluate", "-s", "1f1b", *args)


def test_compare_marks_every_schedule_over_memory():
    text = run("compare", *OVER)
    data = json.loads(run("compare", *OVER, "--json"))
    over = [r["schedule"] for r in data if r["simulation"]["over_memory"]]
    # 70B on 8 GPUs without tensor parallelism fits nowhere: about 8.8 B parameters per GPU at 16 bytes
    # of weights, gradients and Adam state each (bytes_per_param_state) are 141 GB, over the H100's 80
    assert data and over == [r["schedule"] for r in data]
    for name in over:
        assert any(line.startswith(f"# {name}: device ") for line in text.splitlines())


def test_sweep_rows_carry_the_flag():
    from ppopt.config import load_model

    model, system = load_model("llama3-70b"), load_system("dgx-h100")
    inputs = {"schedule": "1f1b", "devices": 8, "microbatches": 64, "chunks": None, "waves": None, "split": None,
              "global_batch": 64, "backward": 2}
    row = run_item(EvalItem(inputs, "h", model, system, 1.0))[0]
    expected = evaluate("1f1b", 8, 64, model=model, system=system, global_batch=64).memory_over
    assert row["sim_over_memory"] is True
    assert expected is not None and row["sim_memory_excess_bytes"] == expected.excess_bytes
    assert row["sim_memory_excess_bytes"] == row["sim_peak_memory_bytes_max"] - 80e9


def test_evaluate_refuses_more_stages_than_layers_before_building_the_schedule(monkeypatch):
    """A sweep point of Chimera on 1,024 devices for the study's 128 layers spent 85 s building
    8 million ops before the simulator refused the split; the library's evaluate now refuses first."""
    import ppopt.evaluate
    from ppopt.config import load_model
    from ppopt.errors import ScheduleError

    def no_build(*args, **kwargs):
        raise AssertionError("the schedule was built")

    monkeypatch.setattr(ppopt.evaluate, "generate", no_build)
    with pytest.raises(ScheduleError) as refused:
        evaluate("chimera", 1024, 4096, model=load_model("study"), system=load_system("mid-mid"))
    assert refused.value.reason == "1024 stages (1024 devices x 1 under chimera) exceed the model's 128 layers"


@pytest.mark.parametrize("microbatches, parallel, reason", [
    (1_000_000, None, "1,000,000 microbatches exceed the global batch of 256 sequences (give fewer, or a larger global batch)"),
    (6, {"dp": 2}, "global batch of 256 sequences does not split into 6 microbatches x 2 replicas (give another count, "
                   "data-parallel degree or global batch)"),
])
def test_evaluate_refuses_a_batch_that_does_not_split_before_building_the_schedule(monkeypatch, microbatches, parallel, reason):
    """`evaluate -s 1f1b -p 4 -m 1000000 --model llama3-8b` built 4 million ops for 9 s before the
    batch was found not to split; the library's evaluate (and so every sweep point) now refuses first."""
    import ppopt.evaluate
    from ppopt.config import load_model
    from ppopt.errors import ConfigError
    from ppopt.job import Parallelism

    def no_build(*args, **kwargs):
        raise AssertionError("the schedule was built")

    monkeypatch.setattr(ppopt.evaluate, "generate", no_build)
    with pytest.raises(ConfigError) as refused:
        evaluate("1f1b", 4, microbatches, model=load_model("llama3-8b"), system=load_system("dgx-a100"),
                 parallel=None if parallel is None else Parallelism(**parallel))
    assert refused.value.field == "microbatches" and refused.value.reason == reason


def test_the_evaluate_command_refuses_a_batch_that_does_not_split_before_building(monkeypatch):
    import ppopt.cli.schedules

    monkeypatch.setattr(ppopt.cli.schedules, "resolve_schedule", lambda *a, **k: pytest.fail("the schedule was built"))
    result = CliRunner().invoke(main, ["evaluate", "-s", "1f1b", "-p", "4", "-m", "1000000", "--model", "llama3-8b",
                                       "--system", "dgx-a100", "-q"])
    assert result.exit_code == 1
    assert result.output == ("error: --microbatches: 1,000,000 microbatches exceed the global batch of 256 sequences "
                             "(give fewer, or a larger global batch)\n")
