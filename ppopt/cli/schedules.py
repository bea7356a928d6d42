"""Commands over handcrafted schedules: list, table, evaluate."""

from __future__ import annotations

import click

from ppopt.cli import main
from ppopt.cli.options import emit_json, json_option, schedule_options, system_options
from ppopt.generators import REGISTRY


@main.command("list")
@json_option
def list_command(as_json: bool) -> None:
    """List the schedules, their options and their rules."""
    if as_json:
        emit_json([{"schedule": g.name, "summary": g.summary, "options": list(g.options), "rules": g.rules} for g in REGISTRY.values()])
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


def _presets(model, system, required: bool = False):
    """Load --model and --system (both or neither)."""
    from ppopt.config import load_model, load_system
    from ppopt.errors import ConfigError

    if (model is None) != (system is None) or (required and model is None):
        raise ConfigError("give both --model and --system" + (" (the simulation layer needs them)" if required else ""))
    if model is None:
        return None, None
    return load_model(model), load_system(system)


@main.command("evaluate")
@schedule_options()
@system_options()
@json_option
def evaluate_command(name, devices, microbatches, backward, options, model, system, global_batch, as_json) -> None:
    """Formula vs table (and, with --model and --system, simulated) metrics for one schedule or 'all'."""
    from ppopt.evaluate import evaluate, evaluate_all
    from ppopt.report.evaluation import evaluation_json, evaluation_text

    model_config, system_config = _presets(model, system)
    if name == "all":
        results, skipped = evaluate_all(devices, microbatches, backward, model_config, system_config, global_batch, **options)
        for schedule, reason in skipped.items():
            click.echo(f"skipped {schedule}: {reason}", err=True)
    else:
        results = [evaluate(name, devices, microbatches, backward, model_config, system_config, global_batch, **options)]
    if as_json:
        payload = [evaluation_json(r) for r in results]
        emit_json(payload if name == "all" else payload[0])
    else:
        click.echo(evaluation_text(results, backward))


@main.command("compare")
@schedule_options(name=False)
@system_options(required=True)
@json_option
def compare_command(devices, microbatches, backward, options, model, system, global_batch, as_json) -> None:
    """Rank all applicable schedules in the formula, table and simulation layers; mark rank changes."""
    from ppopt.evaluate import evaluate_all, rank_layers
    from ppopt.report.evaluation import compare_json, compare_text

    model_config, system_config = _presets(model, system, required=True)
    results, skipped = evaluate_all(devices, microbatches, backward, model_config, system_config, global_batch, **options)
    for schedule, reason in skipped.items():
        click.echo(f"skipped {schedule}: {reason}", err=True)
    ranking = rank_layers(results)
    if as_json:
        emit_json(compare_json(results, ranking))
    else:
        click.echo(compare_text(results, ranking, backward, f"model {model_config.name} on system {system_config.name}"))
