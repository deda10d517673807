"""The robustness map: ``python -m normgrow.grid --profile cpu --grid robustness`` (make grid).

Where does the headline hold? A grid (params/grids/<name>.yaml: its settings, what each changes against the profile,
and the plan of its runs, shared by identity with the study's and between settings, are grid_plan.py's) is trained
here and judged per setting. Per setting the core variants (joint, grow, single of both placements) run for every
seed; every arm takes its lr from the profile's train.lr (per placement and schedule, from
``python -m normgrow.sweep``), so a setting whose placement has no lr there needs that sweep first.

Choices:
  - A directory that holds other settings is refused, never counted; the study's report does not count ``grid-``
    runs.
  - Execution is the runner's (runner.py, as for the study): resumable, ``jobs`` at a time (params/study.yaml), one
    teacher cache per distinct data. A setting that cannot run (a placement without an lr) is reported, and the others go on.
  - Judged per setting by the study's own claim declarations (params/reference.yaml, SETTING_CLAIMS): headline-grow
    on the grow gap (a-grow - b-grow) and headline-ratio on the interaction (grow gap - joint gap), their gaps
    re-pointed at the setting's pair, paired by seed with 95% t-intervals, through the study's judges and gates
    (claims.JUDGES, gate_claims: every variant compared trained, regime.regime_check; depth_gate: depth pays for
    both placements, params/reference.yaml's depth_margin). A gated verdict says which gate failed, and the numbers
    are still shown.
  - A grid may train only the joint and single arms (``schedules: [joint, single]``: the regime ladder,
    params/grids/ladder.yaml): its rows then carry each placement's depth gain against the compute of a joint run,
    and no grow verdict. A setting that changes the data (data.train_tokens) trains on a teacher cache of its own,
    built once before the runs, and is gated against its own unigram level.
Outputs: outputs/grid/<profile>/<grid>/ (DESIGN.md, "Where results land"), always covering every setting of the
grid from the finished runs, whichever settings an invocation trained (``--settings``).
"""
from __future__ import annotations

if __name__ == "__main__":  # --help and usage errors before the imports below load torch (cli.py)
    from .cli import parse_early
    parse_early("grid")

import dataclasses
import math
import shlex
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd

from .analysis import formats
from .analysis.claims import JUDGES, NOT_TESTABLE, depth_gate, gate_claims
from .cli import parse
from .config import ParamError, load_profile, with_processes, writable_outputs_dir
from .rundir import (RunDirError, Summary, grid_dir, is_finished, machine_hours,
                     read_finished, run_machine, run_path, runner_lock)
from .analysis.stats import LEVEL, depth_trend, mean_ci, paired_differences, runs_frame
from .analysis.regime import baselines, depth_check, regime_check, runs_teacher_key, with_flatness
from .runner import (ExecutorParams, default_jobs, ensure_teacher_cache, executor_of, git_commit, parse_seeds,
                     report_failures, run_jobs, runner_exit)
from .utils import atomic_write_json, atomic_write_text
from .analysis.reference import Reference, load_reference
from .analysis.variants import StudyRuns, Variant, load_variants
from .grid_plan import CORE, Cell, GridPlan, Setting, check_settings, load_grid, plan_grid

# -------------------------------------------------------------------------------------------------- the verdicts

GRID_FIELDS = ("setting", "about", "a", "b", "n_seeds", "joint_gap", "joint_ci_low", "joint_ci_high",
               "grow_gap", "grow_ci_low", "grow_ci_high", "grow_mde", "interaction", "interaction_ci_low",
               "interaction_ci_high", "interaction_mde", "depth_gain_a", "depth_gain_a_ci_low", "depth_gain_a_ci_high",
               "depth_gain_b", "depth_gain_b_ci_low", "depth_gain_b_ci_high", "depth_margin", "depth_pays",
               "trained", "grow_verdict", "interaction_verdict", "gate", "lrs", "runs_finished", "runs_needed",
               "unigram_val_ce", "unique_tokens", "run_tokens", "d_model", "warmup_steps", "joint_tflop")
"""grid.csv's columns. depth_gain_*: single - joint final val_ce of the placement (the depth gate's reading, means
over seeds) and the 95% interval of its paired differences by seed; unique_tokens (data.train_tokens),
run_tokens (train.stage_tokens summed), d_model and warmup_steps: the setting's regime; joint_tflop: the matmul
TFLOP of one joint run of placement a (train.step.step_flops per token x its tokens), the compute a depth gain
is plotted against."""


