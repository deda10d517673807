"""normgrow.viz.render and the diagnostics plots: number formats, tables, the notebook renderer and offline export (an
executed notebook of the test run's tiny study), and the widget's choices."""
from __future__ import annotations

import json
import math
import re

import nbformat
import numpy as np
import pandas as pd
import pytest

from chromium import needs_chromium
from normgrow.analysis.claims import SUPPORTED, Claim

from normgrow.viz import diagplots, render
from normgrow.analysis import formats


def test_fmt_by_column_kind():
    assert formats.cell(4.920512345, "val_ce") == "4.9205"
    assert formats.cell(786432.0, "active_layer_tokens") == "786,432"
    assert formats.cell(0.0450797, "flat_ratio") == "0.0451"
    assert formats.cell(164.63, "wall_s") == "165"
    assert formats.cell(np.bool_(True)) == "yes" and formats.cell(False) == "no"
    assert formats.cell(float("nan"), "val_ce") == "" and formats.cell(None) == ""
    assert formats.interval(4.92109, 4.90423, 4.93795) == "4.921 [4.904, 4.938]"
    assert formats.interval(4.92109, math.nan, math.nan) == "4.921"


def test_table_drops_empty_columns_and_formats():
    df = pd.DataFrame({"variant": ["pre-grow", "post-grow"], "val_ce": [4.818123456789, 4.9211],
                       "missing": [None, None], "unpaired": [math.nan, math.nan], "trained": [True, False]})
    out = render.table(df, rename={"val_ce": "val CE"})
    assert "missing" not in out and "unpaired" not in out
    assert "<th>val CE</th>" in out and ">4.8181<" in out and ">4.818123456789<" not in out
    assert ">yes<" in out and ">no<" in out


def test_palette_gives_each_placement_and_schedule_its_own_look():
    """A colour per registered placement, none of them a verdict's; a line style and a marker per schedule family;
    every variant of the study's run files a look of its own."""
    from normgrow.analysis.variants import load_variants
    from normgrow.student.placements import PLACEMENTS
    from normgrow.viz import palette
    assert set(palette.PLACEMENT_COLOUR) == set(PLACEMENTS)
    colours = list(palette.PLACEMENT_COLOUR.values())
    assert len(set(colours)) == len(colours) and not set(colours) & set(palette.STATUS_COLOUR.values())
    assert len(set(palette.SCHEDULE_DASH.values())) == len(palette.SCHEDULE_DASH)
    assert len(set(palette.SCHEDULE_SYMBOL.values())) == len(palette.SCHEDULE_SYMBOL)
    styles = {tuple(palette.variant_style(*render.split_variant(v)).values()) for v in load_variants()}
    assert len(styles) == len(load_variants())


def test_pages_load_one_shared_plotlyjs(tmp_path, monkeypatch):
    """Pages written under the outputs root load the one plotly.js of outputs/assets/ by a relative path, none inlines
    it; a page that is not a file (html() alone) inlines it once."""
    import plotly.graph_objects as go
    from plotly.offline import get_plotlyjs_version
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    page = render.Page("t")
    for _ in range(3):
        page.figure(go.Figure(go.Scatter(x=[1, 2], y=[1, 2])))
    text = page.html()
    assert text.count("window.Plotly = Plotly") == 1 and text.count("Plotly.newPlot") == 3
    assert not re.search(r"<script[^>]*\bsrc=", text)
    asset = tmp_path / "assets" / f"plotly-{get_plotlyjs_version()}.min.js"
    for where in ("study/tiny/report.html", "grid/tiny/shapes/report.html"):
        written = page.write(tmp_path / where).read_text()
        src = re.findall(r"<script src='([^']+)'>", written)
        assert len(src) == 1 and (tmp_path / where).parent.joinpath(src[0]).resolve() == asset.resolve()
        assert "window.Plotly = Plotly" not in written and len(written) < 100_000
    assert asset.stat().st_size > 1_000_000 and "window.Plotly = Plotly" in asset.read_text()
    assert "<script" not in render.Page("no figures").add("<p>x</p>").html()


