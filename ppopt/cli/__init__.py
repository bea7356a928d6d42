"""The ``ppopt`` command line: a thin layer over the library.

Results go to stdout, progress and errors to stderr. Exit status: 0 ok, 1 invalid input or an
infeasible request (one-line reason), 2 usage error.
"""

from __future__ import annotations

import click

from ppopt.errors import PpoptError

FIELD_FLAGS = {"time_limit_s": "time_limit", "memory_limit_bytes": "memory_limit"}
"""Library field names that differ from the parameter name of the option that sets them."""


def flag_for(field: str, command: click.Command | None) -> str:
    """The flag of ``command`` that sets ``field`` (``--chunks`` for ``chunks``), or ``field`` itself."""
    name = FIELD_FLAGS.get(field, field)
    for param in command.params if command is not None else ():
        if param.name == name and isinstance(param, click.Option):
            return max(param.opts, key=len)
    return field


def error_line(error: PpoptError, command: click.Command | None) -> str:
    """``error: <flag>: <reason>`` when the error names a field the command has a flag for."""
    if error.field:
        return f"error: {flag_for(error.field, command)}: {error.reason}"
    return f"error: {error}"


class _Cli(click.Group):
    """Turns every :class:`PpoptError` into ``error: <reason>`` on stderr and exit status 1."""

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


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ppopt")
def main() -> None:
    """Pipeline-parallel schedules as tables: evaluate, search, and measure optimality gaps."""


from ppopt.cli import measured, outputs, schedules, solver, sweep  # noqa: E402,F401  (registers the commands)
