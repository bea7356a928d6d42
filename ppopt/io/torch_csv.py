"""PyTorch's pipeline schedule CSV (``torch.distributed.pipelining``), read and written.

The format (PyTorch's ``_load_csv`` / ``_dump_csv``; torchtitan's ``pipeline_parallel_schedule_csv``):
no header; row r is rank r; its cells are that rank's actions in execution order; an empty cell is an
idle step and is skipped. A compute action is ``<stage><TYPE><microbatch>`` with a global (virtual)
stage id, e.g. ``0F3``, ``5I2``, ``7W0``, ``2B1``, which is exactly ``str(op)`` of a ppopt
:class:`~ppopt.ir.Op`.

Reading (:func:`read_torch_csv`)
    * Action types, as in the current PyTorch (``_ComputationType``, torch >= 2.6): ``F`` forward,
      ``I`` backward for inputs, ``W`` backward for weights, ``B`` full backward.
    * ``compute_comms`` files: the runtime actions ``SEND_F``, ``RECV_F``, ``SEND_B``, ``RECV_B``,
      ``UNSHARD``, ``RESHARD``, ``REDUCE_GRAD`` (microbatch optional) and torch 2.5's batched
      ``<s>SEND_F<m>_<s>RECV_B<m>`` / ``..SEND_B.._..RECV_F..`` are skipped: ppopt derives
      communication itself. A single one must still name a stage of its own rank and, when it
      names one, a microbatch of the file (PyTorch would refuse the file otherwise). ``(0F7;7B3)OVERLAP_F_B`` is its compute sub-actions, in order;
      a group of exactly an F then a B is kept as an overlapped pair (``Schedule.overlapped``),
      which the writer writes back as such a group.
    * Legacy spelling (``legacy_backward=True``, torch <= 2.5): ``BW`` is the full backward and
      ``B`` the backward; that old ``B`` ran as an input-gradient backward only in schedules that
      also had ``W`` actions (``use_full_backward=False``), so it is read as ``I`` when the file holds
      any ``W`` and as a full ``B`` otherwise. ``I`` is accepted as ``I``.
    * Mixed backward: the backward kind is per stage and microbatch, in ppopt's IR as in PyTorch
      (DualPipeV runs some microbatches' backward as one ``B``, others as ``I`` then ``W``), so each
      action is read as written; a stage and microbatch with both a ``B`` and an ``I`` or ``W`` is
      rejected by the validator.
    * Without the legacy flag a ``BW`` cell is an error that says to use it: the current PyTorch
      parser does not know ``BW`` (its regex reads ``0BW3`` as ``0B`` without a microbatch, which
      its validator then rejects), and a file spelling ``BW`` most likely means ``I`` by ``B``.
    * The schedule: devices = rows (trailing blank lines are ignored; a row of empty cells such as
      ``,,`` anywhere, or an empty line inside the file, is an idle rank), stage s placed on the one rank whose row holds it, name = the file's stem.
      Stages and microbatches are indexed by what the file names, never by the largest index: the
      S distinct stages must be 0..S-1 and the M distinct microbatches 0..M-1; a gap or an index
      beyond is a one-line error naming the action, its rank and its place, so a short file with
      a huge index allocates nothing. A file with more than :data:`ppopt.ir.MAX_OPS` compute
      actions, or whose S x M x kinds exceeds it, is refused; so is a file over :data:`MAX_BYTES`
      bytes (a pipe or device such as ``/dev/zero`` is read up to that limit, and refused at its
      first NUL byte). The schedule is then checked by
      :func:`ppopt.validation.validate`.
    * Errors are :class:`~ppopt.errors.ScheduleError` with one line, prefixed by the file as given
      (its path, or "standard input"; the schedule itself is named by the file's stem).
      Positions are **0-based**, like PyTorch's ``Rank r, step s``: "row 2 (rank 2, line 3),
      cell 5" is the sixth cell of the file's third line. Validation errors keep their order grid
      in ``.details``. A cell quoted in a message is cut to 40 characters; a line the ``csv`` module
      cannot read (a quoted field over its limit of 131,072 characters, a carriage return inside an
      unquoted field) is named by its 1-based line. Indices are ASCII digits (``int()`` would also
      read other scripts' digits such as ``٢``), at most :data:`MAX_DIGITS` of them.

Writing (:func:`write_torch_csv`): one row per device, its ops in order, or sorted by given start
times (simulated or solver times). PyTorch's CSV holds one rank per stage, so a schedule with
replicated stages (Chimera) is refused rather than written as a file PyTorch would not load. The
file is written atomically.
"""

