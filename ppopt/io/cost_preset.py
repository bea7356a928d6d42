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
measured in different runs); ``link`` is optional (communication free without it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

from ppopt.config import LinkConfig
from ppopt.costs import Costs, StageCost
from ppopt.errors import ConfigError
from ppopt.io import write_json

FORMAT = "ppopt-costs/1"


def cost_preset_json(costs: Costs, link: LinkConfig | None, measured: dict) -> dict:
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
    return write_json(cost_preset_json(costs, link, measured), path, indent=2)


def read_cost_preset(path: str | os.PathLike) -> tuple[Costs, LinkConfig | None]:
    """The costs and link of a preset file; ConfigError (one line, naming the file) if malformed."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file", field="costs") from None
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: not a readable JSON file ({error})", field="costs") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a ppopt cost preset (expected \"format\": \"{FORMAT}\"; write one with `ppopt profile`)", field="costs")
    names = [f.name for f in dataclasses.fields(StageCost)]
    stages = []
    try:
        for i, stage in enumerate(data["stages"]):
            values = {name: stage[name] for name in names if name in stage}
            bad = [k for k, v in values.items() if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0)]
            if bad:
                raise ConfigError(f"{path}: stage {i}: {bad[0]} must be a non-negative number", field="costs")
            stages.append(StageCost(**values))
        costs = Costs(tuple(stages), int(data["microbatch_size"]), int(data["microbatches"]))
        link = None if data.get("link") is None else LinkConfig(**data["link"])
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise ConfigError(f"{path}: malformed cost preset ({type(error).__name__}: {error})", field="costs") from None
    return costs, link
