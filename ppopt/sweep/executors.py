"""Where a sweep's work items run: one interface, ``map_unordered(fn, items)``.

``fn`` must be a module-level function and the items plain picklable data, so the same call works
in-process, in a process pool and in Ray tasks. Results come back in completion order; the sweep
sorts rows itself, so the executor never changes what is written.

- :class:`LocalExecutor` ``(jobs)``: ``jobs == 1`` runs in-process (no pool, easiest to debug);
  ``jobs > 1`` uses a ``ProcessPoolExecutor`` with the ``spawn`` start method (no fork of a process
  that may hold threads, e.g. a Ray client or CP-SAT). Workers die with the sweep: each starts a
  watcher thread that blocks on ``multiprocessing.parent_process().sentinel`` (the read end of a
  pipe whose write end only the parent holds, or the parent's process handle on Windows) and ends
  the worker with ``os._exit`` when it becomes ready, i.e. when the parent is gone, however it
  died (``kill -9`` included). No polling, no platform-specific call.
- :class:`RayExecutor` ``(address=None, num_cpus=None)``: one Ray task per item. Connects to the
  Ray cluster at ``address``, uses an already initialised Ray, or starts a local one (``num_cpus``);
  it shuts down only a Ray it started. ``ray`` is optional (the ``ray`` extra): ``pip install 'ray>=2.9'``. Workers of a
  remote cluster must be able to import ``ppopt`` (install it there, or use a Ray runtime_env).

Use executors as context managers: leaving the block cancels items not yet started; leaving it on
an exception (Ctrl-C, SIGTERM, a deadline) also stops the items running (``abort()``).

``map_unordered(fn, items, deadline)`` raises :class:`TimeLimitReached` at ``deadline`` (a
``time.monotonic()`` value): a pool or Ray waits for results no longer than that, and an item run
in this process is interrupted by a ``SIGALRM`` (:func:`alarm_at`), except inside an
:func:`uninterrupted` section. With a deadline, items are drawn only when a worker is free to start
them, so a caller's check that an item fits in the time left is made when it starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice
from typing import Any

from ppopt.errors import ConfigError, PpoptError
from ppopt.host import check_local_parallelism

__all__ = ["Executor", "LocalExecutor", "RayExecutor", "TimeLimitReached", "alarm_at", "make_executor", "uninterrupted"]


def _die_with_parent() -> None:
    """Pool initializer: end this worker as soon as the process that started it is gone, and end it
    quietly on Ctrl-C (the terminal sends it to every process of the group: the parent reports
    ``aborted``; each worker printed its own KeyboardInterrupt traceback). A parent that ignores
    Ctrl-C (a background job of a script) passes that on, and its workers keep ignoring it: they
    used to end, and the parent then failed on its broken pool."""
    import multiprocessing
    import signal
    import threading

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, lambda *_: os._exit(1))

    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        from multiprocessing.connection import wait

        wait([sentinel])  # ready at EOF: the parent closed its end by exiting
        os._exit(1)

    threading.Thread(target=watch, name="ppopt-parent-watch", daemon=True).start()


class TimeLimitReached(BaseException):
    """A deadline passed (:meth:`Executor.map_unordered`). Not an :class:`Exception`, so that no
    handler of an item's own errors takes it; it unwinds the caller as Ctrl-C does."""


class _Alarm:
    """A ``SIGALRM`` that raises :class:`TimeLimitReached`, except inside :func:`uninterrupted`:
    the item then ends by itself, and the caller starts no further one, the deadline having passed."""

    def __init__(self) -> None:
        self.holding = 0

    def ring(self, signum, frame) -> None:
        if not self.holding:
            raise TimeLimitReached


_ALARM: _Alarm | None = None
"""The alarm armed in this process, if any (pool workers and Ray tasks have none)."""

MAX_ALARM_S = 1e7
"""A deadline further off than this (116 days) arms no alarm: the system timer takes no such value
(``--time-limit 1e308``), and nothing within ppopt's size limits runs that long."""


@contextlib.contextmanager
def alarm_at(deadline: float | None) -> Iterator[None]:
    """Raise :class:`TimeLimitReached` in the block at ``deadline`` (at once if it has passed). Armed
    only in the main thread (the only one that may set a handler) and for a deadline within
    :data:`MAX_ALARM_S`; the previous handler is restored after the block."""
    global _ALARM
    if deadline is None or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeLimitReached
    if left >= MAX_ALARM_S:
        yield
        return
    alarm, outer = _Alarm(), _ALARM
    previous = signal.signal(signal.SIGALRM, alarm.ring)
    _ALARM = alarm
    try:
        signal.setitimer(signal.ITIMER_REAL, left)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _ALARM = outer
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """A section the alarm must not cut (a CP-SAT solve, which cannot be stopped cleanly from a
    signal handler and honours its own time limit): a ring inside it is let pass."""
    alarm = _ALARM
    if alarm is None:
        yield
        return
    alarm.holding += 1
    try:
        yield
    finally:
        alarm.holding -= 1