from __future__ import annotations

import dataclasses
import operator
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import IO

import numpy as np

from ppopt.errors import ScheduleError
from ppopt.flat import paused_gc
from ppopt.io import (
    atomic_write_text,
    csv_records,
    not_utf8,
    read_stdin_bounded,
    read_text_bounded,
    require_file_name,
    shown,
    unreadable,
    utf8,
)
from ppopt.ir import MAX_OPS, Kind, Op, Schedule, check_size, ops_of, parse_action
from ppopt.validation import ScheduleValidationError, validate, validated

__all__ = ["COMM_ACTIONS", "format_torch_csv", "parse_torch_csv", "read_torch_csv", "refuse_replicas", "write_torch_csv"]

COMM_ACTIONS = ("SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD")
"""Runtime (non-compute) action types of ``compute_comms`` files; skipped when reading."""

_TYPES = "|".join(COMM_ACTIONS) + "|BW|F|I|B|W"
_SINGLE = re.compile(rf"^([0-9]+)({_TYPES})([0-9]*)$")  # [0-9], not \d: ASCII digits only
_BATCHED = re.compile(r"^[0-9]+(SEND_F|SEND_B)[0-9]+_[0-9]+(RECV_B|RECV_F)[0-9]+$")  # torch 2.5's paired comms
_GROUP = re.compile(r"^\((.*)\)([A-Za-z_]+)$")
MAX_DIGITS = 40
"""The most digits of a stage or microbatch index: far more than any index of a valid file (which holds
at most :data:`ppopt.ir.MAX_OPS` actions) and few enough to quote in a message; ``int()`` refuses
more than 4,300."""


class _CellError(Exception):
    """A malformed cell; the reader adds where it is."""


_Raw = tuple[int, str, int]  # (stage, action type as written: F, I, W, B or BW, microbatch)


def _parse_single(text: str) -> _Raw | None:
    """A compute action, or a communication action with its microbatch (-1 when it names none), or
    None for torch 2.5's batched communication (not checked)."""
    match = _SINGLE.match(text)
    if match is None:
        if _BATCHED.match(text):
            return None
        separated = "; cells are separated by commas" if any(mark in text for mark in "\t; ") else ""
        raise _CellError(f"unknown action {shown(text)} (expected <stage><F|I|W|B><microbatch>, e.g. 3F12{separated})")
    stage, code, microbatch = match.groups()
    if code not in COMM_ACTIONS and not microbatch:
        raise _CellError(f"compute action {shown(text)} has no microbatch")
    if max(len(stage), len(microbatch)) > MAX_DIGITS:
        raise _CellError(f"action {shown(text)} has an index of more than {MAX_DIGITS} digits")
    return int(stage), code, int(microbatch) if microbatch else -1


def parse_cell(text: str) -> list[_Raw]:
    """The actions of one CSV cell as ``(stage, type as written, microbatch)``, in order: none (idle),
    one, or an ``OVERLAP_F_B`` group's sub-actions. Communication actions are among them (their type
    is in :data:`COMM_ACTIONS`, their microbatch -1 when they name none)."""
    text = text.strip()
    if not text:
        return []
    group = _GROUP.match(text)
    if group is None:
        action = _parse_single(text)
        return [] if action is None else [action]
    inner, kind = group.groups()
    if kind != "OVERLAP_F_B":
        raise _CellError(f"unknown action group type {shown(kind)} in {shown(text)} (expected OVERLAP_F_B)")
    actions = [_parse_single(part.strip()) for part in inner.split(";") if part.strip()]
    return [a for a in actions if a is not None]


_BW_HINT = (
    "'BW' is the legacy spelling of a full backward (current PyTorch writes B, and I for the input backward); "
    "read the file with legacy_backward=True (--legacy-backward)"
)


def _kinds(code: str, legacy: bool, has_w: bool) -> Kind:
    """The op kind an action type means (see the module docstring)."""
    if code == "BW":
        if not legacy:
            raise _CellError(_BW_HINT)
        return Kind.B
    if code == "B" and legacy and has_w:
        return Kind.I
    return Kind(code)


