"""README.md reads as one page (at most 120 lines) and keeps what other issues require of it; every
relative link in README.md and docs/*.md reaches a file of the repository, and an anchor a heading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a `# ...` there is a comment, `[a](b)` is code)."""
    return _FENCE.sub("", text)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", _prose(page.read_text()), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """Each relative link of ``page`` whose file (inside ``root``), or whose anchor in a Markdown file,
    does not exist."""
    bad = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or not dest.is_relative_to(root.resolve()):
            bad.append(f"{page.name}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{page.name}: {target} (no heading with that anchor)")
    return bad


def test_the_readme_is_one_page() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines (at most 120: move a topic to docs/)"


def test_the_readme_keeps_the_two_commands_capacity_and_both_export_formats() -> None:
    text = README.read_text()
    assert re.search(r"```sh\nmake demo .*\nmake test .*\n```", text)
    capacity = text[text.index("\n## How much traffic can it carry?\n") :]
    assert "--objective capacity" in capacity and "# capacity at SLO" in capacity  # its command, its output
    assert "--export-format vllm-config" in text and "--export-format helm-values" in text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    assert not broken_links(page)


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# Tool\n\n## How much traffic can it carry?\n")
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    links = "[a](#top) [b](../README.md#how-much-traffic-can-it-carry) [c](nowhere.md) [d](../README.md#gone)"
    page.write_text(
        f"# Top\n\n{links} [e](https://example.com/x)\n\n```sh\n# not a heading [f](code.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "page.md: nowhere.md (no such file)",
        "page.md: ../README.md#gone (no heading with that anchor)",
    ]
