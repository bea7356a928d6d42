"""Measured training steps in the CSV format of ``data/measured`` (vTrain's ground truth).

Columns (data/measured/README.md): an optional leading ``Parameters (billion)``, then ``# GPUs``,
``global batch``, ``micro batch``, ``hidden size``, ``attention heads``, ``# layers``,
``sequence length``, ``tensor parallelism``, ``data parallelism``, ``pipeline parallelism``,
``iteration time (ms)``, and an optional ``vocabulary size``. Each row becomes a
:class:`Measured`: a :class:`ppopt.job.Job` (a GPT-style model as trained by Megatron-DeepSpeed:
vocabulary 50257 unless the row gives one, learned position embeddings, GELU MLP with 4h, full
recomputation, 1F1B) and the measured step time.

A user's own runs may differ from those assumptions: the optional columns of :data:`OPTIONAL`
(``ffn hidden size``, ``kv heads``, ``activation``, ``flash attention``, ``dropout``,
``recompute``, ``schedule``, ``chunks``, ``sequence parallel``, ``distributed optimizer``) set them
row by row; an empty cell keeps the assumption. A row's model key (Spearman's groups) then names
what differs, e.g. ``h4096 a32 L32 s8192 f14336 kv8 swiglu flash``.

Bad data raises :class:`MeasuredDataError` with one line naming the file, line and column: a
missing or non-numeric cell, a count that is not positive or exceeds the model's limits
(:data:`ppopt.config.MODEL_LIMITS`), or an iteration time outside :data:`MIN_TIME_MS` to
:data:`MAX_TIME_MS`, attention heads that do not divide the hidden size, a parameter count that is no
positive number; also a column named twice in the header and a line the ``csv`` module cannot
read (a field over its limit of 131,072 characters). A number is plain ASCII decimal text (an
optional sign, digits, an optional fraction and exponent): Python's ``int()`` and ``float()`` would
also read ``300_0``, other scripts' digits such as ``٢``, ``inf`` and ``nan``. A cell quoted in a
message is cut to 40 characters (:func:`ppopt.io.shown`).

The CSV and number readers are :mod:`ppopt.io`'s (:func:`~ppopt.io.csv_records`,
:func:`~ppopt.io.check_header`, :func:`~ppopt.io.decimal_int`, :func:`~ppopt.io.decimal_float`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import get_args

from pydantic import ValidationError

from ppopt.config import ModelConfig, SystemConfig, load_system, validation_message
from ppopt.errors import ConfigError
from ppopt.generators import get
from ppopt.io import decimal_float, decimal_int, read_csv_table, require_file_name, shown, source_name, unread_columns
from ppopt.job import RECOMPUTE_MODES, SCHEDULES, Job, idle_job_flag, job_schedule

MEASURED_BYTES = 256 * 2**20
"""The largest measured-data CSV read, in bytes (the shipped files are under 1 MB)."""

__all__ = ["ASSUMED", "COLUMNS", "OPTIONAL", "Measured", "MeasuredDataError", "Unmodelled", "gpt_model", "label_far", "label_problem", "read_measured",
           "unused_columns"]

PARAMETERS = "Parameters (billion)"
TIME = "iteration time (ms)"
VOCABULARY_COLUMN = "vocabulary size"
"""Optional integer column (e.g. 51200 in the Megatron-LM runs of data/published)."""
COLUMNS = {
    "# GPUs": "gpus",
    "global batch": "global_batch",
    "micro batch": "micro_batch",
    "hidden size": "hidden",
    "attention heads": "heads",
    "# layers": "layers",
    "sequence length": "seq",
    "tensor parallelism": "tp",
    "data parallelism": "dp",
    "pipeline parallelism": "pp",
}
"""Integer columns -> short names."""

VOCABULARY = 50257
"""GPT-2 BPE vocabulary (Radford et al. 2019), as in the measured runs."""

MODEL_COLUMNS = {"num_layers": "# layers", "hidden_size": "hidden size", "num_attention_heads": "attention heads",
                 "seq_length": "sequence length", "global_batch_size": "global batch", "vocab_size": VOCABULARY_COLUMN,
                 "ffn_hidden_size": "ffn hidden size", "num_kv_heads": "kv heads"}
"""The column of each :class:`ppopt.config.ModelConfig` field :func:`gpt_model` fills from a row."""

MEASURED_FILE = "a measured-data CSV file"
"""What a measured-data file is, in the readers' messages (:func:`ppopt.io.unreadable`)."""

