"""The study report: the finished runs of outputs/runs/<profile>/ (variants.collect_runs), their statistics (stats.py),
the claims judged from them (claims.py), rendered as tables and one self-contained HTML page.
notebooks/summary.ipynb calls this and shows the result.

    rep = build_report("tiny")      # collect + compute (no files written)
    write_report(rep)               # outputs/study/<profile>/{summary.csv, variant_stats.csv, gaps.csv,
                                    #   crossover.csv, claims.csv, regime.csv, unassigned.csv, baselines.json,
                                    #   report.html}
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .claims import (NOT_JUDGED, NOT_RESOLVED, NOT_SUPPORTED, NOT_TESTABLE, SUPPORTED, Claim, evaluate_claims,
                     gate_claims, read_diagnostics)
from .rundir import study_dir, unfinished_runs
from .stats import (FLAT_LIMIT, FLAT_TAIL, LEVEL, REGIME_FIELDS, UNIGRAM_MARGIN, baselines, crossover_table,
                    gap_ratio, gap_table, regime_check, runs_frame, undertrained, variant_stats, with_flatness)
from .utils import atomic_write_json, atomic_write_text
from .variants import GapSpec, collect_runs, load_gaps


@dataclass
class Report:
    profile: str
    runs: pd.DataFrame
    stats: pd.DataFrame
    gaps: pd.DataFrame
    ratio: dict
    crossover: pd.DataFrame
    claims: list[Claim]
    diagnostics_claims: list[Claim] | None
    diagnostics_note: str
    grow: GapSpec  # the grow gap's variants are the crossover's
    unfinished: list[str] = field(default_factory=list)
    unassigned: dict[str, str] = field(default_factory=dict)  # finished runs that are not part of the study, and why
    level: float = LEVEL
    baselines: dict = field(default_factory=dict)  # teacher_val_ce, unigram_val_ce and their sources (baselines())
    regime: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(REGIME_FIELDS)))

    def regime_verdict(self) -> str:
        """One line: are the claims judged (see gate_claims)?"""
        if not len(self.regime):
            return "no finished runs: nothing to judge"
        bad = list(undertrained(self.regime)["variant"])
        if not bad:
            return "students trained: claims judged"
        return (f"{len(bad)} variant{'s' if len(bad) != 1 else ''} undertrained ({', '.join(bad)}): claims that "
                f"compare them are not judged")

    def baselines_text(self) -> str:
        if not self.baselines:
            return "Baselines: no teacher cache for this profile, so the teacher and unigram levels are not shown."
        b = self.baselines
        return (f"Baselines on the same validation positions: teacher {b['teacher_val_ce']:.3f} nats/token; "
                f"unigram model fitted on the training tokens {b['unigram_val_ce']:.3f} nats/token.")

    def claims_frame(self) -> pd.DataFrame:
        df = pd.DataFrame([c.to_json() for c in self.claims], columns=["claim", "status", "supported", "sentence", "statement", "variants",
                                                "evidence"])
        df["variants"] = df["variants"].map(" ".join)
        df["evidence"] = df["evidence"].map(lambda e: json.dumps(e, default=_json_default))
        return df

    def sentences(self) -> list[str]:
        out = [f"[regime] {self.regime_verdict()}"] + [f"[{c.claim}] {c.sentence}" for c in self.claims]
        if self.diagnostics_claims is None:
            out.append(self.diagnostics_note)
        else:
            out += [f"[{c.claim}] {c.sentence}" for c in self.diagnostics_claims]
        out += [f"[not counted] {name}: {why}" for name, why in self.unassigned.items()]
        return out


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    return str(o)


def build_report(profile: str, level: float = LEVEL) -> Report:
    """Collect the finished runs (with their flatness) and compute every table; every claim, the diagnostics' too,
    passes the regime gate."""
    study = collect_runs(profile)
    runs = with_flatness(runs_frame(study), profile)
    spec = load_gaps()
    gaps = gap_table(runs, spec, level=level)
    base = baselines(profile)
    regime = regime_check(runs, base.get("unigram_val_ce"))
    diag, note = read_diagnostics(profile)
    return Report(profile=profile, runs=runs, stats=variant_stats(runs, level), gaps=gaps, ratio=gap_ratio(gaps),
                  crossover=crossover_table(runs, spec["grow"].a, spec["grow"].b, level=level),
                  claims=gate_claims(evaluate_claims(runs, spec, level=level), regime),
                  diagnostics_claims=None if diag is None else gate_claims(diag, regime), diagnostics_note=note,
                  grow=spec["grow"], unfinished=unfinished_runs(profile), unassigned=study.unassigned, level=level,
                  baselines=base, regime=regime)


# --------------------------------------------------------------------------------------------------------- figures

def crossover_figure(rep: Report):
    """Validation CE at each stage end (mean and CI over seeds) of the grow gap's variants, and their paired gap."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    t, a, b = rep.crossover, rep.grow.a, rep.grow.b
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.6, 0.4],
                        subplot_titles=("validation CE at each stage end", f"paired gap {a} - {b} (> 0: {b} leads)"))
    if len(t):
        x = [f"stage {int(s)} (depth {d})" for s, d in zip(t["stage"], t["depth"])]
        for v, color in ((a, "#d62728"), (b, "#1f77b4")):
            err = (t[f"{v}_ci_high"] - t[f"{v}_mean"]).fillna(0)
            fig.add_trace(go.Scatter(x=x, y=t[f"{v}_mean"], error_y=dict(type="data", array=err), name=v,
                                     mode="lines+markers", line=dict(color=color)), row=1, col=1)
        err = (t["gap_ci_high"] - t["gap_mean"]).fillna(0)
        fig.add_trace(go.Scatter(x=x, y=t["gap_mean"], error_y=dict(type="data", array=err), name=f"{a} - {b}",
                                 mode="lines+markers", line=dict(color="black")), row=2, col=1)
        fig.add_hline(y=0, line_dash="dot", line_color="gray", row=2, col=1)
    fig.update_yaxes(title_text="val CE (nats/token)", row=1, col=1)
    fig.update_yaxes(title_text="gap (nats/token)", row=2, col=1)
    fig.update_layout(template="plotly_white", height=560, title=f"crossover ({rep.profile}): mean and "
                      f"{round(rep.level * 100)}% CI over seeds")
    return fig