@pytest.mark.integration
def test_executed_notebook_keeps_its_figures_outside_jupyterlab(finished_study):
    """The study executed run_variant.ipynb for post-grow-s0: its figure carries both the plotly mimetype and
    text/html (what nbconvert and nbviewer keep), and plotly.js is in the notebook once."""
    root, _ = finished_study
    executed = root / "runs" / "tiny" / "post-grow-s0" / "run.ipynb"
    nb = nbformat.read(executed, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert figures and all("text/html" in o["data"] for o in figures)
    assert sum("window.Plotly = Plotly" in str(o.get("data", {}).get("text/html", "")) for o in outputs) == 1


def synthetic_study() -> dict:
    """Two seeds of pre-grow, pre-grow-freeze and post-grow (three phases) and one pre-joint seed (one checkpoint):
    the structure of diagnostics.json with rms = 1 + boundary index and max_abs = 10 x that."""
    groups = ["all", "first"]

    def ckpt(phase, depth, scale):
        return {"phase": phase, "depth": depth, "growth_boundary": None if phase == 0 else depth - 1,
                "boundaries": [{"rms": {g: scale * (1 + i) for g in groups},
                                "max_abs": {g: 10 * scale * (1 + i) for g in groups}} for i in range(depth + 1)],
                "blocks": [{"index": j, "update_ratio": {g: 0.1 for g in groups}, "cosine": {g: 0.9 for g in groups},
                            "skip_delta_ce": 0.01} for j in range(depth)]}

    runs = {}
    for variant, schedule in (("pre-grow", "grow"), ("pre-grow-freeze", "grow"), ("post-grow", "grow")):
        for seed in (0, 1):
            runs[f"{variant}-s{seed}"] = {"seed": seed, "schedule": schedule, "norm": variant.split("-")[0],
                                          "variant": variant, "freeze_prefix": variant.endswith("freeze"),
                                          "drift": {"fixed_boundary": 1},
                                          "checkpoints": [ckpt(p, p + 1, 1 + seed + p) for p in range(3)]}
    runs["pre-joint-s0"] = {"seed": 0, "schedule": "joint", "norm": "pre", "variant": "pre-joint",
                            "freeze_prefix": False, "drift": {"fixed_boundary": 3},
                            "checkpoints": [ckpt(0, 3, 2.0)]}
    return {"profile": "synth", "groups": groups, "runs": runs, "claims": [],
            "batch": {"class_counts": {"all": 16, "first": 2}}}


def test_widget_defaults_and_metric_toggle():
    study = synthetic_study()
    assert diagplots.default_run(study) == "pre-grow-s0"  # not pre-grow-freeze-s0
    # the overlay's counterpart by the run files' parameters: same schedule, control and seed, the other placement
    assert diagplots.counterpart(study, "pre-grow-s1") == "post-grow-s1"
    assert diagplots.counterpart(study, "post-grow-s0") == "pre-grow-s0"
    assert diagplots.counterpart(study, "pre-grow-freeze-s0") is None  # no post-grow-freeze run in this study
    renamed = {**study, "runs": {("mine" if n == "post-grow-s1" else n): d for n, d in study["runs"].items()}}
    assert diagplots.counterpart(renamed, "pre-grow-s1") == "mine"  # names are never parsed
    rms = diagplots.widget_figures(study, "pre-grow-s0", metric="rms")
    mx = diagplots.widget_figures(study, "pre-grow-s0", metric="max_abs")
    ys = lambda fig: [v for t in fig.data for v in (t.y or []) if v is not None]  # noqa: E731
    for k in range(3):  # the boundary figure and both drift figures follow the metric
        assert np.allclose(ys(mx[k]), [10 * v for v in ys(rms[k])]), k
    titles = " ".join(f.layout.title.text for f in rms)
    assert "checkpoint -1" not in titles and "final checkpoint" in titles
    phase1 = diagplots.boundary_figure(study, checkpoint=1)
    assert "phase 1 (depth 2)" in phase1.layout.title.text


def test_widget_overlay_draws_each_placement_in_its_colour():
    """The overlay of pre vs post: every trace of both runs in its placement's colour (the two were one colour, the
    schedule's, when colour meant schedule), each schedule in its line style."""
    from normgrow.viz import palette
    study = synthetic_study()
    for fig in diagplots.widget_figures(study, "pre-grow-s0", overlay=True):
        styled = [t for t in fig.data if t.meta]
        assert {t.meta["norm"] for t in styled} == {"pre", "post"}, fig.layout.title.text
        for t in styled:
            drawn = t.line.color if "lines" in t.mode else t.marker.color
            assert palette.faint(palette.colour(t.meta["norm"]), 0.45) == drawn or drawn == palette.colour(
                t.meta["norm"]), (t.name, drawn)
            assert "lines" not in t.mode or t.line.dash == palette.dash(t.meta["schedule"])


def test_drift_draws_grown_variants_and_joint_as_reference():
    study = synthetic_study()
    fig = diagplots.drift_figure(study, kind="top")
    means = [t for t in fig.data if t.showlegend and "seed" in t.name]
    assert sorted({t.name.split(" ")[0] for t in means}) == ["post-grow", "pre-grow", "pre-grow-freeze"]
    refs = [t for t in fig.data if "reference" in (t.name or "")]
    assert refs and all(list(t.x) == [1, 3] for t in refs)  # across the grown runs' depths, not a point
    assert all(t.y[0] == t.y[1] == 2.0 * 4 for t in refs)  # pre-joint's final top boundary h_3: 2 x (1 + 3)
    mean = next(t for t in fig.data if t.name == "pre-grow (2 seeds)" and list(t.x) == [1, 2, 3])
    assert list(mean.y) == pytest.approx([3.0, 7.5, 14.0])  # top boundary, mean of seeds 0 and 1
    for axis in (fig.layout.yaxis, fig.layout.yaxis2):  # matched axes share their type (no plotly warning)
        assert axis.type == "log"


def test_diagnostics_page_is_styled_and_has_no_raw_json(tmp_path):
    study = synthetic_study()
    claims = [Claim("obs4-stability", "stable", SUPPORTED, "Supported: post x1.01",
                    {"post/all": 1.0086903086999, "pre/all": 1.6045070867976667}).to_json()]
    study["claims_table"] = {"boundary_drift": [
        {"run": n, "group": g, "ratio": 1.5, "variant": n[:-3]} for n in study["runs"] for g in ("all", "first")]}
    text = diagplots.export_html(study, tmp_path / "d.html", claims).read_text()
    body = text.split("<body>", 1)[1]
    visible = re.sub(r"<script.*?</script>", "", body, flags=re.S)
    assert "<style>" in text and visible.count("class='claim'") == 1  # the claims once
    assert "1.0086903086999" not in visible and json.dumps(study["batch"]) not in visible
    headings = re.findall(r"<h2>(.*?)</h2>", visible)
    assert "Residual scale at every boundary (final checkpoint)" in headings
    assert not [h for h in headings if "_" in h], headings  # no code names as headings


@pytest.mark.integration
def test_an_executed_run_notebook_keeps_its_finished_bar_and_the_regime_line(finished_study):
    """The study's kernel executed run_variant.ipynb: its saved output holds the text bar at its last step (a widget
    bar's saved state read 0/N) and the run's closing line about the regime gate."""
    root, _ = finished_study
    run = root / "runs" / "tiny" / "post-grow-s0"
    steps = json.loads((run / "summary.json").read_text())["steps"]
    nb = nbformat.read(run / "run.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert f"{steps}/{steps}" in text and "post-grow-s0: final val_ce" in text


@needs_chromium
def test_a_static_figure_is_the_page_s_figure_exported_the_same_every_time(tmp_path):
    """write_svg exports a plotly figure through kaleido: two exports are the same bytes (plotly.js's random clip
    and trace ids are fixed), and the figure's text is in the file."""
    import plotly.graph_objects as go
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4], name="pre"), layout=dict(title="a gap by width", height=300))
    first, second = render.write_svg(fig, tmp_path / "a.svg"), render.write_svg(fig, tmp_path / "b.svg")
    svg = first.read_text()
    assert svg.startswith("<svg") and "a gap by width" in svg and "defs-normgrow" in svg
    assert svg == second.read_text()


