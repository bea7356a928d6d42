"""The ``ppopt`` command line: a thin layer over the library.

Results go to stdout, progress and errors to stderr. Exit status: 0 ok, 1 invalid input or an
infeasible request (one-line reason), 2 usage error.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Callable

import click

from ppopt.errors import PpoptError
from ppopt.generators import OPTIONS, REGISTRY


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


def schedule_options(require_name: bool = True) -> Callable:
    """The flags every schedule-taking command shares: devices, microbatches, schedule options."""

    def decorate(command: Callable) -> Callable:
        options = [
            click.option("--devices", "-p", type=int, required=True, help="Number of devices (pipeline ranks), p."),
            click.option("--microbatches", "-m", type=int, required=True, help="Microbatches per step, m."),
            click.option("--chunks", "-v", type=int, default=None, help=f"Chunks per device for interleaved-1f1b [default: {OPTIONS['chunks'][0]}]."),
            click.option("--waves", type=int, default=None, help=f"Waves for hanayo [default: {OPTIONS['waves'][0]}]."),
            click.option("--split", default=None, help="Layer split A:B between the pipeline halves for chimera-asym [default: 1:2]."),
            click.option("--backward", type=int, default=1, show_default=True, help="Slot length of a full backward B in tables (1 or 2)."),
        ]
        if require_name:
            options.insert(0, click.option("--schedule", "-s", "name", required=True, help="Schedule name (see `ppopt list`), or 'all'."))
        for option in reversed(options):
            command = option(command)

        @functools.wraps(command)
        def wrapper(chunks, waves, split, **kwargs):
            kwargs["options"] = {"chunks": chunks, "waves": waves, "split": split}
            return command(**kwargs)

        return wrapper

    return decorate


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


def _emit_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2, default=_jsonable))


def _jsonable(value: object) -> object:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ppopt")
def main() -> None:
    """Pipeline-parallel schedules as tables: evaluate, search, and measure optimality gaps."""


@main.command("list")
@json_option
def list_command(as_json: bool) -> None:
    """List the schedules, their options and their rules."""
    if as_json:
        _emit_json([{"schedule": g.name, "summary": g.summary, "options": list(g.options), "rules": g.rules} for g in REGISTRY.values()])
        return
    from ppopt.report.text import aligned

    rows = [(g.name, ", ".join(f"--{o}" for o in g.options) or "-", g.rules or "any p, m", g.summary) for g in REGISTRY.values()]
    click.echo(aligned(("schedule", "options", "rules", "summary"), rows))


@main.command("table")
@schedule_options()
def table_command(name: str, devices: int, microbatches: int, backward: int, options: dict) -> None:
    """Print a schedule's unit-slot table: rows are devices, columns are slots."""
    from ppopt.evaluate import table_of
    from ppopt.report.text import grid, per_device

    table = table_of(name, devices, microbatches, backward, **options)
    click.echo(grid(table))
    click.echo(
        f"\nlength {table.length} slots, bubble ratio {table.bubble_ratio:.4f}, "
        f"peak live activations per device {per_device(table.peak_activations)}"
    )


@main.command("evaluate")
@schedule_options()
@json_option
def evaluate_command(name: str, devices: int, microbatches: int, backward: int, options: dict, as_json: bool) -> None:
    """Formula vs table metrics, side by side, for one schedule or 'all'."""
    from ppopt.evaluate import evaluate, evaluate_all
    from ppopt.report.evaluation import evaluation_json, evaluation_text

    if name == "all":
        results, skipped = evaluate_all(devices, microbatches, backward, **options)
        for schedule, reason in skipped.items():
            click.echo(f"skipped {schedule}: {reason}", err=True)
    else:
        results = [evaluate(name, devices, microbatches, backward, **options)]
    if as_json:
        payload = [evaluation_json(r) for r in results]
        _emit_json(payload if name == "all" else payload[0])
    else:
        click.echo(evaluation_text(results, backward))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
