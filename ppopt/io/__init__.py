"""File input and output: the project's one atomic writer, and the interchange formats.

Every file ppopt writes goes through :func:`atomic_write_text` or :func:`atomic_write_bytes`: the
content is written to a temporary file in the destination's directory and moved into place with
``os.replace``, so a failure (an exception while rendering, a full disk, Ctrl-C) never leaves a
half-written file behind, and an existing file is only replaced by a complete one.

Formats: :mod:`ppopt.io.torch_csv` (PyTorch's pipeline schedule CSV). Chrome traces and pictures
are reports (:mod:`ppopt.report.trace`, :mod:`ppopt.report.plot`); they are written with the helpers
here.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ppopt.errors import PpoptError

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_writer", "write_json"]


def atomic_writer(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Call ``write(file)`` on a temporary binary file next to ``path``, then move it to ``path``.

    On any exception the temporary file is removed and ``path`` is left as it was. A directory
    that does not exist, or cannot be written, is a :class:`PpoptError` naming the path.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise PpoptError(f"cannot write {target}: it is a directory")
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as error:
        raise PpoptError(f"cannot write {target}: {error.strerror or error}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
        os.replace(temp, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(error, OSError):
            raise PpoptError(f"cannot write {target}: {error.strerror or error}") from None
        raise
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_writer`)."""
    return atomic_writer(path, lambda handle: handle.write(data))


def atomic_write_text(path: str | os.PathLike, text: str, newline: str | None = None) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically. ``newline`` as for :func:`open` (None: ``\\n``
    kept as written; ppopt writes ``\\n`` line ends on every platform)."""
    if newline is not None and newline != "\n":
        text = text.replace("\n", newline)
    return atomic_write_bytes(path, text.encode("utf-8"))


def write_json(obj: object, path: str | os.PathLike, indent: int | None = None) -> Path:
    """Serialise ``obj`` as JSON (strict: no NaN or infinity) and write it to ``path`` atomically."""
    try:
        text = json.dumps(obj, indent=indent, allow_nan=False)
    except ValueError as error:
        raise PpoptError(f"cannot write {path}: {error}") from None
    return atomic_write_text(path, text + "\n")