def test_without_a_browser_the_static_figure_is_named_not_written(tmp_path, monkeypatch, capsys):
    import kaleido
    import plotly.graph_objects as go

    def no_chrome(*args, **kwargs):
        raise RuntimeError("could not find a Chrome executable")
    monkeypatch.setattr(kaleido, "calc_fig_sync", no_chrome)
    assert render.write_svg(go.Figure(), tmp_path / "a.svg") is None and not (tmp_path / "a.svg").exists()
    assert f"note: {tmp_path / 'a.svg'} not written: a static figure needs Chrome or Chromium" in capsys.readouterr().out


def test_plotly_s_render_id_is_fixed_only_where_it_names_something(tmp_path, monkeypatch):
    """An all-digit render id (about one render in sixteen) is also a coordinate's digits: only the ids change."""
    import kaleido
    import plotly.graph_objects as go
    svg = ('<svg><defs id="defs-123456"><clipPath id="clip123456xyplot"/></defs>'
           '<path d="M1.123456,2" clip-path="url(#clip123456xyplot)"/></svg>')
    monkeypatch.setattr(render.write_svg, "server", True, raising=False)
    monkeypatch.setattr(kaleido, "calc_fig_sync", lambda *a, **kw: svg.encode())
    written = render.write_svg(go.Figure(), tmp_path / "a.svg").read_text()
    assert written == svg.replace("defs-123456", "defs-normgrow").replace("clip123456", "clipnormgrow")
