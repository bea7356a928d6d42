"""The ``ppopt`` console script: the command line of :mod:`ppopt.cli`, with Ctrl-C covered from the
first moment.

Importing the command line takes about half a second (numpy, pydantic, the generators); Ctrl-C in
that time raised KeyboardInterrupt before :func:`ppopt.cli.main` could turn it into ``aborted``, and
Python printed a traceback. This module imports nothing but :mod:`sys` and the (lazy) package.
"""

import sys


def main() -> None:
    """Import the command line and run it; Ctrl-C while importing prints ``aborted``, exit status 1,
    as it does once the command runs (after a line break, as click's, that ends the terminal's ``^C``)."""
    try:
        from ppopt.cli import main as command_line
    except KeyboardInterrupt:
        sys.stderr.write("\naborted\n")
        raise SystemExit(1) from None
    command_line()
