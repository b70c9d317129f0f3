"""Every relative link and image in the README and docs/ points at a file that exists, and the
pages keep the lengths a reader can take in (README ≤ 220 lines, results ≤ 300)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)


def broken(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    missing = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address, or an anchor on the page
        if not (page.parent / target.split("#")[0]).exists():
            missing.append(target)
    return missing


def test_every_relative_link_resolves():
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    assert len(pages) > 50
    assert {str(p.relative_to(REPO)): broken(p) for p in pages if broken(p)} == {}


def test_the_front_pages_stay_short():
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 220
    assert len((REPO / "docs/results.md").read_text(encoding="utf-8").splitlines()) <= 300
