"""The CSV readers (measured data, the published table, PyTorch schedule CSVs) refuse what Python's
``csv``, ``int()`` and ``float()`` would trip over or read too generously, in one line naming the
file and line: a field over the ``csv`` module's limit, numbers such as ``300_0`` or ``٢``, a column
named twice, a huge cell (quoted cut short), an empty file name."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

from ppopt.cli import main
from ppopt.config import load_system
from ppopt.errors import ConfigError, ScheduleError
from ppopt.io import csv_problem, decimal_float, decimal_int, shown
from ppopt.io.measured import MeasuredDataError, read_measured
from ppopt.io.published import read_published
from ppopt.io.torch_csv import parse_torch_csv, read_torch_csv

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = (ROOT / "data" / "published" / "megatron-lm-2021.csv").read_text().splitlines()
HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
          "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)")
ROW = "2,16,8,1024,16,24,1024,1,1,2,300"
LIMIT = csv.field_size_limit()


def cli(*args) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def measured_commands(path: Path, tmp_path: Path) -> list[tuple[list, str]]:
    """Every command that reads a measured-data file, and the flag its errors name ("" for none)."""
    return [(["validate", path, "--system", "a100-vtrain"], ""), (["calibrate", path, "-o", tmp_path / "cal.toml"], ""),
            (["plan", "--system", "a100-vtrain", "--candidates", path, "-q"], "--candidates: ")]


def schedule_commands(path: Path) -> list[list]:
    """Every command that reads a PyTorch schedule CSV."""
    return [["import", path], ["table", "--schedule-file", path]]


def published_with(tmp_path: Path, column: str, value: str) -> Path:
    """The published table's header and first run, with ``column`` set to ``value``."""
    header = PUBLISHED[0].split(",")
    cells = PUBLISHED[1].split(",")
    cells[header.index(column)] = value
    path = tmp_path / "published.csv"
    path.write_text(f"{PUBLISHED[0]}\n{','.join(cells)}\n")
    return path


# -- 1. a field over the csv module's limit, and other lines csv cannot read -------------------------


@pytest.mark.parametrize(("text", "line"), [("a" * 200_000 + "\n", 1), (f"{HEADER}\n{ROW[:-3]}{'1' * 200_000}\n", 2)])
def test_a_field_over_the_csv_limit_in_measured_data_is_one_line(tmp_path, text, line):
    path = tmp_path / "long.csv"
    path.write_text(text)
    for args, flag in measured_commands(path, tmp_path):
        assert cli(*args) == (1, f"error: {flag}{path}: line {line}: a field is longer than {LIMIT:,} characters\n"), args
    assert not (tmp_path / "cal.toml").exists()


def test_a_field_over_the_csv_limit_in_the_published_table_is_one_line(tmp_path):
    path = published_with(tmp_path, "GPUs", '"' + "7" * 200_000 + '"')
    assert cli("published", path) == (1, f"error: {path}: line 2: a field is longer than {LIMIT:,} characters\n")


def test_a_quoted_field_over_the_csv_limit_in_a_schedule_csv_is_one_line(tmp_path):
    path = tmp_path / "sched.csv"
    path.write_text('0F0,0B0\n1F0,"' + "x" * 200_000 + '"\n')
    for args in schedule_commands(path):
        assert cli(*args) == (1, f"error: {path}: line 2: a field is longer than {LIMIT:,} characters\n"), args


def test_a_carriage_return_inside_an_unquoted_field_is_one_line(tmp_path):
    reason = r"a carriage return inside an unquoted field (quote the field, or end lines with \n or \r\n)"
    measured = tmp_path / "cr.csv"
    measured.write_text(f"{HEADER}\n{ROW}\r5\n", newline="")
    assert cli("validate", measured) == (1, f"error: {measured}: line 2: {reason}\n")
    schedule = tmp_path / "sched.csv"
    schedule.write_text("0F0,0B0\n1F0\r,1B0\n", newline="")
    for args in schedule_commands(schedule):
        assert cli(*args) == (1, f"error: {schedule}: line 2: {reason}\n"), args


def test_any_other_csv_error_is_named_as_unreadable_csv():
    # Python 3.11's csv reads a NUL byte (older versions raised "line contains NUL"; the files are
    # refused at their first NUL byte before csv sees them), so the fallback is checked directly
    assert csv_problem(csv.Error("line contains NUL")) == "not readable as CSV (line contains NUL)"