@dataclass(frozen=True)
class CellRun:
    """A cell's run as read from its directory: finished (summary and identity read and validate: read_finished),
    damaged (they do not) or missing."""
    status: str
    summary: Summary | None = None
    identity: dict | None = None


def read_cells(plan: GridPlan) -> dict[str, CellRun]:
    """Every run of the plan's cells, read once by name (a run shared by settings, or with the study, is one run):
    the record's tables, gates and figures all read these."""
    runs: dict[str, CellRun] = {}
    for c in plan.cells:
        if c.run_name in runs:
            continue
        run_dir = run_path(plan.profile, c.run_name)
        if not is_finished(run_dir):
            runs[c.run_name] = CellRun("missing")
            continue
        try:
            runs[c.run_name] = CellRun("finished", *read_finished(run_dir))
        except RunDirError:
            runs[c.run_name] = CellRun("damaged")
    return runs


def cell_records(plan: GridPlan, runs: dict[str, CellRun]) -> list[dict]:
    """runs.csv: one row per cell, its status (read_cells) and, finished, its wall seconds and the machine that
    trained it (rundir.run_machine)."""
    records = []
    for c in plan.cells:
        run = runs[c.run_name]
        finished = run.status == "finished"
        records.append(c.__dict__ | {"status": run.status, "machine": run_machine(run.identity) if finished else None,
                                     "wall_s": run.summary.wall_s if finished else None})
    return records


def grid_machines(records: list[dict]) -> dict[str, dict]:
    """rundir.machine_hours over the finished runs of runs.csv's records, each run once (a run shared by settings,
    or with the study, is one run)."""
    finished = {r["run_name"]: r for r in records if r["status"] == "finished"}
    return machine_hours(finished.values())


def setting_runs(plan: GridPlan, setting: str, runs: dict[str, CellRun]) -> pd.DataFrame:
    """stats.runs_frame of the setting's finished runs, one variant per (placement, schedule): '<norm>-<schedule>'.
    A damaged run is not counted (runs.csv and the runner name it)."""
    assigned: dict[tuple[str, int], Summary] = {}
    machines: dict[str, str] = {}
    for c in plan.cells:
        run = runs[c.run_name]
        if c.setting == setting and run.status == "finished":
            assigned[(f"{c.norm}-{c.schedule}", c.seed)], machines[c.run_name] = run.summary, run_machine(run.identity)
    return runs_frame(StudyRuns(assigned, {}, machines=machines))


SETTING_CLAIMS = {"grow_verdict": "headline-grow", "interaction_verdict": "headline-ratio"}
"""The claims of params/reference.yaml each setting is judged by, by the grid.csv column of their verdict: the same
declarations, judges and gates as the study's (claims.py), on the setting's pair of placements."""


def setting_reference(reference: Reference, a: str, b: str) -> Reference:
    """reference with the gaps of SETTING_CLAIMS re-pointed from the study's placements to the setting's pair a - b
    (pre-grow - post-grow becomes a-grow - b-grow). Such a gap must compare two core variants of one schedule; a
    declaration that needs another gap cannot be judged per setting (ParamError naming the claim and the gap)."""
    variants, gaps = load_variants(), dict(reference.gaps)
    for claim_name in SETTING_CLAIMS.values():
        for gap_name in reference.claim(claim_name).gaps:
            gap = reference.gaps[gap_name]
            one, two = variants[gap.a], variants[gap.b]
            if not (one.schedule == two.schedule in CORE and not (one.freeze_prefix or two.freeze_prefix)
                    and one.match_active_layer_tokens is None is two.match_active_layer_tokens):
                raise ParamError(f"grid: claim {claim_name!r} reads gap {gap_name!r} ({gap.a} - {gap.b}), which is "
                                 f"not between two plain variants of one schedule of {', '.join(CORE)}")
            gaps[gap_name] = dataclasses.replace(gap, a=f"{a}-{one.schedule}", b=f"{b}-{one.schedule}")
    return dataclasses.replace(reference, gaps=gaps)


def setting_overrides(plan: GridPlan, setting: Setting) -> dict:
    """The dotted profile keys of the setting's runs: the plan's and the setting's (the lr and warmup aside,
    which tuning_of may change per arm)."""
    return {**plan.overrides, **setting.overrides}