MIN_TIME_MS = 1e-3
"""The shortest iteration time of a row (1 µs), milliseconds."""
MAX_TIME_MS = 1e12
"""The longest iteration time of a row (about 32 years), milliseconds."""


BOOLEAN = ("true", "false")


@dataclass(frozen=True)
class OptionalColumn:
    """An optional column: the :class:`ppopt.config.ModelConfig` or :class:`ppopt.job.Job` field it
    sets (``target`` ``model`` or ``job``), its values (``int``, or the choices), and the label it
    adds to the model key (None: none; ``{}`` is the value)."""

    field: str
    target: str
    values: type[int] | tuple[str, ...]
    key: str | None = None


OPTIONAL = {
    "ffn hidden size": OptionalColumn("ffn_hidden_size", "model", int, "f{}"),
    "kv heads": OptionalColumn("num_kv_heads", "model", int, "kv{}"),
    "activation": OptionalColumn("activation", "model", get_args(ModelConfig.model_fields["activation"].annotation), "{}"),
    "flash attention": OptionalColumn("flash_attention", "model", BOOLEAN, "flash"),
    "dropout": OptionalColumn("dropout", "model", BOOLEAN, "no-dropout"),
    "tied embeddings": OptionalColumn("tie_embeddings", "model", BOOLEAN, "untied"),
    "learned positions": OptionalColumn("learned_position_embeddings", "model", BOOLEAN, "rotary"),
    "recompute": OptionalColumn("recompute", "job", RECOMPUTE_MODES),
    "schedule": OptionalColumn("schedule", "job", tuple(SCHEDULES)),
    "chunks": OptionalColumn("chunks", "job", int),
    "sequence parallel": OptionalColumn("sequence_parallel", "job", BOOLEAN),
    "distributed optimizer": OptionalColumn("distributed_optimizer", "job", BOOLEAN),
}
"""Optional columns (module doc) -> what they set. A model column's key label is added when the
row departs from the plain GPT (:func:`_departures`: ``flash`` for true, ``no-dropout``, ``untied``
and ``rotary`` for false)."""
KNOWN_COLUMNS = frozenset({*COLUMNS, TIME, PARAMETERS, VOCABULARY_COLUMN, *OPTIONAL})
"""Every column the reader reads (a header may name them in any letter case)."""

ASSUMED = ("each row is a GPT-style model trained by Megatron-DeepSpeed as in data/measured: GELU MLP of 4h, "
           "learned position embeddings, input and output embeddings tied, vocabulary 50,257 (or a 'vocabulary size' "
           "column), no flash attention, full recomputation, 1F1B (optional columns such as 'activation', 'flash "
           "attention', 'tied embeddings', 'recompute' and 'schedule' change that row by row: data/measured/README.md)")
"""What a row's job is, beyond its columns (the commands' help and their note on ignored columns say it)."""


def unused_columns(source: str | os.PathLike[str]) -> list[str]:
    """Header names of the CSV ``source`` that :func:`read_measured` does not read (a run's schedule
    or recomputation mode, say): the rows are modelled as :data:`ASSUMED` whatever they say. Call
    after :func:`read_measured` has accepted the file."""
    header, records = read_csv_table(Path(source), MEASURED_BYTES, MeasuredDataError, MEASURED_FILE, KNOWN_COLUMNS)
    return unread_columns(header, records, KNOWN_COLUMNS)


PARAMETERS_LABEL_FACTOR = 1.25
"""A parameter-count label more than this factor from the count the row's dimensions give gets a
note (the shipped files' labels lie within 2 % of theirs: 3.6 against 3.56, 18.4 against 18.44)."""


def label_far(label: float, counted: float) -> bool:
    """Whether a parameter-count label lies more than :data:`PARAMETERS_LABEL_FACTOR` from the count
    the dimensions give (both in the same unit): measured rows and published runs alike."""
    return not 1 / PARAMETERS_LABEL_FACTOR <= label / counted <= PARAMETERS_LABEL_FACTOR


def label_problem(row: Measured) -> str | None:
    """Why the row's 'Parameters (billion)' label disagrees with its dimensions (:func:`label_far`),
    or None; the prediction follows the dimensions."""
    from ppopt.costs import model_param_count

    if row.parameters_billion is None:
        return None
    counted = model_param_count(row.job.model) / 1e9
    if not label_far(row.parameters_billion, counted):
        return None
    return (f"'{PARAMETERS}' says {row.parameters_billion:g}, but the layers, hidden size and vocabulary give "
            f"{counted:.3g} billion; the prediction follows them, the label is only read")


