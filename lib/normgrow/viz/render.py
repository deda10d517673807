"""What a researcher sees: the HTML pages (report.html, diagnostics.html), their tables and look, and the plotly
renderer of the notebooks. report.py and diagplots.py build their pages with this module.

Choices, and why:

- Offline first, plotly.js once. The study machine has no network, so a page loads plotly.js from the one copy under
  the outputs root (``plotly_asset``: outputs/assets/plotly-<version>.min.js, committed with the pages) by a relative
  path, instead of inlining 4.8 MB into every page; a page moved away from it says so where its figures would be.
  Figures never reference MathJax (none uses LaTeX).
- Notebooks keep their figures outside JupyterLab. ``notebook_setup()`` (the first code cell of every notebook)
  makes each figure carry two outputs: ``application/vnd.plotly.v1+json``, which JupyterLab draws with its plotly
  extension, and ``text/html`` without plotly.js, which nbconvert keeps; plotly.js itself is displayed once, inline,
  by that first cell. Without it an executed notebook stores only the plotly mimetype and nbconvert drops the figure.
- One stylesheet (STYLE) for both pages, sized for a laptop: a 1100 px column, 12.5 px tables whose headers wrap, so
  no table needs sideways scrolling. Wide frames are shown as a chosen subset of columns (the csv next to the page
  has them all) and the long ones sit in a closed ``<details>``.
- Numbers are formatted by column (``formats.cell``): validation CE and gaps with 4 decimals (the gaps of interest are
  0.0004-0.03 nats), ratios with 3 significant digits, token counts with thousands separators, booleans yes/no,
  NaN as an empty cell; a column that is empty everywhere is dropped (it only costs width).
- Colours, line styles and markers come from ``palette``: a colour per placement and a line style per schedule on
  every page.
"""
from __future__ import annotations

import html
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis.formats import cell
from ..analysis.claims import GATED
from . import palette

# ----------------------------------------------------------------------------------------------------------- style

STYLE = """
:root{--fg:#1d2330;--muted:#5b6475;--line:#dde1e8;--bg2:#f5f7fa}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);max-width:1100px;
     margin:1.5em auto;padding:0 1.2em}
h1{font-size:1.5em;margin:.2em 0 .6em}
h2{font-size:1.2em;margin:1.6em 0 .4em;padding-bottom:.2em;border-bottom:1px solid var(--line)}
h3{font-size:1.02em;margin:1.2em 0 .3em}
p.note,.caption{color:var(--muted);font-size:.92em}
.caption{margin:.1em 0 .8em}
table.t{border-collapse:collapse;font-size:12.5px;margin:.4em 0 .8em;max-width:100%}
table.t th{background:var(--bg2);font-weight:600;white-space:normal;vertical-align:bottom}
table.t td,table.t th{border:1px solid var(--line);padding:3px 7px}
table.t td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.t td.txt{text-align:left}
.verdict{margin:.4em 0 1em;padding:.7em 1em;border-left:6px solid;background:var(--bg2);font-size:1.05em}
.claim{margin:.45em 0;padding:.45em .9em;border-left:5px solid;background:#fbfbfc}
.claim .status{font-weight:600}
.claim .statement{color:var(--muted);font-style:italic}
details{margin:.4em 0 .9em}
details>summary{cursor:pointer;color:var(--muted)}
.fig{margin:.2em 0 .2em}
nav.toc{font-size:.92em;color:var(--muted);margin:.2em 0 1em}
nav.toc a{margin-right:1em}
"""
FIGURE_CONFIG = {"displaylogo": False, "responsive": True}
FONT = dict(family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size=12)

def split_variant(variant: str) -> tuple[str, str]:
    """(placement, schedule family) of a variant from its run file, never from its name (variants.load_variants:
    pre-grow-freeze.yaml says norm pre, schedule grow, freeze_prefix true -> ('pre', 'grow-freeze'); a matched run's
    family is 'joint-matched'); ('', variant) for a name that is no run file."""
    from ..analysis.variants import load_variants
    v = load_variants().get(variant)
    if v is None:
        return "", variant
    family = v.schedule + ("-freeze" if v.freeze_prefix else "") + ("-matched" if v.match_active_layer_tokens else "")
    return v.norm, family


LOG_TICKS = [k * 10.0 ** e for e in range(-5, 7) for k in (1, 2, 5)]