def variants_figure(rep: Report, metric: str = "val_ce"):
    """Final validation metric per variant: mean with CI, and every seed as a dot."""
    import plotly.graph_objects as go
    fig = go.Figure()
    s = rep.stats
    if len(s):
        fig.add_trace(go.Scatter(x=s["variant"], y=s[f"{metric}_mean"], mode="markers", name="mean",
                                 marker=dict(size=12, symbol="line-ew-open", line=dict(width=3)),
                                 error_y=dict(type="data", array=s[f"{metric}_half_width"].fillna(0))))
        r = rep.runs
        fig.add_trace(go.Scatter(x=r["variant"], y=r[metric], mode="markers", name="seeds", opacity=0.6,
                                 text=[f"seed {x}" for x in r["seed"]], marker=dict(size=7)))
    fig.update_layout(template="plotly_white", height=420, yaxis_title=f"{metric} (nats/token)",
                      title=f"final {metric} per variant ({rep.profile}): mean, {round(rep.level * 100)}% CI, seeds")
    return fig


def gaps_figure(rep: Report, metric: str = "val_ce"):
    """The paired gaps with their CIs, the reference values as crosses where the reference gives one."""
    import plotly.graph_objects as go
    g = rep.gaps[rep.gaps["metric"] == metric]
    fig = go.Figure()
    labels = [f"{n}: {c}" for n, c in zip(g["gap"], g["comparison"])]
    fig.add_trace(go.Scatter(x=g["mean"], y=labels, mode="markers", name="this study",
                             error_x=dict(type="data", array=(g["ci_high"] - g["mean"]).fillna(0))))
    ref = g["reference"].astype(float)
    fig.add_trace(go.Scatter(x=ref, y=labels, mode="markers", name="reference", marker=dict(symbol="x", size=10)))
    fig.add_vline(x=0, line_dash="dot", line_color="gray")
    fig.update_layout(template="plotly_white", height=120 + 45 * len(g), xaxis_title=f"{metric} gap (nats/token)",
                      title=f"paired gaps a - b by seed ({rep.profile})", yaxis=dict(autorange="reversed"))
    return fig


def figures(rep: Report) -> dict:
    return {"crossover": crossover_figure(rep), "variants": variants_figure(rep), "gaps": gaps_figure(rep)}


# ------------------------------------------------------------------------------------------------------- writing

def _table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, na_rep="nan", float_format=lambda x: f"{x:.4f}", border=0, classes="t",
                      escape=True)


STATUS_COLORS = {SUPPORTED: "#2ca02c", NOT_SUPPORTED: "#d62728", NOT_RESOLVED: "#ff7f0e", NOT_TESTABLE: "#7f7f7f",
                 NOT_JUDGED: "#9467bd"}
REGIME_CRITERIA = (f"A variant is trained when its mean final val_ce is at least {UNIGRAM_MARGIN:.1f} nat below the "
                   f"unigram baseline and, for every seed, the last {FLAT_TAIL:.0%} of its tokens improved val_ce by "
                   f"less than {FLAT_LIMIT:.0%} of the run's total improvement (flat_ratio = (v_80 - v_end) / "
                   f"(v_start - v_end), v_start the step-0 evaluation). A claim comparing a variant that is not "
                   f"trained is '{NOT_JUDGED}'.")


def _regime_html(rep: Report) -> str:
    """The regime section: the verdict line, the criteria, the per-variant table and every run's flatness."""
    e = html.escape
    per_run = ["run_name", "variant", "seed", "tokens", "v_start", "tokens_80", "v_80", "val_ce", "flat_ratio",
               "flattened", "flat_note"]
    return (f"<h2>Training regime</h2><p><b>{e(rep.regime_verdict())}</b>. {e(REGIME_CRITERIA)}</p>"
            f"<div class='scroll'>{_table(rep.regime)}</div><details><summary>flatness per run</summary>"
            f"<div class='scroll'>{_table(rep.runs.reindex(columns=per_run))}</div></details>")


def _claim_html(c: Claim) -> str:
    e, color = html.escape, STATUS_COLORS.get(c.status, "#000")
    return (f"<div class='claim' style='border-color:{color}'><b>{e(c.claim)}</b> <span style='color:{color}'>"
            f"[{e(c.status)}]</span>: <i>{e(c.statement)}</i><br>{e(c.sentence)}</div>")


def report_html(rep: Report, figs: dict | None = None) -> str:
    """A self-contained page: tables (pandas), plotly figures with plotly.js embedded once (no CDN)."""
    figs = figs if figs is not None else figures(rep)
    e = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>normgrow study: {e(rep.profile)}</title>"
             "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
             "table.t{border-collapse:collapse;font-size:12px;margin:0.5em 0}"
             "table.t td,table.t th{border:1px solid #ddd;padding:3px 6px;text-align:right}"
             ".claim{margin:0.5em 0;padding:0.4em 0.8em;border-left:5px solid}"
             ".scroll{overflow-x:auto}</style></head><body>",
             f"<h1>Normalization placement under depth growth: study <code>{e(rep.profile)}</code></h1>",
             f"<p>{len(rep.runs)} finished runs of {rep.runs['variant'].nunique() if len(rep.runs) else 0} variants"
             + (f"; unfinished run directories: {e(', '.join(rep.unfinished))}" if rep.unfinished else "")
             + (f"; finished but not counted: {e('; '.join(f'{n} ({w})' for n, w in rep.unassigned.items()))}"
                if rep.unassigned else "")
             + f". Intervals: two-sided {round(rep.level * 100)}% Student-t over seeds; gaps are paired by seed. "
             "Claims are judged from the numbers: interval excludes zero in the claimed direction: supported; "
             "includes zero: not resolved at this number of seeds; excludes zero the other way: not supported.</p>",
             f"<p>{e(rep.baselines_text())}</p>",
             _regime_html(rep),
             "<h2>Claims</h2>"]
    for c in rep.claims:
        parts.append(_claim_html(c))
    parts.append("<h3>Observations 4 and 5 (boundary diagnostics)</h3>")
    if rep.diagnostics_claims is None:
        parts.append(f"<p>{e(rep.diagnostics_note)}</p>")
    else:
        parts.append(f"<p>{e(rep.diagnostics_note)}</p>")
        parts += [_claim_html(c) for c in rep.diagnostics_claims]
    if (study_dir(rep.profile) / "diagnostics.html").is_file():
        parts.append("<p>Diagnostics report: <a href='diagnostics.html'>diagnostics.html</a> (same folder).</p>"
                     "<iframe src='diagnostics.html' style='width:100%;height:600px;border:1px solid #ddd'></iframe>")
    ratio = rep.ratio
    ratio_text = f"{ratio['ratio']:.1f}x" if np.isfinite(ratio["ratio"]) else "undefined"
    caveat = "" if ratio["joint_resolved"] else "; the joint gap's interval includes zero, so the ratio is unbounded"
    parts += ["<h2>Paired gaps (a - b by seed)</h2>",
              f"<p>Grow gap / joint gap (val_ce, ratio of means): {ratio_text} (reference "
              f"~{ratio['reference_ratio']:.0f}x){caveat}.</p>",
              f"<div class='scroll'>{_table(rep.gaps)}</div>"]
    include = True
    for name, title in (("gaps", None), ("crossover", f"Crossover: {rep.grow.a} vs {rep.grow.b} at every stage end"),
                        ("variants", "Per-variant statistics")):
        if title:
            parts.append(f"<h2>{e(title)}</h2>")
        if name == "crossover":
            parts.append(f"<div class='scroll'>{_table(rep.crossover)}</div>")
        if name == "variants":
            parts.append(f"<div class='scroll'>{_table(rep.stats)}</div>")
        parts.append(figs[name].to_html(full_html=False, include_plotlyjs=include))
        include = False
    parts += ["<h2>Runs (one row per run and seed)</h2>", f"<div class='scroll'>{_table(rep.runs)}</div>",
              "</body></html>"]
    return "\n".join(parts)


def write_report(rep: Report, out_dir: Path | None = None, figs: dict | None = None) -> dict:
    """Write summary.csv (one row per run and seed), variant_stats.csv, gaps.csv, crossover.csv, claims.csv,
    regime.csv, unassigned.csv (finished runs not counted, and why), baselines.json (the baselines with their sources, or a note that there are none) and report.html
    into outputs/study/<profile>/ (or out_dir). Returns {name: path}."""
    out = Path(out_dir) if out_dir is not None else study_dir(rep.profile)
    out.mkdir(parents=True, exist_ok=True)
    files = {"summary": out / "summary.csv", "variant_stats": out / "variant_stats.csv", "gaps": out / "gaps.csv",
             "crossover": out / "crossover.csv", "claims": out / "claims.csv", "regime": out / "regime.csv",
             "unassigned": out / "unassigned.csv", "baselines": out / "baselines.json", "report": out / "report.html"}
    atomic_write_text(files["summary"], rep.runs.to_csv(index=False))
    atomic_write_text(files["variant_stats"], rep.stats.to_csv(index=False))
    atomic_write_text(files["gaps"], rep.gaps.to_csv(index=False))
    atomic_write_text(files["crossover"], rep.crossover.to_csv(index=False))
    atomic_write_text(files["claims"], rep.claims_frame().to_csv(index=False))
    atomic_write_text(files["regime"], rep.regime.to_csv(index=False))
    atomic_write_text(files["unassigned"], pd.DataFrame(list(rep.unassigned.items()), columns=["run", "reason"])
                      .to_csv(index=False))
    atomic_write_json(files["baselines"], rep.baselines or {"note": rep.baselines_text()})
    atomic_write_text(files["report"], report_html(rep, figs))
    return files