def test_a_record_spanning_lines_and_a_blank_line_keep_the_line_numbers_of_the_file(tmp_path):
    path = tmp_path / "multi.csv"
    path.write_text(f'{HEADER}\n"2\n",16,8,1024,16,24,1024,1,1,2,300\n\n{ROW[:-3]}fast\n')
    with pytest.raises(MeasuredDataError) as caught:
        read_measured(path, load_system("a100-vtrain"))
    assert str(caught.value) == f"{path}: line 5, column 'iteration time (ms)': not a number: 'fast'"
    table = tmp_path / "published.csv"  # a blank line counted: csv.DictReader's rows were numbered without it
    table.write_text(f"{PUBLISHED[0]}\n\n{PUBLISHED[1].replace(',137', ',fast')}\n")
    with pytest.raises(ConfigError) as caught:
        read_published(table)
    assert str(caught.value) == f"{table}: line 3, column 'teraFLOP/s per GPU': not a number: 'fast'"


# -- 2. plain ASCII decimal numbers only -------------------------------------------------------------


@pytest.mark.parametrize(("column", "value", "message"), [
    ("iteration time (ms)", "300_0", "not a number: '300_0'"),
    ("iteration time (ms)", "٣٠٠", "not a number: '٣٠٠'"),
    ("iteration time (ms)", "inf", "not a number: 'inf'"),
    ("iteration time (ms)", "nan", "not a number: 'nan'"),
    ("# GPUs", "٢", "not an integer: '٢'"),
    ("micro batch", "0_8", "not an integer: '0_8'"),
    ("hidden size", "1" * 5000, f"too many digits: {shown('1' * 5000)}"),
    ("iteration time (ms)", "9" * 400, f"must lie between 0.001 and 1e+12, got {shown('9' * 400)}"),
])
def test_a_measured_number_must_be_plain_ascii_decimal(tmp_path, column, value, message):
    cells = ROW.split(",")
    cells[HEADER.split(",").index(column)] = value
    path = tmp_path / "odd.csv"
    path.write_text(f"{HEADER}\n{','.join(cells)}\n")
    assert cli("validate", path, "--system", "a100-vtrain") == (1, f"error: {path}: line 2, column '{column}': {message}\n")


@pytest.mark.parametrize(("column", "value", "message"), [
    ("GPUs", "3_2", "not a number: '3_2'"),
    ("attention heads", "٢٤", "not a number: '٢٤'"),
    ("teraFLOP/s per GPU", "nan", "not a number: 'nan'"),
])
def test_a_published_number_must_be_plain_ascii_decimal(tmp_path, column, value, message):
    path = published_with(tmp_path, column, value)
    assert cli("published", path) == (1, f"error: {path}: line 2, column '{column}': {message}\n")


def test_plain_decimal_numbers_are_read_as_before():
    assert [decimal_int(text) for text in ("12", "+12", "-12", "007")] == [12, 12, -12, 7]
    assert [decimal_float(text) for text in ("1", "-1.5e3", "+.5", "2.", "1E-2")] == [1, -1500, 0.5, 2, 0.01]
    for text in ("", "+", "1_000", "٢", "inf", "nan", "0x10", "1e", ".", " 1", "1.5.2", "½"):
        with pytest.raises(ValueError):
            decimal_float(text)
    for text in ("", "1.0", "1e3", "3_000", "٢", "²"):
        with pytest.raises(ValueError):
            decimal_int(text)


def test_a_schedule_index_must_be_ascii_digits_of_sensible_length(tmp_path):
    arabic = tmp_path / "arabic.csv"
    arabic.write_text("0F٠,0B٠\n1F٠,1B٠\n")  # numpy and int() read these: a traceback, or stage 0
    for args in schedule_commands(arabic):
        assert cli(*args) == (1, f"error: {arabic}: row 0 (rank 0, line 1), cell 0: unknown action '0F٠' "
                                 "(expected <stage><F|I|W|B><microbatch>, e.g. 3F12)\n"), args
    digits = tmp_path / "digits.csv"
    digits.write_text(f"0F0,0B0\n1F0,1B{'1' * 5000}\n")  # over int()'s 4,300 digits: a ValueError traceback
    assert cli("import", digits) == (1, f"error: {digits}: row 1 (rank 1, line 2), cell 1: action {shown('1B' + '1' * 5000)} "
                                        "has an index of more than 40 digits\n")


# -- 3. a column named twice -------------------------------------------------------------------------


