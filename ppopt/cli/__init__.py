"""The ``ppopt`` command line: a thin layer over the library.

Results go to stdout, progress and errors to stderr. Exit status: 0 ok, 1 invalid input or an
infeasible request (one-line reason), 2 usage error.
"""

from __future__ import annotations

import click

from ppopt.errors import PpoptError


class _Cli(click.Group):
    """Turns every :class:`PpoptError` into ``error: <reason>`` on stderr and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except PpoptError as error:
            click.echo(f"error: {error}", err=True)
            details = getattr(error, "details", "")
            if details:
                click.echo(details, err=True)
            ctx.exit(1)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ppopt")
def main() -> None:
    """Pipeline-parallel schedules as tables: evaluate, search, and measure optimality gaps."""


from ppopt.cli import outputs, schedules, solver, sweep  # noqa: E402,F401  (registers the commands)
