"""The study report's figures (report.py builds the Report they draw and the page that holds them): the learning
curves, grown against joint, the crossover, each variant's final val_ce, the paired gaps and the lr each arm was
tuned at, each a plotly figure of the report's runs and tables."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ..rundir import NUMERICS_VERSION, SAME_TRAINING, RunDirError, read_finished, read_identity, run_path, sweep_dir

if TYPE_CHECKING:
    from .report import Report


# Rendering: the figures and page of the report; the look (style, tables, number formats) is normgrow.viz.render's.

def crossover_figure(rep: Report):
    """Validation CE at each stage end (mean and CI over seeds) of the grow gap's variants, and their paired gap."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from . import palette
    from .render import split_variant, style_figure
    t, a, b = rep.crossover, rep.grow.a, rep.grow.b
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1, row_heights=[0.6, 0.4],
                        subplot_titles=("validation CE at each stage end", f"paired gap {a} - {b} (> 0: {b} leads)"))
    if len(t):
        x = [f"stage {int(s)} (depth {d})" for s, d in zip(t["stage"], t["depth"])]
        for v in (a, b):
            err = (t[f"{v}_ci_high"] - t[f"{v}_mean"]).fillna(0)
            fig.add_trace(go.Scatter(x=x, y=t[f"{v}_mean"], error_y=dict(type="data", array=err), name=v,
                                     mode="lines+markers", meta=palette.meta(*split_variant(v)),
                                     line=dict(color=palette.colour(split_variant(v)[0]),
                                               dash=palette.dash(split_variant(v)[1]))),
                          row=1, col=1)
        err = (t["gap_ci_high"] - t["gap_mean"]).fillna(0)
        fig.add_trace(go.Scatter(x=x, y=t["gap_mean"], error_y=dict(type="data", array=err), name=f"{a} - {b}",
                                 mode="lines+markers", line=dict(color="black")), row=2, col=1)
        fig.add_hline(y=0, line_dash="dot", line_color="gray", row=2, col=1)
        # half a category of room at either end: the first stage's label is centred on the plot's left edge otherwise,
        # across the y axis's labels
        fig.update_xaxes(range=[-0.5, len(x) - 0.5])
    fig.update_yaxes(title_text="val CE (nats/token)", row=1, col=1)
    fig.update_yaxes(title_text="gap (nats/token)", row=2, col=1)
    fig.update_layout(title=f"crossover: mean and {round(rep.level * 100)}% CI over seeds")
    return style_figure(fig, height=520)


def variants_figure(rep: Report, metric: str = "val_ce"):
    """Final validation metric per variant (pre and post of a schedule side by side): mean with CI, every seed as a
    faint dot, pre-norm red and post-norm blue."""
    import plotly.graph_objects as go

    from . import palette
    from .render import split_variant, style_figure
    fig = go.Figure()
    s = rep.stats
    if len(s):
        order = sorted(s["variant"], key=lambda v: (split_variant(v)[1], split_variant(v)[0] != "pre"))
        s = s.set_index("variant").loc[order].reset_index()
        r = rep.runs
        for norm in sorted({split_variant(v)[0] for v in order}):
            color = palette.colour(norm)
            mine = s[[split_variant(v)[0] == norm for v in s["variant"]]]
            seeds = r[[split_variant(v)[0] == norm for v in r["variant"]]]
            fig.add_trace(go.Scatter(x=seeds["variant"], y=seeds[metric], mode="markers", legendgroup=norm,
                                     showlegend=False, text=[f"seed {x}" for x in seeds["seed"]],
                                     marker=dict(size=7, color=palette.faint(color, 0.45)),
                                     hovertemplate="%{x} %{text}: %{y:.4f}<extra></extra>"))
            fig.add_trace(go.Scatter(x=mine["variant"], y=mine[f"{metric}_mean"], mode="markers",
                                     name=f"{norm}-norm mean", legendgroup=norm, meta=palette.meta(norm),
                                     marker=dict(size=14, symbol="line-ew-open", color=color, line=dict(width=3)),
                                     error_y=dict(type="data", array=mine[f"{metric}_half_width"].fillna(0),
                                                  color=color)))
        # ten variant names side by side overlap at a laptop's width, level or slanted (a slanted label's box spans
        # its neighbour's): level, one word of the name per line
        fig.update_xaxes(categoryorder="array", categoryarray=order, tickangle=0, tickmode="array", tickvals=order,
                         ticktext=[v.replace("-", "<br>") for v in order])
    fig.update_layout(yaxis_title=f"{metric} (nats/token)",
                      title=f"final {metric} per variant: mean, {round(rep.level * 100)}% CI, seeds")
    return style_figure(fig, height=400)