def test_a_measured_column_named_twice_is_refused(tmp_path):
    path = tmp_path / "twice.csv"
    path.write_text(f"{HEADER},# GPUs\n{ROW},4\n")
    for args, flag in measured_commands(path, tmp_path):
        assert cli(*args) == (1, f"error: {flag}{path}: line 1, column '# GPUs': named twice in the header (columns 1 and 12)\n")


def test_a_published_column_named_twice_is_refused(tmp_path):
    path = tmp_path / "twice.csv"
    path.write_text(f"{PUBLISHED[0]},GPUs\n{PUBLISHED[1]},64\n")
    assert cli("published", path) == (1, f"error: {path}: line 1, column 'GPUs': named twice in the header (columns 7 and 10)\n")


def test_empty_header_cells_may_repeat(tmp_path):
    path = tmp_path / "trailing.csv"
    path.write_text(f"{HEADER},,\n{ROW},,\n")
    rows, _ = read_measured(path, load_system("a100-vtrain"))
    assert len(rows) == 1


# -- 4. a huge cell is quoted cut short ----------------------------------------------------------------


def test_shown_cuts_a_cell_to_40_characters():
    assert shown("fast") == "'fast'"
    assert shown("x" * 40) == repr("x" * 40)
    assert shown("x" * 1_000_000) == f"{'x' * 40!r}... (1,000,000 characters)"


def test_a_huge_bad_cell_is_quoted_cut_short(tmp_path):
    cell = "x" * 100_000  # under the csv limit
    quoted = f"{'x' * 40!r}... (100,000 characters)"
    measured = tmp_path / "measured.csv"
    measured.write_text(f"{HEADER}\n{ROW[:-3]}{cell}\n")
    assert cli("validate", measured) == (1, f"error: {measured}: line 2, column 'iteration time (ms)': not a number: {quoted}\n")
    published = published_with(tmp_path, "layers", cell)
    assert cli("published", published) == (1, f"error: {published}: line 2, column 'layers': not a number: {quoted}\n")
    schedule = tmp_path / "sched.csv"
    schedule.write_text(f"0F0,0B0\n{'x' * 1_000_000}\n")  # no quotes: split without csv, so no limit
    for args in schedule_commands(schedule):
        assert cli(*args) == (1, f"error: {schedule}: row 1 (rank 1, line 2), cell 0: unknown action {shown('x' * 1_000_000)} "
                                 "(expected <stage><F|I|W|B><microbatch>, e.g. 3F12)\n"), args
    with pytest.raises(ScheduleError) as caught:
        parse_torch_csv(f"0F0,({'x' * 50_000})OVERLAP\n", "group")
    assert str(caught.value) == ("group: row 0 (rank 0, line 1), cell 1: unknown action group type 'OVERLAP' in "
                                 f"{shown('(' + 'x' * 50_000 + ')OVERLAP')} (expected OVERLAP_F_B)")


# -- 5. an empty file name -----------------------------------------------------------------------------


def test_an_empty_file_name_is_said_to_be_empty(tmp_path):
    for args in (["validate", ""], ["calibrate", "", "-o", tmp_path / "cal.toml"]):
        assert cli(*args) == (1, "error: empty file name: give a measured-data CSV file\n"), args
    assert cli("published", "") == (1, "error: empty file name: give a published-throughput CSV file\n")
    with pytest.raises(ScheduleError, match="^empty file name: give a PyTorch schedule CSV file$"):
        read_torch_csv("")


@pytest.mark.parametrize("args", [["import", ""], ["table", "--schedule-file", ""], ["evaluate", "--schedule-file", ""],
                                  ["run", ""]])
def test_an_empty_schedule_file_name_is_named_as_such(args):
    """It read as the current directory: "error: .: cannot read: Is a directory"."""
    assert cli(*args) == (1, "error: empty file name: give a PyTorch schedule CSV file\n")


def test_plan_with_an_empty_candidates_name_says_so():
    """--candidates '' was read as no --candidates at all ("missing --model and --gpus")."""
    assert cli("plan", "--candidates", "", "--system", "a100-vtrain") == (
        1, "error: --candidates: empty file name: give a measured-data CSV file\n")
    assert cli("plan", "--candidates", "/nonexistent.csv", "--system", "a100-vtrain") == (
        1, "error: --candidates: /nonexistent.csv: no such file\n")


# -- bytes that are not UTF-8 ---------------------------------------------------------------------


