"""The README and the reference pages under docs/ it links: every relative link names a file
that exists and, after `#`, a heading of that file (as GitHub makes anchors), so splitting or
renaming a section cannot leave a dead link; every page is reachable from the README.

The format and the design are documented inside the project (issue 32): no file cites the notes
that used to sit outside the repository, none names a path outside it, and every
`docs/format.md §N` reference points at a section that exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8")))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_heading(page):
    for target in links(page):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}: no such file"
        if anchor:
            assert anchor in anchors(linked), f"{page.name}: {target}: no such heading"


def test_the_readme_links_every_reference_page():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    assert set(PAGES[1:]) <= linked, set(PAGES[1:]) - linked


# -- the format and design inside the project --------------------------------------------------
FORMAT = ROOT / "docs" / "format.md"
# The changelog tells history, old file names included.
HISTORY = {"CHANGELOG.md"}
# The one place that says where the real samples are kept (outside the repository on purpose).
SAMPLES_HELPER = "tests/real_samples.py"
OLD_NOTES = re.compile(r"\b(CONTRACT|DESIGN)\.md")
OUTSIDE = re.compile(r"\.\./shared\b|[\"']shared[\"']\s*/|(?:/work)/")
# `docs/format.md §2`, `format.md §1-4`, `docs/format.md §1, §7`, `format.md §5 and §6`.
FORMAT_REF = re.compile(r"format\.md((?:(?:,\s*|\s+and\s+|\s*)§\d+(?:-\d+)?)+)")
SECTION = re.compile(r"§(\d+)(?:-(\d+))?")


def repository_files() -> list[str]:
    """The repository's text files (tracked, and new ones git does not ignore)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the repository's files cannot be listed")
    return [name for name in out.splitlines()
            if name not in HISTORY and (ROOT / name).is_file()
            and b"\0" not in (ROOT / name).read_bytes()[:8192]]


def text_of(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8", errors="replace")


def lines_matching(pattern: re.Pattern[str], skip: frozenset[str] = frozenset()) -> list[str]:
    return [f"{name}:{number}: {line.strip()}"
            for name in repository_files() if name not in skip
            for number, line in enumerate(text_of(name).splitlines(), 1) if pattern.search(line)]


def format_sections() -> list[int]:
    return [int(n) for n in re.findall(r"^## (\d+)\. ", text_of("docs/format.md"), re.M)]


def test_no_file_cites_the_old_format_and_design_notes():
    assert lines_matching(OLD_NOTES) == [], "cite docs/format.md §N or docs/development.md"


def test_no_file_names_a_path_outside_the_repository():
    assert lines_matching(OUTSIDE, frozenset({SAMPLES_HELPER})) == [], \
        f"real samples are found through {SAMPLES_HELPER}"


def test_the_format_sections_are_numbered_one_after_another():
    sections = format_sections()
    assert len(sections) >= 12 and sections == list(range(1, len(sections) + 1))


def test_the_reference_finder_reads_every_form_the_code_uses():
    text = "docs/format.md §1-4; docs/format.md §1, §7; format.md §5 and §6; (format.md §3)."
    assert [SECTION.findall(m.group(1)) for m in FORMAT_REF.finditer(text)] == [
        [("1", "4")], [("1", ""), ("7", "")], [("5", ""), ("6", "")], [("3", "")]]


def test_every_format_reference_names_a_section_that_exists():
    sections = set(format_sections())
    bad = []
    for name in repository_files():
        text = text_of(name)
        refs = [m.group(1) for m in FORMAT_REF.finditer(text)]
        if name == "docs/format.md":  # its own cross-references are a bare `§N`
            refs.append(text)
        for ref in refs:
            for first, last in SECTION.findall(ref):
                wanted = set(range(int(first), int(last or first) + 1))
                if not wanted or not wanted <= sections:
                    bad.append(f"{name}: §{first}{'-' + last if last else ''}")
    assert bad == []
