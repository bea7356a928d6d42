"""One rank of a run (a separate process, started by :mod:`ppopt.run.launcher`; imports torch).

:func:`child` (the process the launcher starts for a rank): joins the process group on 127.0.0.1 (gloo;
NCCL with one GPU per rank where there is one, :func:`rank_device`)
(meeting through a file of the run's folder, a timeout on every collective), builds this
rank's stages (the stages in its row of the CSV), loads the CSV into PyTorch's
``_PipelineScheduleRuntime`` (which lowers it, adding the sends and receives), and runs
``warmup + steps`` steps on one synthetic batch; then the next schedule of the spec, and at the end
the ping-pong message timing when asked. It writes ``OUT_DIR/rank<R>.json``: per schedule, the
duration of every timed step, of every compute op (F, I, W, B: the stage's ``forward_one_chunk``,
``backward_one_chunk`` and ``backward_weight_one_chunk``, so waiting for a message is not counted),
the gradient check of its stages and, on the rank holding the last stage, the loss. Any failure
prints one line ``rank R: <reason>`` on stderr and exits with status 1.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import statistics
import sys
import threading
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

from ppopt.io.torch_csv import read_torch_csv
from ppopt.run.launcher import LAUNCHER_PID
from ppopt.run.model import build_stages, loss_fn, synthetic_batch
from ppopt.run.spec import TOLERANCES, Job, RunSpec, spec_from_json

_TIMED = {"forward_one_chunk": "F", "backward_one_chunk": "B", "backward_weight_one_chunk": "W"}


def _synchronizer(device: torch.device):
    """A call that waits for the device's queued work (CUDA kernels run asynchronously), so wall
    clock readings time the work itself; nothing to wait for on the CPU."""
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def _time_ops(stage: PipelineStage, times: dict, device: torch.device) -> None:
    """Wrap the stage's compute entry points to record (kind, seconds) per call.

    ``backward_one_chunk(full_backward=False)`` is the input-gradient backward I."""
    sync = _synchronizer(device)
    for method, kind in _TIMED.items():
        original = getattr(stage, method)

        def timed(*args, _original=original, _kind=kind, **kwargs):
            sync()
            start = time.perf_counter()
            result = _original(*args, **kwargs)
            sync()
            code = "I" if _kind == "B" and not kwargs.get("full_backward", True) else _kind
            times[(stage.stage_index, code)].append(time.perf_counter() - start)
            return result

        setattr(stage, method, timed)


def _gradient_check(spec: RunSpec, mine: dict, reference: dict, losses: list, ref_loss: float, last: bool) -> dict:
    rtol, atol = TOLERANCES[spec.dtype]
    worst_abs = worst_rel = 0.0
    checked, bad = 0, []
    for s, module in mine.items():
        for (name, param), (_, ref) in zip(module.named_parameters(), reference[s].named_parameters(), strict=True):
            if param.grad is None:
                bad.append(f"stage {s} {name}: no gradient")
                continue
            diff = (param.grad - ref.grad).abs()
            worst_abs = max(worst_abs, float(diff.max()))
            worst_rel = max(worst_rel, float((diff / ref.grad.abs().clamp_min(atol)).max()))
            checked += param.numel()
            if not torch.allclose(param.grad, ref.grad, rtol=rtol, atol=atol):
                bad.append(f"stage {s} {name}: max difference {float(diff.max()):.3g}")
    result: dict = {"elements": checked, "max_abs_error": worst_abs, "max_rel_error": worst_rel,
                    "rtol": rtol, "atol": atol, "mismatches": bad}
    result["ok"] = not bad
    if last:
        loss = float(torch.stack([x.detach() for x in losses]).mean())
        result.update(loss=loss, reference_loss=ref_loss, loss_error=abs(loss - ref_loss))
        if abs(loss - ref_loss) > atol + rtol * abs(ref_loss):
            bad.append(f"loss {loss!r} != reference {ref_loss!r}")
        result["ok"] = not bad
    return result


def _ping_pong(spec: RunSpec, rank: int, dtype: torch.dtype, device: torch.device) -> dict:
    """One-way message time between ranks 0 and 1: half the mean round trip, for a one-element
    tensor (latency) and for one microbatch's activations (the stage-to-stage message)."""
    shape = (spec.model.microbatch_size, spec.model.sequence, spec.model.hidden)
    result = {}
    sync = _synchronizer(device)
    for label, tensor in (("small", torch.zeros(1, dtype=dtype, device=device)), ("activation", torch.zeros(shape, dtype=dtype, device=device))):
        for _ in range(2):  # warm-up round trips
            _round_trip(rank, tensor)
        sync()
        start = time.perf_counter()
        for _ in range(spec.p2p_repeats):
            _round_trip(rank, tensor)
        sync()
        result[label] = {"bytes": tensor.numel() * tensor.element_size(),
                         "one_way_s": (time.perf_counter() - start) / (2 * spec.p2p_repeats)}
    return result


def _round_trip(rank: int, tensor: torch.Tensor) -> None:
    if rank == 0:
        dist.send(tensor, 1)
        dist.recv(tensor, 1)
    else:
        dist.recv(tensor, 0)
        dist.send(tensor, 0)


def run(spec: RunSpec, rank: int, store: str) -> dict:
    """Every job of ``spec`` in order on this rank, then the message timing. ``store``: the file
    through which the ranks meet (a ``FileStore`` in the run's folder: torch's TCP store would listen on
    every network interface, whatever its address says, while the gloo sockets are on 127.0.0.1)."""
    torch.set_num_threads(spec.threads)
    dtype = getattr(torch, spec.dtype)
    device = rank_device(rank, spec.devices)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.FileStore(store, spec.devices), rank=rank, world_size=spec.devices,
                            timeout=timedelta(seconds=spec.timeout_s))
    result: dict = {"rank": rank, "backend": backend, "jobs": [_run_job(spec, job, rank, dtype, device) for job in spec.jobs]}
    if spec.p2p_repeats and spec.devices >= 2:
        dist.barrier()
        if rank < 2:
            result["p2p"] = _ping_pong(spec, rank, dtype, device)
    dist.barrier()
    dist.destroy_process_group()
    return result


def rank_device(rank: int, devices: int) -> torch.device:
    """CUDA device ``rank`` (with NCCL) when this machine has a GPU per rank, else the CPU (with gloo).

    The CUDA path follows PyTorch's pipelining documentation; it is not exercised by the tests,
    which run on CPUs only.
    """
    if torch.cuda.is_available() and torch.cuda.device_count() >= devices:
        return torch.device("cuda", rank)
    return torch.device("cpu")


