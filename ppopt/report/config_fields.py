"""What a model or system file may hold, and what one holds: the reference behind
``ppopt list model-fields`` / ``system-fields`` and the side-by-side view of ``ppopt list models
NAME|FILE ...``.

Everything is read from the pydantic classes of :mod:`ppopt.config` (their field docstrings, types,
bounds and defaults), so the reference cannot drift from what a file is checked against. A link
table (``intra_node``, ``inter_node``) is flattened into dotted names (``inter_node.latency_s``), as
a TOML file writes them under ``[inter_node]``.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from ppopt.config import COMPUTED_DEFAULTS, FILE_MINIMA, LinkConfig
from ppopt.io.toml_text import toml_value

UNITS = (("peak_flops", "FLOP/s"), ("_bytes_per_s", "bytes/s"), ("_s", "s"), ("_bytes", "bytes"), ("_flops", "FLOP"))
"""Units from a field's name (the module doc of :mod:`ppopt.config`: units are part of the names);
the first matching suffix wins. ``peak_flops`` is a rate, ``gemm_half_saturation_flops`` a size."""


@dataclass(frozen=True)
class FieldDoc:
    """One field of a model or system file, as a user writes it."""

    name: str
    kind: str
    unit: str
    default: str
    meaning: str

    def as_json(self) -> dict[str, str]:
        return {"field": self.name, "type": self.kind, "unit": self.unit, "default": self.default, "meaning": self.meaning}


def field_docs(config: type[BaseModel], prefix: str = "") -> list[FieldDoc]:
    """Every field of ``config`` in declaration order, link tables flattened (module doc)."""
    docs = []
    for name, info in config.model_fields.items():
        if info.annotation is LinkConfig:
            docs += field_docs(LinkConfig, f"{prefix}{name}.")
            continue
        file_max = getattr(config, "_FILE_MAXIMA", {}).get(name)
        file_min = FILE_MINIMA.get(name, (None,))[0]
        docs.append(FieldDoc(prefix + name, _kind(info.annotation, info.metadata, file_min, file_max), _unit(name),
                             _default(name, info), _plain(info.description or "")))
    return docs


def _kind(annotation: Any, metadata: list[Any], file_min: float | None, file_max: float | None) -> str:
    """The type and range a file's value must have, e.g. ``number >= 0`` or ``"gelu" or "swiglu"``."""
    if get_origin(annotation) is Literal:
        return " or ".join(f'"{value}"' for value in get_args(annotation))
    if annotation is bool:
        return "true or false"
    if annotation is str:
        return "text"
    limits = {key: getattr(m, key) for m in metadata for key in ("gt", "ge", "le") if getattr(m, key, None) is not None}
    low = None
    if file_min is not None:
        low = f">= {_number(file_min)}"
    elif "gt" in limits:
        low = ">= 1" if annotation is int and limits["gt"] == 0 else f"> {_number(limits['gt'])}"
    elif "ge" in limits:
        low = f">= {_number(limits['ge'])}"
    high = limits.get("le", file_max)
    what = "integer" if annotation is int else "number"
    bounds = [b for b in (low, None if high is None else f"<= {_number(high)}") if b]
    return f"{what} {', '.join(bounds)}".strip()


def _number(value: float) -> str:
    """A bound as it reads best: 2^20 for a power of two over a thousand, else the shortest form."""
    if isinstance(value, int) and value > 1024 and value & (value - 1) == 0:
        return f"2^{value.bit_length() - 1}"
    return f"{value:g}"


def _unit(name: str) -> str:
    return next((unit for suffix, unit in UNITS if name.endswith(suffix)), "")


def _default(name: str, info: Any) -> str:
    """The value a file that leaves the field out gets, as TOML writes it; ``required`` if none."""
    if name in COMPUTED_DEFAULTS:
        return COMPUTED_DEFAULTS[name]
    return "required" if info.is_required() else toml_value(info.default)


def _plain(docstring: str) -> str:
    """A field docstring as one line of plain text: reStructuredText roles and literals unwrapped."""
    text = re.sub(r":\w+:`([^`]*)`", r"\1", docstring)
    return " ".join(text.replace("``", "`").split())


def values_of(config: BaseModel) -> dict[str, tuple[str, bool]]:
    """Each field of a loaded model or system (link tables flattened) -> (value as TOML writes it,
    whether the file gave it; False: the default)."""
    values: dict[str, tuple[str, bool]] = {}
    for name in type(config).model_fields:
        value = getattr(config, name)
        if isinstance(value, LinkConfig):
            for inner, (text, given) in values_of(value).items():
                values[f"{name}.{inner}"] = (text, given and name in config.model_fields_set)
            continue
        values[name] = (toml_value(value), name in config.model_fields_set)
    return values


def field_reference_text(docs: list[FieldDoc], width: int = 100) -> str:
    """The reference as a definition list: each field with its type, unit and default on one line,
    then its meaning, indented and wrapped to ``width`` characters."""
    lines = []
    for doc in docs:
        facts = ", ".join(filter(None, (doc.kind, doc.unit, f"default {doc.default}" if doc.default != "required" else "required")))
        lines.append(f"{doc.name}  ({facts})")
        lines += textwrap.wrap(doc.meaning, width, initial_indent="    ", subsequent_indent="    ") or ["    -"]
    return "\n".join(lines)