def _where(row: int, cell: int) -> str:
    return f"row {row} (rank {row}, line {row + 1}), cell {cell}"


_Row = tuple[Sequence[int], list[int], list[str], list[int]]  # (cell, stage, type as written, microbatch)
_Comm = tuple[int, int, int, str, int]  # a communication action: (row, cell, stage, type, microbatch or -1)
_Line = str | list[str]
"""A row of the file: its text, cells not split yet (plain text), or its cells as ``csv`` read them."""
_PLAIN_ROW = re.compile(r"[0-9]+[FIWB][0-9]+(?:,[0-9]+[FIWB][0-9]+)*")
"""A row whose cells are each one plain compute action, without spaces: the common case, parsed at once."""
_TO_COMMA = str.maketrans("FIWB", ",,,,")
_LETTERS_ONLY = str.maketrans("", "", "0123456789,")
_LARGEST = 2**62  # numpy clamps an int64 overflow to 2**63 - 1: such rows are read cell by cell


def _parse_rows(rows: list[_Line], name: str, comms: list[_Comm]) -> list[_Row]:
    """Per row, its compute actions as parallel lists: (cell, stage, type as written, microbatch);
    the communication actions are appended to ``comms``.

    A row of plain cells is parsed at once (one regular-expression check, numpy reads the numbers);
    other rows cell by cell. Refuses a file with more than :data:`~ppopt.ir.MAX_OPS` compute actions
    as soon as a row passes it.
    """
    parsed = []
    total = 0
    for r, row in enumerate(rows):
        plain = _plain_row(row, row.count(",") + 1) if isinstance(row, str) else _plain_row(",".join(row), len(row))
        parsed.append(plain if plain is not None else _parse_row_cells(_cells(row), r, name, comms))
        total += len(parsed[-1][0])
        check_size(total, f"{name}: the compute actions of rows 0..{r}", memory=False)  # the rows are read: checked before the build
    return parsed


def _plain_row(joined: str, cells: int) -> _Row | None:
    """The actions of a row of ``cells`` cells (``joined``: them joined by commas) whose every cell is
    one plain action such as ``3F12``, or None."""
    if _PLAIN_ROW.fullmatch(joined) is None:
        return None
    numbers = np.fromstring(joined.translate(_TO_COMMA), dtype=np.int64, sep=",")
    if len(numbers) != 2 * cells or numbers.max() >= _LARGEST:  # a cell holding a comma (quoted) is read cell by cell
        return None
    values = numbers.tolist()
    return range(cells), values[0::2], list(joined.translate(_LETTERS_ONLY)), values[1::2]


def _cells(row: _Line) -> list[str]:
    return row.split(",") if isinstance(row, str) else row


def _blank(row: _Line) -> bool:
    """Whether ``row`` is a blank line (at most one cell, of spaces only). A row of empty cells such
    as ``,,,`` is a rank with no actions, as PyTorch's reader counts it, not a blank line."""
    cells = _cells(row)
    return len(cells) <= 1 and not any(cell.strip() for cell in cells)


def _parse_row_cells(row: list[str], r: int, name: str, comms: list[_Comm]) -> _Row:
    """One row's compute actions, cell by cell (communication actions, groups, errors); its
    communication actions are appended to ``comms``."""
    cells: list[int] = []
    out: _Row = (cells, [], [], [])
    for c, cell in enumerate(row):
        try:
            actions = parse_cell(cell)
        except _CellError as error:
            header = " (a header row? the file has none: row r is rank r)" if r == 0 and cell.strip()[:1].isalpha() else ""
            raise ScheduleError(f"{name}: {_where(r, c)}: {error}{header}") from None
        for stage, code, microbatch in actions:
            if code in COMM_ACTIONS:
                comms.append((r, c, stage, code, microbatch))
                continue
            cells.append(c)
            out[1].append(stage)
            out[2].append(code)
            out[3].append(microbatch)
    return out


def parse_torch_csv(text: str, name: str = "torch-csv", legacy_backward: bool = False, where: str | None = None) -> Schedule:
    """Parse the text of a PyTorch schedule CSV into a validated :class:`Schedule` named ``name``;
    its errors begin with ``where`` (the file as the user gave it) or, without it, with ``name``.

    See the module docstring for the format, the legacy spelling, the indexing of stages and
    microbatches and the error positions.
    """
    with paused_gc():
        return _parse(text, name, legacy_backward, name if where is None else where)