def test_a_data_file_that_is_not_utf8_is_one_line_in_every_command_that_reads_one(tmp_path):
    """A CSV saved in another encoding (here a Latin-1 'é' in a header name) is refused in one line
    naming the file, by the measured-data commands and by `published`, which printed a traceback."""
    path = tmp_path / "latin1.csv"
    path.write_bytes(HEADER.replace("# GPUs", "# GPUs (\xe9t\xe9)").encode("latin-1") + b"\n" + ROW.encode() + b"\n")
    commands = [*measured_commands(path, tmp_path), (["published", path], "")]
    for args, flag in commands:
        code, output = cli(*args)
        assert code == 1, (args, output)
        assert output == f"error: {flag}{path}: not UTF-8 text (invalid continuation byte)\n", args
    assert not (tmp_path / "cal.toml").exists()  # calibrate wrote nothing
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        read_published(path)


def test_every_other_reader_says_the_same_of_a_file_that_is_not_utf8(tmp_path):
    """The twins of the CSV readers above said it each their own way, with Python's codec message
    ("cannot read: 'utf-8' codec can't decode byte 0xe9 in position 4: ...", "not valid TOML: 'utf-8'
    codec ..."): a PyTorch schedule CSV (import, table, run), a model or system file, a sweep or study
    spec and a cost preset now give the same line as the data files."""
    latin1 = "name = \"\xe9t\xe9\"\n".encode("latin-1")
    files = {suffix: tmp_path / f"latin1{suffix}" for suffix in (".csv", ".toml", ".json")}
    for path in files.values():
        path.write_bytes(latin1)
    csv_file, toml_file, json_file = (str(files[s]) for s in (".csv", ".toml", ".json"))
    commands = [
        (["import", csv_file], csv_file, ""),
        (["table", "--schedule-file", csv_file], csv_file, ""),
        (["run", csv_file], csv_file, ""),
        (["evaluate", "-s", "1f1b", "-p", 2, "-m", 2, "--model", toml_file, "--system", "mid-mid"], toml_file, ""),
        (["evaluate", "-s", "1f1b", "-p", 2, "-m", 2, "--model", "study", "--system", json_file], json_file, ""),
        (["sweep", toml_file, "-o", tmp_path / "out"], toml_file, ""),
        (["study", "--spec", toml_file, "-o", tmp_path / "out"], toml_file, ""),
        (["search", "-p", 2, "-m", 2, "--costs", json_file], json_file, "--costs: "),
    ]
    for args, path, flag in commands:
        code, output = cli(*args)
        assert (code, output) == (1, f"error: {flag}{path}: not UTF-8 text (invalid continuation byte)\n"), args
    assert not (tmp_path / "out").exists()


def test_a_measured_file_of_too_many_rows_is_refused_while_reading(tmp_path, monkeypatch):
    """300,000 rows took validate 122 s and 1 GB, calibrate more than 5 minutes on 100,000: every
    command that reads measured rows refuses a file over MAX_MEASURED_ROWS (here lowered to 3) in one
    line naming it, before predicting or fitting any row, and calibrate writes nothing."""
    from ppopt.io import measured

    monkeypatch.setattr(measured, "MAX_MEASURED_ROWS", 3)
    path = tmp_path / "rows.csv"
    rows = [ROW[:-3] + str(300 + i) for i in range(4)]
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    for args, flag in measured_commands(path, tmp_path):
        assert cli(*args) == (1, f"error: {flag}{path}: more than 3 rows (line 5): split the file, 3 rows at most each\n")
    assert not (tmp_path / "cal.toml").exists()
    path.write_text("\n".join([HEADER, *rows[:3]]) + "\n")  # at the limit: read
    assert len(read_measured(path, "a100-vtrain")[0]) == 3


def test_a_published_table_of_too_many_runs_is_refused_while_reading(tmp_path, monkeypatch):
    """2,500 runs took published 14 s on one system: a table over MAX_PUBLISHED_RUNS (here 2) is refused."""
    from ppopt.io import published

    monkeypatch.setattr(published, "MAX_PUBLISHED_RUNS", 2)
    path = tmp_path / "table.csv"
    path.write_text("\n".join(PUBLISHED[:4]) + "\n")
    assert cli("published", path) == (1, f"error: {path}: more than 2 runs (line 4): split the table, 2 runs at most each\n")
    path.write_text("\n".join(PUBLISHED[:3]) + "\n")
    assert len(read_published(path)) == 2
