"""File input and output: the project's one file writer, its one JSON encoder, and the interchange formats.

Every text file ppopt reads (model, system and spec files, measured CSVs, schedule CSVs) goes
through :func:`read_text_bounded` (a schedule CSV given as ``-``, standard input, through
:func:`read_stdin_bounded`): read in chunks up to a byte limit, so a device or pipe that never ends
(``/dev/zero``, ``yes |``) is refused in one line instead of filling memory.

Every file ppopt writes goes through :func:`atomic_writer` (or :func:`atomic_write_text`,
:func:`atomic_write_bytes`, :func:`write_json`):

* A regular file (or a path that does not exist yet) is written atomically: the content goes to a
  temporary file in the destination's directory, which is moved into place with ``os.replace``. A
  failure (an exception while rendering, a full disk, Ctrl-C) never leaves a half-written file
  behind, and an existing file is only replaced by a complete one (keeping its permission bits).
  A symbolic link to a regular file stays a link: the file it points to is replaced.
* Anything else that can be opened for writing (a character device such as ``/dev/null`` or
  ``/dev/stdout``, a FIFO) is written directly, never replaced: renaming over it would turn a
  device into a regular file.
* Several outputs of one command are written all or none inside :func:`output_group`: each
  regular file is completed as its temporary file, and they replace their targets together when
  the group ends without an error (a device or FIFO is still written at once).
* A directory and an empty file name are refused. Every failure (a missing directory, no
  permission, ``ENOSPC`` on a full disk or ``/dev/full``) is a :class:`PpoptError`
  ``cannot write PATH: <reason>``.

Every JSON text goes through :func:`json_bytes` (or :func:`write_json`): strict JSON. A non-finite
number in the output is a bug of the code that built it (a value that legitimately means "none"
must be given as ``None``, i.e. ``null``), and is reported as a :class:`PpoptError` naming where
it is, never printed as the invalid ``Infinity`` or ``NaN``.

Formats: :mod:`ppopt.io.torch_csv` (PyTorch's pipeline schedule CSV). Chrome traces and pictures
are reports (:mod:`ppopt.report.trace`, :mod:`ppopt.report.plot`); they are written with the helpers
here.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import errno
import gzip
import io
import json
import math
import numbers
import os
import re
import select
import stat
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from ppopt.errors import PpoptError

__all__ = ["CONFIG_BYTES", "atomic_write_bytes", "atomic_write_text", "atomic_writer", "csv_problem", "is_a_directory",
           "json_bytes", "not_utf8", "parse_data", "read_bytes_bounded", "read_csv_table", "read_stdin_bounded", "read_text_bounded", "shown",
           "unreadable", "write_json"]

CONFIG_BYTES = 64 * 2**20
"""The largest model, system or spec file read, in bytes (real ones are a few kB)."""

_CHUNK = 1 << 20


def require_file_name(source: str | os.PathLike, what: str, error: type[PpoptError] = PpoptError,
                      field: str | None = None) -> None:
    """Raise ``error`` ("empty file name: give WHAT") for an empty file name, before ``Path()``
    reads it as the current directory."""
    if not os.fspath(source):
        raise error(f"empty file name: give {what}", field=field)


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


SHOWN_CHARACTERS = 40
"""The most characters of an input cell or value quoted in a message (:func:`shown`)."""


def shown(text: str | None) -> str:
    """``text`` quoted for a message (``repr``), cut to :data:`SHOWN_CHARACTERS` characters:
    ``'xxxx'... (10,000,000 characters)``, so an error never echoes megabytes of input."""
    if text is None or len(text) <= SHOWN_CHARACTERS:
        return repr(text)
    return f"{text[:SHOWN_CHARACTERS]!r}... ({len(text):,} characters)"


def csv_problem(problem: csv.Error) -> str:
    """What a :class:`csv.Error` of a file ppopt reads means, for a one-line message."""
    text = str(problem)
    if text.startswith("field larger than field limit"):
        return f"a field is longer than {csv.field_size_limit():,} characters"
    if text.startswith("new-line character seen in unquoted field"):
        return "a carriage return inside an unquoted field (quote the field, or end lines with \\n or \\r\\n)"
    return f"not readable as CSV ({text})"


_INTEGER = re.compile(r"[+-]?[0-9]+")


def decimal_int(text: str) -> int:
    """``text`` as an integer if it is plain ASCII decimal digits with an optional sign, such as
    ``-12``; ValueError otherwise (``int()`` alone also reads ``3_000`` and ``٢``), and for more
    digits than Python converts (4,300): the message says which, "not an integer: ..." or "too many
    digits: ..."."""
    if _INTEGER.fullmatch(text) is None:
        raise ValueError(f"not an integer: {shown(text)}")
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"too many digits: {shown(text)}") from None


