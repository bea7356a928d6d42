"""Throughput of ppopt's in-process evaluation path beside PyTorch's own, in compute ops per second.

Schedules: 1F1B, interleaved 1F1B (2 chunks per device) and ZB-V at 32 devices x 1024 microbatches.

ppopt, timed in one process (what ``ppopt evaluate -s NAME --model study --system mid-mid`` runs for
the simulation layer; not timed: the process's start-up, reading the presets, which are loaded
once before, the formula and table layers and printing): generate the schedule (``ppopt.generators.generate``), validate it into its flat
form (``ppopt.validation.validated``), build the per-stage costs of the ``study`` model on the
``mid-mid`` system with one sequence per microbatch (``ppopt.evaluate.schedule_costs``) and simulate one step with communication
(``ppopt.simulate.simulate``). A second figure, "simulate only", times ``simulate`` on the already
validated flat form (what a sweep over systems pays per point).

PyTorch, timed: its own checks and lowering and its dry-run simulator, from
``torch.distributed.pipelining.schedules``: ``_validate_schedule`` on the compute actions,
``_add_send_recv`` (lowering to send/recv actions) and ``_simulate_comms_compute`` (unit-step
simulation). Not timed for PyTorch: building its compute action lists (``_Action``) from ppopt's
orders (fresh lists for each run, as PyTorch consumes them), because its own schedule classes
generate orders only around real pipeline stages; and it has no costs to build. So the PyTorch figure leaves out work the ppopt figure includes.

Each figure, PyTorch's and ppopt's, is the best of 5 runs (:data:`REPEATS`), so that a burst of
load on a shared machine does not hit all of them. The machine's load average at the
start and at the end is printed, since the machine may be shared. Without torch there is no
baseline, and the script says so on every case.

Run: ``PYTHONPATH=. python benchmarks/simulate_ops.py``.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable

from ppopt.config import load_model, load_system
from ppopt.evaluate import schedule_costs
from ppopt.generators import generate
from ppopt.ir import Schedule
from ppopt.simulate import simulate
from ppopt.validation import validated

DEVICES = 32
MICROBATCHES = 1024
CASES: list[tuple[str, dict[str, object]]] = [("1f1b", {}), ("interleaved-1f1b", {"chunks": 2}), ("zb-v", {})]
GLOBAL_BATCH = MICROBATCHES  # one sequence per microbatch
REPEATS = 5


def best_of(
    function: Callable[..., object],
    repeats: int = REPEATS,
    patience_s: float = float("inf"),
    setup: Callable[[], tuple] = tuple,
) -> float:
    """Best wall time of ``repeats`` calls of ``function(*setup())`` (``setup`` is not timed); stops
    early once one call took longer than ``patience_s``."""
    best = float("inf")
    for _ in range(repeats):
        arguments = setup()
        gc.collect()
        t0 = time.perf_counter()
        function(*arguments)
        best = min(best, time.perf_counter() - t0)
        if best > patience_s:
            break
    return best


def ppopt_end_to_end(name: str, options: dict[str, object], model, system) -> None:
    schedule = generate(name, DEVICES, MICROBATCHES, **options)
    flat = validated(schedule)
    simulate(flat, schedule_costs(schedule, model, system, GLOBAL_BATCH), system)


def torch_path(schedule: Schedule) -> tuple[Callable[..., object], Callable[[], tuple]] | None:
    """PyTorch's validation, lowering and simulation of ``schedule`` and the (untimed) setup of its
    input, or None. PyTorch consumes its action lists, so each run gets fresh ones."""
    try:
        from torch.distributed.pipelining.schedules import (
            _Action,
            _add_send_recv,
            _simulate_comms_compute,
            _validate_schedule,
        )
    except ImportError:
        return None
    placement = [holders[0] for holders in schedule.placement]
    actions = [[_Action.from_str(str(op)) for op in order] for order in schedule.orders]

    def setup() -> tuple:
        return ({d: list(order) for d, order in enumerate(actions)},)

    def run(compute: dict) -> object:
        _validate_schedule(compute, schedule.devices, schedule.stages, schedule.microbatches)
        lowered = _add_send_recv(compute, placement.__getitem__, schedule.stages)
        return _simulate_comms_compute(lowered, placement.__getitem__, schedule.stages)

    return run, setup


def main() -> None:
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    model, system = load_model("study"), load_system("mid-mid")
    for name, options in CASES:
        schedule = generate(name, DEVICES, MICROBATCHES, **options)
        ops = schedule.op_count
        costs = schedule_costs(schedule, model, system, GLOBAL_BATCH)
        flat = validated(schedule)
        step = simulate(flat, costs, system).step_time_s
        total = best_of(lambda name=name, options=options: ppopt_end_to_end(name, options, model, system), REPEATS)
        alone = best_of(lambda flat=flat, costs=costs: simulate(flat, costs, system), REPEATS)
        label = f"{name}{' ' + str(options) if options else ''} p={DEVICES} m={MICROBATCHES} ({ops:,} ops)"
        print(f"{label}: simulated step {step:.4g} s")
        print(f"  ppopt generate+validate+costs+simulate: {total * 1e3:8.1f} ms  {ops / total:>11,.0f} ops/s")
        print(f"  ppopt simulate only (validated flat):   {alone * 1e3:8.1f} ms  {ops / alone:>11,.0f} ops/s")
        baseline = torch_path(schedule)
        if baseline is None:
            print("  NO BASELINE: torch is not installed (pip install torch==2.13.0), so these figures compare with nothing")
            continue
        reference = best_of(baseline[0], setup=baseline[1])
        print(f"  torch validate+lower+simulate:          {reference * 1e3:8.1f} ms  {ops / reference:>11,.0f} ops/s")
        print(f"  ppopt's path is {reference / total:.1f}x faster (target >= 10x)")
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
