"""Shared set-up of the test session."""

import signal
import time

import pytest
from hypothesis import settings

# No per-example deadline: Hypothesis's default (200 ms) is a timed assertion, which a loaded
# machine fails without any change in behaviour; performance is measured in benchmarks/.
settings.register_profile("ppopt", deadline=None)
settings.load_profile("ppopt")

# A shell starts a background job (``pytest ... &``) with SIGINT ignored, and Python then installs no
# KeyboardInterrupt handler, which the Ctrl-C tests (tests/test_run.py, tests/test_sweep_deadline.py)
# rely on; their subprocesses inherit the disposition. Restore Python's own handler so those tests
# check ppopt and not how the suite was started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


class StillClock:
    """A stand-in for the ``time`` module of the modules a budget test patches: ``monotonic()`` stands
    still until the test moves it (``jump``, or ``now`` set), so what a test asserts about a time
    limit does not depend on the machine's speed or load. Everything else (``sleep``, ...) is the
    real module's."""

    def __init__(self, now: float = 0.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def jump(self, seconds: float = 1e6) -> None:
        self.now += seconds

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture
def still_clock(monkeypatch):
    """``still_clock("ppopt.plan", ...)``: one :class:`StillClock` for the ``time`` of each module named."""

    def patch(*modules: str) -> StillClock:
        clock = StillClock()
        for module in modules:
            monkeypatch.setattr(f"{module}.time", clock)
        return clock

    return patch


@pytest.fixture(autouse=True)
def progress_only_when_asked(monkeypatch):
    """Progress that appears once work has run ``PROGRESS_AFTER_S`` (phase lines, "still working")
    depends on the machine's load; a test's output must not. Here it waits an hour, and a test of
    progress lowers it itself (to 0, "as if it had taken long")."""
    monkeypatch.setattr("ppopt.solve.options.PROGRESS_AFTER_S", 3600.0)
