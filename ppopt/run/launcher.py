"""Start one process per rank on this machine, wait for all of them, collect their results.

Every rank joins a gloo process group on the loopback interface only (``GLOO_SOCKET_IFNAME=lo``,
127.0.0.1); the ranks meet through a file in the run's temporary folder (``FileStore``), so no
rendezvous port is opened, and gloo's connections between the ranks listen on 127.0.0.1 alone. The launcher polls the processes: when one exits with an
error (or is killed), it kills the others at once and raises :class:`~ppopt.run.RunError` with one
line naming that rank and its last message; when the whole run (from the first rank's start) exceeds ``spec.timeout_s``, it kills
every rank and says so. Nothing is left running.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import multiprocessing.context
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ppopt.run import RunError
from ppopt.run.spec import RunSpec, spec_json
from ppopt.solve.interrupt import sigterm_as_ctrl_c

LAUNCHER_PID = "PPOPT_LAUNCHER_PID"
"""The environment variable giving a rank the launcher's process id: a rank whose launcher is gone
(killed with SIGKILL, which no clean-up follows) ends itself (:func:`ppopt.run.worker.child`)."""


def _environment(spec: RunSpec, rank: int) -> dict[str, str]:
    """What a rank sets in its environment before joining the group: loopback only."""
    return {
        "WORLD_SIZE": str(spec.devices),
        "RANK": str(rank),
        "OMP_NUM_THREADS": str(spec.threads),
        "GLOO_SOCKET_IFNAME": "lo",
        LAUNCHER_PID: str(os.getpid()),
    }


def _context() -> multiprocessing.context.ForkServerContext:
    """Ranks are forked from a server process that imported torch once (``forkserver`` with the
    worker preloaded): starting P ranks then costs one ``import torch``, not P. The server and its
    ranks ignore Ctrl-C (:func:`_start_server_without_ctrl_c`); this process stops them."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["ppopt.run.worker"])
    _start_server_without_ctrl_c()
    return context


def _start_server_without_ctrl_c() -> None:
    """Start the fork server (if it is not running) with SIGINT ignored, which the new interpreter
    inherits and keeps (CPython installs its KeyboardInterrupt handler only over the default
    action), and so do the ranks it forks: Ctrl-C while the server started and imported torch
    (seconds) printed torch's traceback under the command's ``aborted``. The disposition is the whole process's, so this process ignores Ctrl-C while it
    spawns the server, a few milliseconds, and a Ctrl-C within them is lost (blocking SIGINT instead
    does not keep it: Linux hands it to another thread, of torch's, which ignores it)."""
    import multiprocessing.forkserver

    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, handler)


PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")
"""What a rank's error says when another rank died under it (gloo's words): the other rank's failure
is the one to report (rank 0 was named when rank 1 got SIGTERM)."""


def _last_line(path: Path, killed: bool) -> str:
    """A failed rank's own last line (``rank R: ...``); else, for a rank that exited, its last line
    of any text (a traceback's tail, from before it could write its own). A rank killed by a signal
    says nothing itself: what its stderr holds then is a library's warning, not the reason."""
    if not path.exists():
        return "no message"
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith("rank ")]
    return (ours or ([] if killed else lines) or ["no message"])[-1]


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def launch(spec: RunSpec, on_started: Callable[[list], None] | None = None) -> list[dict]:
    """Run ``spec`` on ``spec.devices`` local processes; the result of every rank, rank 0 first.

    ``on_started`` is called with the processes (``multiprocessing`` processes: ``pid``,
    ``exitcode``) once all are started; tests use it to kill one.
    Raises RunError: one rank failed (the others are then stopped), or the run timed out.
    """
    from ppopt.run.worker import child

    with sigterm_as_ctrl_c():  # `kill` stops the ranks and removes the folder, as Ctrl-C does
        try:
            return _launch(spec, child, on_started)
        except KeyboardInterrupt:
            _stop_server()
            raise


def _stop_server() -> None:
    """Kill the fork server and reap it: after a Ctrl-C it ignores, one that was still importing
    torch ran on at a full core for seconds after the command had said ``aborted``. (A later
    launch in the same process starts a new one.)"""
    import multiprocessing.forkserver

    server = multiprocessing.forkserver._forkserver  # the module's one server (private, hence the care)
    pid = getattr(server, "_forkserver_pid", None)
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        server._stop()  # type: ignore[attr-defined]  # closes its pipe and reaps it


def _launch(spec: RunSpec, child: Callable, on_started: Callable[[list], None] | None) -> list[dict]:
    context = _context()
    deadline = math.inf  # set once the first rank has started
    with tempfile.TemporaryDirectory(prefix="ppopt-run-") as tmp:
        folder = Path(tmp)
        processes: list = []
        try:
            for rank in range(spec.devices):
                process = context.Process(target=child, args=(spec_json(spec), rank, _environment(spec, rank), tmp), daemon=True)
                process.start()
                processes.append(process)
                if rank == 0:  # the first start waits for the fork server's `import torch` (2.4 s), before the --timeout
                    deadline = time.monotonic() + spec.timeout_s  # the whole run: starting the other ranks (seconds at p = 16) too
                if time.monotonic() > deadline:
                    raise _timed_out(spec.timeout_s)
            if on_started is not None:
                on_started(processes)
            _wait(processes, deadline, spec.timeout_s, folder)
        finally:
            for process in processes:
                if process.exitcode is None:
                    process.kill()
            for process in processes:
                process.join()
        return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(spec.devices)]


def _timed_out(timeout_s: float) -> RunError:
    return RunError(f"the ranks did not finish within {timeout_s:.3g} s (--timeout); stopped all ranks")


def _wait(processes: list, deadline: float, timeout_s: float, folder: Path) -> None:
    """Poll the ranks until all have finished, one has failed, or ``deadline`` (monotonic) passes."""
    while True:
        codes = [process.exitcode for process in processes]
        failed = {r: code for r, code in enumerate(codes) if code is not None and code != 0}
        if failed:
            lines = {r: _last_line(folder / f"rank{r}.err", code < 0) for r, code in failed.items()}
            # the cause, not its echo: a rank killed by a signal, else one that did not just lose a peer
            first = min(failed, key=lambda r: (failed[r] >= 0, any(m in lines[r] for m in PEER_LOST), r))
            raise RunError(f"rank {first} failed ({_exit_reason(failed[first])}): {lines[first]}; stopped the other ranks")
        if all(code == 0 for code in codes):
            return
        if time.monotonic() > deadline:
            raise _timed_out(timeout_s)
        time.sleep(0.02)
