"""What the run's fork server imports before it starts any rank (:func:`ppopt.run.launcher._context`).

Ctrl-C in a terminal reaches every process of the command, the fork server too. The server imports
torch (seconds) before it starts ignoring SIGINT itself, and a KeyboardInterrupt during that import
printed torch's traceback under the command's ``aborted``. So this module ignores SIGINT first,
then imports the worker. The ranks the server forks inherit that: the launcher stops them itself
(it kills every rank still running when it returns, also when the command is interrupted).
"""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)

import ppopt.run.worker  # noqa: E402,F401  (after the signal: this import is the slow part)
