"""Static figures (matplotlib): what a person would rather look at than read. Each returns its figure, and saves
it as a PNG when given a path, so the same picture appears in a notebook, a run folder and the README."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure


def plot_training(metrics: pd.DataFrame, optimum: float | None = None, path: str | Path | None = None) -> Figure:
    """Reward (mean ± std) per step, and held-out success and turns per evaluation, with the optimum if known."""
    train = metrics[~metrics.get("eval_only", pd.Series(False, index=metrics.index)).astype(bool)]
    evals = metrics.dropna(subset=["eval_success"]) if "eval_success" in metrics else metrics.iloc[0:0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    if not train.empty:
        steps = train["step"] + 1
        left.plot(steps, train["reward_mean"], label="reward (judge), mean")
        left.fill_between(
            steps,
            train["reward_mean"] - train["reward_std"],
            train["reward_mean"] + train["reward_std"],
            alpha=0.2,
            label="± std across trajectories",
        )
    left.set(xlabel="step", ylabel="reward", title="Training reward")
    left.legend(loc="lower right")
    if not evals.empty:
        eval_steps = evals["step"] + (~evals["eval_only"].astype(bool)).astype(int)
        right.plot(eval_steps, evals["eval_mean_turns"], "o-", color="C1", label="mean turns (held out)")
        if optimum is not None:
            right.axhline(optimum, color="k", linestyle="--", label=f"optimum {optimum:.2f}")
        twin = right.twinx()
        twin.plot(eval_steps, evals["eval_success"], "s:", color="C2", label="success (held out)")
        twin.set(ylim=(0, 1.05), ylabel="success")
        twin.legend(loc="upper right")
    right.set(xlabel="step", ylabel="turns", title="Held-out evaluation (ground truth)")
    right.legend(loc="lower left")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