def _run_job(spec: RunSpec, job: Job, rank: int, dtype: torch.dtype, device: torch.device) -> dict:
    schedule = read_torch_csv(Path(job.csv_path))
    owned = [s for s, holders in enumerate(schedule.placement) if holders[0] == rank]
    modules = [module.to(device) for module in build_stages(spec.model, job.stages, spec.seed, dtype)]
    mine = {s: modules[s] for s in owned}
    tokens, target = (x.to(device) for x in synthetic_batch(spec.model, job.microbatches, spec.seed))

    reference_loss = 0.0
    if spec.check:  # the same model, not pipelined, on the same batch
        reference = [copy.deepcopy(m) for m in modules]
        loss = loss_fn(torch.nn.Sequential(*reference)(tokens), target)
        loss.backward()
        reference_loss = float(loss.detach())

    times: dict = defaultdict(list)
    stages = []
    for s in owned:
        stage = PipelineStage(mine[s], s, job.stages, device)
        _time_ops(stage, times, device)
        stages.append(stage)
    runtime = _PipelineScheduleRuntime(stages, job.microbatches, loss_fn=loss_fn, scale_grads=True)
    runtime._load_csv(job.csv_path)
    first, last = 0 in mine, job.stages - 1 in mine
    optimizer = torch.optim.SGD([p for m in mine.values() for p in m.parameters()], lr=1e-3)

    sync = _synchronizer(device)
    step_s: list[float] = []
    result: dict = {"name": job.name, "stages": owned}
    for step in range(spec.warmup + spec.steps):
        if step == spec.warmup:
            times.clear()
        losses: list = []
        optimizer.zero_grad(set_to_none=True)
        dist.barrier()
        sync()
        start = time.perf_counter()
        runtime.step(*([tokens] if first else []), target=target if last else None, losses=losses)
        sync()
        elapsed = time.perf_counter() - start
        if step == 0 and spec.check:
            result["check"] = _gradient_check(spec, mine, {s: reference[s] for s in owned}, losses, reference_loss, last)
        if last:
            result.setdefault("losses", []).append(float(torch.stack([x.detach() for x in losses]).mean()))
        optimizer.step()  # not timed: ppopt's simulator predicts the pipeline, not the optimizer
        if step >= spec.warmup:
            step_s.append(elapsed)
    result["step_s"] = step_s
    result["ops"] = [{"stage": s, "kind": k, "median_s": statistics.median(v), "count": len(v)} for (s, k), v in sorted(times.items())]
    dist.barrier()
    return result


TEMPORARY_PREFIXES = ("ppopt-run-", "ppopt-csv-")
"""The temporary folders of a run (the launcher's, and the schedules' CSVs): the only ones a rank
removes, when its launcher is gone."""


def _end_without_the_launcher(launcher: int, leftovers: list[Path], every_s: float = 0.5) -> None:
    """End this rank (status 1) once the launcher process is gone or its fork server, this rank's
    parent, has ended (it does when the launcher's end closes its pipe): a launcher killed with
    SIGKILL cannot stop its ranks, which ran all their steps with nobody waiting for them, nor
    remove its temporary folders, so the ranks do (``leftovers``, those among them named by
    :data:`TEMPORARY_PREFIXES`; every rank tries, the first to get there removes them)."""
    parent = os.getppid()

    def gone() -> None:
        for folder in leftovers:
            if folder.name.startswith(TEMPORARY_PREFIXES):
                shutil.rmtree(folder, ignore_errors=True)
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(every_s)
            if os.getppid() != parent:
                gone()
            try:
                os.kill(launcher, 0)
            except ProcessLookupError:
                gone()
            except PermissionError:  # a process of another user under that id: not ours, so ours is gone
                gone()

    threading.Thread(target=watch, name="ppopt-launcher-watch", daemon=True).start()


def child(spec_text: str, rank: int, environment: dict[str, str], out_dir: str) -> None:
    """A rank's process (started by the launcher): its stderr goes to ``out_dir/rank<R>.err``, its
    result to ``out_dir/rank<R>.json``; any failure is one line ``rank R: <reason>`` and exit status 1.
    Without ``out_dir`` the launcher has already given up the run (interrupted while this rank was
    being started, it removed the folder): the rank ends at once, status 1, without a word."""
    try:
        errors = os.open(Path(out_dir) / f"rank{rank}.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError:
        os._exit(1)
    os.dup2(errors, 2)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.environ.update(environment)
    try:
        spec = spec_from_json(spec_text)
        _end_without_the_launcher(int(environment[LAUNCHER_PID]), [Path(out_dir), *sorted({Path(job.csv_path).parent for job in spec.jobs})])
        result = run(spec, rank, str(Path(out_dir) / "store"))
        (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(result))
    except BaseException as error:  # one line for the launcher, never a traceback
        text = " ".join(str(error).split()) or type(error).__name__
        print(f"rank {rank}: {type(error).__name__}: {text[:400]}", file=sys.stderr, flush=True)
        os._exit(1)