def _rows(text: str, name: str) -> list[_Line]:
    """The file's rows, whose cells are as ``csv.reader`` reads them. Text without quotes or carriage
    returns (what PyTorch and ppopt write) is split on newlines only, in C, and a row's cells are
    those of ``str.split(",")``; an empty line then has the one cell ``""`` rather than none, which
    reads the same (an idle rank). A line ``csv`` cannot read is a ScheduleError naming it."""
    if '"' in text or "\r" in text:
        return [cells for _, cells in csv_records(text, name, ScheduleError)]
    lines: list[_Line] = list(text.split("\n"))
    if lines[-1] == "":
        lines.pop()
    return lines


def _parse(text: str, name: str, legacy_backward: bool, where: str) -> Schedule:
    """The schedule ``name`` the text describes; every error begins with ``where`` (the file's path)."""
    lines = text.count("\n") + (not text.endswith("\n"))
    if lines > MAX_OPS:  # one row per rank, and no schedule has more ranks than ops: refused before splitting
        raise ScheduleError(f"{where}: {lines:,} lines: more rank rows than the {MAX_OPS:,} ops a schedule may hold")
    rows = _rows(text, where)
    while rows and _blank(rows[-1]):
        rows.pop()
    if not rows:
        raise ScheduleError(f"{where}: empty file: no rank rows (a PyTorch schedule CSV has one row of actions per rank)")

    # First pass: the compute actions of every cell, as written.
    comms: list[_Comm] = []
    parsed = _parse_rows(rows, where, comms)
    codes = set().union(*(set(p[2]) for p in parsed))
    if not codes:
        raise ScheduleError(f"{where}: no compute action in the file (expected cells such as 0F0, 0B0)")

    # Second pass: kinds (legacy spelling).
    kinds: dict[str, Kind] = {}
    for code in codes:
        try:
            kinds[code] = _kinds(code, legacy_backward, "W" in codes)
        except _CellError as error:
            r, c = next((r, p[0][i]) for r, p in enumerate(parsed) for i, x in enumerate(p[2]) if x == code)
            raise ScheduleError(f"{where}: {_where(r, c)}: {error}") from None
    if not legacy_backward and {"B", "W"} <= codes and "I" not in codes:  # every W would lack its I
        r, c = next((r, p[0][i]) for r, p in enumerate(parsed) for i, x in enumerate(p[2]) if x == "W")
        raise ScheduleError(f"{where}: {_where(r, c)}: W actions beside B and no I: in the spelling of torch <= 2.5 B was "
                            "the input backward; read the file with legacy_backward=True (--legacy-backward)")
    split = any(kind in (Kind.I, Kind.W) for kind in kinds.values())

    # Placement: each stage on the one rank whose row holds it; stages 0..S-1 all present.
    holder: dict[int, int] = {}
    for r, (cells, stages, _, _) in enumerate(parsed):
        distinct = set(stages)
        clash = [stage for stage in distinct if holder.get(stage, r) != r]
        if clash:
            stage = min(clash, key=stages.index)  # the first in the row
            first = holder[stage]
            c0 = parsed[first][0][parsed[first][1].index(stage)]
            c = cells[stages.index(stage)]
            raise ScheduleError(
                f"{where}: stage {stage} is on two ranks: {_where(first, c0)} and {_where(r, c)} "
                "(each stage must be on exactly one rank)"
            )
        holder.update(dict.fromkeys(distinct, r))
    if max(holder) >= len(holder):
        missing = next(s for s in range(len(holder)) if s not in holder)
        numbered = " (stages are numbered from 0)" if missing == 0 else ""
        raise ScheduleError(f"{where}: stage {missing} appears in no row, but stages up to {max(holder)} do{numbered}")
    stage_count = len(holder)

    # Microbatches: indexed by the file's own indices, which must be 0..M-1 for its M distinct ones.
    indices = set().union(*(set(p[3]) for p in parsed))
    microbatches = len(indices)
    if max(indices) >= microbatches:
        r, i = next((r, i) for r, p in enumerate(parsed) for i, mb in enumerate(p[3]) if mb >= microbatches)
        cells, stages, written, mbs = parsed[r]
        gap = next(x for x in range(microbatches) if x not in indices)
        raise ScheduleValidationError(
            f"{where}: {_where(r, cells[i])}: action {stages[i]}{written[i]}{mbs[i]} names microbatch {mbs[i]}, but the "
            f"file names {microbatches} distinct microbatch(es), so they must be 0..{microbatches - 1} "
            f"(microbatch {gap} appears nowhere)"
        )
    check_size(stage_count * microbatches * (3 if split else 2),
               f"{where}: {stage_count} stages x {microbatches} microbatches")
    _check_comms(comms, holder, microbatches, where)

    orders = tuple(tuple(ops_of(stages, map(kinds.__getitem__, written), mbs)) for _, stages, written, mbs in parsed)
    schedule = Schedule(
        name=name,
        devices=len(orders),
        microbatches=microbatches,
        placement=tuple((holder[s],) for s in range(stage_count)),
        orders=orders,
        overlapped=_overlapped(parsed, orders),
    )
    try:
        validated(schedule)
        return schedule
    except ScheduleValidationError as error:
        raise _located(error, where, parsed, kinds) from None


