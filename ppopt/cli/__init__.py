"""The ``ppopt`` command line: a thin layer over the library.

Results go to stdout, progress and errors to stderr. Exit status: 0 ok; 1 for every error, printed
as one line on stderr:

* invalid input or an infeasible request: ``error: <reason>``, naming the flag or field it is about
  (an invalid schedule adds its device orders around the fault, :func:`ppopt.validation.order_grid`);
* a usage error (an unknown option or command, a value of the wrong type, a bad choice, a missing
  required option): ``error: <click's message> (see 'ppopt <command> --help')``;
* output that cannot be written: ``error: cannot write PATH: <reason>`` for a file, ``error: cannot
  write to standard output: <reason>`` for stdout (a full disk, ``> /dev/full``). A reader that
  closes the pipe early (``| head -1``) ends the command quietly with status 1.

Ctrl-C prints ``aborted``, exit status 1, also during a CP-SAT solve (:mod:`ppopt.solve.interrupt`).
``--help`` and ``--version`` exit 0. No traceback is printed for anything a user can cause.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import click

from ppopt import IMPORTED_AT, __version__
from ppopt.errors import PpoptError

FIELD_FLAGS = {"time_limit_s": ("time_limit",), "memory_limit_bytes": ("memory_limit",), "schedule": ("schedule", "name"),
               "units": ("unit", "units"), "given": ("schedule_file",)}
"""Library field names that differ from the parameter name of the option that sets them: the names
to try, in order (the schedule's parameter is ``schedule`` in ``job``, ``name`` in the schedule
commands, where ``--schedule NAME`` may also be a file's)."""


_FROM_COMMAND_LINE = False
"""Whether the running command is this process's own command line (``ppopt ...``, ``python -m
ppopt ...``) rather than one invoked from Python (``main([...])``, click's test runner)."""


def startup_s() -> float:
    """Seconds since this process started (since ppopt was imported where the system does not say)
    when the running command is this process's own command line, else 0: a command's
    ``--time-limit`` covers the interpreter's start and the imports too."""
    if not _FROM_COMMAND_LINE:
        return 0.0
    return max(time.monotonic() - IMPORTED_AT, process_age_s() or 0.0)


def process_age_s() -> float | None:
    """Seconds since this process started, from Linux's ``/proc/self/stat`` (its start time, field 22,
    in clock ticks since boot, against ``CLOCK_BOOTTIME``; ticks are 10 ms); None elsewhere. The
    interpreter's start before ppopt's import takes tens of milliseconds: `plan --time-limit 4`
    printed its answer 30 ms past the limit when the budget counted from the import."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of the line, the 20th after the name
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def flag_for(field: str, command: click.Command | None) -> str:
    """The flag of ``command`` that sets ``field`` (``--chunks`` for ``chunks``), or ``field`` itself:
    the first long name declared (``--micro-batch`` before its former ``--microbatch-size``)."""
    for name in FIELD_FLAGS.get(field, (field,)):
        for param in command.params if command is not None else ():
            if param.name == name and isinstance(param, click.Option):
                return next((opt for opt in param.opts if opt.startswith("--")), max(param.opts, key=len))
    return field


def error_line(error: PpoptError, command: click.Command | None) -> str:
    """``error: <flag>: <reason>`` when the error names a field the command has a flag for; one line
    whatever the reason quotes (:func:`escaped`)."""
    if error.field:
        return escaped(f"error: {flag_for(error.field, command)}: {error.reason}")
    return escaped(f"error: {error}")


def escaped(text: str) -> str:
    """``text`` with each character that is not printable (a line break or another control
    character in a file or preset name the user gave) written as its Python escape, ``\\n``: such a
    name split the error line in two."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


MICROBATCHES_OF_A_JOB = ("a job's microbatch count follows from its batch: m = global batch / (micro batch x d); "
                         "give --global-batch and --micro-batch")
"""What `-m` means to job and plan, which take the batch instead of a microbatch count."""


def usage_line(error: click.UsageError) -> str:
    """A usage error on one line: ``error: <click's message> (see 'ppopt <command> --help')``;
    ``-m``/``--microbatches`` given to job or plan says how they set the microbatch count."""
    names = []
    ctx = error.ctx
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    command = " ".join(["ppopt", *reversed(names)])
    message = _one_line(error.format_message())
    if isinstance(error, click.NoSuchOption) and error.option_name in ("-m", "--microbatches") and names[:1] in (["job"], ["plan"]):
        message = f"No such option '{error.option_name}': {MICROBATCHES_OF_A_JOB}"
    return f"error: {message} (see '{command} --help')"


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


class _Command(click.Command):
    """A command whose options that take one value may be given once: click keeps the last of
    ``-p 2 -p 3`` (or of ``--grid --no-grid``) silently, so a user who meant one of them gets the
    other. Options declared ``multiple`` (or counted) repeat as they are meant to, and a plain flag
    (``-q -q``) means the same however often it is given."""

    def make_parser(self, ctx: click.Context):
        parser = super().make_parser(ctx)
        parse = parser.parse_args

        def parse_once(args: list[str]):
            try:
                opts, rest, order = parse(args)  # order: each option once per time it was given
            except click.UsageError as error:  # "-s requires an argument" comes without its command
                error.ctx = error.ctx or ctx
                raise
            given = Counter(param for param in order if _takes_one_value(param))
            repeated = next((param for param, times in given.items() if times > 1), None)
            if repeated is not None and not ctx.resilient_parsing:
                names = "/".join(repeated.opts + repeated.secondary_opts)
                raise click.UsageError(f"{names} is given {given[repeated]} times; give it once", ctx)
            return opts, rest, order

        parser.parse_args = parse_once  # type: ignore[method-assign]
        return parser

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        if not ctx.resilient_parsing:
            _refuse_output_over_input(ctx, self)
            _merge_repeated_values(ctx, self)
        return rest


def _merge_repeated_values(ctx: click.Context, command: click.Command) -> None:
    """A repeatable option given one value twice (``gap -s 1f1b -s 1f1b``, ``plan --recompute full
    --recompute full``, ``validate --by model --by model``) means it once, kept at its first place:
    the commands would otherwise run, plan or print it twice. Values are compared once converted
    (``--micro-batch 1 --micro-batch 01`` is one)."""
    for param in command.params:
        value = ctx.params.get(param.name or "")
        if isinstance(param, click.Option) and param.multiple and isinstance(value, tuple):
            ctx.params[param.name or ""] = tuple(dict.fromkeys(value))


def _takes_one_value(param: click.Parameter) -> bool:
    """An option whose repetition would silently drop a value: not repeatable, not counted, and
    not a plain flag (``-q -q`` is ``-q``); a flag pair (``--grid/--no-grid``) counts."""
    if not isinstance(param, click.Option) or param.multiple or param.count:
        return False
    return not (param.is_flag and not param.secondary_opts)


def _refuse_output_over_input(ctx: click.Context, command: click.Command) -> None:
    """An output option naming a file the command also reads (``plan --candidates c.csv
    --torch-csv c.csv``, ``search --costs c.json --trace c.json``): the output would replace the
    input. The outputs' callbacks have registered their files (:func:`ppopt.cli.options.check_output`)."""
    written: dict[str, str] = ctx.meta.get("ppopt.outputs", {})
    if not written:
        return
    for param in command.params:
        value = ctx.params.get(param.name or "")
        for path in value if isinstance(value, (tuple, list)) else (value,):
            if not isinstance(path, str) or not path or path == "-" or not os.path.isfile(path):
                continue
            flag = param.opts[0] if isinstance(param, click.Option) else (param.name or "").upper()
            written_by = written.get(os.path.realpath(path))
            if written_by is not None and written_by != flag:
                raise click.UsageError(f"{written_by} would replace the {flag} input {path}: give the output another name",
                                       ctx)


class _Cli(click.Group):
    """Every error a user can cause becomes one ``error:`` line on stderr and exit status 1.

    :meth:`invoke` turns a :class:`PpoptError` into its line (with the flag the field maps to);
    :meth:`main` does the same for click's usage errors, for a standard output that cannot be
    written and for a MemoryError (a request a size check missed); any other exception is a bug,
    reported from the command line in one line too (``PPOPT_DEBUG=1`` gives its traceback, and a
    caller's ``main(args)``, the tests', gets the exception). Its commands are :class:`_Command`: an
    option that takes one value is refused when given twice.
    """

    command_class = _Command

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except PpoptError as error:
            sub = ctx.invoked_subcommand
            command = self.get_command(ctx, sub) if sub else None
            click.echo(error_line(error, command), err=True)
            details = getattr(error, "details", "")
            if details:
                click.echo(details, err=True)
            ctx.exit(1)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        global _FROM_COMMAND_LINE
        _FROM_COMMAND_LINE = args is None  # click then reads sys.argv
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        if sys.stdout is None:  # started without one (`>&-`): writing it is an error, not a no-op
            sys.stdout = io.TextIOWrapper(_ClosedStdout(), write_through=True)
        elif _FROM_COMMAND_LINE:
            _complete_stdout()
        if _FROM_COMMAND_LINE:
            from ppopt.solve.interrupt import install

            # Ctrl-C stops a running CP-SAT solve and the command (`aborted`, exit 1), and so does `kill`
            # (or `timeout`): no file is left half-written
            install(sigterm=True)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
            sys.stdout.flush()
        except click.exceptions.NoArgsIsHelpError as error:  # bare `ppopt`: the help, as --help
            click.echo(error.ctx.get_help() if error.ctx else "")
            code = 0
        except click.UsageError as error:
            click.echo(usage_line(error), err=True)
            code = 1
        except click.ClickException as error:
            click.echo(f"error: {_one_line(error.format_message())}", err=True)
            code = 1
        except click.Abort:
            click.echo("aborted", err=True)
            code = 1
        except MemoryError:  # a size check missed a request: still one line, not a traceback
            click.echo("error: out of memory: the request needs more memory than this machine has; make it smaller",
                       err=True)
            code = 1
        except OSError as error:
            code = _stdout_failed(error)
        except Exception as error:  # a bug: one line from the command line (PPOPT_DEBUG=1 re-raises); tests see the exception
            if not _FROM_COMMAND_LINE or os.environ.get("PPOPT_DEBUG", "0") not in ("", "0"):
                raise
            click.echo(f"error: internal error ({type(error).__name__}: {_one_line(str(error))[:300]}): a bug in ppopt, not in "
                       "your input; PPOPT_DEBUG=1 shows where", err=True)
            code = 1
        code = code if isinstance(code, int) else 0
        if _FROM_COMMAND_LINE:
            _exit_now(code)
        sys.exit(code)


def _exit_now(code: int) -> None:
    """End this process at once, once its output is flushed: the command is done (files written and
    closed, pools and Ray shut down by their context managers), and freeing a large command's
    objects one by one at the interpreter's exit took 0.85 s after `ppopt plan` on 5,136 jobs,
    past its --time-limit. Only for the process's own command line: a caller's interpreter lives on."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    util = sys.modules.get("multiprocessing.util")
    if util is not None:  # multiprocessing's own clean-up at exit, which os._exit skips: a process pool's
        # semaphores (the resource tracker warned of them as leaked after an aborted pool, SIGTERM during
        # `sweep -j 2`) and the fork server's socket folder (/tmp/pymp-*, left after every `run`)
        with contextlib.suppress(Exception):
            util._run_finalizers()
    os._exit(code)


class _ClosedStdout(io.RawIOBase):
    """Standard output of a process started without one: every write fails with ``EBADF``."""

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))


class _WholeWrites(io.RawIOBase):
    """A file descriptor whose every write is complete or fails.

    A write of megabytes (a JSON result or a trace on standard output) can return short when the
    reader leaves part-way (``| head``) or the disk fills, and Python's buffered standard output then
    drops the rest without an error: the command would exit 0 with its output cut. Writing until
    every byte is out makes the next ``os.write`` raise (``EPIPE``, ``ENOSPC``), which the CLI
    reports (:func:`_stdout_failed`)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return False  # a terminal is not wrapped (:func:`_complete_stdout`)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.write(self._fd, view[done:])
        return done


def _complete_stdout() -> None:
    """Standard output through :class:`_WholeWrites`, with the same encoding and line buffering,
    when it is a pipe or a file (the original object stays as ``sys.__stdout__``). A terminal keeps
    Python's own stream: nothing large is cut there, and on Windows its console writer is not a
    plain file descriptor."""
    stdout = sys.stdout
    try:
        fd = stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file descriptor: nothing to complete
        return
    if os.isatty(fd):
        return
    stdout.flush()
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(_WholeWrites(fd)), encoding=stdout.encoding,
                                  errors=stdout.errors, line_buffering=bool(stdout.line_buffering))