def style_figure(fig, height: int | None = None, legend_title: str | None = None):
    """The common look: white template, system font, compact margins, legend on the right; log axes labelled at 1,
    2 and 5 of each decade with the full value (plotly's default labels a short log range's minor ticks with their
    first digit only, '2' for 20, and crowds them)."""
    fig.update_layout(template="plotly_white", font=FONT, margin=dict(l=60, r=20, t=60, b=50),
                      title=dict(font=dict(size=15), x=0, xanchor="left"),
                      legend=dict(font=dict(size=11), tracegroupgap=2, title=dict(text=legend_title or "")))
    if height:
        fig.update_layout(height=height)
    log_ticks = dict(tickmode="array", tickvals=LOG_TICKS, ticktext=[f"{v:g}" for v in LOG_TICKS])
    fig.for_each_yaxis(lambda ax: ax.update(log_ticks) if ax.type == "log" else None)
    fig.for_each_xaxis(lambda ax: ax.update(log_ticks) if ax.type == "log" else None)
    # a y label at the bottom of an axis otherwise touches the x label at its left end ('4.5' on '0')
    fig.update_yaxes(ticklabelstandoff=6)
    fig.update_annotations(font=dict(size=12))
    return fig


def _empty(col: pd.Series) -> bool:
    return bool(col.map(lambda v: v is None or v == "" or (isinstance(v, float) and math.isnan(v))).all())