def _check_comms(comms: list[_Comm], holder: dict[int, int], microbatches: int, where: str) -> None:
    """Communication actions name a stage of their own rank (PyTorch's ``_add_send_recv`` puts a
    send on the sending stage's rank and a receive on the receiving stage's) and, when they name
    one, a microbatch of the file: ppopt derives the messages itself, but a file PyTorch would
    refuse is not accepted silently."""
    for r, c, stage, code, microbatch in comms:
        action = f"{stage}{code}{microbatch if microbatch >= 0 else ''}"
        if holder.get(stage) != r:
            on = f"stage {stage} is on row {holder[stage]}" if stage in holder else f"no row computes stage {stage}"
            raise ScheduleError(f"{where}: {_where(r, c)}: {action} names stage {stage}, which this rank does not hold ({on})")
        if microbatch >= microbatches:
            raise ScheduleError(f"{where}: {_where(r, c)}: {action} names microbatch {microbatch}, but the file's "
                                f"microbatches are 0..{microbatches - 1}")


def _overlapped(parsed: list[_Row], orders: tuple[tuple[Op, ...], ...]) -> tuple[tuple[Op, Op], ...]:
    """The ``OVERLAP_F_B`` groups holding exactly an F then a B, as overlapped pairs (module docstring)."""
    pairs = []
    for (cells, *_), order in zip(parsed, orders):
        if isinstance(cells, range) or len(set(cells)) == len(cells):  # no cell holds two actions: no group
            continue
        for i in range(len(cells) - 1):
            if cells[i] == cells[i + 1] and (i + 2 == len(cells) or cells[i + 2] != cells[i]) and (i == 0 or cells[i - 1] != cells[i]) \
                    and order[i].kind is Kind.F and order[i + 1].kind is Kind.B:
                pairs.append((order[i], order[i + 1]))
    return tuple(pairs)


def _located(error: ScheduleValidationError, name: str, parsed: list[_Row], kinds: dict[str, Kind]) -> ScheduleValidationError:
    """The validator's error with the file name and the place of the first op it mentions."""
    seen: dict[Op, tuple[int, int]] = {}
    holder: dict[int, int] = {}
    for r, (cells, stages, written, mbs) in enumerate(parsed):
        for c, stage, code, mb in zip(cells, stages, written, mbs):
            op = Op(stage, kinds[code], mb)
            holder.setdefault(stage, r)
            if op in seen:
                return ScheduleValidationError(
                    f"{name}: {_where(r, c)}: action {op} appears twice (first at {_where(*seen[op])})", error.details
                )
            seen[op] = (r, c)
    unmatched = _unmatched(seen, holder)
    if unmatched is not None:
        return ScheduleValidationError(f"{name}: {unmatched}", error.details)
    message = str(error)
    mentioned = [parse_action(word) for word in _ACTION_WORD.findall(message)]
    named = next((seen[op] for op in mentioned if op in seen), None)
    if named is not None:
        where = f" (at {_where(*named)})"
    elif mentioned and mentioned[0].stage in holder:
        row = holder[mentioned[0].stage]
        where = f" (stage {mentioned[0].stage} is on row {row} (rank {row}, line {row + 1}))"
    else:
        where = ""
    return ScheduleValidationError(f"{name}: {message}{where}", error.details)