def setting_unigram(plan: GridPlan, setting: Setting, runs: dict[str, CellRun]) -> float | None:
    """The unigram level of the setting's data (regime.baselines: the teacher pass its finished runs recorded), None
    without one."""
    recorded = [runs[c.run_name].summary for c in plan.cells
                if c.setting == setting.name and runs[c.run_name].status == "finished"]
    return baselines(plan.profile, setting_overrides(plan, setting),
                     teacher_key=runs_teacher_key(recorded)).get("unigram_val_ce")


def setting_warmups(cells: list[Cell]) -> int | str:
    """The warmup steps of a setting's runs: one number when every arm has the same, else each arm's."""
    arms = {f"{c.norm}-{c.schedule}": c.warmup_steps for c in cells}
    values = set(arms.values())
    return values.pop() if len(values) == 1 else " ".join(f"{arm} {w}" for arm, w in arms.items())


def joint_tflop(plan: GridPlan, setting: Setting, prof, runs: dict[str, CellRun]) -> float:
    """The matmul TFLOP of a finished joint run of the setting's placement a (train.step.step_flops per token of
    its student, prof: the setting's profile, vocabulary as it trained, x its tokens); NaN when there is none."""
    from .train.step import step_flops
    from .student.model import StudentConfig
    a = setting.placements[0]
    joint = [runs[c.run_name] for c in plan.cells if (c.setting, c.norm, c.schedule) == (setting.name, a, "joint")]
    summaries = [run.summary for run in joint if run.status == "finished"]
    if not summaries:
        return math.nan
    summary = summaries[0]
    cfg = StudentConfig.from_params(prof.student, vocab_size=summary.vocab["size"], n_layers=summary.depth, norm=a,
                                    max_seq_len=prof.data.seq_len)
    return step_flops(cfg, 1, prof.data.seq_len)["step"] * summary.tokens / prof.data.seq_len / 1e12


def setting_gaps(runs: pd.DataFrame, a: str, b: str, level: float = LEVEL) -> dict[str, dict]:
    """A setting's gaps over a runs frame (variants '<norm>-<schedule>'): joint (a-joint - b-joint), grow (a-grow -
    b-grow) and interaction (grow - joint on the seeds both pair), each stats.mean_ci of the per-seed differences."""
    joint = paired_differences(runs, f"{a}-joint", f"{b}-joint")
    grow = paired_differences(runs, f"{a}-grow", f"{b}-grow")
    both = sorted(set(joint.index) & set(grow.index))
    return {"joint": mean_ci(joint.values, level), "grow": mean_ci(grow.values, level),
            "interaction": mean_ci([grow[s] - joint[s] for s in both], level)}


CURRICULUM_FIELDS = ("setting", "stages", "a", "b", "n_seeds", "single_a", "joint_a", "grow_a", "single_b", "joint_b",
                     "grow_b", "grow_vs_single_a", "grow_vs_single_a_ci_low", "grow_vs_single_a_ci_high",
                     "grow_vs_single_b", "grow_vs_single_b_ci_low", "grow_vs_single_b_ci_high", "phase_val_ce_a",
                     "phase_val_ce_b", "phase_gaps", "phase_leaders")
"""curriculum.csv's columns (grids with grown runs; grid.curriculum): per setting its train.stages; each placement's
mean final val_ce per schedule; grow - single of each placement, paired by seed with its 95% interval (negative:
the grown student beat the first stage trained alone on the same tokens); and at each phase end of the grown runs
(one value per stage, space-separated) each placement's mean val_ce, the gap a - b paired by seed, and the
placement that led (the lower mean)."""