def decimal_float(text: str) -> float:
    """``text`` as a float if it is a plain ASCII decimal number: an optional sign, digits, an
    optional fraction and exponent, such as ``-1.5e3`` or ``.5``; ValueError otherwise (``float()``
    alone also reads ``3_000``, ``٢``, ``inf`` and ``nan``)."""
    if _DECIMAL.fullmatch(text) is None:
        raise ValueError(f"not a number: {shown(text)}")
    return float(text)


def csv_records(text: str, name: str, error: type[PpoptError]) -> Iterator[tuple[int, list[str]]]:
    """The rows of the CSV ``text`` with the line each starts on (the first line is 1; a quoted
    field may span lines). A line the ``csv`` module cannot read raises ``error`` in one line naming
    ``name`` and the line: a field over :func:`csv.field_size_limit` characters, a carriage return
    inside an unquoted field."""
    reader = csv.reader(io.StringIO(text))
    start = 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as problem:
            raise error(f"{name}: line {reader.line_num}: {csv_problem(problem)}") from None
        yield start, cells
        start = reader.line_num + 1


def header_row(records: Iterator[tuple[int, list[str]]]) -> list[str]:
    """The header of a CSV read by :func:`csv_records`: its first record that is not blank (blank
    lines before it are skipped), names stripped; [] for a file of blank lines only."""
    for _, cells in records:
        if any(cell.strip() for cell in cells):
            return [cell.strip() for cell in cells]
    return []


def check_header(header: list[str], name: str, error: type[PpoptError]) -> None:
    """Raise ``error`` for a column named twice in ``header`` (which of the two cells to read would
    be a guess); empty names (trailing commas) may repeat."""
    first: dict[str, int] = {}
    for position, column in enumerate(header):
        if column.strip() and first.setdefault(column, position) != position:
            raise error(f"{name}: line 1, column {shown(column)}: named twice in the header "
                        f"(columns {first[column] + 1} and {position + 1})")


def not_utf8(name: str, problem: UnicodeDecodeError) -> str:
    """The one-line reason every reader gives for a file that is not UTF-8 text (one saved in
    Latin-1, say): ``NAME: not UTF-8 text (invalid continuation byte)``."""
    return f"{name}: not UTF-8 text ({problem.reason})"


def unreadable(name: str, problem: OSError, what: str) -> str:
    """The one-line reason every reader gives for a file it cannot open: ``NAME: no such file``,
    ``NAME: is a directory, not WHAT`` (``what`` as "a cost preset file (.json)") or
    ``NAME: cannot read file (Permission denied)``."""
    if isinstance(problem, FileNotFoundError):
        return f"{name}: no such file"
    if isinstance(problem, IsADirectoryError):
        return is_a_directory(name, what)
    return f"{name}: cannot read file ({problem.strerror or problem})"


def is_a_directory(name: str, what: str) -> str:
    """The reason for a directory given where ``what`` (a file, as "a model file (.toml or .json)") was
    wanted: ``NAME: is a directory, not WHAT``, in every reader (:func:`unreadable`)."""
    return f"{name}: is a directory, not {what}"