def _unmatched(seen: dict[Op, tuple[int, int]], holder: dict[int, int]) -> str | None:
    """The first op, in file order, whose microbatch the other stages and kinds do not run, or the
    first stage and kind lacking one they all run; None when every stage runs every kind of the same
    microbatches.

    In a valid schedule every (stage, kind) runs the same microbatches. The set more of them run than
    any other is taken as the intended one (with a tie, None: the validator's message stands), so a rank that numbers its microbatches off by one (PyTorch 2.13's
    1F1B CSV names its last rank's forwards 1..m) is named at its first odd action, ``3F8``, rather
    than through the dependency error it causes on another stage (``0F8`` is missing).
    """
    runs: dict[tuple[int, Kind], set[int]] = {}
    for op in seen:
        runs.setdefault((op.stage, op.kind), set()).add(op.microbatch)
    if not runs:
        return None
    frozen = {key: frozenset(mbs) for key, mbs in runs.items()}
    ranked = Counter(frozen.values()).most_common(2)
    if len(ranked) < 2 or ranked[0][1] == ranked[1][1]:  # all alike, or no set most of them run
        return None
    common = ranked[0][0]
    others = _ranges(sorted(common))
    odd = [(place, op) for op, place in seen.items() if op.microbatch not in common]
    if odd:
        (r, c), op = min(odd, key=lambda item: item[0])
        return (f"{_where(r, c)}: action {op} names microbatch {op.microbatch}, which the other stages and kinds "
                f"do not run (most run microbatches {others}): check the numbering of rank {r}")
    stage, kind = min(key for key, mbs in frozen.items() if mbs != common)
    lacking = min(common - frozen[(stage, kind)])
    rank = holder[stage]
    return (f"stage {stage} (rank {rank}, line {rank + 1}) has no {kind} of microbatch {lacking} ({stage}{kind}{lacking}), "
            f"which most stages and kinds run (microbatches {others})")


def _ranges(values: list[int]) -> str:
    """``0..7`` for consecutive integers, else them listed (at most 8, then an ellipsis)."""
    if values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}..{values[-1]}" if len(values) > 1 else str(values[0])
    return ", ".join(map(str, values[:8])) + (", ..." if len(values) > 8 else "")


_ACTION_WORD = re.compile(r"\b\d+[FBIW]\d+\b")




def read_torch_csv_file(name: str, legacy_backward: bool = False, deadline: float | None = None) -> Schedule:
    """:func:`read_torch_csv` of the file ``name`` as a command line gives it: always a file name,
    whatever its characters (a comma too), and an empty name is a ScheduleError (``Path("")`` would
    be the current directory). ``-`` is standard input (``ppopt export -o - | ppopt import -``),
    read within the same limits, and by ``deadline`` (``time.monotonic()``; None: however long it
    takes); the schedule is then named ``stdin``."""
    if name == "-":
        try:
            text = read_stdin_bounded(MAX_BYTES, "utf-8-sig", f"{MAX_OPS:,} ops", deadline)
        except UnicodeDecodeError as error:
            raise ScheduleError(not_utf8("standard input", error)) from None
        except OSError as error:
            raise ScheduleError(f"standard input: cannot read ({error.strerror or error})") from None
        return parse_torch_csv(text, "stdin", legacy_backward, where="standard input")
    require_file_name(name, TORCH_CSV_FILE, ScheduleError)
    return read_torch_csv(Path(name), legacy_backward)


def read_torch_csv(path_or_text: str | os.PathLike | IO[str], legacy_backward: bool = False) -> Schedule:
    """Read a PyTorch schedule CSV into a validated :class:`Schedule`.

    ``path_or_text``: a path (``os.PathLike``, or a ``str`` without a newline that names a file or
    holds no comma), an open text file, or the CSV text itself (a ``str`` containing a newline, or a
    comma and naming no file: ``p2,m2.csv`` written by :func:`write_torch_csv` reads back as that
    file). The schedule is named after the file's stem (``torch-csv`` for text).
    """
    if not isinstance(path_or_text, (str, os.PathLike)) and not hasattr(path_or_text, "read"):
        raise ScheduleError(f"must be a path, an open text file or the CSV text, got {path_or_text!r:.60}", field="path_or_text")
    if hasattr(path_or_text, "read"):
        source = getattr(path_or_text, "name", None)
        name = _name(Path(source).stem) if isinstance(source, str) else "torch-csv"
        return parse_torch_csv(path_or_text.read(), name, legacy_backward)
    if isinstance(path_or_text, str) and ("\n" in path_or_text or "," in path_or_text and not os.path.isfile(path_or_text)):
        return parse_torch_csv(path_or_text, "torch-csv", legacy_backward)
    require_file_name(path_or_text, TORCH_CSV_FILE, ScheduleError)
    path = Path(path_or_text)
    try:
        text = read_text_bounded(path, MAX_BYTES, "utf-8-sig", f"{MAX_OPS:,} ops")
    except UnicodeDecodeError as error:
        raise ScheduleError(not_utf8(str(path), error)) from None
    except OSError as error:
        raise ScheduleError(unreadable(str(path), error, TORCH_CSV_FILE)) from None
    return parse_torch_csv(text, _name(path.stem), legacy_backward, where=str(path))


