"""`TrainingDashboard()`: live plots of a GRPO run, as a trainer callback:
`GRPOTrainer(..., callbacks=[dashboard])` (notebook 05)."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable
from typing import Any

import ipywidgets as widgets
import pandas as pd
from matplotlib.figure import Figure

from agentic_rl_lab.plots import plot_dashboard
from agentic_rl_lab.widgets._html import _format, _with_static_html


class TrainingDashboard:
    """Live plots of a GRPO run, redrawn after each step: reward mean ± std, held-out success, KL, clip fraction,
    completion length, and the time split between rollout, judge and update (`plots.plot_dashboard`).

    Pass it as a trainer callback, `GRPOTrainer(..., callbacks=[dashboard])`, or feed rows with `add(row)`.
    `rows`: rows to start from (e.g. `trainer.metrics()`, with the step-0 evaluation). `optimum`: the best
    possible mean number of turns, drawn on the held-out panel. `every`: redraw every that many rows.
    The plot is a PNG in an `Image` widget, which renders the same in JupyterLab, Colab and VS Code.

    State: `rows` (every row received), `figure` (the matplotlib figure), `redraws` (how many times it was drawn).
    """

    def __init__(
        self, rows: Iterable[dict[str, Any]] | pd.DataFrame = (), *, optimum: float | None = None, every: int = 1
    ) -> None:
        self.optimum = optimum
        self.every = max(1, every)
        self.rows: list[dict[str, Any]] = []
        self.redraws = 0
        self.figure = Figure(figsize=(13, 6))
        self.status = widgets.HTML()
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.widget = widgets.VBox([self.status, self.image])
        self.widget.add_class("arl-dashboard")
        records = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else rows
        self.rows += [dict(row) for row in records]
        self.redraw()

    def __call__(self, trainer: Any, row: dict[str, Any]) -> None:
        """The trainer-callback form: `callback(trainer, row)` after every step."""
        self.add(row)

    def add(self, row: dict[str, Any]) -> None:
        """Append one row of step metrics and redraw (every `every` rows)."""
        self.rows.append(dict(row))
        if len(self.rows) % self.every == 0:
            self.redraw()

    def redraw(self) -> None:
        plot_dashboard(self.rows, optimum=self.optimum, figure=self.figure)
        self.image.value = self.png()
        self.status.value = self._status_html()
        self.redraws += 1

    def png(self) -> bytes:
        """The current figure as PNG bytes."""
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=72)
        return buffer.getvalue()

    def _status_html(self) -> str:
        train = [r for r in self.rows if not r.get("eval_only")]
        if not train:
            return "<i>waiting for the first training step</i>"
        last = train[-1]
        return (
            f"step {int(last.get('step', 0)) + 1}: reward {_format(last.get('reward_mean'))} "
            f"± {_format(last.get('reward_std'))}, clip fraction {_format(last.get('clip_fraction'))}, "
            f"approx KL {_format(last.get('approx_kl'), '.4f')}"
        )

    def to_html(self) -> str:
        encoded = base64.b64encode(self.png()).decode()
        return f"<div class='arl-dashboard'><p>{self.status.value}</p><img src='data:image/png;base64,{encoded}'></div>"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return _with_static_html(self.widget, self.to_html(), **kwargs)