def read_csv_table(path: str | os.PathLike, limit: int, error: type[PpoptError], what: str, columns: Iterable[str] = (),
                   deadline: float | None = None) -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
    """The header (:func:`header_row`) and the records after it (:func:`csv_records`) of the CSV data
    file ``path`` (``what``, as "a measured-data CSV file"), read as UTF-8 (a byte-order mark allowed)
    up to ``limit`` bytes. A header cell naming one of ``columns`` in other letter case (``# gpus``,
    ``Parameters (billion)``) is taken as that column. Raises ``error`` in one line naming the file:
    unreadable (:func:`unreadable`), not UTF-8 text, no header row, or a column named twice
    (:func:`check_header`). ``deadline``: standard input must end by then (:func:`read_stdin_bounded`)."""
    name = source_name(path)
    try:
        text = _stdin_once(limit, deadline) if os.fspath(path) == "-" else read_text_bounded(path, limit, "utf-8-sig")
    except OSError as problem:
        raise error(unreadable(name, problem, what)) from problem
    except UnicodeDecodeError as problem:
        raise error(not_utf8(name, problem)) from problem
    records = csv_records(text, name, error)
    header = header_row(records)
    if not header:
        raise error(f"{name}: empty file (expected a header row)")
    spelled = {column.casefold(): column for column in columns}
    header = [spelled.get(cell.casefold(), cell) for cell in header]
    check_header(header, name, error)
    return header, records


def unread_columns(header: list[str], records: Iterator[tuple[int, list[str]]], known: AbstractSet[str]) -> list[str]:
    """The columns of a CSV table (:func:`read_csv_table`) a reader does not read: the header names
    not in ``known``, and ``column N (no name)`` (N from 1) for an unnamed column holding a value in
    some row (a spreadsheet's trailing empty column is none)."""
    named = [cell for cell in header if cell and cell not in known]
    unnamed = {n for n, cell in enumerate(header) if not cell}
    filled: set[int] = set()
    for _, cells in records:
        filled.update(n for n in unnamed - filled if n < len(cells) and cells[n].strip())
    return named + [f"column {n + 1} (no name)" for n in sorted(filled)]


def source_name(path: str | os.PathLike) -> str:
    """How messages name a data file: its path, or "standard input" for ``-``."""
    return "standard input" if os.fspath(path) == "-" else str(path)


def file_labels(paths: Sequence[str | os.PathLike]) -> list[str]:
    """How rows and reports name several data files: each by its file name, or by the path as given
    (:func:`source_name`) when two share a file name (a/x.csv and b/x.csv both read x.csv)."""
    names = ["standard input" if os.fspath(p) == "-" else Path(p).name for p in paths]
    return [source_name(p) for p in paths] if len(set(names)) < len(names) else names


_STDIN_READ: list = []
"""The standard input stream :func:`_stdin_once` read and its text, as ``[stream, text]``."""


def _stdin_once(limit: int, deadline: float | None = None) -> str:
    """The text of standard input (UTF-8, a byte-order mark allowed), read once per stream: the CSV
    readers read a data file twice (its rows, then its header for the columns it does not use).
    Holding the stream keeps its identity unique, so a new stream (a test runner's next command) is
    read afresh."""
    if not _STDIN_READ or _STDIN_READ[0] is not sys.stdin:
        _STDIN_READ[:] = [sys.stdin, read_stdin_bounded(limit, "utf-8-sig", deadline=deadline)]
    return _STDIN_READ[1]


def parse_data(text: str, toml: bool = False) -> Any:
    """``text`` parsed as TOML or JSON. Every problem is a :class:`ValueError` (a
    ``TOMLDecodeError`` or ``JSONDecodeError``), including input nested deeper than the parser's
    recursion allows (``[[[...]]]`` a thousand levels deep: a ``RecursionError`` inside the parser)
    and, in JSON, a key given twice in one object (TOML refuses it itself). A leading UTF-8
    byte-order mark (some Windows editors write one) is skipped, as the CSV readers do."""
    text = text.removeprefix("\ufeff")
    try:
        return tomllib.loads(text) if toml else json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except tomllib.TOMLDecodeError as error:
        raise ValueError(_named_overwrite(str(error), text)) from None


