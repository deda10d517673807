"""Plotly figures shared by the notebooks (the notebooks only call these and show the result)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.graph_objects as go


def read_metrics(run_dir: Path) -> pd.DataFrame:
    return pd.read_json(Path(run_dir) / "metrics.jsonl", lines=True)


def val_ce_curve(run_dirs: list[Path] | Path, metric: str = "val_ce") -> go.Figure:
    """Validation CE against active-layer tokens, one line per run, phase ends marked (dotted lines, depth labels)."""
    run_dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else run_dirs
    fig = go.Figure()
    for run_dir in run_dirs:
        df = read_metrics(run_dir)
        evals = df[df["kind"].isin(["eval", "phase_end"])]
        fig.add_trace(go.Scatter(x=evals["active_layer_tokens"], y=evals[metric], mode="lines+markers",
                                        name=Path(run_dir).name))
        for _, row in df[df["kind"] == "phase_end"].iterrows():
            fig.add_vline(x=row["active_layer_tokens"], line_dash="dot", line_color="gray",
                          annotation_text=f"depth {row['depth']}", annotation_position="top left")
    fig.update_layout(xaxis_title="student active-layer tokens (tokens x active depth)",
                      yaxis_title=f"{metric} (nats/token)", template="plotly_white", height=420)
    return fig
