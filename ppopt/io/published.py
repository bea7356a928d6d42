"""The published-throughput table of ``data/published`` (Narayanan et al. 2021, Table 1), read into
:class:`ppopt.published.PublishedRun` rows. Bad data raises ConfigError with one line naming the
file, line and column."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from ppopt.errors import ConfigError
from ppopt.io import read_text_bounded
from ppopt.published import PublishedRun

__all__ = ["COLUMNS", "read_published"]

PUBLISHED_BYTES = 2**20
"""The largest table read, in bytes (the shipped one is under 1 kB)."""

COLUMNS = {
    "parameters (billion)": "parameters",
    "attention heads": "heads",
    "hidden size": "hidden",
    "layers": "layers",
    "tensor parallelism": "tp",
    "pipeline parallelism": "pp",
    "GPUs": "gpus",
    "global batch": "global_batch",
    "teraFLOP/s per GPU": "teraflops",
}
"""Columns (data/published/README.md) -> field names; every cell is a positive number, the counts
whole numbers."""


def read_published(source: str | os.PathLike[str]) -> list[PublishedRun]:
    """Read the table (``data/published/megatron-lm-2021.csv``). Raises ConfigError naming the line
    and column of a missing or bad cell, or of a layout whose t·p does not divide the GPUs."""
    name = str(source)
    try:
        text = read_text_bounded(Path(source), PUBLISHED_BYTES, "utf-8-sig")
    except OSError as error:
        raise ConfigError(f"{name}: cannot read file ({error.strerror or error})") from error
    reader = csv.DictReader(io.StringIO(text))
    missing = [column for column in COLUMNS if column not in (reader.fieldnames or [])]
    if missing:
        raise ConfigError(f"{name}: missing column '{missing[0]}'")
    runs = []
    for line, row in enumerate(reader, start=2):
        values: dict[str, float] = {}
        for column, short in COLUMNS.items():
            try:
                values[short] = float(row[column])
            except (TypeError, ValueError):
                raise ConfigError(f"{name}: line {line}, column '{column}': not a number: {row[column]!r}") from None
            if not values[short] > 0:
                raise ConfigError(f"{name}: line {line}, column '{column}': must be positive")
        counts = {key: int(values[key]) for key in ("heads", "hidden", "layers", "tp", "pp", "gpus", "global_batch")}
        for column, short in COLUMNS.items():
            if short in counts and counts[short] != values[short]:
                raise ConfigError(f"{name}: line {line}, column '{column}': not an integer: {row[column]!r}")
        run = PublishedRun(line, parameters_billion=values["parameters"], teraflops_per_gpu=values["teraflops"],
                           **counts)
        if run.gpus % (run.tp * run.pp):
            raise ConfigError(f"{name}: line {line}, column 'GPUs': {run.gpus} is not a multiple of "
                              f"t x p = {run.tp * run.pp}")
        runs.append(run)
    if not runs:
        raise ConfigError(f"{name}: no data rows")
    return runs