_OVERWRITE = re.compile(r"Cannot overwrite a value \(at line (\d+), column \d+\)")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\-\"' ]+?)\s*=")


def _named_overwrite(message: str, text: str) -> str:
    """tomllib's message for a key given twice names the line only: add the key (as written)."""
    found = _OVERWRITE.fullmatch(message)
    lines = text.splitlines()
    if found is None or not 0 < int(found[1]) <= len(lines):
        return message
    key = _KEY.match(lines[int(found[1]) - 1])
    return f"key {shown(key[1])} is given twice ({message})" if key else message


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (json.loads would keep the last; TOML refuses it too)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"key {shown(key)} is given twice")
        data[key] = value
    return data


def read_text_bounded(path: str | os.PathLike, limit: int, encoding: str = "utf-8", why: str = "") -> str:
    """The text of ``path``, read in chunks of 1 MiB. Raises :class:`OSError` (whose ``strerror``
    says why, for the callers' ``cannot read`` messages) for a regular file over ``limit`` bytes, for
    any other file (pipe, device) once more than ``limit`` bytes have been read, and for a NUL byte
    (not text: ``/dev/zero``) as soon as it is read. ``why`` is appended to the size message (e.g.
    what the limit derives from). Decoding errors raise :class:`UnicodeDecodeError`.
    """
    with open(path, "rb") as file:
        return _read_bounded(file, limit, encoding, why)


def read_stdin_bounded(limit: int, encoding: str = "utf-8", why: str = "", deadline: float | None = None) -> str:
    """:func:`read_text_bounded` of standard input (left open; a stream without a file descriptor,
    as a test runner's, is read through its buffer). OSError when there is none (``<&-``).
    ``deadline``: a ``time.monotonic()`` value; a pipe or terminal that has not reached its end by
    then raises OSError (ETIMEDOUT), so a command's time limit covers the wait for its input."""
    if sys.stdin is None:
        raise OSError(errno.EBADF, "there is no standard input")
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):
        return _read_bounded(sys.stdin.buffer, limit, encoding, why)
    with open(fd, "rb", closefd=False) as file:
        return _read_bounded(file, limit, encoding, why, deadline)


