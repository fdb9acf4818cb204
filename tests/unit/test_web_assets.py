"""The web view's bundled libraries: exactly what web/package-lock.json pins, each package with
its licence, and pages that load nothing from elsewhere and run no inline script."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STATIC = REPO / "sandbox" / "web" / "static"
VENDOR = STATIC / "vendor"


def test_the_vendored_libraries_are_the_locked_ones_each_with_its_licence() -> None:
    lock = json.loads((REPO / "web" / "package-lock.json").read_text())
    locked = {
        path.removeprefix("node_modules/"): meta["version"]
        for path, meta in lock["packages"].items()
        if path
    }
    vendored = json.loads((VENDOR / "VERSIONS.json").read_text())
    assert {name: meta["version"] for name, meta in vendored.items()} == locked
    for name in locked:
        licence = VENDOR / "licenses" / (name.replace("/", "__") + ".txt")
        assert licence.stat().st_size > 100, name
    wanted = json.loads((REPO / "web" / "package.json").read_text())["dependencies"]
    assert {name: locked[name] for name in wanted} == wanted


def test_pages_load_only_their_own_files_and_run_no_inline_script() -> None:
    for page in STATIC.glob("*.html"):
        html = page.read_text()
        for url in re.findall(r'(?:src|href|action)="([^"]*)"', html):
            assert url.startswith("/ui/"), (page.name, url)
            assert (STATIC / url.removeprefix("/ui/static/")).exists() or not url.startswith(
                "/ui/static/"
            ), url
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), page.name
        assert not re.search(r"\son[a-z]+=", html), page.name  # no inline event handlers
        assert "style=" not in html, page.name