def curriculum(plan: GridPlan, runs: dict[str, CellRun], level: float = LEVEL) -> list[dict]:
    """Per setting of a grid with grown runs: its stages, the pair, the seeds its grown runs pair on, and per
    placement the mean final val_ce of its single, joint and grown runs, grow - single (stats.mean_ci of the paired
    differences) and the grown runs' mean val_ce at each phase end; with the gap a - b at each phase end (mean_ci).
    What curriculum.csv and curriculum.svg show: how the grown students fared, which is where shapes of a
    curriculum that share their first and last stage (and so their depth gain) differ."""
    items = []
    for setting in plan.grid.settings:
        if not any(c.setting == setting.name for c in plan.cells) or setting.name in plan.not_run:
            continue
        frame = setting_runs(plan, setting.name, runs)
        stages = list(load_profile(plan.profile, setting_overrides(plan, setting)).train.stages)

        def mean(variant: str, column: str = "val_ce") -> float:  # over the variant's finished seeds; NaN: none
            rows = frame[frame["variant"] == variant] if len(frame) and column in frame else frame.iloc[:0]
            return float(pd.to_numeric(rows[column]).mean()) if len(rows) else math.nan
        a, b = setting.placements
        arms = {norm: {"single": mean(f"{norm}-single"), "joint": mean(f"{norm}-joint"), "grow": mean(f"{norm}-grow"),
                       "grow_vs_single": mean_ci(paired_differences(frame, f"{norm}-grow", f"{norm}-single").values,
                                                 level),
                       "phases": [mean(f"{norm}-grow", f"val_ce_p{i}") for i in range(len(stages))]}
                for norm in (a, b)}
        gaps = [mean_ci(paired_differences(frame, f"{a}-grow", f"{b}-grow", phase=i).values, level)
                for i in range(len(stages))]
        items.append({"setting": setting.name, "stages": stages, "a": a, "b": b,
                      "n_seeds": len(paired_differences(frame, f"{a}-grow", f"{b}-grow")), "arms": arms,
                      "phase_gaps": gaps})
    return items


def curriculum_frame(items: list[dict]) -> pd.DataFrame:
    """curriculum.csv (CURRICULUM_FIELDS) from curriculum's items."""
    words = lambda values, fmt: " ".join(format(v, fmt) for v in values)
    rows = []
    for it in items:
        a, b = it["a"], it["b"]
        row = {"setting": it["setting"], "stages": words(it["stages"], "d"), "a": a, "b": b, "n_seeds": it["n_seeds"]}
        for side, norm in (("a", a), ("b", b)):
            arm = it["arms"][norm]
            row |= {f"single_{side}": arm["single"], f"joint_{side}": arm["joint"], f"grow_{side}": arm["grow"],
                    f"grow_vs_single_{side}": arm["grow_vs_single"]["mean"],
                    f"grow_vs_single_{side}_ci_low": arm["grow_vs_single"]["ci_low"],
                    f"grow_vs_single_{side}_ci_high": arm["grow_vs_single"]["ci_high"],
                    f"phase_val_ce_{side}": words(arm["phases"], ".4f")}
        row |= {"phase_gaps": words((g["mean"] for g in it["phase_gaps"]), "+.4f"),
                "phase_leaders": " ".join(b if g["mean"] > 0 else a if g["mean"] < 0 else "-"
                                          for g in it["phase_gaps"])}
        rows.append(row)
    return pd.DataFrame(rows, columns=list(CURRICULUM_FIELDS))


