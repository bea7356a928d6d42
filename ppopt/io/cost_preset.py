"""Cost preset files: measured per-stage op durations (and a link) for the simulator, as JSON.

``ppopt profile`` writes one (:func:`write_cost_preset`); ``ppopt run --compare`` and
``ppopt evaluate --costs`` read it (:func:`read_cost_preset`) and simulate with those durations
instead of the analytic model of :mod:`ppopt.costs`. Format::

    {"format": "ppopt-costs/1",
     "microbatch_size": 2, "microbatches": 4,
     "stages": [{"layers": 2, "forward_s": ..., "backward_s": ..., "input_grad_s": ...,
                 "weight_grad_s": ..., "activation_bytes": ..., "persistent_bytes": ...,
                 "param_count": ..., "send_bytes": ...}, ...],
     "link": {"bandwidth_bytes_per_s": ..., "latency_s": ...},
     "measured": {... free-form: where and how it was measured ...}}

Stage fields are those of :class:`ppopt.costs.StageCost` (seconds and bytes). ``backward_s`` is the
measured full backward, which need not equal ``input_grad_s + weight_grad_s`` exactly (they are
measured in different runs); ``link`` is optional (communication free without it) and follows
:class:`ppopt.config.LinkConfig` as in a system file.

Limits (:func:`read_cost_preset`): ``layers``, ``microbatch_size`` and ``microbatches`` are
positive integers of at most :data:`MAX_COUNT`; every other stage field is a number between 0 and
its maximum, :data:`MAX_OP_S` for the durations, :data:`MAX_BYTES` for the byte counts and
``param_count``, so that every simulated time and memory stays a finite number; a duration is 0 or
at least :data:`MIN_OP_S`, and some stage's ``forward_s`` is not 0. A field not
named above, at the top or in a stage, is refused (a misspelt optional field would be ignored).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

from pydantic import ValidationError

from ppopt.config import LinkConfig, validation_message
from ppopt.costs import Costs, StageCost
from ppopt.errors import ConfigError
from ppopt.io import CONFIG_BYTES, not_utf8, parse_data, read_text_bounded, require_file_name, unreadable, write_json

FORMAT = "ppopt-costs/1"

MAX_OP_S = 1e6
"""The longest op (F, B, I or W of one microbatch on one stage) of a cost preset: about 11.6 days, seconds."""
MIN_OP_S = 1e-9
"""The shortest op a cost preset may give, other than 0: a nanosecond, seconds (a step of 1e-300 s
ops printed and ranked every schedule alike)."""
MAX_BYTES = 1e18
"""The largest byte count (and ``param_count``) of a stage of a cost preset: an exabyte."""
MAX_COUNT = 2**30
"""The largest ``layers``, ``microbatch_size`` and ``microbatches`` of a cost preset."""
_COUNTS = ("layers",)
TOP_LEVEL_KEYS = frozenset({"format", "microbatch_size", "microbatches", "stages", "link", "measured"})
"""The fields of a cost preset file (module doc); any other is refused."""

_SECONDS = ("forward_s", "backward_s", "input_grad_s", "weight_grad_s")


def cost_preset_json(costs: Costs, link: LinkConfig | None, measured: dict) -> dict:
    """A cost preset file's content (per-stage seconds and bytes, the link, what was measured)."""
    return {
        "format": FORMAT,
        "microbatch_size": costs.microbatch_size,
        "microbatches": costs.microbatches,
        "stages": [dataclasses.asdict(stage) for stage in costs.stages],
        "link": None if link is None else link.model_dump(),
        "measured": measured,
    }


def write_cost_preset(path: str | os.PathLike, costs: Costs, link: LinkConfig | None, measured: dict) -> Path:
    """Write the preset atomically (:func:`ppopt.io.write_json`)."""
    return write_json(cost_preset_json(costs, link, measured), path, pretty=True)


def read_cost_preset(path: str | os.PathLike) -> tuple[Costs, LinkConfig | None]:
    """The costs and link of a preset file; ConfigError (one line, naming the file) if malformed."""
    costs, link, _ = read_cost_preset_file(path)
    return costs, link