def _name(stem: str) -> str:
    """A schedule's name from a file's stem, its undecodable bytes written as their escapes
    (``bad\\udcff`` for the byte 0xff): the name goes into tables, JSON and plots, which take text."""
    return utf8(stem).decode("utf-8")


TORCH_CSV_FILE = "a PyTorch schedule CSV file"
"""What a schedule file is, in the reader's messages (:func:`ppopt.io.unreadable`)."""

MAX_BYTES = 32 * MAX_OPS
"""The largest CSV read, in bytes: :data:`ppopt.ir.MAX_OPS` actions of up to 32 bytes each (a compute
cell such as ``12I4095,`` is under 16; the rest leaves room for communication cells)."""


def refuse_replicas(schedule: Schedule) -> None:
    """Refuse a schedule with replicated stages (Chimera, DualPipe): PyTorch's CSV holds one rank
    per stage."""
    for s, holders in enumerate(schedule.placement):
        if len(set(holders)) > 1:
            ranks = ", ".join(str(d) for d in holders[:-1]) + f" and {holders[-1]}"
            raise ScheduleError(
                f"PyTorch's schedule CSV holds one rank per stage; {schedule.name} places stage {s} on ranks {ranks}"
            )


StartTimes = Mapping[Op, float] | Sequence[Sequence[float]]
"""Start times of a schedule's ops: by op, or one sequence per device in that device's order (what
:meth:`ppopt.simulate.Simulation.device_starts` gives without a dictionary keyed by op, seconds at
millions of ops)."""


def _device_times(schedule: Schedule, start: StartTimes) -> list[Sequence[float]]:
    if not isinstance(start, Mapping):
        if len(start) != schedule.devices or any(len(t) != len(o) for t, o in zip(start, schedule.orders)):
            raise ScheduleError(f"start times for {[len(t) for t in start]} ops per device, the schedule has "
                                f"{[len(o) for o in schedule.orders]}")
        return list(start)
    times: list[Sequence[float]] = []
    for d, order in enumerate(schedule.orders):
        try:
            times.append([start[op] for op in order])
        except KeyError as absent:
            raise ScheduleError(f"no start time for op {absent.args[0]} on device {d}") from None
    return times


def loss_order_message(schedule: Schedule) -> str | None:
    """Why PyTorch's runtime would train the schedule with wrong gradients, or None.

    The runtime keeps each loss in a list in the order the last stage computes its forwards, and
    a backward of the last stage takes the loss at its microbatch's index in that list
    (``_maybe_compute_loss`` and ``_maybe_get_loss`` of ``torch/distributed/pipelining/schedules.py``):
    unless the last stage runs its forwards in microbatch order 0, 1, ..., a backward starts from
    another microbatch's loss. Such a schedule meets every dependency (ppopt's validator accepts it)
    and runs, and its gradients differ from the non-pipelined model's (measured with ``ppopt run``:
    stage 1 of two running F1 before F0). The other stages may take their microbatches in any order:
    the runtime posts each receive before the op that needs it and matches it to the right send
    (a middle stage of three running F1 before F0 and B1 before B0 trains exactly)."""
    last = schedule.stages - 1
    forwards = [op for device in sorted(set(schedule.placement[last])) for op in schedule.orders[device]
                if op.stage == last and op.kind is Kind.F]
    order = [op.microbatch for op in forwards]
    for position, microbatch in enumerate(order):
        if microbatch != position:
            expected = next(op for op in forwards if op.microbatch == position)
            return (f"the last stage ({last}) runs {forwards[position]} before {expected}; PyTorch's runtime looks up each "
                    f"microbatch's loss by the order the last stage's forwards ran, so its backwards would start from "
                    f"another microbatch's loss: run the last stage's forwards in microbatch order")
    return None