def judge_setting(plan: GridPlan, setting: Setting, reference: Reference, unigram: float | None,
                  cell_runs: dict[str, CellRun], level: float = LEVEL) -> dict:
    """One row of grid.csv (GRID_FIELDS): the gaps' numbers, the gates' findings and the SETTING_CLAIMS verdicts. A
    grid without grown runs has no grow gap: its verdicts are NOT_TESTABLE and its rows carry the depth gains."""
    a, b = setting.placements
    runs = setting_runs(plan, setting.name, cell_runs)
    cells = [c for c in plan.cells if c.setting == setting.name]
    margin = reference.depth_margin
    prof = load_profile(plan.profile, setting_overrides(plan, setting))
    row = {"setting": setting.name, "about": setting.about, "a": a, "b": b, "depth_margin": margin,
           "runs_needed": len(cells), "runs_finished": len(runs),
           "lrs": " ".join(f"{n}-{s} {lr:g}" for n, s, lr in dict.fromkeys((c.norm, c.schedule, c.lr) for c in cells)),
           "unigram_val_ce": unigram, "unique_tokens": prof.data.train_tokens,
           "run_tokens": sum(prof.train.stage_tokens), "d_model": prof.student.d_model,
           "warmup_steps": setting_warmups(cells), "joint_tflop": joint_tflop(plan, setting, prof, cell_runs)}
    for name, norm in (("a", a), ("b", b)):
        gain = mean_ci(paired_differences(runs, f"{norm}-single", f"{norm}-joint").values, level)
        row |= {f"depth_gain_{name}_ci_low": gain["ci_low"], f"depth_gain_{name}_ci_high": gain["ci_high"]}
    stats = setting_gaps(runs, a, b, level)
    for name, s in stats.items():
        row |= {("joint_gap" if name == "joint" else "grow_gap" if name == "grow" else name): s["mean"],
                f"{name}_ci_low": s["ci_low"], f"{name}_ci_high": s["ci_high"]}
    row |= {"grow_mde": stats["grow"]["half_width"], "interaction_mde": stats["interaction"]["half_width"],
            "n_seeds": stats["interaction"]["n"]}
    variants = {f"{n}-{s}": Variant(n, s, name=f"{n}-{s}") for n in (a, b) for s in plan.grid.schedules}
    ref = setting_reference(reference, a, b)
    claims = [JUDGES[ref.claim(name).kind](ref.claim(name), ref, runs, "val_ce", level)
              for name in SETTING_CLAIMS.values()]
    missing = [v for v in variants if v not in set(runs.get("variant", []))]
    if len(runs):  # the gates see every finished run; depth does not pay for a placement missing a single or joint run
        regime = regime_check(with_flatness(runs, plan.profile), unigram)
        depth = depth_check(runs, variants, margin)
        claims = depth_gate(gate_claims(claims, regime), depth, variants)
    if missing:
        row |= {"trained": False, "depth_pays": False, "depth_gain_a": math.nan, "depth_gain_b": math.nan,
                "gate": f"no finished runs of {', '.join(missing)}"}
    else:
        gains = depth.set_index("norm")
        row |= {"trained": bool(regime["trained"].all()), "depth_pays": bool(gains["pays"].all()),
                "depth_gain_a": gains.loc[a, "depth_gain"], "depth_gain_b": gains.loc[b, "depth_gain"]}
        row["gate"] = ("; ".join(regime.loc[~regime["trained"].astype(bool), "reason"]) if not row["trained"] else
                       "; ".join(gains.loc[~gains["pays"].astype(bool), "reason"]) if not row["depth_pays"] else
                       "judged")
    if "grow" not in plan.grid.schedules:
        return row | dict.fromkeys(SETTING_CLAIMS, f"{NOT_TESTABLE}: the grid trains no grown runs")
    return row | {column: claim.status for column, claim in zip(SETTING_CLAIMS, claims)}


def grid_frame(plan: GridPlan, runs: dict[str, CellRun], level: float = LEVEL) -> pd.DataFrame:
    """grid.csv: a row per setting (judge_setting) from the cells' runs (read_cells), each gated against the unigram
    level of its own data."""
    reference = load_reference()
    rows = [judge_setting(plan, s, reference, setting_unigram(plan, s, runs), runs, level) for s in plan.grid.settings
            if s.name not in plan.not_run and any(c.setting == s.name for c in plan.cells)]
    rows += [{"setting": name, "about": next(s.about for s in plan.grid.settings if s.name == name),
              "grow_verdict": NOT_TESTABLE, "interaction_verdict": NOT_TESTABLE, "gate": f"not run: {why}"}
             for name, why in plan.not_run.items()]
    return pd.DataFrame(rows, columns=list(GRID_FIELDS))


# ------------------------------------------------------------------------------------------------------ the page

def depth_trends(frame: pd.DataFrame, margin: float) -> dict[str, dict]:
    """Per placement, stats.depth_trend over the settings with a depth gain, and how many distinct computes they
    span (computes): where the line of depth gain against log10 joint TFLOP reaches the margin. Empty for a frame
    without computes (no finished joint runs)."""
    if "joint_tflop" not in frame:
        return {}
    points = pd.concat([pd.DataFrame({"norm": frame[side], "tflop": pd.to_numeric(frame["joint_tflop"], errors="coerce"),
                                      "gain": pd.to_numeric(frame[f"depth_gain_{side}"], errors="coerce")})
                        for side in "ab"])
    trends = {norm: depth_trend(rows["tflop"], rows["gain"], margin) | {"computes": int(rows["tflop"].nunique())}
              for norm, rows in points.groupby("norm", sort=False)}
    return {norm: trend for norm, trend in trends.items() if trend["n"]}


def spans_computes(frame: pd.DataFrame) -> bool:
    """Whether the settings' joint runs have at least two computes: the depth figure (depth gain against compute)
    and its trends draw nothing else."""
    return pd.to_numeric(frame.get("joint_tflop", pd.Series(dtype=float)), errors="coerce").dropna().nunique() >= 2


