"""The `codespec stats --html` page in a real headless browser (Debian's chromium, driven by
Playwright; `scripts/setup-e2e.sh` installs it): the charts are drawn and nothing is fetched.

Set CODESPEC_SCREENSHOTS=DIR to keep the page's screenshot (the README's comes from here)."""

from __future__ import annotations

import io
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codespec.stats.record import Timing, request_row
from codespec.stats.store import Store

CHROMIUM = "/usr/bin/chromium"


def realistic_store(path: Path) -> None:
    """A week of requests in four languages with made-up but plausible figures."""
    rng = random.Random(7)
    store = Store(path)
    for i in range(600):
        language = rng.choice(["python", "typescript", "go", "rust"])
        first = rng.uniform(0.08, 0.6)
        timing = Timing(
            arrived=0.0, started=0.005, first_text=first, done=first + rng.uniform(0.2, 3)
        )
        kind = rng.choice(["single", "single", "multi"])
        row = request_row(
            f"{i:016x}", language, kind, "auto", "served", timing, "x" * rng.randint(4, 120)
        )
        tokens = rng.randint(3, 48)
        passes = max(1, int(tokens / rng.uniform(1.0, 2.6)))
        row.update(
            t=time.time() - rng.uniform(0, 7 * 86400),
            tokens=tokens,
            passes=passes,
            ngram_proposed=tokens * 2,
            ngram_accepted=tokens - passes + 1,
            decode_s=passes * 0.15,
        )
        store.put_request(row)
        verdict = rng.choices(["accepted", "partial", "rejected"], [3, 1, 5])[0]
        chars = (
            row["chars"]
            if verdict == "accepted"
            else rng.randint(1, row["chars"])
            if verdict == "partial"
            else 0
        )
        store.put_verdict(row["id"], {"shown": 1, "verdict": verdict, "accepted_chars": chars})
    store.close()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")  # installed by scripts/setup.sh
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: run scripts/setup-e2e.sh")
    with sync_api.sync_playwright() as playwright:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield chromium
        chromium.close()


def test_the_html_report_draws_its_charts_offline(browser, tmp_path):
    from PIL import Image  # matplotlib's own dependency

    db = tmp_path / "stats.sqlite3"
    realistic_store(db)
    page_path = tmp_path / "report.html"
    out = subprocess.run(
        [sys.executable, "-m", "codespec", "stats", "--db", str(db), "--html", str(page_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(page_path.as_uri())
    page.wait_for_load_state("networkidle")
    assert requested == [page_path.as_uri()]  # nothing but the page itself
    figures = page.locator("figure svg")
    assert figures.count() == 4
    for i in range(4):
        drawn = figures.nth(i).evaluate("svg => svg.querySelectorAll('path, rect, use').length")
        assert drawn > 20, f"chart {i} has {drawn} shapes"
        box = figures.nth(i).bounding_box()
        assert box["width"] > 300 and box["height"] > 150
        pixels = Image.open(io.BytesIO(figures.nth(i).screenshot())).convert("RGB")
        data = pixels.tobytes()
        colored = sum(
            1
            for at in range(0, len(data), 3)
            if max(data[at : at + 3]) - min(data[at : at + 3]) > 60
        )
        assert colored > 500, f"chart {i}: only {colored} coloured pixels"  # bars and lines
    rows = page.locator("table tr")
    assert rows.count() == 6  # header, four languages, total
    assert "python" in page.locator("table").inner_text()
    keep = os.environ.get("CODESPEC_SCREENSHOTS")
    if keep:
        shot = tmp_path / "stats-report.png"
        page.screenshot(path=str(shot), full_page=True)
        shutil.copy(shot, Path(keep) / "stats-report.png")
    page.close()
