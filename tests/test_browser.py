"""What a researcher sees, in a real browser: the tiny study's report.html and diagnostics.html, and an executed
run_variant notebook exported to HTML, and the map's grid page, opened in headless Chromium with the network blocked (the study machine is
offline). Each page must load without a JavaScript error or a plotly warning, draw every figure in the palette's
colours and line styles, and show the claims and the regime check. Screenshots go to outputs/screenshots/ (ignored by git) for a person to look at.

Chromium is the Debian package ``chromium`` (``apt-get install -y chromium``; .ci/run installs it when apt is
there); Playwright (PyPI) drives that executable, it never downloads a browser. Without it the tests are skipped
with a message naming the package. The pages come from the test run's reduced tiny study (conftest.finished_study,
shared with test_study.py), so this file adds only the browser's time (~20 s).
"""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from chromium import CHROMIUM, needs_chromium

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
SHOTS = REPO / "outputs" / "screenshots"
LOCAL = ("file:", "data:", "blob:", "about:")
WIDTH = 1400  # a laptop's window: no page may need sideways scrolling in it
# every plotly div has been drawn (js-plotly-plot) and has a layout; then count what each one drew
DRAWN = """() => { const d = Array.from(document.querySelectorAll('.plotly-graph-div'));
  return d.length > 0 && d.every(x => x.classList.contains('js-plotly-plot') && x._fullLayout); }"""
TRACES = """Array.from(document.querySelectorAll('.plotly-graph-div')).map(d => ({
  id: d.id, traces: (d._fullData || []).length,
  drawn: d.querySelectorAll('g.trace').length + d.querySelectorAll('.hm image').length}))"""
# every trace that draws a placement or a schedule (palette.meta): its colours and line style
STYLED = """Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(d => (d._fullData || [])
  .filter(t => t.meta && (t.meta.norm || t.meta.schedule)).map(t => ({figure: d.id, name: t.name, meta: t.meta,
    mode: t.mode || '', line: t.line ? t.line.color : null, dash: t.line ? t.line.dash : null,
    marker: t.marker && typeof t.marker.color === 'string' ? t.marker.color : null})))"""

TEXT_OVERLAPS = """() => { const out = [];
  for (const svg of document.querySelectorAll('svg')) {
    const boxes = Array.from(svg.querySelectorAll('text')).filter(t => t.textContent.trim()
        && getComputedStyle(t).visibility !== 'hidden' && Number(getComputedStyle(t).opacity) > 0)
      .map(t => ({t: t.textContent.trim(), r: t.getBoundingClientRect()})).filter(b => b.r.width > 0);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i].r, b = boxes[j].r;
      if (Math.min(a.right, b.right) - Math.max(a.left, b.left) > 2
          && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 2) out.push(boxes[i].t + ' | ' + boxes[j].t);
    } }
  return out; }"""


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        # --no-sandbox: CI and these machines run as root, where Chromium refuses its sandbox
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def open_offline(browser, path: Path, shot: str) -> dict:
    """Open a local page with every non-local request aborted; wait until all plotly figures are drawn; save a
    full-page screenshot. Returns the page (still open), its errors, console warnings, blocked URLs and figures."""
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    seen = {"errors": [], "console": [], "blocked": []}
    page.on("pageerror", lambda err: seen["errors"].append(str(err)))
    page.on("console", lambda msg: seen["console"].append(f"{msg.type}: {msg.text}")
            if msg.type in ("error", "warning", "trace") else None)

    def route(r):
        if r.request.url.startswith(LOCAL):
            r.continue_()
        else:
            seen["blocked"].append(r.request.url)
            r.abort()
    page.route("**/*", route)
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function(DRAWN, timeout=60_000)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / shot), full_page=True)
    return {**seen, "page": page, "figures": page.evaluate(TRACES)}


def rgb(colour: str) -> tuple[int, ...]:
    """'#rrggbb', 'rgb(r,g,b)' or 'rgba(r,g,b,a)' as (r, g, b)."""
    if colour.startswith("#"):
        return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return tuple(int(float(v)) for v in colour[colour.index("(") + 1:-1].split(",")[:3])


def check_palette(page) -> int:
    """Every trace drawn for a placement has its colour and every line drawn for a schedule its line style, the
    palette's (viz.palette), on this page; returns how many traces were checked."""
    from normgrow.viz import palette
    traces = page.evaluate(STYLED)
    wrong = []
    for t in traces:
        norm, schedule = t["meta"].get("norm"), t["meta"].get("schedule")
        drawn = [c for part, c in (("lines", t["line"]), ("markers", t["marker"])) if part in t["mode"] and c]
        if norm and (not drawn or any(rgb(c) != rgb(palette.colour(norm)) for c in drawn)):
            wrong.append((t["figure"], t["name"], norm, drawn))
        if schedule and "lines" in t["mode"] and t["dash"] != palette.dash(schedule):
            wrong.append((t["figure"], t["name"], schedule, t["dash"]))
    assert not wrong, f"traces off the palette: {wrong[:5]}"
    return len(traces)


def check_page(seen: dict, min_figures: int) -> None:
    assert not seen["errors"], f"JavaScript errors: {seen['errors']}"
    overflow = seen["page"].evaluate("document.documentElement.scrollWidth")
    assert overflow <= WIDTH, f"the page is {overflow} px wide in a {WIDTH} px window"
    assert not seen["console"], f"console errors or warnings (plotly logs through console.trace): {seen['console'][:5]}"
    assert not seen["blocked"], f"the page asked for the network: {seen['blocked'][:5]}"
    figs = seen["figures"]
    assert len(figs) >= min_figures, figs
    empty = [f for f in figs if not (f["traces"] > 0 and f["drawn"] > 0)]
    assert not empty, f"figures without drawn traces: {empty}"
    overlaps = seen["page"].evaluate(TEXT_OVERLAPS)
    assert not overlaps, f"overlapping labels: {overlaps[:5]}"
    assert check_palette(seen["page"]) > 0, "no figure drew a placement"


