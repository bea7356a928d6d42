"""Citations a reader can follow: the project cites papers (authors, title, year,
section) or its own files, never a document outside the repository nor a path outside it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ["ppopt", "tests", "benchmarks", "docs", "configs", "models", "data", "README.md"]
# Built from pieces so that this file does not match itself.
FORBIDDEN = re.compile("|".join([
    "reference " + "§",  # an unnamed "reference", section n
    r"reference\." + "md",
    "/" + "work/",  # absolute paths of the machine the project was written on
    r"\.\./" + "shared",
    "shared" + "/reference",
    "project's " + "(domain )?reference",
    r"\b[Ii]ssue " + r"(\d|\")",  # the tracker the work came from, by number or title: not in the repository
    r"\bthe " + "issue's",
]))


def test_no_citation_of_documents_outside_the_repository():
    hits = []
    for entry in SCANNED:
        path = ROOT / entry
        for file in [path] if path.is_file() else sorted(path.rglob("*")):
            if file.suffix not in {".py", ".md", ".toml", ".json", ".txt", ".csv", ".cfg", ".ini", ".yaml", ".yml"}:
                continue
            for number, line in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if FORBIDDEN.search(line):
                    hits.append(f"{file.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "\n".join(hits)