def read_bytes_bounded(path: str | os.PathLike, limit: int, why: str = "") -> bytes:
    """The bytes of ``path``, a regular file (a file ppopt appends to), refused as
    :func:`read_text_bounded` refuses a file over ``limit`` (OSError), but NUL bytes kept: such a
    file may end in the zeros a crash leaves, and its reader skips those lines. Anything else (a
    device, a pipe, which ``open`` would wait on) is refused before it is opened: OSError (EINVAL)."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # FileNotFoundError when there is none
        raise OSError(errno.EINVAL, "not a regular file")
    with open(path, "rb") as file:
        return _read_bytes(file, limit, why, refuse_nul=False)


def _read_bounded(file: BinaryIO, limit: int, encoding: str, why: str, deadline: float | None = None) -> str:
    return _read_bytes(file, limit, why, deadline).decode(encoding)


def _read_bytes(file: BinaryIO, limit: int, why: str, deadline: float | None = None, refuse_nul: bool = True) -> bytes:
    limit_text = f"the limit is {limit:,} bytes{f' ({why})' if why else ''}"
    try:
        status: os.stat_result | None = os.fstat(file.fileno())
    except (AttributeError, OSError, ValueError):  # a stream without a file descriptor: no size to check first
        status = None
    if status is not None and stat.S_ISREG(status.st_mode) and status.st_size > limit:
        raise OSError(errno.EFBIG, f"file too large: {status.st_size:,} bytes; {limit_text}")
    waits_until = deadline if status is not None and not stat.S_ISREG(status.st_mode) else None  # a pipe or terminal
    chunks: list[bytes] = []
    size = 0
    while chunk := (file.read(_CHUNK) if waits_until is None else _read_before(file.fileno(), waits_until)):
        nul = chunk.find(b"\0") if refuse_nul else -1
        if nul >= 0:
            raise OSError(errno.EINVAL, f"not a text file: NUL byte at byte {size + nul:,}")
        size += len(chunk)
        if size > limit:
            raise OSError(errno.EFBIG, f"input too large: over {limit:,} bytes read; {limit_text}")
        chunks.append(chunk)
    return b"".join(chunks)


def _read_before(fd: int, deadline: float) -> bytes:
    """What the pipe or terminal ``fd`` has (at most a chunk), once it has something or its end;
    OSError (ETIMEDOUT) if neither comes before ``deadline`` (``time.monotonic()``)."""
    while True:
        try:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        except InterruptedError:  # pragma: no cover - Python retries select itself since 3.5
            continue
        if not ready:
            raise OSError(errno.ETIMEDOUT, "the time limit ended before the input did")
        return os.read(fd, _CHUNK)


_STAGED: list[tuple[str, Path, Path]] | None = None
"""Inside :func:`output_group`: (temporary file, final path, path as given) of each completed output."""


@contextlib.contextmanager
def output_group() -> Iterator[None]:
    """Write a command's outputs all or none (``--csv X --trace Y``: a full disk at Y used to leave
    X replaced). Regular files written inside stay temporary files next to their targets until the
    block ends; then they replace their targets, or, when it raised, they are removed. A group
    inside a group belongs to the outer one."""
    global _STAGED
    if _STAGED is not None:
        yield
        return
    staged: list[tuple[str, Path, Path]] = []
    _STAGED = staged
    try:
        yield
        for temp, final, target in staged:
            try:
                os.replace(temp, final)
            except OSError as error:
                raise PpoptError(f"cannot write {target}: {error.strerror or error}") from None
    finally:
        _STAGED = None
        for temp, _, _ in staged:  # the ones not moved into place (a moved one is no longer there)
            with contextlib.suppress(OSError):
                os.unlink(temp)


def atomic_writer(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write(file)`` on a binary file for ``path``; see the module docstring for how.

    Returns ``path``. On any exception a regular ``path`` is left as it was.
    """
    if not os.fspath(path):  # Path("") is ".", a directory: say what is wrong
        raise PpoptError("cannot write '': empty file name")
    target = Path(path)
    if (descriptor := _open_descriptor(os.fspath(path))) is not None:
        _write_to_descriptor(target, descriptor, write)
        return target
    try:
        status: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        status = None
    except OSError as error:
        raise PpoptError(f"cannot write {target}: {error.strerror or error}") from None
    if status is not None and stat.S_ISDIR(status.st_mode):
        raise PpoptError(f"cannot write {target}: it is a directory")
    if status is not None and not stat.S_ISREG(status.st_mode):
        _write_in_place(target, write)
    else:
        _write_by_rename(target, write, None if status is None else stat.S_IMODE(status.st_mode))
    return target


_DESCRIPTOR_PATH = re.compile(r"/dev/(?:(stdout)|(stderr)|fd/(\d+))|/proc/self/fd/(\d+)")


def _open_descriptor(path: str) -> int | None:
    """The descriptor a path such as ``/dev/stdout`` or ``/dev/fd/3`` names, or None. Opened anew,
    such a path reopens what the descriptor points to, a regular file at its start (a shell's
    ``> log`` lost what was written before) or, by rename, replaced it whole."""
    found = _DESCRIPTOR_PATH.fullmatch(path)
    if found is None:
        return None
    stdout, stderr, fd, proc = found.groups()
    return 1 if stdout else 2 if stderr else int(fd or proc)