class MeasuredDataError(ConfigError):
    """A measured-data file that cannot be read: one line naming the row and column."""


@dataclass(frozen=True)
class Measured:
    """One measured step: where it came from, the job, and its step time."""

    line: int
    """Line of the CSV file (the header is line 1)."""
    job: Job
    measured_s: float
    model_key: str
    """Which model (dimensions) the row trains, e.g. ``h3072 a32 L30 s2048``."""
    source: str = ""
    """File name the row came from."""
    parameters_billion: float | None = None
    """The row's 'Parameters (billion)' label, if it has one: only a label (the dimensions give the
    model), which :func:`label_problem` checks against them."""

    def on(self, system: SystemConfig) -> Measured:
        """The same row with its job on ``system`` (e.g. a calibrated system predicting it)."""
        return replace(self, job=replace(self.job, system=system))


@dataclass(frozen=True)
class Unmodelled:
    """A well-formed row ppopt cannot model, and why."""

    line: int
    label: str
    measured_s: float
    reason: str
    source: str = ""
    job: str = ""  # the row's layout, as Job.describe writes it ("t3 p1 d21 b4 m8")


def gpt_model(values: dict[str, int], given: dict[str, object] | None = None, labels: str = "") -> ModelConfig:
    """The GPT model of a measured row: ``hidden``, ``heads``, ``layers``, ``seq``, ``global_batch``
    and optionally ``vocabulary`` (default :data:`VOCABULARY`), as Megatron trains it; ``given``: the
    row's optional model fields (:data:`OPTIONAL`) over those assumptions, ``labels`` what they
    change, for the model's name."""
    return ModelConfig.model_validate({
        "name": f"gpt h{values['hidden']} a{values['heads']} L{values['layers']} s{values['seq']}{labels}",
        "num_layers": values["layers"],
        "hidden_size": values["hidden"],
        "num_attention_heads": values["heads"],
        "vocab_size": values.get("vocabulary", VOCABULARY),
        "seq_length": values["seq"],
        "global_batch_size": values["global_batch"],
        "flash_attention": False,  # Megatron-DeepSpeed of 2022: scores are materialised
        "tie_embeddings": True,  # GPT: output projection = input embedding (a copy on the last stage)
        "learned_position_embeddings": True,  # GPT-2 style (data/measured/README.md)
        **(given or {}),
    })


def _departures(given: dict[str, object], plain: ModelConfig) -> str:
    """The model key's labels (:data:`OPTIONAL`) of the row's model fields ``given`` that differ from
    the plain GPT's (a row stating an assumption, ffn = 4h say, is the same model)."""
    return "".join(f" {option.key.format(given[option.field])}" for option in OPTIONAL.values()
                   if option.key is not None and option.field in given and given[option.field] != getattr(plain, option.field))


def _optional_values(name: str, line: int, cells: list[str], index: dict[str, int]) -> tuple[dict[str, object], dict[str, object]]:
    """The row's optional columns (:data:`OPTIONAL`): model fields and job fields; MeasuredDataError
    naming the column for a value it does not take."""
    model: dict[str, object] = {}
    job: dict[str, object] = {}
    for column, option in OPTIONAL.items():
        position = index.get(column)
        raw = cells[position].strip() if position is not None and position < len(cells) else ""
        if not raw:
            continue
        value: object
        if option.values is int:
            try:
                value = decimal_int(raw)
            except ValueError as error:
                raise MeasuredDataError(f"{name}: line {line}, column '{column}': {error}") from None
            if value < 1:
                raise MeasuredDataError(f"{name}: line {line}, column '{column}': must be positive, got {value}")
        else:
            choices = option.values
            assert isinstance(choices, tuple)
            if raw.lower() not in choices:
                known = " or ".join(choices) if len(choices) <= 3 else f"one of {', '.join(choices)}"
                raise MeasuredDataError(f"{name}: line {line}, column '{column}': must be {known}, got {shown(raw)}")
            value = raw.lower() == "true" if choices is BOOLEAN else raw.lower()
        (model if option.target == "model" else job)[option.field] = value
    schedule = str(job.get("schedule", "1f1b"))
    if "chunks" in job and "chunks" not in get(schedule).options:
        raise MeasuredDataError(f"{name}: line {line}, column 'chunks': schedule {schedule} takes no chunks "
                                f"(those that do: {', '.join(n for n in SCHEDULES if 'chunks' in get(n).options)})")
    return model, job


