"""The published-throughput table of ``data/published`` (Narayanan et al. 2021, Table 1), read into
:class:`ppopt.published.PublishedRun` rows. Bad data raises ConfigError with one line naming the
file, line and column: a missing or non-numeric cell, a value that is not positive, a count that is
not whole, a value outside :data:`LIMITS` (the model's sizes are those of
:data:`ppopt.config.MODEL_LIMITS`; the others keep every step time a positive finite number); also a
column named twice in the header and a line the ``csv`` module cannot read (a field over 131,072
characters). Numbers are plain ASCII decimal text and quoted cells are cut short, as in
:mod:`ppopt.io.measured` (the readers of :mod:`ppopt.io`)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from ppopt.config import MODEL_LIMITS
from ppopt.errors import ConfigError
from ppopt.io import decimal_float, read_csv_table, require_file_name, shown, source_name, unread_columns
from ppopt.published import PublishedRun

__all__ = ["ASSUMED", "COLUMNS", "read_published", "unused_columns"]

PUBLISHED_FILE = "a published-throughput CSV file"
"""What the file is, in the readers' messages (:func:`ppopt.io.unreadable`)."""

PUBLISHED_BYTES = 2**20
"""The largest table read, in bytes (the shipped one is under 1 kB)."""

MAX_PUBLISHED_RUNS = 1_000
"""Most runs of a table (the shipped one holds 10). Each is predicted at four micro batches on every
system, about 5 ms a run and system: 2,500 runs took 14 s on one system; refused while reading."""

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

ASSUMED = ("each run is predicted at the fastest micro batch of 1, 2, 4 and 8 that fits, with 1F1B and full "
           "recomputation, whatever other columns say")
"""What ``ppopt published`` assumes beyond the columns it reads (its note on ignored columns says it)."""

MAX_GPUS = 2**24
"""The most GPUs of a run (the largest published runs use about 2**15)."""
LIMITS: dict[str, tuple[float, float]] = {
    "parameters": (1e-9, 1e9),
    "heads": (1, MODEL_LIMITS["num_attention_heads"]),
    "hidden": (1, MODEL_LIMITS["hidden_size"]),
    "layers": (1, MODEL_LIMITS["num_layers"]),
    "tp": (1, MAX_GPUS),
    "pp": (1, MAX_GPUS),
    "gpus": (1, MAX_GPUS),
    "global_batch": (1, MODEL_LIMITS["global_batch_size"]),
    "teraflops": (1e-6, 1e6),
}
"""The range of each field: (least, most). A GPU reaches between 1 MFLOP/s and 1 EFLOP/s (an A100's
dense peak is 312 teraFLOP/s); a model has between one parameter and 10**18."""


def _plain(limit: float) -> str:
    """A limit as a user types it: whole numbers with thousands separators (1,073,741,824, not
    1.07374e+09), others as ``:g``."""
    return f"{int(limit):,}" if limit == int(limit) else f"{limit:g}"


def read_published(source: str | os.PathLike[str]) -> list[PublishedRun]:
    """Read the table (``data/published/megatron-lm-2021.csv``). Raises ConfigError naming the line
    and column of a missing or bad cell, or of a layout whose t·p does not divide the GPUs."""
    require_file_name(source, PUBLISHED_FILE, ConfigError)
    name = source_name(source)
    header, records = read_csv_table(Path(source), PUBLISHED_BYTES, ConfigError, PUBLISHED_FILE, COLUMNS)
    missing = [column for column in COLUMNS if column not in header]
    if missing:
        raise ConfigError(f"{name}: missing column '{missing[0]}'")
    runs: list[PublishedRun] = []
    for line, cells in records:
        if not any(cell.strip() for cell in cells):  # a blank line, or one of empty cells
            continue
        if len(runs) == MAX_PUBLISHED_RUNS:
            raise ConfigError(f"{name}: more than {MAX_PUBLISHED_RUNS:,} runs (line {line}): split the table, "
                              f"{MAX_PUBLISHED_RUNS:,} runs at most each")
        if any(cell.strip() for cell in cells[len(header):]):
            raise ConfigError(f"{name}: line {line}: {len(cells)} cells, but the header names {len(header)} columns")
        row = dict(zip(header, cells))
        values: dict[str, float] = {}
        for column, short in COLUMNS.items():
            cell = row.get(column)
            if cell is None or not cell.strip():  # a short row, or an empty cell
                raise ConfigError(f"{name}: line {line}, column '{column}': missing value")
            try:
                values[short] = decimal_float(cell.strip())
            except ValueError:
                raise ConfigError(f"{name}: line {line}, column '{column}': not a number: {shown(cell)}") from None
            if not values[short] > 0:
                raise ConfigError(f"{name}: line {line}, column '{column}': must be positive")
            least, most = LIMITS[short]
            if not least <= values[short] <= most:
                raise ConfigError(f"{name}: line {line}, column '{column}': must lie between {_plain(least)} and {_plain(most)}, "
                                  f"got {shown(cell)}")
        counts = {key: int(values[key]) for key in ("heads", "hidden", "layers", "tp", "pp", "gpus", "global_batch")}
        for column, short in COLUMNS.items():
            if short in counts and counts[short] != values[short]:
                raise ConfigError(f"{name}: line {line}, column '{column}': not an integer: {shown(row[column])}")
        run = PublishedRun(line, parameters_billion=values["parameters"], teraflops_per_gpu=values["teraflops"],
                           **counts)
        if run.hidden % run.heads:  # as `validate` refuses it: the model would not exist
            raise ConfigError(f"{name}: line {line}, column 'attention heads': {run.heads} does not divide the hidden "
                              f"size {run.hidden} (Megatron splits the hidden size evenly among the heads)")
        if run.gpus % (run.tp * run.pp):
            raise ConfigError(f"{name}: line {line}, column 'GPUs': {run.gpus} is not a multiple of "
                              f"t x p = {run.tp * run.pp}")
        earlier = next((r for r in runs if replace(r, line=line) == run), None)
        if earlier is not None:  # it would weigh that run twice in the MAPE
            raise ConfigError(f"{name}: line {line} repeats line {earlier.line} (the same run and throughput): give each run once")
        runs.append(run)
    if not runs:
        raise ConfigError(f"{name}: no data rows")
    return runs


def unused_columns(source: str | os.PathLike[str]) -> list[str]:
    """Header names of the CSV ``source`` that :func:`read_published` does not read (a run's micro
    batch, say: the runs are predicted as :data:`ASSUMED`). Call after :func:`read_published` has
    accepted the file."""
    header, records = read_csv_table(Path(source), PUBLISHED_BYTES, ConfigError, PUBLISHED_FILE, COLUMNS)
    return unread_columns(header, records, set(COLUMNS))