def gaps_figure(rep: Report, metric: str = "val_ce"):
    """The paired gaps with their CIs, the reference values as crosses where the reference gives one."""
    import plotly.graph_objects as go

    from .render import style_figure
    g = rep.gaps[rep.gaps["metric"] == metric]
    fig = go.Figure()
    labels = [f"{n}: {c}" for n, c in zip(g["gap"], g["comparison"])]
    fig.add_trace(go.Scatter(x=g["mean"], y=labels, mode="markers", name="this study", marker=dict(size=9),
                             error_x=dict(type="data", array=(g["ci_high"] - g["mean"]).fillna(0))))
    ref = g["reference"].astype(float)
    fig.add_trace(go.Scatter(x=ref, y=labels, mode="markers", name="reference", marker=dict(symbol="x", size=10)))
    fig.add_vline(x=0, line_dash="dot", line_color="gray")
    fig.update_layout(xaxis_title=f"{metric} gap a - b (nats/token)", yaxis=dict(autorange="reversed"),
                      title=f"paired gaps a - b by seed, {round(rep.level * 100)}% CI")
    return style_figure(fig, height=140 + 40 * len(g))


def curves_figure(rep: Report, metric: str = "val_ce"):
    """The learning curves of every variant (plots.learning_curves) from the runs' metrics.jsonl, with the teacher
    and unigram levels of rep.baselines."""
    from .plots import learning_curves
    return learning_curves(_variant_dirs(rep), rep.baselines, metric)


def curve_positions(rep: Report) -> tuple[int | None, int | None]:
    """(target positions of the evaluation subset the curves are drawn on, of the whole validation split the tables'
    final values are on), as the first run's metrics.jsonl recorded them; None where it has no such evaluation."""
    from ..rundir import read_metrics
    dirs = [d for ds in _variant_dirs(rep).values() for d in ds]
    evals = [r for r in read_metrics(dirs[0], note=False) if r.get("kind") in ("eval", "phase_end")] if dirs else []
    subset = next((r["eval_positions"] for r in evals if not r.get("full_split") and "eval_positions" in r), None)
    whole = next((r["eval_positions"] for r in evals if r.get("full_split") and "eval_positions" in r), None)
    return subset, whole


def _variant_dirs(rep: Report) -> dict[str, list[Path]]:
    """{variant: [run directory of each seed]} of the report's runs (what the curve figures read)."""
    return ({v: [run_path(rep.profile, n) for n in g["run_name"]] for v, g in rep.runs.groupby("variant")}
            if len(rep.runs) else {})


def overlay_figure(rep: Report, metric: str = "val_ce"):
    """Grown against joint per placement, validation and smoothed train loss (plots.schedule_overlay)."""
    from .plots import schedule_overlay
    return schedule_overlay(_variant_dirs(rep), metric)


LR_SHOWN = 0.4  # nats above an arm's best val_ce that the lr figure shows; higher points (diverged) sit on its edge


def sweep_candidates(profile: str, norms) -> pd.DataFrame:
    """The lr sweep's candidates of the given placements, one row per run (norm, schedule, lr, seed, val_ce), from
    every sweep record that lists them (outputs/sweep/<profile>/sweep.json and <norm>/sweep.json), each read back
    from its run directory and kept only while that run is finished under a numerics version that trains as the
    study runs' (rundir.SAME_TRAINING): a record lists its rows as they were when it was written, and a name may since
    hold a run trained again under another numerics version (or none), whose numbers are not comparable with the
    study's."""
    names = {}
    for path in [sweep_dir(profile) / "sweep.json", *(sweep_dir(profile, n) / "sweep.json" for n in norms)]:
        if path.is_file():
            names.update(dict.fromkeys(r["run_name"] for r in json.loads(path.read_text())["rows"]))
    rows = []
    for name in names:
        try:
            summary, identity = read_finished(run_path(profile, name))
        except RunDirError:
            continue
        if identity.get("numerics") in SAME_TRAINING and summary.norm in norms:
            train = identity["profile"]["train"]
            rows.append({"norm": summary.norm, "schedule": summary.schedule, "lr": train["lr"],
                         "warmup": train["warmup_steps"], "seed": summary.seed, "val_ce": summary.val_ce})
    return pd.DataFrame(rows, columns=["norm", "schedule", "lr", "warmup", "seed", "val_ce"])