MAX_MEASURED_ROWS = 100_000
"""Most rows of one measured-data file (the shipped ones hold 1,440 and 41). Each row is simulated
(about 0.4 ms and 3 KB), and ``calibrate`` fits every row seven times: 300,000 rows took validate
122 s and 1 GB, and calibrate more than 5 minutes on 100,000; refused while reading, before any of it."""

CHECK_EVERY_ROWS = 1_000
"""Rows :func:`read_measured` reads between two calls of its ``check`` (about 50 ms of reading)."""


def read_measured(source: str | os.PathLike[str], system: SystemConfig | str | os.PathLike[str],
                  check: Callable[[int], None] | None = None, deadline: float | None = None) -> tuple[list[Measured], list[Unmodelled]]:
    """Read a measured-data CSV file into jobs on ``system`` (a SystemConfig, a preset name or a file).

    ``check``, if given, is called with the count of rows read every :data:`CHECK_EVERY_ROWS` rows
    (about 50 µs a row): a caller with a time limit raises from it once the budget is spent (a
    candidates file of 300,000 rows took 14 s to read). ``deadline`` (``time.monotonic()``): standard
    input (``-``) must have ended by then.

    Returns the rows ppopt models and those it cannot (with the reason). Raises
    MeasuredDataError for a missing column, a non-numeric or non-positive cell, t·p·d different
    from the GPU count, or a micro batch that does not divide the global batch per replica.
    """
    system = load_system(system)  # an unknown name refused once, not as every row's reason
    require_file_name(source, MEASURED_FILE, MeasuredDataError)
    path = Path(source)
    name = source_name(source)
    header, records = read_csv_table(path, MEASURED_BYTES, MeasuredDataError, MEASURED_FILE, KNOWN_COLUMNS, deadline)
    for column in [*COLUMNS, TIME]:
        if column not in header:
            separated = "; cells are separated by commas" if len(header) == 1 and any(mark in header[0] for mark in ";\t") else ""
            raise MeasuredDataError(f"{name}: missing column '{column}'{separated}")
    index = {column: header.index(column) for column in header}

    rows: list[Measured] = []
    unmodelled: list[Unmodelled] = []
    for number, (line, cells) in enumerate(records, 1):
        if check is not None and number % CHECK_EVERY_ROWS == 0:
            check(number)
        if not any(cell.strip() for cell in cells):
            continue
        if len(rows) + len(unmodelled) == MAX_MEASURED_ROWS:
            raise MeasuredDataError(f"{name}: more than {MAX_MEASURED_ROWS:,} rows (line {line}): split the file, "
                                    f"{MAX_MEASURED_ROWS:,} rows at most each")
        if len(cells) > len(header) and any(cell.strip() for cell in cells[len(header):]):
            raise MeasuredDataError(f"{name}: line {line}: {len(cells)} cells, but the header names {len(header)} columns")

        def cell(column: str, cells: list[str] = cells, line: int = line) -> str:
            position = index[column]
            if position >= len(cells) or not cells[position].strip():
                raise MeasuredDataError(f"{name}: line {line}, column '{column}': missing value")
            return cells[position].strip()

        values: dict[str, int] = {}
        optional = {VOCABULARY_COLUMN: "vocabulary"} if VOCABULARY_COLUMN in index else {}
        for column, short in {**COLUMNS, **optional}.items():
            raw = cell(column)
            try:
                value = decimal_int(raw)
            except ValueError as error:  # "not an integer: ..." or "too many digits: ..."
                raise MeasuredDataError(f"{name}: line {line}, column '{column}': {error}") from None
            if value < 1:
                raise MeasuredDataError(f"{name}: line {line}, column '{column}': must be positive, got {value}")
            values[short] = value
        raw = cell(TIME)
        try:
            measured_ms = decimal_float(raw)
        except ValueError:
            raise MeasuredDataError(f"{name}: line {line}, column '{TIME}': not a number: {shown(raw)}") from None
        if not measured_ms > 0:
            raise MeasuredDataError(f"{name}: line {line}, column '{TIME}': must be a positive number, got {shown(raw)}")
        if not MIN_TIME_MS <= measured_ms <= MAX_TIME_MS:
            raise MeasuredDataError(f"{name}: line {line}, column '{TIME}': must lie between {MIN_TIME_MS:g} and "
                                    f"{MAX_TIME_MS:g}, got {shown(raw)}")
        measured_s = float(Decimal(raw) / 1000)  # the file's milliseconds in seconds, correctly rounded (3975.2 -> 3.9752)
        parameters = None
        if PARAMETERS in index and (raw := cells[index[PARAMETERS]].strip() if index[PARAMETERS] < len(cells) else ""):
            try:  # only a label (the dimensions give the model), but a label that is no count is a broken row
                parameters = decimal_float(raw)
            except ValueError:
                parameters = math.nan
            if not parameters > 0:
                raise MeasuredDataError(f"{name}: line {line}, column '{PARAMETERS}': must be a positive number, got {shown(raw)}")
        if values["hidden"] % values["heads"]:
            raise MeasuredDataError(f"{name}: line {line}, column 'attention heads': {values['heads']} does not divide the hidden "
                                    f"size {values['hidden']} (Megatron splits the hidden size evenly among the heads)")
        t, p, d = values["tp"], values["pp"], values["dp"]
        if t * p * d != values["gpus"]:
            raise MeasuredDataError(f"{name}: line {line}, column '# GPUs': {values['gpus']} differs from "
                                    f"tensor x pipeline x data parallelism = {t} x {p} x {d} = {t * p * d}")
        per_replica, left = divmod(values["global_batch"], d)
        if left:
            raise MeasuredDataError(f"{name}: line {line}, column 'global batch': {values['global_batch']} does not split "
                                    f"over the {d} data-parallel replicas")
        if per_replica % values["micro_batch"]:
            raise MeasuredDataError(f"{name}: line {line}, column 'micro batch': {values['micro_batch']} does not "
                                    f"divide the global batch per replica ({values['global_batch']} / {d} = {per_replica})")

        model_fields, job_fields = _optional_values(name, line, cells, index)
        # refused as `ppopt job` refuses them: nothing to act on, yet the job's label would name them
        idle = idle_job_flag(t, d, bool(job_fields.get("sequence_parallel")), bool(job_fields.get("distributed_optimizer")))
        if idle is not None:
            column = next(column for column, option in OPTIONAL.items() if option.field == idle.field)
            raise MeasuredDataError(f"{name}: line {line}, column '{column}': {idle.why}: false or empty there")
        try:
            model = gpt_model(values)
            if model_fields:
                model = gpt_model(values, model_fields, _departures(model_fields, model))
        except ValidationError as error:  # a size over the model's limits, kv heads not dividing the heads
            raise MeasuredDataError(f"{name}: line {line}, {_model_problem(error)}") from None
        label = model.name.removeprefix("gpt ")
        try:  # a layout the job model refuses (t not dividing the heads, more stages than layers) is listed
            job = Job(model, system, tp=t, pp=p, dp=d, micro_batch=values["micro_batch"],
                      global_batch=values["global_batch"], **{"recompute": "full", **job_fields})  # type: ignore[arg-type]
            if job.schedule != "1f1b":  # its rules (DualPipeV's m >= 2p, ...) are checked when it is built
                job_schedule(job)
        except ConfigError as error:
            layout = f"t{t} p{p} d{d} b{values['micro_batch']} m{per_replica // values['micro_batch']}"
            unmodelled.append(Unmodelled(line, label, measured_s, error.reason, path.name, layout))
            continue
        rows.append(Measured(line, job, measured_s, label, path.name, parameters))
    if not rows and not unmodelled:
        raise MeasuredDataError(f"{name}: no data rows")
    return rows, unmodelled


def _model_problem(error: ValidationError) -> str:
    """The first error of :func:`gpt_model`'s validation, by column: ``column 'hidden size': ...``."""
    item = error.errors(include_url=False)[0]
    field = str(item["loc"][0]) if item["loc"] else ""
    if not field and "num_kv_heads" in item["msg"]:  # the heads' check spans two fields: the optional one is the row's choice
        field = "num_kv_heads"
    if field in MODEL_COLUMNS:
        message = " ".join(item["msg"].split()).removeprefix("Value error, ")
        return f"column '{MODEL_COLUMNS[field]}': {message}"
    return validation_message(error)