def table(df: pd.DataFrame, columns=None, rename: dict | None = None, formats: dict | None = None) -> str:
    """An HTML table of df (or of these columns, in this order; missing ones are skipped): cells by ``formats.cell`` or a
    per-column function in formats, numbers right-aligned, columns empty in every row dropped, headers renamed."""
    if columns is not None:
        df = df[[c for c in columns if c in df.columns]]
    df = df[[c for c in df.columns if not _empty(df[c])]] if len(df) else df
    rename, formats = rename or {}, formats or {}
    e = html.escape
    head = "".join(f"<th>{e(str(rename.get(c, c)))}</th>" for c in df.columns)
    rows = []
    for rec in df.itertuples(index=False):
        cells = []
        for c, v in zip(df.columns, rec):
            text = formats[c](v) if c in formats else cell(v, str(c))
            numeric = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
            cells.append(f"<td class='{'num' if numeric else 'txt'}'>{e(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class='t'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def details(summary: str, body: str, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{html.escape(summary)}</summary>{body}</details>"


# ---------------------------------------------------------------------------------------------------------- claims

def claims_html(claims: list[dict]) -> str:
    """Claim records (claims.Claim.to_json(): claim, status, statement, sentence, evidence) as verdict boxes, the same
    on report.html and diagnostics.html: status, statement, the sentence with the numbers (closed for a not-judged
    claim, whose sentence repeats the regime or depth table), the numeric evidence in a closed table, never as JSON."""
    e = html.escape
    parts = []
    for c in claims:
        color = palette.STATUS_COLOUR.get(c["status"], "#000")
        sentence = (details("why not judged, and the ungated reading", e(c["sentence"]))
                    if c["status"] in GATED else f"<br>{e(c['sentence'])}")
        # inline border and padding: the box keeps its look in a notebook, where STYLE is absent
        parts.append(f"<div class='claim' style='border-left:5px solid {color};padding:.3em .8em;margin:.4em 0'>"
                     f"<b>{e(str(c['claim']))}</b> <span class='status' style='color:{color}'>[{e(c['status'])}]"
                     f"</span>: <span class='statement'>{e(c['statement'])}</span>{sentence}</div>")
        numbers = {k: v for k, v in (c.get("evidence") or {}).items() if isinstance(v, (int, float))}
        if numbers and c["status"] not in GATED:
            df = pd.DataFrame({"quantity": list(numbers), "value": [cell(v, "ratio") for v in numbers.values()]})
            parts.append(details(f"numbers of {c['claim']}", table(df)))
    return "".join(parts)


# ----------------------------------------------------------------------------------------------------------- pages

def plotly_asset() -> Path:
    """The copy of plotly.js that the pages under the outputs root load, written once per plotly.js version."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    from ..paths import outputs_dir
    path = outputs_dir() / "assets" / f"plotly-{get_plotlyjs_version()}.min.js"
    if not path.exists():
        write_text(path, get_plotlyjs())
    return path


def plotly_src(page: Path) -> str:
    """The shared plotly.js (plotly_asset) as a URL relative to a page written at this path."""
    return Path(os.path.relpath(plotly_asset().resolve(), Path(page).resolve().parent)).as_posix()


MISSING_PLOTLY = ("<script>if (!window.Plotly) document.querySelectorAll('.fig').forEach(d => d.insertAdjacentHTML("
                  "'afterbegin', \"<p class='note'>This figure needs plotly.js at {src} (the outputs folder's assets/), "
                  "which is not there: open the page where it was written.</p>\"))</script>")


class Page:
    """An HTML page: STYLE, then its parts in order; plotly.js is loaded once, from the shared asset when the page is
    written with ``write`` (inlined with the first figure by ``html()`` alone, for a page that is not a file)."""

    def __init__(self, title: str):
        self.title = title
        self.parts: list[str] = []
        self.figures = 0

    def add(self, *parts: str) -> "Page":
        self.parts.extend(parts)
        return self

    def figure(self, fig, div_id: str | None = None, caption: str | None = None) -> "Page":
        self.parts.append("<div class='fig'>" + fig.to_html(
            full_html=False, include_plotlyjs=False, include_mathjax=False, div_id=div_id,
            config=FIGURE_CONFIG, default_width="100%") + "</div>")
        self.figures += 1
        if caption:
            self.parts.append(f"<p class='caption'>{html.escape(caption)}</p>")
        return self

    def html(self, plotly_src: str | None = None) -> str:
        """The page, with plotly.js from plotly_src (a relative URL) or, without one, inlined."""
        if not self.figures:
            script = ""
        elif plotly_src:
            script = f"<script src='{html.escape(plotly_src)}'></script>"
        else:
            from plotly.offline import get_plotlyjs
            script = f"<script type='text/javascript'>{get_plotlyjs()}</script>"
        missing = MISSING_PLOTLY.format(src=html.escape(plotly_src)) if self.figures and plotly_src else ""
        return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
                f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
                f"<title>{html.escape(self.title)}</title><style>{STYLE}</style>{script}</head><body>\n"
                + "\n".join(self.parts) + f"\n{missing}</body></html>")

    def write(self, path: Path) -> Path:
        """Write the page at path, loading plotly.js from the shared asset by its path relative to the page."""
        return write_text(Path(path), self.html(plotly_src(path) if self.figures else None))


def write_text(path: Path, text: str) -> Path:
    """Write via a temporary file and rename, so a reader never sees half a page."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def write_svg(fig, path: Path, width: int = 1000) -> Path | None:
    """A static SVG of a plotly figure, the same figure a page draws, for README and for readers without a browser.
    Exported by kaleido through a Chrome or Chromium it finds (one browser for the process); plotly.js names each
    render's clip paths and traces by random ids, fixed here, so a record rebuilds byte for byte. Without a browser the page and
    tables are still written and this says what is missing (None)."""
    import re

    import kaleido
    try:
        if not getattr(write_svg, "server", False):
            kaleido.start_sync_server(silence_warnings=True)
            write_svg.server = True
        spec = fig.to_dict()
        for i, trace in enumerate(spec["data"]):
            trace.setdefault("uid", f"trace{i}")  # else a random id per render names each trace's group
        svg = kaleido.calc_fig_sync(spec, opts=dict(format="svg", width=width, scale=1,
                                                    height=fig.layout.height or 450)).decode()
    except Exception as err:  # choreographer's BrowserFailedError and ChromeNotFoundError alike
        print(f"note: {path} not written: a static figure needs Chrome or Chromium for kaleido ({type(err).__name__}: "
              f"{str(err).strip().splitlines()[0] if str(err).strip() else ''}); the page draws the same figure")
        return None
    uid = re.search(r"defs-([0-9a-f]+)", svg)  # only where it names something: an all-digit uid is also a number
    return write_text(Path(path), re.sub(rf"(?<=[a-z-]){uid.group(1)}", "normgrow", svg) if uid else svg)


# ------------------------------------------------------------------------------------------------------- notebooks

RENDERER = "normgrow_offline_html"


def notebook_setup() -> None:
    """Call once at the top of a notebook: figures then carry the plotly mimetype (JupyterLab) and offline text/html
    (nbconvert, nbviewer, any browser), and plotly.js is displayed here, inline, once for the notebook. Bad input
    (a ParamError, a locked or damaged run folder) then shows as the command line shows it, one ``error:`` line, in
    JupyterLab and in what papermill prints, instead of the cell's traceback."""
    import plotly.io as pio
    from IPython import get_ipython
    from IPython.display import HTML, display
    from plotly.io.base_renderers import MimetypeRenderer
    from plotly.offline import get_plotlyjs

    class OfflineHtml(MimetypeRenderer):
        """text/html without plotly.js (the setup cell holds it) and without MathJax (a CDN script)."""

        def to_mimebundle(self, fig_dict):
            return {"text/html": pio.to_html(fig_dict, full_html=False, include_plotlyjs=False,
                                             include_mathjax=False, config=FIGURE_CONFIG, default_width="100%",
                                             validate=False)}

    from ..paths import ParamError
    from ..rundir import RunDirError
    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc((ParamError, RunDirError),
                             lambda shell, etype, value, tb, tb_offset=None: shell._showtraceback(
                                 etype, value, [f"error: {value}"]))
    pio.renderers[RENDERER] = OfflineHtml()
    pio.renderers.default = f"plotly_mimetype+{RENDERER}"
    display(HTML(f"<script type='text/javascript'>{get_plotlyjs()}</script>"))