def runtime_problem(schedule: Schedule) -> str | None:
    """Why PyTorch's runtime cannot train ``schedule`` correctly though ppopt's validator accepts it,
    or None: a rank with no stage (an empty row of a file: the runtime's pipeline group would be
    larger than its stages), or the last stage's forwards out of microbatch order
    (:func:`loss_order_message`). Replicated stages are refused before (:func:`refuse_replicas`)."""
    held = {rank for holders in schedule.placement for rank in holders}
    idle = [rank for rank in range(schedule.devices) if rank not in held]
    if idle:
        if schedule.devices > schedule.stages:
            why = f"its pipeline group of {schedule.devices} ranks would be larger than the {schedule.stages} stages"
        else:
            held_by = [[s for s, holders in enumerate(schedule.placement) if rank in holders] for rank in range(schedule.devices)]
            most = max(range(schedule.devices), key=lambda rank: len(held_by[rank]))
            why = f"rank {most} holds {len(held_by[most])} of the {schedule.stages} stages, rank {idle[0]} none"
        return f"rank {idle[0]} holds no stage; PyTorch's runtime needs at least one stage on every rank ({why})"
    return loss_order_message(schedule)


def format_torch_csv(schedule: Schedule, start: StartTimes | None = None) -> str:
    """The CSV text of ``schedule`` (see :func:`write_torch_csv`)."""
    if not isinstance(schedule, Schedule):
        raise ScheduleError(f"must be a Schedule, got {schedule!r:.60}", field="schedule")
    refuse_replicas(schedule)
    validate(schedule)  # a file ppopt's import would refuse is not written (free for a schedule validated before)
    rows = list(schedule.orders)
    if start is not None:
        moved = False
        for d, (order, times) in enumerate(zip(schedule.orders, _device_times(schedule, start))):
            if any(map(operator.gt, times, islice(times, 1, None))):  # sort by start time; ties keep the order
                rows[d] = tuple(order[i] for i in sorted(range(len(order)), key=times.__getitem__))
                moved = True
        if moved:
            reordered = dataclasses.replace(schedule, orders=tuple(rows))
            try:
                validate(reordered)
            except ScheduleValidationError as error:
                raise ScheduleValidationError(f"ordering {schedule.name} by the given start times: {error}", error.details) from None
    problem = runtime_problem(dataclasses.replace(schedule, orders=tuple(rows)))
    if problem is not None:  # a file PyTorch's runtime could not run, or would train with wrong gradients, is not written
        raise ScheduleError(f"{schedule.name}: {problem}")
    together = dict(schedule.overlapped)  # F -> the B overlapped with it
    letter = {kind: kind.value for kind in Kind}
    lines = []
    for order in rows:
        if not together:  # str(op), written out: a call per op is a third of the time at millions of ops
            cells = [f"{s}{letter[k]}{mb}" for s, k, mb in order]
        else:
            cells, i = [], 0
            while i < len(order):
                op = order[i]
                if together.get(op) is not None and i + 1 < len(order) and order[i + 1] == together[op]:
                    cells.append(f"({op};{order[i + 1]})OVERLAP_F_B")
                    i += 2
                else:
                    cells.append(str(op))
                    i += 1
        lines.append(",".join(cells))  # no cell holds a comma, quote or line break: nothing to quote
    return "\n".join(lines) + "\n"


def write_torch_csv(
    schedule: Schedule,
    path_or_file: str | os.PathLike | IO[str],
    start: StartTimes | None = None,
) -> None:
    """Write ``schedule`` as a PyTorch schedule CSV (``compute_only`` format).

    One row per device with its ops in order; with ``start`` (simulated or solver start times, by
    op or per device: :data:`StartTimes`), each device's ops sorted by start time (ties keep the schedule's order). A path is written
    atomically; an open text file is written as is. Raises :class:`ScheduleError` for a schedule
    with replicated stages, which the format cannot hold, and :class:`ScheduleValidationError` for
    one that is not valid (nothing is written).
    """
    text = format_torch_csv(schedule, start)
    if hasattr(path_or_file, "write"):
        path_or_file.write(text)
    else:
        atomic_write_text(path_or_file, text)
