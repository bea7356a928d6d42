"""TOML text written by ppopt: values and comment lines that read back as written, whatever the
strings hold (a calibrated system file, `ppopt list models|systems NAME|FILE`)."""

from __future__ import annotations

__all__ = ["toml_comment", "toml_value"]

_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _escaped(text: str, quote: bool) -> str:
    """``text`` with TOML's escapes for a basic string (``quote``: also ``"`` and ``\\``): the short
    ones, ``\\uXXXX`` for the other characters that are not printable (control characters and DEL,
    which TOML refuses raw), U+FFFD for a lone surrogate (not encodable)."""
    out = []
    for char in text:
        if char in _TOML_ESCAPES and (quote or char not in '"\\'):
            out.append(_TOML_ESCAPES[char])
        elif 0xD800 <= ord(char) < 0xE000:  # a lone surrogate (an undecodable file name byte): no TOML escape
            out.append("\\uFFFD")
        elif not char.isprintable() and char != " ":
            out.append(f"\\u{ord(char):04X}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08X}")
        else:
            out.append(char)
    return "".join(out)


def toml_value(value: object) -> str:
    """``value`` as TOML writes it: ``true``, ``16``, a float in its shortest form that reads back
    exactly and as a float (``3.12e+14``, ``16.0``, ``0.0017232636619587912``), a string quoted and
    escaped."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        short = f"{value:g}"
        if float(short) != value:
            return repr(value)
        return short if any(c in short for c in ".e") else f"{short}.0"
    return f'"{_escaped(str(value), quote=True)}"'


def toml_comment(text: str) -> str:
    """``text`` made safe for one TOML comment line: control characters escaped as in a string
    (a newline in a file name must not end the comment and start a line of TOML)."""
    return _escaped(text, quote=False)