def _write_to_descriptor(target: Path, descriptor: int, write: Callable[[BinaryIO], object]) -> None:
    """Write through the open ``descriptor`` at its own offset, after what Python's standard streams
    hold (the report printed before the file)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        with os.fdopen(os.dup(descriptor), "wb") as handle:
            write(handle)
    except OSError as error:
        raise PpoptError(f"cannot write {target}: {error.strerror or error}") from None


def _write_in_place(target: Path, write: Callable[[BinaryIO], object]) -> None:
    """A device or FIFO: open and write it; it is not ours to replace."""
    try:
        with open(target, "wb") as handle:
            write(handle)
    except OSError as error:
        raise PpoptError(f"cannot write {target}: {error.strerror or error}") from None


def broken_link(path: Path) -> str | None:
    """Why ``path``, a symbolic link, leads nowhere (``it is a link to X, which does not exist``, or a
    loop of links), or None when it is no link or leads to something: where a directory is to be
    made, mkdir said only "File exists"."""
    if not path.is_symlink() or path.exists():
        return None
    try:
        os.stat(path)
    except FileNotFoundError:
        return f"it is a link to {os.path.realpath(path)}, which does not exist"
    except OSError as error:
        return error.strerror or str(error)
    return None  # pragma: no cover (it appeared meanwhile)


def replaced_file(target: Path) -> Path:
    """The file a write of ``target`` replaces: where a symbolic link points (the link stays), else
    ``target`` itself."""
    return Path(os.path.realpath(target)) if target.is_symlink() else target


def temporary_beside(final: Path) -> tuple[int, str]:
    """A new temporary file (descriptor and path) for a write of ``final`` to go through, in its
    directory; its name is ``final``'s with 14 more characters, so a name near the system's limit
    fails here (OSError)."""
    return tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=str(final.parent) if str(final.parent) else ".")


def _write_by_rename(target: Path, write: Callable[[BinaryIO], object], mode: int | None) -> None:
    """A regular file (or a new one): a complete temporary file next to it, then ``os.replace``."""
    final = replaced_file(target)
    try:
        fd, temp = temporary_beside(final)
    except OSError as error:
        raise PpoptError(f"cannot write {target}: {error.strerror or error}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode if mode is not None else 0o666 & ~_umask())  # mkstemp makes 0600 files
        if _STAGED is not None:  # in an output group: replaced with the others at its end
            _STAGED.append((temp, final, target))
        else:
            os.replace(temp, final)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(error, OSError):
            raise PpoptError(f"cannot write {target}: {error.strerror or error}") from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` (see :func:`atomic_writer`)."""
    return atomic_writer(path, lambda handle: handle.write(data))


def atomic_write_text(path: str | os.PathLike, text: str, newline: str | None = None) -> Path:
    """Write ``text`` (UTF-8) to ``path`` (see :func:`atomic_writer`). ``newline`` as for
    :func:`open` (None: ``\\n`` kept as written; ppopt writes ``\\n`` line ends on every platform)."""
    if newline is not None and newline != "\n":
        text = text.replace("\n", newline)
    return atomic_write_bytes(path, utf8(text))


def utf8(text: str) -> bytes:
    """``text`` in UTF-8, where a file name's undecodable bytes (Python's lone surrogates, e.g. from
    a name with the byte 0xff) are written as their escapes (``\\udcff``), which JSON strings read
    back as the same characters, instead of failing the whole output."""
    return text.encode("utf-8", "backslashreplace")


JSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
"""orjson's options for every JSON text: keys that are not strings (ints, enums) written as strings,
and numpy scalars and arrays as numbers, as the standard library writes them."""


