"""Shared set-up of the test session."""

import signal

# A shell starts a background job (``pytest ... &``) with SIGINT ignored, and Python then installs no
# KeyboardInterrupt handler, which the Ctrl-C tests (tests/test_run.py, tests/test_sweep_deadline.py)
# rely on; their subprocesses inherit the disposition. Restore Python's own handler so those tests
# check ppopt and not how the suite was started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