def _stdout_failed(error: OSError) -> int:
    """Report a standard output that cannot be written (exit status 1); re-raise any other OSError.

    A closed pipe (``EPIPE``: the reader has gone, as with ``| head -1``) is not reported. Standard
    output is then pointed at the null device, so the interpreter's last flush cannot fail again.
    """
    if not _writing_stdout(error):
        raise error  # not standard output: a bug, with its traceback
    if error.errno != errno.EPIPE:
        click.echo(f"error: cannot write to standard output: {error.strerror or error}", err=True)
    with contextlib.suppress(Exception):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
    return 1


def flush_stdout() -> None:
    """Flush standard output now: a command that writes files after its results calls it first, so
    that a standard output it cannot write (a full disk) stops it, reported as :func:`click.echo`'s
    failures are, before any file is written."""
    sys.stdout.flush()


def _writing_stdout(error: OSError) -> bool:
    """Whether ``error`` was raised by ``click.echo`` writing to standard output, or by our last flush.

    Every result reaches stdout through ``click.echo`` (files go through :mod:`ppopt.io`, whose
    errors are :class:`PpoptError`), so the failing frame tells: ``echo`` with ``err`` false.
    """
    frames = []
    trace = error.__traceback__
    while trace is not None:
        frames.append(trace.tb_frame)
        trace = trace.tb_next
    last = frames[-1] if frames else None
    if last is not None and last.f_code is _Cli.main.__code__:
        return True  # sys.stdout.flush() after the command
    if any(frame.f_code is flush_stdout.__code__ for frame in frames):
        return True
    echo = click.utils.echo.__code__
    return any(frame.f_code is echo and not frame.f_locals.get("err") for frame in frames)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ppopt")
def main() -> None:
    """Pipeline-parallel schedules as tables: evaluate, search, and measure optimality gaps."""


from ppopt.cli import measured, outputs, plan, run, schedules, solver, sweep  # noqa: E402,F401  (registers the commands)
