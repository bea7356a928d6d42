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


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but - and _ dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_s_links_within_itself_lead_to_headings_and_its_contents_list_every_section():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = [line.lstrip("#").strip() for line in text.splitlines() if re.match(r"#{2,4} ", line)]
    anchors = {_slug(h) for h in headings}
    assert _slug("`ppopt search`: find a better schedule, and prove it optimal") in anchors  # code and commas dropped
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert links and [link for link in links if link not in anchors] == []
    contents = next(line for line in text.splitlines() if line.startswith("**Contents:**"))
    sections = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]
    assert re.findall(r"\]\(#([^)]+)\)", contents) == [_slug(s) for s in sections]