def trend_sentence(norm: str, trend: dict) -> str:
    """Two sentences: the slope per tenfold compute with its interval, and the compute where the line and its band
    reach the margin; "not enough rungs" where there is no slope (fewer than 3 rungs, or all at one compute)."""
    if trend["n"] < 3 or not math.isfinite(trend["slope_per_decade"]):
        n, computes = trend["n"], trend.get("computes", trend["n"])
        return (f"{norm}: not enough rungs for a trend ({n} {'rung' if n == 1 else 'rungs'} at {computes} "
                f"{'compute' if computes == 1 else 'computes'})")
    where = (f"reaches the margin at {trend['at_tflop']:.3g} TFLOP" if trend["at_tflop"] else
             "never reaches the margin (its slope is not positive)")
    if trend["band_everywhere"]:
        band = ("its 95% band is too wide to locate where depth would pay (it holds the margin across the whole "
                "range, down to 3 decades below the rungs)")
    elif trend["from_tflop"]:
        band = f"its 95% band holds the margin from {trend['from_tflop']:.3g} " + (
            f"to {trend['to_tflop']:.3g} TFLOP" if trend["to_tflop"] else
            "TFLOP on, and does not exclude that depth never pays")
    else:
        band = "its 95% band never holds the margin"
    return (f"{norm}: the depth gain changes by {trend['slope_per_decade']:+.3f} nats per tenfold compute (95% "
            f"interval {trend['slope_ci_low']:+.3f} to {trend['slope_ci_high']:+.3f}) over {trend['n']} rungs. The "
            f"fitted line {where}; {band}.")


def grid_report_html(plan: GridPlan, frame: pd.DataFrame, machines: dict[str, dict],
                     items: list[dict] | None = None, at: Path | None = None) -> str:
    """The grid's page; items: curriculum's (grids with grown runs), drawn and tabled under "How the grown students
    fared"; at: where it will be written (plotly.js from the shared asset; inlined without)."""
    import html
    from .viz.depth import depth_figure
    from .viz.forest import forest_figure, reference_marks
    from .viz.render import Page, details, plotly_src, table
    e = html.escape
    ref = reference_marks()
    page = Page(f"normgrow grid: {plan.grid.name} ({plan.profile})")
    grows = "grow" in plan.grid.schedules
    if grows:
        page.add(f"<h1>Where does the headline hold? Grid <code>{e(plan.grid.name)}</code>, profile "
                 f"<code>{e(plan.profile)}</code></h1>",
                 "<p>Each row is one setting of params/grids/" + e(plan.grid.name) + ".yaml: a - b is the placement "
                 "pair it compares (pre - post unless it says), gaps in final validation CE paired by seed, 95% "
                 "Student-t intervals. A positive gap means b is better. The reference study reports post-norm better "
                 f"grown by {ref['grow']:.4f} and an interaction of {ref['interaction']:.4f} (the forest's dashed "
                 "lines; they apply to pre - post). A row is judged only where every variant is trained and depth pays "
                 "for both placements (params/reference.yaml's depth_margin); otherwise its verdict names the failed "
                 "gate and the interval is the ungated reading.</p>")
        page.figure(forest_figure(frame, ref), div_id="fig-forest")
    else:
        page.add(f"<h1>Where does depth pay? Grid <code>{e(plan.grid.name)}</code>, profile "
                 f"<code>{e(plan.profile)}</code></h1>",
                 "<p>Each row is one setting of params/grids/" + e(plan.grid.name) + ".yaml, trained in the joint "
                 f"and single schedules only ({', '.join(map(e, plan.grid.schedules))}): it asks at which data, "
                 "tokens and width nine blocks beat the first stage alone by the depth margin, not whether growth "
                 "favours a placement (no grown runs: the growth claims are not testable here).</p>")
    unfinished = frame[frame["runs_finished"] < frame["runs_needed"]]
    if len(unfinished):
        page.add("<p class='note'><b>Not finished</b>: " + "; ".join(
            f"{e(str(r.setting))} ({int(r.runs_finished)} of {int(r.runs_needed)} runs)"
            for r in unfinished.itertuples()) + ". Their rows read the runs done so far.</p>")
    interval = lambda table_, mean, ci: [formats.interval(m, lo, hi, digits=4, sign=True) for m, lo, hi in
                                         zip(table_[mean], table_[f"{ci}_ci_low"], table_[f"{ci}_ci_high"])]
    if items:
        from .viz.curriculum import curriculum_figure
        shown = curriculum_frame(items)
        for side in "ab":
            shown[f"grow_vs_single_{side}"] = interval(shown, f"grow_vs_single_{side}", f"grow_vs_single_{side}")
        page.add("<h2>How the grown students fared</h2><p>Each setting's grown runs at each phase's end (mean over "
                 "seeds) beside the single run (the first stage alone on the same tokens) and the joint run, per "
                 "placement; grow - single paired by seed with its 95% interval (negative: growing beat the first "
                 "stage alone), and the gap a - b at each phase end (positive: b led). Every column: "
                 "curriculum.csv.</p>")
        page.figure(curriculum_figure(items), div_id="fig-curriculum")
        page.add(table(shown, ["setting", "stages", "n_seeds", "grow_a", "grow_b", "grow_vs_single_a",
                               "grow_vs_single_b", "phase_gaps", "phase_leaders"],
                       {"n_seeds": "seeds", "grow_a": "grown a", "grow_b": "grown b",
                        "grow_vs_single_a": "grow - single a", "grow_vs_single_b": "grow - single b",
                        "phase_gaps": "a - b at each phase end", "phase_leaders": "leader at each phase end"}))
    page.add("<h2>Where does depth pay?</h2><p>Depth gain: the single arm (the first-stage prefix alone, same tokens) "
             "minus the joint arm, per placement, paired by seed with 95% intervals, against the compute of one joint "
             "run; the gate asks for the depth margin (dashed).</p>")
    trends = depth_trends(frame, load_reference().depth_margin)
    spans = spans_computes(frame)
    if not spans:
        page.add("<p>Not enough rungs for a figure: every setting's joint run has the same compute, so the depth "
                 "gains are read in the table below (depth gain a, b), not against compute.</p>")
    else:
        page.figure(depth_figure(frame, trends), div_id="fig-depth")
    if trends and spans:
        page.add("<p>The trend (least squares of the settings' depth gains on log10 TFLOP; the settings change data, "
                 "tokens and width together, so it locates and does not separate them):</p><ul>"
                 + "".join(f"<li>{e(trend_sentence(norm, t))}</li>" for norm, t in trends.items()) + "</ul>")
    shown = frame.assign(grow=interval(frame, "grow_gap", "grow"),
                         interaction_=interval(frame, "interaction", "interaction"),
                         joint=interval(frame, "joint_gap", "joint"))
    names = {"interaction_": "interaction", "n_seeds": "seeds", "grow_mde": "grow MDE",
             "interaction_mde": "interaction MDE", "depth_gain_a": "depth gain a", "depth_gain_b": "depth gain b",
             "runs_finished": "runs done", "runs_needed": "runs", "grow_verdict": "grow verdict",
             "interaction_verdict": "interaction verdict", "depth_pays": "depth pays"}
    # the verdicts and their intervals fit a laptop's width; the numbers behind them and the long texts (the gate's
    # reason, the setting's sentence, its lrs) follow, closed, in tables of their own
    verdicts = (["grow", "interaction_", "grow_verdict", "interaction_verdict"] if grows
                else ["depth_gain_a", "depth_gain_b", "depth_pays"])
    page.add("<h2>Every setting</h2>",
             table(shown, ["setting", "a", "b", "n_seeds", *verdicts, "runs_finished", "runs_needed"], names),
             details("the numbers behind each verdict: joint gap, MDEs, depth gains and the gates (every column: "
                     "grid.csv)", table(shown, ["setting", "joint", "grow_mde", "interaction_mde", "depth_gain_a",
                                                "depth_gain_b", "depth_margin", "trained"], names)
                     + table(shown, ["setting", "gate", "about", "lrs"], names)),
             "<p>Trained on (runs.csv's machine: bf16 rounds differently from one machine to another, the teacher "
             "cache's pass included): " + "; ".join(f"{e(m)}, {v['runs']} runs, {v['run_hours']:.2f} run-hours"
                                                    for m, v in machines.items()) + ".</p>")
    return page.html(plotly_src(at) if at and page.figures else None)