def _left(deadline: float | None) -> float | None:
    """Seconds to ``deadline`` (never negative), or None without one: a wait's timeout."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _run_here(fn: Callable[[Any], Any], items: Iterable[Any], deadline: float | None) -> Iterator[Any]:
    """``fn`` over ``items`` in this process, each call interrupted at ``deadline``."""
    for item in items:
        with alarm_at(deadline):
            result = fn(item)
        yield result


def _check_jobs(jobs: int) -> None:
    if jobs < 1:
        raise ConfigError(f"must be >= 1, got {jobs}", field="jobs")
    check_local_parallelism(jobs, "jobs")


RAY_SHUTDOWN_S = 2.0
"""Seconds to keep for shutting down a local Ray this executor started: ``ray.shutdown()`` took
1.5 s on this project's 2-core machine, after the last result (``plan --time-limit`` ran 18 % over)."""


RAY_START_S = 3.0
"""Seconds starting a local Ray takes at least: ``make_executor("ray")`` (importing Ray and
``ray.init()``, nothing else) took 3.0 and 3.9 s in two runs on this project's 2-core machine. A time limit that this start and the run's kept time would use up is refused before
Ray starts (:func:`starting_s`)."""


def starting_s(kind: str, address: str | None) -> float:
    """Seconds the executor ``kind`` takes at least to start: a local Ray's :data:`RAY_START_S`; 0
    for the local pool and for a Ray cluster reached at ``address`` (no estimate)."""
    return RAY_START_S if kind == "ray" and address is None else 0.0