@needs_chromium
def test_report_page_offline(browser, finished_study):
    root, summary = finished_study
    seen = open_offline(browser, root / "study" / "tiny" / "report.html", "report_tiny.png")
    check_page(seen, min_figures=5)  # learning curves, grown against joint, variants, gaps, crossover
    page = seen["page"]
    text = page.inner_text("body")
    assert "Training regime:" in text.split("Claims")[0]  # the regime check comes before the claims
    # the answer comes first, and its verdicts are claims.csv's
    assert text.index("The answer") < text.index("Training regime:")
    answer = page.locator("#answer").inner_text()
    status = {r["claim"]: r["status"] for r in csv.DictReader((root / "study" / "tiny" / "claims.csv").open())}
    for claim in ("headline-grow", "headline-joint", "headline-ratio"):
        assert f"[{status[claim]}]" in answer, (claim, status[claim], answer)
    overlay = next(f for f in seen["figures"] if f["id"] == "fig-overlay")
    assert overlay["drawn"] >= 2  # a joint and a grown curve at least
    claims = page.locator(".claim")
    assert claims.count() >= 8, claims.count()  # the 8 claims of docs/STUDY.md (plus observations 4 and 5)
    for claim in ("headline-joint", "headline-grow", "obs1-matched", "obs2-crossover", "obs3-controls"):
        assert claim in text
    assert "obs4-stability" in text and "obs4-structural" in text and "obs5-identity" in text
    curves = next(f for f in seen["figures"] if f["id"] == "fig-curves")
    assert curves["drawn"] >= summary["variant"].nunique()  # a line per variant (and bands, markers, baselines)
    legend = page.locator("#fig-curves").text_content()
    for word in ("teacher", "unigram", "growth point", "post-norm"):
        assert word in legend
    widths = page.evaluate("Array.from(document.querySelectorAll('table')).map(t => t.getBoundingClientRect().right)")
    assert max(widths) <= WIDTH, "a table is wider than a laptop screen"
    page.close()


@needs_chromium
def test_diagnostics_page_offline(browser, finished_study):
    root, _ = finished_study
    seen = open_offline(browser, root / "study" / "tiny" / "diagnostics.html", "diagnostics_tiny.png")
    check_page(seen, min_figures=6)
    page = seen["page"]
    text = page.inner_text("body")
    assert page.locator(".claim").count() == 3  # observations 4 (in two halves) and 5, once (no second claims table)
    assert "obs4-stability" in text and "obs4-structural" in text and "obs5-identity" in text
    assert "Fixed batch" in text and "{" not in text  # no raw JSON
    page.close()


@needs_chromium
def test_grid_page_fits_and_names_its_colours(browser, tmp_path):
    """The ladder's page of the committed cpu runs (grid.grid_report_html, written to tmp_path: the committed page is
    not touched): it fits the window, its depth figure draws without a console warning, and its legend names both
    placements."""
    from normgrow import grid, grid_plan
    plan = grid_plan.plan_grid("cpu", grid_plan.load_grid("ladder"))
    runs = grid.read_cells(plan)
    frame = grid.grid_frame(plan, runs)
    path = tmp_path / "grid.html"
    path.write_text(grid.grid_report_html(plan, frame, grid.grid_machines(grid.cell_records(plan, runs))))
    seen = open_offline(browser, path, "grid_cpu_ladder.png")
    check_page(seen, min_figures=1)
    legend = seen["page"].locator("#fig-depth .legend").text_content()
    assert "pre" in legend and "post" in legend, legend
    seen["page"].close()

COMMITTED_PAGES = sorted(p for suffix in ("html", "svg") for p in (REPO / "outputs").rglob(f"*.{suffix}")
                         if p.relative_to(REPO / "outputs").parts[0] not in ("archive", "screenshots", "runs"))


@needs_chromium
@pytest.mark.parametrize("path", COMMITTED_PAGES, ids=lambda p: p.relative_to(REPO / "outputs").as_posix())
def test_every_committed_page_reads_at_a_laptops_width(browser, path):
    """Every page and figure of outputs/ but the archive (records kept as they were written), at 1,400 px: it loads
    offline without an error, fits the window, prints no nan or inf, and no two of its text labels overlap."""
    import re
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(LOCAL) else r.abort())
    page.goto(path.as_uri(), wait_until="load")
    if path.suffix == ".html" and page.locator(".plotly-graph-div").count():
        page.wait_for_function(DRAWN, timeout=60_000)
        check_palette(page)
    assert not errors, f"JavaScript errors: {errors}"
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDTH or path.suffix == ".svg", f"the page is {width} px wide in a {WIDTH} px window"
    text = page.evaluate("(document.body ? document.body.innerText : '') + ' ' + "
                         "Array.from(document.querySelectorAll('svg text')).map(t => t.textContent).join(' ')")
    assert not re.search(r"(?<![\w.])[+-]?(nan|inf)\b", text, re.IGNORECASE), re.findall(r".{40}\bnan\b.{40}", text)
    overlaps = page.evaluate(TEXT_OVERLAPS)
    assert not overlaps, f"overlapping labels: {overlaps[:5]}"
    page.close()