def read_cost_preset_file(path: str | os.PathLike) -> tuple[Costs, LinkConfig | None, dict]:
    """The costs, link and ``measured`` object of a preset file (read once: it may be a pipe);
    ConfigError (one line, naming the file and the field, ``field="costs"``) if it is malformed or
    a value is outside the limits of the module doc."""
    require_file_name(path, "a cost preset file (.json)", ConfigError, field="costs")
    path = Path(path)
    try:
        data = parse_data(read_text_bounded(path, CONFIG_BYTES))
    except OSError as error:
        raise ConfigError(unreadable(str(path), error, "a cost preset file (.json)"), field="costs") from None
    except UnicodeDecodeError as error:
        raise ConfigError(not_utf8(str(path), error), field="costs") from None
    except ValueError as error:  # JSONDecodeError
        raise ConfigError(f"{path}: not a readable JSON file ({' '.join(str(error).split())})", field="costs") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a ppopt cost preset (expected \"format\": \"{FORMAT}\"; write one with `ppopt profile`)", field="costs")

    def fail(reason: str) -> ConfigError:
        return ConfigError(f"{path}: {reason}", field="costs")

    unknown = sorted(set(data) - TOP_LEVEL_KEYS)
    if unknown:  # a misspelt field would be ignored, as a model or system file refuses it
        raise fail(f"unknown field '{unknown[0]}' (the fields: {', '.join(sorted(TOP_LEVEL_KEYS))})")
    stages = data.get("stages")
    if not isinstance(stages, list) or not stages:
        raise fail("'stages' must be a non-empty list of stage objects")
    names = [f.name for f in dataclasses.fields(StageCost)]
    required = [f.name for f in dataclasses.fields(StageCost) if f.default is dataclasses.MISSING]
    read = []
    for i, stage in enumerate(stages):
        if not isinstance(stage, dict):
            raise fail(f"stage {i}: must be an object of fields")
        missing = [name for name in required if name not in stage]
        if missing:
            raise fail(f"stage {i}: missing field '{missing[0]}'")
        unknown = sorted(set(stage) - set(names))
        if unknown:
            raise fail(f"stage {i}: unknown field '{unknown[0]}' (the fields of a stage: {', '.join(names)})")
        values = {name: stage[name] for name in names if name in stage}
        for key, value in values.items():
            if (problem := _problem(key, value)) is not None:
                raise fail(f"stage {i}: {key} {problem}")
        try:
            read.append(StageCost(**values))
        except ValueError as error:  # a check across fields (the part freed at I at most the activation)
            raise fail(f"stage {i}: {error}") from None
    counts = {}
    for key in ("microbatch_size", "microbatches"):
        if key not in data:
            raise fail(f"missing field '{key}'")
        if (problem := _count_problem(data[key])) is not None:
            raise fail(f"{key} {problem}")
        counts[key] = data[key]
    link = None
    if data.get("link") is not None:
        try:
            link = LinkConfig.model_validate(data["link"], strict=True, context={"file": True})
        except ValidationError as error:
            raise fail(validation_message(error, "link")) from None
    if not any(stage.forward_s for stage in read):  # every simulated step would take 0 s, every schedule tie
        raise fail("every forward_s is 0: a measured forward takes time (write a preset with `ppopt profile`)")
    measured = data.get("measured")
    return Costs(tuple(read), counts["microbatch_size"], counts["microbatches"]), link, measured if isinstance(measured, dict) else {}


def _count_problem(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        return f"must be an integer between 1 and {MAX_COUNT:,}, got {_shown(value)}"
    return None


def _problem(key: str, value: object) -> str | None:
    """Why ``value`` cannot be the stage field ``key`` (module doc, "Limits"), or None."""
    if key in _COUNTS:
        return _count_problem(value)
    most, unit = (MAX_OP_S, " s") if key in _SECONDS else (MAX_BYTES, "")
    # the range first: math.isfinite of an integer beyond a float's range raises OverflowError
    if isinstance(value, bool) or not isinstance(value, int | float) or not (0 <= value <= most and math.isfinite(value)):
        return f"must be a number between 0 and {most:g}{unit}, got {_shown(value)}"
    if key in _SECONDS and 0 < value < MIN_OP_S:
        return f"must be 0 or at least {MIN_OP_S:g} s (a nanosecond), got {_shown(value)}"
    return None


def _shown(value: object) -> str:
    """``value`` for a message: JSON as in the file, cut to 40 characters."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