class Executor:
    """Runs ``fn`` over ``items``; results in completion order. ``closing_s``: seconds :meth:`close`
    may take, which a command with a time limit keeps for it."""

    closing_s = 0.0

    def map_unordered(self, fn: Callable[[Any], Any], items: Iterable[Any], deadline: float | None = None) -> Iterator[Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def abort(self) -> None:
        """Stop the items still running, their results unwanted; :meth:`close` follows."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:  # SIGTERM, a deadline, an error: the items still running are not wanted
            self.abort()
        self.close()


class LocalExecutor(Executor):
    """In-process (``jobs == 1``) or a pool of ``jobs`` spawned processes. Each spawned process
    imports the main module again, so a script that uses more than one job must start the work
    under ``if __name__ == "__main__":`` (Python's multiprocessing guide, "Safe importing of main
    module")."""

    def __init__(self, jobs: int = 1):
        _check_jobs(jobs)
        self.jobs = jobs
        self._pool = None

    def map_unordered(self, fn, items, deadline=None):
        # items are drawn only as workers free up: a caller's generator that stops at a deadline
        # (ppopt plan's budget) is then asked when each item is due, not all at once up front
        queue = iter(items)
        if self.jobs == 1:
            yield from _run_here(fn, queue, deadline)
            return
        first = list(islice(queue, 2))
        if len(first) <= 1:
            yield from _run_here(fn, first, deadline)
            return
        queue = chain(first, queue)
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_die_with_parent)
        # a bounded window of submitted items: cancelling on exit stays cheap, memory stays flat; with
        # a deadline, one per worker, so that an item is drawn when it starts
        window = self.jobs if deadline is not None else 4 * self.jobs
        running = set()
        try:
            for item in queue:
                running.add(self._pool.submit(fn, item))
                if len(running) >= window:
                    break
            while running:
                done, running = wait(running, timeout=_left(deadline), return_when=FIRST_COMPLETED)
                if not done:
                    raise TimeLimitReached
                for future in done:
                    try:
                        result = future.result()
                    except BrokenProcessPool:
                        raise PpoptError(f"one of the {self.jobs} worker processes ended abruptly (killed, out of memory, or started "
                                         "from a script without `if __name__ == \"__main__\":`, which each worker then runs again); "
                                         "the items running were lost (a sweep keeps the rows written: rerun it)",
                                         field="jobs") from None
                    yield result
                    following = next(queue, None)
                    if following is not None:
                        running.add(self._pool.submit(fn, following))
        except GeneratorExit:  # the caller stopped drawing: the items queued are not needed
            for future in running:
                future.cancel()
            raise
        # on any other exception the caller aborts: cancelling the queued futures first would race
        # with the pool marking them broken when its workers are terminated (InvalidStateError)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def abort(self) -> None:
        """Terminate the pool's workers (``shutdown`` would wait for their items to end), then close."""
        if self._pool is not None:
            # the pool's own record of its workers: Python 3.11's pool has no public way to stop them
            for process in list((getattr(self._pool, "_processes", None) or {}).values()):
                process.terminate()
            self.close()


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("ray needs ray: pip install 'ray>=2.9' (ppopt's ray extra)", field="executor") from None
    return ray


class RayExecutor(Executor):
    """One Ray task per item (see the module docstring)."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None, deadline: float | None = None):
        """``deadline`` (``time.monotonic()``): a cluster at ``address`` that has not answered by
        then is an error (a port where something else listens kept ``ray.init`` retrying for
        minutes); the connecting thread is left behind, for the command's exit to end."""
        self.ray = _import_ray()
        self.started = False
        if not self.ray.is_initialized():
            import logging

            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
            if address:
                _check_reachable(address)
                options["address"] = address
            elif num_cpus:
                options["num_cpus"] = num_cpus
            if not address:  # ppopt's own local cluster: Ray's notice that it turned token auth on is noise here
                logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
            try:
                if address and deadline is not None:
                    self._init_before(options, deadline)
                else:
                    self.ray.init(**options)
            except ConfigError:
                raise
            except Exception as error:  # ray raises ConnectionError, RuntimeError, ...: report one line
                raise ConfigError(f"cannot start or reach Ray{f' at {address}' if address else ''}: {' '.join(str(error).split())}") from None
            self.started = True
            self.closing_s = RAY_SHUTDOWN_S

    def _init_before(self, options: dict[str, Any], deadline: float) -> None:
        """``ray.init(**options)`` in a thread, waited for until ``deadline``."""
        import logging

        outcome: list[BaseException | None] = []

        def connect() -> None:
            try:
                self.ray.init(**options)
                outcome.append(None)
            except Exception as error:  # noqa: BLE001  (re-raised in the caller's thread)
                outcome.append(error)

        # Ray's driver sets its SIGTERM handler only from the main thread, and says so: noise here
        logging.getLogger("ray._private.worker").setLevel(logging.ERROR)
        thread = threading.Thread(target=connect, name="ray-connect", daemon=True)
        thread.start()
        thread.join(max(0.0, deadline - time.monotonic()))
        if not outcome:
            raise ConfigError(f"cannot reach the Ray cluster at {options['address']}: no answer within the time limit "
                              "(is it a Ray cluster's address, host:6379 by default?)", field="address")
        if outcome[0] is not None:
            raise outcome[0]

    def map_unordered(self, fn, items, deadline=None):
        ray = self.ray
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        # a window of tasks in flight, refilled as they finish (as the local pool does): items are
        # drawn from the caller when due, so one that stops at a deadline is honoured
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        window = cpus if deadline is not None else 4 * cpus
        queue = iter(items)
        pending = [remote.remote(item) for item in islice(queue, window)]
        stopped = False
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=_left(deadline))
                if not done:
                    stopped = True
                    raise TimeLimitReached
                for ref in done:
                    yield ray.get(ref)
                    following = next(queue, None)
                    if following is not None:
                        pending.append(remote.remote(following))
        finally:
            for ref in pending:
                ray.cancel(ref, force=stopped)  # at a deadline a running task is ended, not asked to stop

    def close(self) -> None:
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
            self.started = False


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a ``host:port`` nobody listens on (``ray.init`` would retry for minutes).
    Other forms (``auto``, ``ray://...``, ``local``) are left to Ray."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not host or "/" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise ConfigError(f"cannot reach the Ray cluster at {address}: {error.strerror or error}") from None


def make_executor(kind: str = "local", jobs: int = 1, address: str | None = None, deadline: float | None = None) -> Executor:
    """``"local"`` (``jobs`` processes) or ``"ray"`` (``address``; ``jobs`` CPUs for a local Ray;
    ``deadline``, ``time.monotonic()``: by when a cluster at ``address`` must answer)."""
    if kind == "local":
        if address:
            raise ConfigError("is for the ray executor", field="address")
        return LocalExecutor(jobs)
    if kind == "ray":
        if address is None:  # a local Ray gets ``jobs`` CPUs of this machine
            _check_jobs(jobs)
        elif jobs < 1:
            raise ConfigError(f"must be >= 1, got {jobs}", field="jobs")
        elif jobs > 1:  # it would be dropped: a running cluster has the CPUs it was started with
            raise ConfigError(f"gives a local Ray its CPUs; the cluster at --address {address} uses its own: drop -j {jobs}",
                              field="jobs")
        return RayExecutor(address, num_cpus=jobs if jobs > 1 else None, deadline=deadline)
    raise ConfigError(f"unknown executor {kind!r} (known: local, ray)")