def study_lrs(rep: Report) -> pd.DataFrame:
    """The peak lr and warmup each arm of the study trained at, as its runs' config.json record them (not the sweep's
    choice: a profile may hold others than its last sweep chose), with the mean final val_ce of those runs: one row
    per placement and schedule of the plain variants (a freeze control takes its placement's grow lr, a matched run
    its joint lr, so they add none). An arm whose seeds recorded different values gets a row per pair."""
    plain = rep.runs[~rep.runs["freeze_prefix"].astype(bool) & rep.runs["match_active_layer_tokens"].isna()]
    trains = [read_identity(run_path(rep.profile, n))["profile"]["train"] for n in plain["run_name"]]
    return (plain.assign(lr=[t["lr"] for t in trains], warmup=[t["warmup_steps"] for t in trains])
            .groupby(["norm", "schedule", "lr", "warmup"], sort=False)
            .agg(val_ce=("val_ce", "mean"), n=("seed", "size")).reset_index())


def lr_figure(rep: Report):
    """Final val_ce against peak lr for every arm of the study (placement x schedule) that the lr sweep measured
    under a numerics version that trains as this one (sweep_candidates), one panel per schedule, a line per placement and warmup: how
    sharp each arm's optimum is, and so how much of a gap between arms could be tuning. A line is the mean over the
    sweep's seeds at one warmup (bold: the warmup the study's runs trained at; thin and faint: the others tried), in its
    schedule's line style, its points
    the seeds; a candidate more than LR_SHOWN above the panel's best (diverged, or on the unigram plateau) is an x on
    the panel's upper edge; the star is the lr and warmup the study's runs trained at (study_lrs) with their mean
    final val_ce. None without a candidate."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from . import palette
    from .render import style_figure

    if not len(rep.runs):
        return None
    chosen = study_lrs(rep)
    rows = sweep_candidates(rep.profile, list(dict.fromkeys(chosen["norm"])))
    if not len(rows):
        return None
    schedules = list(dict.fromkeys(rows["schedule"]))
    fig = make_subplots(rows=1, cols=len(schedules), subplot_titles=schedules, shared_yaxes=False)
    for col, schedule in enumerate(schedules, start=1):
        arm_rows = rows[rows["schedule"] == schedule]
        best = min(arm_rows["val_ce"].min(), chosen.loc[chosen["schedule"] == schedule, "val_ce"].min())
        for norm, g in arm_rows.groupby("norm", sort=False):
            color = palette.colour(norm)
            study = chosen[(chosen["norm"] == norm) & (chosen["schedule"] == schedule)]
            for warmup, w in g.sort_values("lr").groupby("warmup", sort=True):
                studied = warmup in set(study["warmup"])
                mean = w.groupby("lr", sort=True)["val_ce"].mean()
                fig.add_trace(go.Scatter(
                    x=mean.index, y=mean.clip(upper=best + LR_SHOWN), mode="lines",
                    name=f"{norm}-norm, warmup {warmup}", legendgroup=f"{norm}-{warmup}", showlegend=col == 1,
                    line=dict(color=color if studied else palette.faint(color, 0.5), dash=palette.dash(schedule),
                              width=2 if studied else 1), meta=palette.meta(norm, schedule),
                    customdata=mean.values, hovertemplate=f"warmup {warmup}, lr %{{x:.3g}}: mean val_ce "
                                                          "%{customdata:.4f}<extra></extra>"), row=1, col=col)
                off = w["val_ce"] > best + LR_SHOWN
                for part, symbol in ((w[~off], "circle" if studied else "circle-open"), (w[off], "x")):
                    if len(part):
                        fig.add_trace(go.Scatter(
                            x=part["lr"], y=part["val_ce"].clip(upper=best + LR_SHOWN), mode="markers",
                            legendgroup=f"{norm}-{warmup}", showlegend=False,
                            marker=dict(color=color, size=8 if symbol == "x" else 6, symbol=symbol),
                            customdata=list(zip(part["val_ce"], part["seed"])),
                            hovertemplate=f"warmup {warmup}, lr %{{x:.3g}}, seed %{{customdata[1]}}: val_ce "
                                          "%{customdata[0]:.4f}" + (" (off the scale)" if symbol == "x" else "")
                                          + "<extra></extra>"), row=1, col=col)
            if len(study):
                fig.add_trace(go.Scatter(x=study["lr"], y=study["val_ce"].clip(upper=best + LR_SHOWN), mode="markers",
                                         legendgroup=norm, showlegend=False, customdata=study["n"],
                                         marker=dict(symbol="star", size=14, color=color),
                                         hovertemplate="study runs: lr %{x:.3g}, mean val_ce %{y:.4f} over "
                                                       "%{customdata} seeds<extra></extra>"), row=1, col=col)
        fig.update_xaxes(type="log", title_text="peak lr", row=1, col=col)
        fig.update_yaxes(range=[best - 0.03, best + LR_SHOWN + 0.03], row=1, col=col)
    fig.update_yaxes(title_text="final val_ce (nats/token)", row=1, col=1)
    fig.update_layout(title=f"lr sweep per arm (trained as numerics version {NUMERICS_VERSION} trains, seeds "
                            f"{' '.join(map(str, sorted(set(rows['seed']))))}): the study runs' lr starred")
    return style_figure(fig, height=380)


def increment_figure(rep: Report):
    """The growth increment per paired seed, (pre-grow - post-grow) - (pre-single - post-single) from the reference's
    grow and single gaps: a point per seed, the mean and its interval (obs3-single's), and the reference's whole grow
    gap as a line (the reference reports no single-block control, so it has no increment of its own)."""
    import plotly.graph_objects as go

    from ..analysis.stats import difference_in_gaps, gap_differences
    from ..analysis.reference import load_reference
    from .render import style_figure
    gaps = load_reference().gaps
    increment = gap_differences(rep.runs, gaps["grow"], gaps["single"])
    seeds = list(increment.index)
    if not seeds:
        return None  # the page says what is missing instead of an empty figure
    ci = difference_in_gaps(rep.runs, gaps["grow"], gaps["single"], level=rep.level)
    fig = go.Figure(go.Scatter(x=[str(s) for s in seeds], y=increment.values, mode="markers", name="a paired seed",
                               marker={"size": 9, "color": "#333333"}))
    if len(seeds) > 1:
        fig.add_hrect(y0=ci["ci_low"], y1=ci["ci_high"], fillcolor="#999999", opacity=0.2, line_width=0)
        fig.add_hline(y=ci["mean"], line={"color": "#333333"},
                      annotation_text=f"mean {ci['mean']:+.4f}, {round(rep.level * 100)}% interval "
                                      f"[{ci['ci_low']:+.4f}, {ci['ci_high']:+.4f}]", annotation_position="top left")
    fig.add_hline(y=0, line={"color": "#999999", "dash": "dot"})
    if gaps["grow"].reference is not None:
        fig.add_hline(y=gaps["grow"].reference, line={"color": "#777777", "dash": "dash"},
                      annotation_text=f"the reference's whole grow gap {gaps['grow'].reference:+.4f}",
                      annotation_position="top right")
    fig.update_layout(title=f"Growth increment per paired seed ({len(seeds)} seeds)", xaxis_title="seed",
                      yaxis_title="grow gap - single gap (nats)", showlegend=False)
    return style_figure(fig, height=360)


def figures(rep: Report) -> dict:
    return {"curves": curves_figure(rep), "overlay": overlay_figure(rep), "crossover": crossover_figure(rep), "variants": variants_figure(rep),
            "gaps": gaps_figure(rep), "increment": increment_figure(rep), "lr": lr_figure(rep)}
