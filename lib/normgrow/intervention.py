"""The boundary intervention: ``python -m normgrow.intervention [--jobs N] [--report-only]``.

params/interventions.yaml declares the control profile, the interventions (profiles with one fixed operation on the
residual stream where new blocks attach), their bracket and their claims. Training, in order and resumably: each
intervention's bracket (sweep stages with --write: its own tuned file), the control's study and each intervention's;
then the record in outputs/grid/cpu/intervention/:

  claims.csv    every declared claim (analysis.intervention.judge), through the regime gate
  gaps.csv      every declared gap, paired by seed, and the share of the grow gap that normalizing closes
  diagnostics.csv  per study and grown variant, the top-boundary drift and the final block's update ratio
  report.html   the claims and the gaps
"""
from __future__ import annotations

import sys

if __name__ == "__main__":  # --help and usage errors before the imports below load torch (cli.py)
    from .cli import parse_early
    parse_early("intervention")

import pandas as pd

from .analysis import intervention as I
from .cli import parse
from .analysis.regime import baselines
from .rundir import grid_dir, study_dir
from .runner import runner_exit
from .utils import atomic_write_text, read_json


def train(inter: I.Interventions, jobs: int | None) -> None:
    from . import study, sweep
    b = inter.bracket
    jobs_arg = ["--jobs", str(jobs)] if jobs else []
    for name, profile in inter.profiles.items():
        for k, stage in enumerate(b.stages):
            print(f"intervention {name}: bracket stage {k + 1} of {len(b.stages)} ({profile})", flush=True)
            argv = ["--profile", profile, "--seeds", *map(str, b.seeds), "--schedules", *b.schedules,
                    "--norms", *b.norms, "--lr-factors", *map(str, stage.lr_factors), "--write", *jobs_arg]
            if stage.warmup_factors:
                argv += ["--warmup-factors", *map(str, stage.warmup_factors)]
            if sweep.main(argv):
                raise SystemExit(f"intervention {name}: the bracket of {profile} failed; its runner named the runs")
    for profile in (inter.control, *inter.profiles.values()):
        print(f"intervention: the study at {profile}", flush=True)
        if study.main(["--profile", profile, *jobs_arg]):
            raise SystemExit(f"intervention: the study at {profile} failed; its runner named the runs")


def write_record(inter: I.Interventions) -> dict:
    from .viz.render import Page, claims_html, table
    runs = I.combined_runs(inter)
    # the control study's baselines: the interventions distil from the same teacher pass
    recorded = study_dir(inter.control) / "baselines.json"
    unigram = (read_json(recorded) if recorded.is_file() else baselines(inter.control)).get("unigram_val_ce")
    claims = I.judge(inter, runs, unigram)
    gaps = I.gap_frame(inter, runs)
    share = I.share_closed(gaps)
    diagnostics = I.diagnostics_frame(inter)
    out = grid_dir("cpu", "intervention")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "claims.csv", pd.DataFrame([c.to_json() for c in claims]).to_csv(index=False))
    atomic_write_text(out / "gaps.csv", gaps.to_csv(index=False))
    atomic_write_text(out / "diagnostics.csv", diagnostics.to_csv(index=False))
    shown = "not yet (both gaps need runs)" if share is None else f"{share:.2f}"
    page = Page("normgrow boundary intervention").add(
        "<h1>Does the boundary's scale cause post-norm's lead under growth?</h1>",
        f"<p>The control is the study at <code>{inter.control}</code>; each intervention is the same study with one "
        "fixed operation on the residual stream where new blocks attach (the joint runs get it at the same depths): "
        + ", ".join(f"<code>{n}</code> (<code>{p}</code>)" for n, p in inter.profiles.items())
        + ". A variant trained under an intervention is written <code>variant@name</code>.</p>",
        "<h2>Claims</h2>", claims_html([c.to_json() for c in claims]),
        f"<h2>Gaps</h2><p>Paired by seed, 95% intervals. Share of the control's grow gap that normalizing pre-norm's "
        f"boundary closes (normalize-pre / grow, a ratio of means): {shown}.</p>",
        table(gaps, ["gap", "a", "b", "n", "mean", "ci_low", "ci_high", "meaning"]),
        "<h2>The boundary beside the loss</h2><p>Per study and grown variant (diagnostics.json of each study): the "
        "top-boundary RMS at the last phase over the first, all and structural positions, and the final block's "
        "update over the median block's, geometric means over the seeds (diagnostics.csv).</p>",
        table(diagnostics) if len(diagnostics) else "<p class='note'>No study of the intervention has its "
        "diagnostics yet.</p>")
    atomic_write_text(out / "report.html", page.html())
    return {"claims": claims, "gaps": gaps, "out": out}


def main(argv: list[str] | None = None) -> int:
    args = parse("intervention", argv)

    def work() -> None:
        inter = I.load_interventions()
        if not args.report_only:
            train(inter, args.jobs)
        result = write_record(inter)
        for c in result["claims"]:
            print(f"[{c.claim}] {c.status}: {c.sentence}")
        print(f"record: {result['out']}")
    return runner_exit(work)


if __name__ == "__main__":
    sys.exit(main())
