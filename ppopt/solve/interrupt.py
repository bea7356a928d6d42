"""Ctrl-C during a CP-SAT solve stops the whole command, at once.

CP-SAT's own SIGINT handler (its ``catch_sigint_signal``, on by default) ends only the solve it
interrupts and returns that solve's best, so a command of many solves (the large-neighbourhood
search, ``gap``, ``frontier``) went on to the end of its budget and exited 0 as if nothing had
happened. With CP-SAT's handler off, Python's stays in place, but Python runs it only when the solve
returns, up to its whole time limit later.

So the command line calls :func:`install` once: Python's signal handler then also writes each
signal's number to a pipe (:func:`signal.set_wakeup_fd`), and a watcher thread reading it stops every
running solve (``CpSolver.stop_search``, which CP-SAT allows from another thread; the solve releases
Python's lock while it runs). The solve returns within milliseconds and Python raises
``KeyboardInterrupt`` in the main thread, which the command line reports as ``aborted``, exit 1.
Without :func:`install` (ppopt used as a library, or a process that ignores SIGINT) solves keep
CP-SAT's own handling.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the command line installs the watcher before any solver is imported
    from ortools.sat.python import cp_model

_lock = threading.Lock()
_running: set[cp_model.CpSolver] = set()
_installed = False


def install(sigterm: bool = False) -> bool:
    """Stop running solves on SIGINT (module docstring), and with ``sigterm`` make SIGTERM stop the
    process as Ctrl-C does (:func:`sigterm_as_ctrl_c`, for good: the command line's clean-up runs, a
    file being written is removed rather than left half-written, ``aborted``, exit 1), running solves
    stopped too. Only from the main thread, only where no other wakeup pipe is set, and only for a
    signal at its default (a parent that ignores SIGINT or SIGTERM keeps it ignored); True when the
    watcher is in place. Pools start their workers with ``spawn``, so they keep the default action."""
    global _installed
    if _installed:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    interrupts = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    terminates = sigterm and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if not (interrupts or terminates):
        return False
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    if previous != -1:  # someone else's (an event loop's): leave it alone
        signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)
        return False
    threading.Thread(target=_watch, args=(read,), name="ppopt-interrupt", daemon=True).start()
    if terminates:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    _installed = True
    return True


def _watch(read: int) -> None:
    while data := os.read(read, 64):
        if signal.SIGINT in data or signal.SIGTERM in data:  # SIGTERM arrives here only with a handler (install's)
            with _lock:
                for solver in _running:
                    solver.stop_search()


@contextmanager
def stoppable(solver: cp_model.CpSolver) -> Iterator[None]:
    """Run a solve inside this block so that Ctrl-C stops it (when :func:`install` is in place)."""
    if not _installed:
        yield
        return
    solver.parameters.catch_sigint_signal = False
    with _lock:
        _running.add(solver)
    try:
        yield
    finally:
        with _lock:
            _running.discard(solver)


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """In this block SIGTERM (``kill``, ``timeout``) stops the command as Ctrl-C does: it raises
    ``KeyboardInterrupt``, so the block's clean-up runs (a sweep writes rows.csv, a run stops its
    ranks and removes its folders), where the default action ended the process at once. Main thread
    only (the only one that may set a handler); the previous handler is restored after the block. A
    SIGTERM the parent ignores stays ignored, as :func:`install` keeps it, and one :func:`install`
    already turned into Ctrl-C needs nothing more."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) in (signal.SIG_IGN, _raise_interrupt):
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:  # None: a handler not set from Python, which cannot be restored; the default then
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _raise_interrupt(signum, frame) -> None:
    """SIGTERM as Ctrl-C, once: a second SIGTERM while the first one's clean-up runs is ignored (GNU
    ``timeout`` signals the process, then its group; two 2 ms apart printed a traceback after
    ``aborted``, or left a run's folder behind)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt
