"""The study report: the finished runs of outputs/runs/<profile>/ (variants.collect_runs), their statistics (stats.py),
the claims judged from them (claims.py), rendered as tables and one self-contained HTML page.
notebooks/summary.ipynb calls this and shows the result.

    rep = build_report("tiny")      # collect + compute (no files written)
    write_report(rep)               # outputs/study/<profile>/{summary.csv, variant_stats.csv, gaps.csv,
                                    #   crossover.csv, claims.csv, regime.csv, depth.csv, unassigned.csv,
                                    #   baselines.json, report.html}
"""
from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis.claims import (NOT_JUDGED, NOT_JUDGED_DEPTH, NOT_TESTABLE, SUPPORTED, Claim, depth_gate, evaluate_claims, gate_claims,
                               read_diagnostics)
from .forest import forest_figure, reference_marks
from .report_figures import LR_SHOWN, curve_positions, figures
from ..rundir import (SAME_TRAINING, grids_root, machine_hours, study_dir, unfinished_runs)
from ..analysis.stats import ALPHA, LEVEL, SEEDS_LIMIT, crossover_table, gap_ratio, gap_table, runs_frame, variant_stats
from ..analysis.regime import (DEPTH_FIELDS, FLAT_LIMIT, FLAT_TAIL, REGIME_FIELDS, UNIGRAM_MARGIN, baselines, depth_check,
                               regime_check, runs_teacher_key, undertrained, with_flatness)
from ..utils import atomic_write_json, atomic_write_text
from ..analysis.reference import GapSpec, load_reference
from ..analysis.variants import collect_runs, load_variants


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
    damaged: dict[str, str] = field(default_factory=dict)  # run directories whose summary or config does not read
    level: float = LEVEL
    baselines: dict = field(default_factory=dict)  # teacher_val_ce, unigram_val_ce and their sources (baselines())
    regime: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(REGIME_FIELDS)))
    depth: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(DEPTH_FIELDS)))
    equivalence_margin: float = math.nan  # of the claim of no difference (params/reference.yaml)

    def regime_verdict(self) -> str:
        """One line: are the claims judged (see gate_claims)?"""
        if not len(self.regime):
            return "no finished runs: nothing to judge"
        bad = list(undertrained(self.regime)["variant"])
        if not bad:
            return "students trained: claims judged"
        return (f"{len(bad)} variant{'s' if len(bad) != 1 else ''} undertrained ({', '.join(bad)}): claims that "
                f"compare them are not judged")

    def depth_verdict(self) -> str:
        """One line: does depth pay for every placement (see claims.depth_gate)?"""
        if not len(self.depth):
            return "no placements: nothing to check"
        margin = float(self.depth["margin"].iloc[0])
        short = self.depth[~self.depth["pays"].astype(bool)]
        if not len(short):
            return (f"depth pays for {' and '.join(self.depth['norm'])} (joint beats single by >= {margin:.3f} "
                    f"nats): growth claims judged")
        return (f"depth does not pay for {', '.join(short['norm'])}: {'; '.join(short['reason'])}; growth claims "
                f"comparing {'it' if len(short) == 1 else 'them'} are not judged")

    def baselines_text(self) -> str:
        if not self.baselines:
            return "Baselines: no teacher cache for this profile, so the teacher and unigram levels are not shown."
        b = self.baselines
        return (f"Baselines on the same validation positions: teacher {b['teacher_val_ce']:.3f} nats/token; "
                f"unigram model fitted on the training tokens (over the ids that occur in the corpus) "
                f"{b['unigram_val_ce']:.3f} nats/token.")

    def claims_frame(self) -> pd.DataFrame:
        df = pd.DataFrame([c.to_json() for c in self.claims], columns=["claim", "status", "supported", "sentence", "statement", "variants",
                                                "evidence"])
        df["variants"] = df["variants"].map(" ".join)
        df["evidence"] = df["evidence"].map(lambda e: json.dumps(e, default=_json_default))
        return df

    def sentences(self) -> list[str]:
        out = [f"[regime] {self.regime_verdict()}", f"[depth] {self.depth_verdict()}"] + [f"[{c.claim}] {c.sentence}" for c in self.claims]
        if self.diagnostics_claims is None:
            out.append(self.diagnostics_note)
        else:
            out += [f"[{c.claim}] {c.sentence}" for c in self.diagnostics_claims]
        out += [f"[damaged, not counted] {name}: {why}" for name, why in self.damaged.items()]
        out += [f"[not counted] {name}: {why}" for name, why in self.unassigned.items()]
        return out


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    return str(o)


def build_report(profile: str, level: float = LEVEL) -> Report:
    """Collect every finished run (every seed, with its flatness) and compute every table; every claim, the
    diagnostics' too, passes the regime gate, then the depth gate."""
    study = collect_runs(profile)
    runs = with_flatness(runs_frame(study), profile)
    reference, variants = load_reference(), load_variants()
    spec = reference.gaps
    gaps = gap_table(runs, spec, level=level)
    base = baselines(profile, teacher_key=runs_teacher_key(study.assigned.values()))
    regime = regime_check(runs, base.get("unigram_val_ce"))
    depth = depth_check(runs, variants, reference.depth_margin)
    gate = lambda claims: depth_gate(gate_claims(claims, regime), depth, variants)
    diag, note = read_diagnostics(profile)
    return Report(profile=profile, runs=runs, stats=variant_stats(runs, level), gaps=gaps, ratio=gap_ratio(gaps),
                  crossover=crossover_table(runs, spec["grow"].a, spec["grow"].b, level=level),
                  claims=gate(evaluate_claims(runs, reference, level=level)),
                  diagnostics_claims=None if diag is None else gate(diag), diagnostics_note=note,
                  grow=spec["grow"], unfinished=unfinished_runs(profile), unassigned=study.unassigned, damaged=study.damaged,
                  level=level,
                  baselines=base, regime=regime, depth=depth, equivalence_margin=reference.equivalence_margin)


# ------------------------------------------------------------------------------------------------------- writing

REGIME_CRITERIA = (f"A variant is trained when its mean final val_ce is at least {UNIGRAM_MARGIN:.1f} nat below the "
                   f"unigram baseline and, for every seed, the last {FLAT_TAIL:.0%} of its tokens improved val_ce by "
                   f"less than {FLAT_LIMIT:.0%} of the run's total improvement (flat_ratio = (v_80 - v_end) / "
                   f"(v_start - v_end), v_start the step-0 evaluation). A claim comparing a variant that is not "
                   f"trained is '{NOT_JUDGED}'.")
DEPTH_CRITERIA = (f"Depth pays for a placement when mean final val_ce of its single variant (the first-stage prefix "
                  f"alone, same tokens) minus that of its joint variant (full depth) is at least the depth margin "
                  f"(params/reference.yaml depth_margin, with its reason). A claim about growth comparing a "
                  f"placement where depth does not pay is '{NOT_JUDGED_DEPTH}'; the joint claim is not gated.")


def _regime_html(rep: Report) -> str:
    """The regime and depth checks, first on the page: both verdicts in a coloured box, the criteria, the per-variant
    table, (closed) every run's flatness, and the per-placement depth table."""
    from .palette import STATUS_COLOUR
    from .render import details, table
    e = html.escape
    depth_pays = len(rep.depth) and rep.depth["pays"].astype(bool).all()
    judged = len(rep.regime) and not len(undertrained(rep.regime)) and depth_pays
    color = STATUS_COLOUR[SUPPORTED] if judged else STATUS_COLOUR[NOT_JUDGED]
    per_run = ["run_name", "tokens", "v_start", "tokens_80", "v_80", "val_ce", "flat_ratio", "flattened", "flat_note"]
    names = {"n_seeds": "seeds", "val_ce_mean": "val_ce mean", "margin_below_unigram": "worst seed below unigram (nats)",
             "max_flat_ratio": "flat ratio (max over seeds)", "tokens_80": "tokens at 80%", "v_start": "val_ce start",
             "v_80": "val_ce at 80%", "val_ce": "val_ce end", "flat_note": "note", "run_name": "run"}
    depth_names = {"single_n": "single seeds", "joint_n": "joint seeds", "single_val_ce_mean": "single val_ce mean",
                   "joint_val_ce_mean": "joint val_ce mean", "depth_gain": "single - joint (nats)",
                   "margin": "needs >= (nats)"}
    return (f"<div class='verdict' style='border-color:{color}'><b>Training regime: {e(rep.regime_verdict())}</b>."
            f"<br><b>Depth: {e(rep.depth_verdict())}</b>.</div><h2>Training regime</h2>"
            f"<p class='note'>{e(REGIME_CRITERIA)}</p>"
            + table(rep.regime, ["variant", "n_seeds", "val_ce_mean", "margin_below_unigram", "max_flat_ratio",
                                 "trained", "reason"], names)
            + details("flatness per run", table(rep.runs.reindex(columns=per_run), rename=names))
            + f"<h3>Does depth pay?</h3><p class='note'>{e(DEPTH_CRITERIA)}</p>"
            + table(rep.depth, list(DEPTH_FIELDS), depth_names))


def _ci_column(df: pd.DataFrame, prefix: str, digits: int) -> list[str]:
    from ..analysis.formats import interval
    return [interval(m, lo, hi, digits) for m, lo, hi in zip(df[f"{prefix}_mean"], df[f"{prefix}_ci_low"],
                                                               df[f"{prefix}_ci_high"])]


def _stats_table(rep: Report) -> str:
    from .render import table
    s, ci = rep.stats, f"mean [{round(rep.level * 100)}% CI]"
    if not len(s):
        return "<p class='note'>No finished runs.</p>"
    df = pd.DataFrame({"variant": s["variant"], "seeds": s["n_seeds"], f"val_ce {ci}": _ci_column(s, "val_ce", 3),
                       f"val_kd_ce {ci}": _ci_column(s, "val_kd_ce", 3), "depth": s["depth_mean"],
                       "tokens": s["tokens_mean"], "active-layer tokens": s["active_layer_tokens_mean"],
                       "wall s (mean)": s["wall_s_mean"]})
    return table(df)


def _gaps_table(rep: Report, metric: str) -> str:
    from .render import table
    g = rep.gaps[rep.gaps["metric"] == metric]
    df = pd.DataFrame({"gap": g["gap"], "a - b": g["comparison"], "seeds": g["n"],
                       f"mean [{round(rep.level * 100)}% CI]": [
                           f"{m:+.4f}" + (f" [{lo:+.4f}, {hi:+.4f}]" if np.isfinite(lo) else "") if np.isfinite(m)
                           else "" for m, lo, hi in zip(g["mean"], g["ci_low"], g["ci_high"])],
                       "MDE": g["mde"], "seeds to resolve reference": g["seeds_to_resolve_reference"],
                       "reference": g["reference_text"], "meaning": g["meaning"], "missing": g["missing"]})
    return table(df)


GAP_RESOLUTION = ("MDE (minimum detectable effect): the half-width of the gap's interval, the smallest |gap| these "
                  "seeds at this spread resolve from zero. Seeds to resolve reference: the paired seeds that, at the "
                  "observed per-seed spread, would make that half-width smaller than the reference's value (blank "
                  f"without a reference value or a measured spread, or beyond {SEEDS_LIMIT:,} seeds).")


def _crossover_table(rep: Report) -> str:
    from .render import table
    t, a, b = rep.crossover, rep.grow.a, rep.grow.b
    if not len(t):
        return "<p class='note'>No stage ends to compare.</p>"
    ci = f"mean [{round(rep.level * 100)}% CI]"
    df = pd.DataFrame({"stage": t["stage"], "depth": t["depth"], "tokens": t["tokens"],
                       f"{a} {ci}": _ci_column(t, a, 4),
                       f"{b} {ci}": _ci_column(t, b, 4), f"{a} - {b} {ci}": _ci_column(t, "gap", 4),
                       "leader": t["leader"]})
    return table(df)


def _diagnostics_html(rep: Report) -> str:
    """Observations 4 and 5 as verdict boxes (render.claims_html, through the regime gate) and a link to diagnostics.html when it
    exists."""
    from .render import claims_html
    parts = [f"<p class='note'>{html.escape(rep.diagnostics_note)}</p>",
             claims_html([c.to_json() for c in rep.diagnostics_claims or []])]
    if (study_dir(rep.profile) / "diagnostics.html").is_file():
        parts.append("<p>Figures and tables of the boundary diagnostics: <a href='diagnostics.html'>"
                     "diagnostics.html</a> (same folder).</p>")
    return "".join(parts)


def _gap_sentence(rep: Report, name: str) -> str:
    """'pre-grow - post-grow = +0.0123 [-0.0050, +0.0296] nats/token over 3 paired seeds (reference +0.0328)'."""
    g = rep.gaps[(rep.gaps["metric"] == "val_ce") & (rep.gaps["gap"] == name)].iloc[0]
    where = (f"{g['mean']:+.4f} [{g['ci_low']:+.4f}, {g['ci_high']:+.4f}]" if np.isfinite(g["ci_low"]) else
             f"{g['mean']:+.4f} (no interval)" if np.isfinite(g["mean"]) else "not measured")
    return f"{g['comparison']} = {where} nats/token over {int(g['n'])} paired seeds; reference {g['reference_text']}"


def _interaction_sentence(rep: Report) -> str:
    """'(grow gap) - (joint gap) = -0.0477 [-0.1568, +0.0615] over 3 paired seeds', from the headline-ratio claim."""
    ev = next((c.evidence for c in rep.claims if c.claim == "headline-ratio"), {}) or {}
    if not ev.get("n"):
        return "not measured"
    interval = (f" [{ev['ci_low']:+.4f}, {ev['ci_high']:+.4f}]" if ev.get("ci_low") is not None
                and np.isfinite(ev["ci_low"]) else "")
    return f"grow gap - joint gap = {ev['mean']:+.4f}{interval} over {ev['n']} paired seeds"


def answer_html(rep: Report) -> str:
    """The study's answer in a few sentences, first on the page: the two headline gaps with their verdicts, what
    'reference' and the sign mean, and the gates that decide whether the growth claims are judged."""
    from .palette import STATUS_COLOUR
    e = html.escape
    status = {c.claim: c.status for c in rep.claims}
    line = lambda claim, text: (f"<li><span class='status' style='color:{STATUS_COLOUR.get(status.get(claim), '#000')}'>"
                                f"[{e(status.get(claim, NOT_TESTABLE))}]</span> {e(text)}</li>")
    return ("<section id='answer'><h2>The answer</h2><ul>"
            + line("headline-grow", f"Grown by appending blocks: {_gap_sentence(rep, 'grow')}. The reference finds "
                   "post-norm better grown.")
            + line("headline-joint", f"Trained jointly at full depth: {_gap_sentence(rep, 'joint')}. The reference "
                   f"finds the two indistinguishable (here: an equivalence test at +-{rep.equivalence_margin:g}).")
            + line("headline-ratio", f"The placement matters more under growth than jointly: {_interaction_sentence(rep)}. "
                   f"The reference finds the grow gap about {rep.ratio['reference_ratio']:.0f} times the joint gap.")
            + f"</ul><p class='note'>Gates: {e(rep.regime_verdict())}; {e(rep.depth_verdict())}. Every gap is a - b "
            "in final validation cross-entropy, paired by seed: positive means post-norm (b) is better, negative "
            "pre-norm. <i>Reference</i>: the published study this toolkit reproduces (docs/STUDY.md), whose numbers "
            "params/reference.yaml holds.</p></section>")


def report_html(rep: Report, figs: dict | None = None, at: Path | None = None) -> str:
    """The study's page, in reading order: baselines and the regime check, the claims, learning curves, final values,
    gaps, crossover, diagnostics, runs. at: where it will be written (plotly.js from the shared asset; inlined
    without)."""
    from .render import Page, claims_html, details, plotly_src, table
    figs = figs if figs is not None else figures(rep)
    e = html.escape
    pct = round(rep.level * 100)
    n_variants = rep.runs["variant"].nunique() if len(rep.runs) else 0
    page = Page(f"normgrow study: {rep.profile}")
    page.add(f"<h1>Normalization placement under depth growth: study <code>{e(rep.profile)}</code></h1>",
             answer_html(rep),
             f"<p class='note'>{len(rep.runs)} finished runs of {n_variants} variants"
             + (f"; unfinished run directories: {e(', '.join(rep.unfinished))}" if rep.unfinished else "")
             + (f"; <b>damaged, not counted ({len(rep.damaged)})</b>: "
                f"{e('; '.join(f'{n} ({w})' for n, w in rep.damaged.items()))}" if rep.damaged else "")
             + (f"; {len(rep.unassigned)} finished runs not counted (listed at the end of the page, and in "
                "unassigned.csv)" if rep.unassigned else "")
             + f". Intervals: two-sided {pct}% Student-t over seeds; gaps are paired by seed. A directional claim is "
             "supported when its interval excludes zero in the claimed direction, not resolved when it includes "
             "zero, not supported when it excludes zero the other way. The claim of no difference is an equivalence "
             f"test (TOST, each one-sided test at {ALPHA:g}) against +-{rep.equivalence_margin:g} nats: supported "
             "when both one-sided tests reject, not supported when the interval excludes zero, otherwise not shown "
             "equivalent.</p>",
             f"<p>{e(rep.baselines_text())}</p>",
             "<nav class='toc'><a href='#claims'>claims</a><a href='#curves'>learning curves</a>"
             "<a href='#variants'>final values</a><a href='#gaps'>gaps</a><a href='#crossover'>crossover</a>"
             "<a href='#diagnostics'>diagnostics</a><a href='#runs'>runs</a></nav>",
             _regime_html(rep), "<section id='claims'><h2>Claims</h2>")
    page.add(claims_html([c.to_json() for c in rep.claims]))
    for grid_csv in sorted(grids_root(rep.profile).glob("*/grid.csv")):
        frame = pd.read_csv(grid_csv)
        name = grid_csv.parent.name
        link = (f"<a href='../../grid/{e(rep.profile)}/{e(name)}/report.html'>outputs/grid/{e(rep.profile)}/{e(name)}/"
                "report.html</a>")
        if not frame["grow_gap"].notna().any():  # a grid without grown runs (the regime ladder) has no forest
            page.add(f"</section><section id='grid-{e(name)}'><h2>Grid {e(name)}: where depth pays</h2>"
                     f"<p>params/grids/{e(name)}.yaml trains no grown runs: it asks where depth pays (each "
                     f"setting's depth gains against its compute), not whether growth favours a placement. Its "
                     f"page: {link}.</p>")
            continue
        page.add(f"</section><section id='grid-{e(name)}'><h2>Where does it hold? Grid {e(name)}</h2>"
                 f"<p>One row per setting of params/grids/{e(name)}.yaml (python -m normgrow.grid --profile "
                 f"{e(rep.profile)} --grid {e(name)}): the grow gap and the interaction with 95% intervals, the "
                 f"marker's colour its verdict; every number, gate and lr is in {link} and grid.csv next to it.</p>")
        page.figure(forest_figure(frame, reference_marks()), div_id=f"fig-grid-{name}")
    page.add("</section><section id='curves'><h2>Learning curves</h2>")
    subset, whole = curve_positions(rep)
    rows = (f"on the evaluation subset: the same {subset:,} target positions at every point (train.eval_tokens), "
            f"where the tables' final values are on the whole split's {whole:,}, so a curve ends off its table row "
            "by the subset's sampling" if subset and whole else "on the whole validation split")
    page.figure(figs["curves"], div_id="fig-curves", caption=f"Validation CE (nats/token) {rows}, against student "
                "active-layer tokens, one panel "
                "per schedule, pre-norm red, post-norm blue: the line is the mean over seeds, the band the range of "
                "the seeds; diamonds and dotted verticals mark growth points (blocks appended); horizontal lines: "
                "teacher and unigram model on the same validation positions.")
    page.figure(figs["overlay"], div_id="fig-overlay", caption="Does growth pay? Each placement's grown variant "
                "(dashed) against its joint one (solid): validation CE on top, with the evaluations 8, 32 and 64 "
                "steps after each growth where the runs have them (train.eval_after_growth), and below the train "
                "loss (one batch per step) smoothed over 32 steps. The buttons switch the x axis between tokens seen "
                "(equal data) and active-layer tokens (equal compute: a grown run reaches the joint run's data with "
                "less of it).")
    if figs.get("lr") is not None:
        page.add("</section><section id='lr'><h2>Learning rate per arm</h2>")
        page.figure(figs["lr"], div_id="fig-lr", caption="Every arm (placement x schedule) trains at its own peak lr, "
                    "chosen by its sweep (python -m normgrow.sweep; a freeze control takes its placement's grow lr, a "
                    "matched run its joint lr). Lines and points: the sweep's candidates trained as this numerics "
                    f"version trains (versions {', '.join(map(str, SAME_TRAINING))} train alike), a line per warmup (mean over seeds; bold: the warmup the study's runs trained at, "
                    "thin and faint: the others tried) and each seed; stars: the lr the study's runs recorded in their "
                    f"config.json, at their mean final val_ce. Candidates more than {LR_SHOWN} nats above a panel's "
                    "best (diverged, or on the unigram plateau) are an x on its upper edge (hover for the value; "
                    "sweep.csv has every row).")
    page.add("</section><section id='variants'><h2>Final validation CE per variant</h2>", _stats_table(rep))
    page.figure(figs["variants"], div_id="fig-variants")
    ratio = rep.ratio
    if np.isfinite(ratio["ratio"]) and ratio["second_resolved"]:
        ratio_text = f"Grow gap / joint gap (val_ce, ratio of means): {ratio['ratio']:.1f}x"
    else:
        ratio_text = ("Grow gap / joint gap: not read, the joint gap's interval includes zero (so the ratio is "
                      "unbounded) or it is missing; headline-ratio reads their difference")
    page.add("</section><section id='gaps'><h2>Paired gaps (a - b by seed)</h2>",
             f"<p>{ratio_text} (the reference's ~{ratio['reference_ratio']:.0f}x).</p>",
             f"<p class='note'>{e(GAP_RESOLUTION)}</p>",
             _gaps_table(rep, "val_ce"))
    page.figure(figs["gaps"], div_id="fig-gaps")
    if figs.get("increment") is None:
        page.add("<p class='note'>Growth increment per seed: no seed has both the grow and the single-block pairs "
                 "finished yet.</p>")
    else:
        page.figure(figs["increment"], div_id="fig-increment", caption="Does growth add to post-norm's lead over "
                    "what its single block already has (obs3-single)? Each point is one seed's (pre-grow - post-grow) "
                    "- (pre-single - post-single), final val_ce; > 0: growth adds to post-norm's lead. The band is the "
                    "mean's interval, the claim's evidence.")
    page.add(details("the same gaps in val_kd_ce (soft-target CE against the teacher)", _gaps_table(rep, "val_kd_ce")),
             f"</section><section id='crossover'><h2>Crossover: {e(rep.grow.a)} vs {e(rep.grow.b)} at every stage "
             "end</h2>",
             _crossover_table(rep))
    page.figure(figs["crossover"], div_id="fig-crossover")
    page.add("</section><section id='diagnostics'><h3>Observations 4 and 5 (boundary diagnostics)</h3>",
             _diagnostics_html(rep), "</section>")
    run_cols = (["run_name", "seed", "depth", "val_ce", "val_kd_ce", "active_layer_tokens", "wall_s", "machine"]
                + sorted(c for c in rep.runs.columns if c.startswith(("val_ce_p", "growth_jump_p")))
                + ["flat_ratio", "flattened"])
    machines = machine_hours(rep.runs[["machine", "wall_s"]].to_dict("records")) if len(rep.runs) else {}
    page.add("<section id='runs'><h2>Runs (one row per run and seed)</h2>",
             "<p>Trained on (bf16 rounds differently from one machine to another, the teacher cache's pass included): "
             + ("; ".join(f"{e(m)}, {v['runs']} runs, {v['run_hours']:.2f} run-hours" for m, v in machines.items())
                or "no run yet") + ".</p>",
             details(f"{len(rep.runs)} runs (every column: summary.csv)",
                     table(rep.runs, run_cols, {"run_name": "run", "wall_s": "wall s"} | {
                         c: f"jump at growth {c.rsplit('p', 1)[1]}" for c in run_cols if c.startswith("growth_jump_p")})),
             details(f"{len(rep.unassigned)} finished runs not counted, and why (unassigned.csv)",
                     "<ul>" + "".join(f"<li>{e(n)}: {e(w)}</li>" for n, w in rep.unassigned.items()) + "</ul>")
             if rep.unassigned else "",
             "</section>")
    return page.html(plotly_src(at) if at and page.figures else None)


def write_report(rep: Report, out_dir: Path | None = None, figs: dict | None = None) -> dict:
    """Write summary.csv (one row per run and seed), variant_stats.csv, gaps.csv, crossover.csv, claims.csv,
    regime.csv, depth.csv, unassigned.csv (run directories not counted: damaged or unassigned, and why), baselines.json (the baselines with their sources, or a note that there are none) and report.html
    into outputs/study/<profile>/ (or out_dir). Returns {name: path}."""
    out = Path(out_dir) if out_dir is not None else study_dir(rep.profile)
    out.mkdir(parents=True, exist_ok=True)
    files = {"summary": out / "summary.csv", "variant_stats": out / "variant_stats.csv", "gaps": out / "gaps.csv",
             "crossover": out / "crossover.csv", "claims": out / "claims.csv", "regime": out / "regime.csv",
             "depth": out / "depth.csv", "unassigned": out / "unassigned.csv", "baselines": out / "baselines.json",
             "report": out / "report.html"}
    atomic_write_text(files["summary"], rep.runs.to_csv(index=False))
    atomic_write_text(files["variant_stats"], rep.stats.to_csv(index=False))
    atomic_write_text(files["gaps"], rep.gaps.to_csv(index=False))
    atomic_write_text(files["crossover"], rep.crossover.to_csv(index=False))
    atomic_write_text(files["claims"], rep.claims_frame().to_csv(index=False))
    atomic_write_text(files["regime"], rep.regime.to_csv(index=False))
    atomic_write_text(files["depth"], rep.depth.to_csv(index=False))
    atomic_write_text(files["unassigned"], pd.DataFrame(
        [(n, "damaged", w) for n, w in rep.damaged.items()] + [(n, "unassigned", w) for n, w in rep.unassigned.items()],
        columns=["run", "status", "reason"]).to_csv(index=False))
    atomic_write_json(files["baselines"], rep.baselines or {"note": rep.baselines_text()})
    atomic_write_text(files["report"], report_html(rep, figs, at=files["report"]))
    return files