def json_bytes(obj: object, pretty: bool = False, sort_keys: bool = False) -> bytes:
    """``obj`` as strict JSON in UTF-8 (no ``NaN``/``Infinity``); dataclasses become objects, tuples
    lists. Compact (no spaces), or ``pretty``: indented by two spaces.

    Encoded by orjson, about 15 times faster than the standard library's encoder on large outputs (a
    chrome trace of 500,000 ops: about 1 s instead of 15 s). orjson writes a non-finite float as
    ``null``, so when the text has a ``null`` the object is searched for one; orjson cannot write an
    integer beyond 64 bits, so such an object goes to the standard library's encoder.

    Raises :class:`PpoptError` naming the first non-finite number, e.g. ``not valid JSON: non-finite
    number inf at [0].simulation.step_time_s``.
    """
    option = JSON_OPTIONS | (orjson.OPT_INDENT_2 if pretty else 0) | (orjson.OPT_SORT_KEYS if sort_keys else 0)
    try:
        data = orjson.dumps(obj, default=_jsonable, option=option)
    except orjson.JSONEncodeError:  # an int beyond 64 bits, nesting beyond 254 levels, or not JSON at all
        return stdlib_json_bytes(obj, pretty, sort_keys)
    if b"null" in data:
        _refuse_non_finite(obj)
    return data


def stdlib_json_bytes(obj: object, pretty: bool = False, sort_keys: bool = False) -> bytes:
    """:func:`json_bytes` by the standard library's encoder, with the same separators (slower, for
    what orjson cannot write)."""
    try:
        text = json.dumps(obj, indent=2 if pretty else None, separators=(",", ": ") if pretty else (",", ":"),
                          sort_keys=sort_keys, allow_nan=False, ensure_ascii=False, default=_jsonable)
    except ValueError:
        _refuse_non_finite(obj)
        raise  # not a number: a circular reference, a bug
    return utf8(text)


def _refuse_non_finite(obj: object) -> None:
    """PpoptError naming the first non-finite number in ``obj``, if it has one."""
    try:
        where, number = _non_finite(obj, "")
    except LookupError:
        return
    raise PpoptError(f"not valid JSON: non-finite number {number} at {where or 'top level'}") from None


GZIP_LEVEL = 3
"""zlib level of a ``.gz`` JSON file: the 285 MB trace of 491,520 ops takes 1.7 s to 30.9 MB at 3,
1.1 s to 34.3 MB at 1 and 5.2 s to 26.6 MB at 6 (measured on this project's 2-core machine)."""


def write_json(obj: object, path: str | os.PathLike, pretty: bool = False, sort_keys: bool = False) -> Path:
    """Serialise ``obj`` with :func:`json_bytes` and write it to ``path`` (see :func:`atomic_writer`).
    A path ending in ``.gz`` is written gzip-compressed (:data:`GZIP_LEVEL`, no timestamp, so the
    same object gives the same bytes), as Perfetto and ``chrome://tracing`` open a trace."""
    data = json_bytes(obj, pretty, sort_keys) + b"\n"
    if os.fspath(path).lower().endswith(".gz"):
        data = gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    return atomic_write_bytes(path, data)


def _jsonable(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _plain(value: object) -> object:
    """``value`` with dataclasses as dicts and numpy arrays as lists (for locating a non-finite number)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _non_finite(value: object, where: str) -> tuple[str, float]:
    """The path (below ``where``) and value of the first non-finite number in ``value``; LookupError
    if it has none. The path is built only for the number found, so a search of millions of
    finite values costs one visit each."""
    found = _first_non_finite(value)
    if found is None:
        raise LookupError(where)
    steps, number = found
    path = where
    for step in reversed(steps):
        path = f"{path}{step}" if step.startswith("[") else f"{path}.{step}" if path else step
    return path, number


def _first_non_finite(value: object) -> tuple[list[str], float] | None:
    """The steps down to the first non-finite number in ``value`` (innermost first) and the number."""
    value = _plain(value)
    if isinstance(value, numbers.Real):  # numpy's scalars as well
        return None if math.isfinite(value) else ([], float(value))
    if isinstance(value, dict):
        steps: Iterable[tuple[str, object]] = ((str(key), item) for key, item in value.items())
    elif isinstance(value, (list, tuple)):
        steps = ((f"[{i}]", item) for i, item in enumerate(value))
    else:
        return None
    for step, item in steps:
        found = _first_non_finite(item)
        if found is not None:
            found[0].append(step)
            return found
    return None