def write_grid(plan: GridPlan, command: str = "", level: float = LEVEL) -> dict[str, Path]:
    """grid.csv, runs.csv, grid.json, report.html, depth.svg (two computes or more) and, with grown runs,
    forest.svg, curriculum.csv and curriculum.svg in grid_dir (module docstring)."""
    from .viz.depth import depth_figure
    from .viz.forest import forest_figure, reference_marks
    from .viz.render import write_svg, write_text
    out = grid_dir(plan.profile, plan.grid.name)
    out.mkdir(parents=True, exist_ok=True)
    runs = read_cells(plan)
    frame = grid_frame(plan, runs, level)
    records = cell_records(plan, runs)
    machines = grid_machines(records)
    files = {"grid": out / "grid.csv", "runs": out / "runs.csv", "json": out / "grid.json",
             "report": out / "report.html"}
    atomic_write_text(files["grid"], frame.to_csv(index=False))
    atomic_write_text(files["runs"], pd.DataFrame(records).to_csv(index=False))
    atomic_write_json(files["json"], {
        "profile": plan.profile, "grid": plan.grid.name, "date": date.today().isoformat(), "git_commit": git_commit(),
        "command": command, "seeds": sorted({c.seed for c in plan.cells}), "not_run": plan.not_run,
        "settings": [s.__dict__ | {"placements": list(s.placements)} for s in plan.grid.settings],
        "rows": frame.to_dict("records"), "depth_trend": depth_trends(frame, load_reference().depth_margin),
        "machines": machines})
    items = curriculum(plan, runs, level) if "grow" in plan.grid.schedules else None
    write_text(files["report"], grid_report_html(plan, frame, machines, items, at=files["report"]))
    if spans_computes(frame):
        files["depth"] = out / "depth.svg"
        write_svg(depth_figure(frame, depth_trends(frame, load_reference().depth_margin)), files["depth"])
    if items is not None:
        from .viz.curriculum import curriculum_figure
        files |= {"figure": out / "forest.svg", "curriculum": out / "curriculum.csv",
                  "curriculum_figure": out / "curriculum.svg"}
        write_svg(forest_figure(frame, reference_marks()), files["figure"])
        atomic_write_text(files["curriculum"], curriculum_frame(items).to_csv(index=False))
        write_svg(curriculum_figure(items), files["curriculum_figure"])
    return files


# ------------------------------------------------------------------------------------------------------- running

def run_grid(profile: str, grid_name: str, seeds: list[int] | None = None, only: list[str] | None = None,
             jobs: int | None = None, processes: int | None = None, command: str = "",
             executor: ExecutorParams = ExecutorParams()) -> int:
    plan = plan_grid(profile, load_grid(grid_name), seeds, only, processes)
    for name, why in plan.not_run.items():
        print(f"setting {name}: not run: {why}")
    jobs = default_jobs(profile) if jobs is None else jobs
    out = grid_dir(profile, grid_name)
    out.mkdir(parents=True, exist_ok=True)
    teacher_keys, cache_jobs = {}, {}  # run name -> its setting's cache key, or the job building it (slurm)
    for setting in plan.grid.settings:  # settings that change no data share one cache
        names = {c.run_name for c in plan.cells if c.setting == setting.name}
        if names:
            overrides = with_processes(setting.overrides, processes)
            key, job = ensure_teacher_cache(load_profile(profile, overrides), out, processes, setting.overrides,
                                            f"00_teacher-{setting.name}.ipynb", executor)
            teacher_keys |= dict.fromkeys(names, key)
            cache_jobs |= dict.fromkeys(names, job) if job else {}
    print(f"grid {grid_name}: {len(plan.cells)} cells in {len(plan.jobs)} runs "
          f"({len(plan.cells) - len(plan.jobs)} cells share a run)")
    _, failed = run_jobs(profile, list(plan.jobs.values()), teacher_keys, jobs, processes, f"grid {grid_name}",
                         executor, cache_jobs)
    try:
        files = write_grid(plan_grid(profile, plan.grid, seeds, None, processes) if only else plan, command)
        print(f"results: {files['report']}")
    except RunDirError as err:
        failed["report"] = str(err)
    return report_failures(failed)


def main(argv: list[str] | None = None) -> int:
    args = parse("grid", argv)
    command = shlex.join(["python", "-m", "normgrow.grid", *(sys.argv[1:] if argv is None else argv)])

    def work() -> int:
        seeds = parse_seeds(args.seeds) if args.seeds else None
        writable_outputs_dir()
        if args.report_only:
            grid = load_grid(args.grid)
            check_settings(grid, args.settings)
            print(f"results: {write_grid(plan_grid(args.profile, grid, seeds, None, args.processes), command)['report']}")
            return 0
        with runner_lock():
            return run_grid(args.profile, args.grid, seeds, args.settings, args.jobs, args.processes, command,
                            executor_of(args))
    return runner_exit(work)


if __name__ == "__main__":
    sys.exit(main())
