"""Throughput of the communication-aware simulator, in ops simulated per second (best of 3).

Schedules: 1F1B at 32 devices x 1024 microbatches, and interleaved 1F1B with 2 chunks per device
when its generator is available. Costs are built directly: F = 1 ms, B = 2 ms (I = W = 1 ms), 16 MiB
messages over a 50 GB/s, 5 us link.

Two numbers for ppopt: ``simulate(schedule, ...)`` end to end (checking and flattening the schedule
included), and ``simulate(prepare(schedule), ...)``, the run alone on a prepared schedule (what a sweep
over costs or systems pays per point).

Baseline: PyTorch's unit-step dry-run simulator ``_simulate_comms_compute`` from
``torch.distributed.pipelining.schedules`` on the same schedule, lowered to send/recv actions with
``_add_send_recv`` beforehand (the lowering is not timed, like ``prepare``). Its ops/s counts the same
compute ops as ours, although it also steps through the send/recv actions. Best of 3, or a single run
when one run takes over 2 s. Skipped when torch is not installed.

Run: ``python benchmarks/simulate_ops.py``.
"""

from __future__ import annotations

import gc
import time

from ppopt.config import LinkConfig
from ppopt.costs import Costs, StageCost
from ppopt.errors import ScheduleError
from ppopt.generators import generate
from ppopt.ir import Schedule
from ppopt.simulate import prepare, simulate

DEVICES = 32
MICROBATCHES = 1024
LINK = LinkConfig(bandwidth_bytes_per_s=50e9, latency_s=5e-6)
REPEATS = 3


def costs_for(stages: int) -> Costs:
    stage = StageCost(
        layers=1, forward_s=1e-3, backward_s=2e-3, input_grad_s=1e-3, weight_grad_s=1e-3,
        activation_bytes=1.0, persistent_bytes=0.0, param_count=0.0, send_bytes=16 * 2**20,
    )
    return Costs(stages=(stage,) * stages, microbatch_size=1, microbatches=MICROBATCHES)


def best_of(function, repeats: int = REPEATS, patience_s: float = float("inf")) -> float:
    """Best wall time of ``repeats`` calls; stops early once one call took longer than ``patience_s``."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - t0)
        if best > patience_s:
            break
    return best


def torch_baseline(schedule: Schedule) -> float | None:
    """Seconds (best of 3) of PyTorch's ``_simulate_comms_compute`` on ``schedule``, or None."""
    try:
        from torch.distributed.pipelining.schedules import _Action, _add_send_recv, _simulate_comms_compute
    except ImportError:
        return None

    def stage_to_rank(stage: int) -> int:
        return schedule.placement[stage][0]

    compute = {d: [_Action.from_str(str(op)) for op in order] for d, order in enumerate(schedule.orders)}
    lowered = _add_send_recv(compute, stage_to_rank, schedule.stages)
    # _simulate_comms_compute copies the per-rank lists itself, so the same input can be reused.
    return best_of(lambda: _simulate_comms_compute(lowered, stage_to_rank, schedule.stages), patience_s=2.0)


def main() -> None:
    cases = [("1f1b", {})]
    try:
        generate("interleaved-1f1b", 2, 2, chunks=2)
        cases.append(("interleaved-1f1b", {"chunks": 2}))
    except (ImportError, ScheduleError) as error:
        print(f"interleaved-1f1b skipped: {error}")
    torch_missing = False
    for name, options in cases:
        schedule = generate(name, DEVICES, MICROBATCHES, **options)
        costs = costs_for(schedule.stages)
        ops = sum(len(order) for order in schedule.orders)
        result = simulate(schedule, costs, link=LINK)
        total = best_of(lambda: simulate(schedule, costs, link=LINK))
        prepared = prepare(schedule)
        run = best_of(lambda: simulate(prepared, costs, link=LINK))
        label = f"{name}{' ' + str(options) if options else ''} p={DEVICES} m={MICROBATCHES} ({ops} ops)"
        print(f"{label}: step {result.step_time_s:.4f} s")
        print(f"  ppopt simulate, end to end:    {total * 1e3:8.1f} ms  {ops / total:>11,.0f} ops/s")
        print(f"  ppopt simulate, prepared:      {run * 1e3:8.1f} ms  {ops / run:>11,.0f} ops/s")
        baseline = torch_baseline(schedule)
        if baseline is None:
            torch_missing = True
            continue
        print(f"  torch _simulate_comms_compute: {baseline * 1e3:8.1f} ms  {ops / baseline:>11,.0f} ops/s")
        print(f"  speed-up over torch: {baseline / total:.1f}x end to end, {baseline / run:.1f}x prepared "
              f"(target >= 10x)")
    if torch_missing:
        print("PyTorch baseline skipped: torch is not installed (pip install torch==2.13.0 installs a CPU build)")


if __name__ == "__main__":
    main()
