"""Static figures (matplotlib): what a person would rather look at than read. Each returns its figure, and saves
it as a PNG when given a path, so the same picture appears in a notebook, a run folder and the README."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure


def plot_dashboard(
    metrics: pd.DataFrame | Iterable[dict[str, Any]],
    optimum: float | None = None,
    figure: Figure | None = None,
    path: str | Path | None = None,
) -> Figure:
    """Six panels of a GRPO run, one point per step: the judge's reward (mean ± std) against the ground truth of
    the same trajectories, held-out success (and turns against the optimum), KL, clip fraction, completion length,
    and seconds spent on rollout, judge and update.

    `metrics`: the trainer's rows (`GRPOTrainer.metrics()`, or the rows its callbacks receive). Columns that are
    missing are left out, so it draws from the first row on. `figure`: draw into this figure (cleared first) instead
    of a new one; `TrainingDashboard` redraws one figure per step. The figure is not registered with pyplot, so a
    notebook shows it once, where it is returned or displayed.
    """
    frame = metrics if isinstance(metrics, pd.DataFrame) else pd.DataFrame(list(metrics))
    eval_only = frame["eval_only"].fillna(False).astype(bool) if "eval_only" in frame else pd.Series(False, frame.index)
    train = frame[~eval_only]
    steps = train["step"] + 1 if "step" in train else pd.Series(range(1, len(train) + 1), index=train.index)
    figure = figure or Figure(figsize=(13, 6))
    figure.clear()
    axes = figure.subplots(2, 3).ravel()

    def lines(ax: Any, columns: dict[str, str], title: str, ylabel: str) -> None:
        for column, label in columns.items():
            if column in train and train[column].notna().any():
                ax.plot(steps, train[column], ".-", label=label)
        ax.set(title=title, xlabel="step", ylabel=ylabel)
        if ax.get_lines():
            ax.legend(loc="best", fontsize=8)
        else:
            ax.text(0.5, 0.5, "waiting for data", ha="center", va="center", transform=ax.transAxes, color="grey")

    reward = axes[0]  # the judge's reward beside the ground truth of the same trajectories: a gap is reward hacking
    truth = {"train_score": "ground-truth score", "train_success": "ground-truth success"}
    lines(reward, {"reward_mean": "judge's reward", **truth}, "Reward (judge) against the ground truth", "reward")
    if {"reward_mean", "reward_std"} <= set(train) and not train.empty:
        low, high = train["reward_mean"] - train["reward_std"], train["reward_mean"] + train["reward_std"]
        reward.fill_between(steps, low, high, alpha=0.2, label="± std")
        reward.legend(loc="best", fontsize=8)

    held_out = axes[1]
    evals = frame.dropna(subset=["eval_success"]) if "eval_success" in frame else frame.iloc[0:0]
    if not evals.empty:  # an evaluation after step k is drawn at k; the one before training at 0
        eval_steps = evals["step"] + (~eval_only[evals.index]).astype(int)
        held_out.plot(eval_steps, evals["eval_success"], "s-", color="C2", label="held-out success")
        held_out.set(ylim=(0, 1.3), yticks=[0, 0.2, 0.4, 0.6, 0.8, 1.0])  # room above 100% for the legends
        held_out.legend(loc="upper left", fontsize=8)
        if "eval_mean_turns" in evals:
            turns = held_out.twinx()
            turns.plot(eval_steps, evals["eval_mean_turns"], "o:", color="C1", label="held-out mean turns")
            if optimum is not None:
                turns.axhline(optimum, color="k", linestyle="--", linewidth=1, label=f"optimum {optimum:.2f} turns")
            low = min(evals["eval_mean_turns"].min(), optimum if optimum is not None else float("inf"))
            span = (evals["eval_mean_turns"].max() - low) or 1.0
            turns.set(ylabel="turns", ylim=(low - 0.1 * span, low + 1.4 * span))  # the top quarter for the legend
            turns.legend(loc="upper right", fontsize=8)
    else:
        held_out.text(0.5, 0.5, "no evaluation yet", ha="center", va="center", transform=held_out.transAxes)
    held_out.set(title="Held-out success (ground truth)", xlabel="step", ylabel="success")

    lines(axes[2], {"approx_kl": "approx KL(π_old ‖ π_θ)", "kl": "KL(π_θ ‖ π_ref)"}, "KL", "nats per token")
    lines(axes[3], {"clip_fraction": "clip fraction"}, "Clipped tokens", "fraction of assistant tokens")
    lines(axes[4], {"completion_tokens": "sampled tokens per trajectory"}, "Completion length", "tokens")

    timing = axes[5]
    bottom = pd.Series(0.0, index=train.index)
    for column, label in (("seconds_rollout", "rollout"), ("seconds_judge", "judge"), ("seconds_update", "update")):
        if column in train and train[column].notna().any():
            timing.bar(steps, train[column].fillna(0.0), bottom=bottom, label=label)
            bottom = bottom + train[column].fillna(0.0)
    timing.set(title="Time per step", xlabel="step", ylabel="seconds")
    if timing.patches:
        timing.set_ylim(0, 1.3 * float(bottom.max()) or 1.0)  # room for the legend above the bars
        timing.legend(loc="upper center", ncol=3, fontsize=8)
    else:
        timing.text(0.5, 0.5, "waiting for data", ha="center", va="center", transform=timing.transAxes, color="grey")
    figure.tight_layout()
    if path is not None:
        figure.savefig(path, dpi=110)
    return figure
