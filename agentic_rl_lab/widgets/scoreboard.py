"""`GroupScoreboard(group)`: how the judge ranked one group. Per member: judge score against ground truth, rank,
advantage, length, permutations (notebook 03).

`agentic_rl_lab.judge` imports an HTTP client, so the scoreboard imports it when it is built.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from agentic_rl_lab.trajectory import TrajectoryGroup
from agentic_rl_lab.widgets._html import POSITIVE, TEXT, _bar, _diverging_bar, _format, _with_static_html
from agentic_rl_lab.widgets.trajectories import advantages_by_member


class GroupScoreboard:
    """One row per member of a judged group: the judge's score against the ground truth (inline bars), its rank
    under each, the GRPO advantage, the length, and each permutation's score at the position it was shown.

    State: `rows` (one dict per member, in member order: `member`, `judge_score`, `scores`, `positions`, `truth`,
    `success`, `rank`, `truth_rank`, `advantage`, `turns`, `length`), `permutations`, `spearman` (judge against
    truth in this group), `table.value` (HTML; each row carries `data-member`). `sort(by)` reorders the table.
    """

    SORT_KEYS = {"member": "member", "judge score": "judge_score", "ground truth": "truth", "advantage": "advantage"}

    def __init__(self, group: TrajectoryGroup, *, scale_rewards: str = "group", sort_by: str = "member") -> None:
        from agentic_rl_lab.judge.diagnostics import ranks, spearman  # imports the judge package (an HTTP client)
        from agentic_rl_lab.judge.prompt import transcript_length

        if not group.trajectories:
            raise ValueError(f"group {group.env} seed={group.seed} has no trajectories to score")
        self.group = group
        advantages, no_signal = advantages_by_member([group], scale_rewards)
        judge_scores = [t.reward for t in group.trajectories]
        truth = [t.outcome.score if t.outcome else None for t in group.trajectories]
        judged = all(s is not None for s in judge_scores)
        rank = _best_first(ranks(judge_scores)) if judged else [None] * len(judge_scores)
        has_truth = all(s is not None for s in truth)
        truth_rank = _best_first(ranks(truth)) if has_truth else [None] * len(truth)
        self.spearman = spearman(judge_scores, truth) if judged and has_truth else None
        self.rows: list[dict[str, Any]] = []
        for m, trajectory in enumerate(group.trajectories):
            verdict = trajectory.metadata.get("judge", {})
            self.rows.append(
                {
                    "member": m,
                    "judge_score": trajectory.reward,
                    "scores": list(verdict.get("scores", [])),
                    "positions": list(verdict.get("positions", [])),
                    "truth": truth[m],
                    "success": trajectory.outcome.success if trajectory.outcome else None,
                    "rank": rank[m],
                    "truth_rank": truth_rank[m],
                    "advantage": 0.0 if 0 in no_signal else advantages.get((0, m)),
                    "turns": trajectory.num_turns,
                    "length": transcript_length(trajectory.messages),
                }
            )
        self.permutations = max((len(row["scores"]) for row in self.rows), default=0)
        self.record = group.metadata.get("judge") or {}
        self.summary = widgets.HTML(TEXT.format(self._summary_html()))
        self.sorter = widgets.ToggleButtons(options=list(self.SORT_KEYS), value=sort_by, description="sort by")
        self.sorter.observe(lambda change: self.sort(change["new"]), names="value")
        self.table = widgets.HTML(layout=widgets.Layout(overflow="auto"))
        self.widget = widgets.VBox([self.summary, self.sorter, self.table])
        self.widget.add_class("arl-scoreboard")
        self.sort(sort_by)

    def sort(self, by: str) -> None:
        """Reorder the table by "member", "judge score", "ground truth" or "advantage" (best first)."""
        key = self.SORT_KEYS[by]
        if self.sorter.value != by:
            self.sorter.value = by  # its observer calls sort(by) again, with the buttons in step
            return
        descending = key != "member"
        ordered = sorted(self.rows, key=lambda row: _sort_value(row[key], descending))
        self.table.value = TEXT.format(self._table_html(ordered))

    def _summary_html(self) -> str:
        if not self.record:
            return f"<b>{self.group.env} seed={self.group.seed}</b>: <i>not judged yet</i>"
        text = (
            f"<b>{self.group.env} seed={self.group.seed}</b>: {self.record.get('judge')} judge "
            f"({html.escape(str(self.record.get('model')))}), {self.permutations} permutation(s)"
        )
        if self.record.get("position_consistency") is not None:
            text += f", position consistency {self.record['position_consistency']:.2f}"
        if self.spearman is not None:
            text += f", Spearman ρ against the ground truth {_format(self.spearman, '.2f')}"
        return text

    def _table_html(self, rows: list[dict[str, Any]]) -> str:
        scale = max([abs(r["advantage"]) for r in self.rows if r["advantage"] is not None] + [1e-9])
        head = ["member", "judge / truth", "rank", "advantage", "turns", "length"]
        head += [f"perm. {k}" for k in range(self.permutations)]
        cell = "<td style='padding:2px 8px;white-space:nowrap'>{}</td>"
        body = ["<tr>" + "".join(f"<th style='text-align:left;padding:2px 8px'>{h}</th>" for h in head) + "</tr>"]
        for row in rows:
            judge = _bar(row["judge_score"], POSITIVE, label=f"judge {_format(row['judge_score'])}")
            truth = _bar(row["truth"], "#6b7280", label=f"truth {_format(row['truth'])}")
            success = {True: " ✓", False: " ✗"}.get(row["success"], "")
            cells = [
                f"{row['member']}{success}",
                f"{judge}<br>{truth}",
                f"{_format(row['rank'], 'g')} / {_format(row['truth_rank'], 'g')}",
                _diverging_bar(row["advantage"], scale),
                row["turns"],
                f"{row['length']} chars",
            ]
            cells += [f"{s:.2f} @ {p}" for s, p in zip(row["scores"], row["positions"])]
            body.append(
                f"<tr class='arl-member' data-member='{row['member']}'>{''.join(cell.format(c) for c in cells)}</tr>"
            )
        note = "<small>rank: by the judge / by the ground truth, 1 = best."
        if self.permutations:
            note += " perm. k: the score in permutation k @ the position it was shown at (0 = first)."
        table = f"<table class='arl-scoreboard-table' style='border-collapse:collapse'>{''.join(body)}</table>"
        return table + note + "</small>"

    def to_html(self) -> str:
        return f"<div class='arl-scoreboard'><p>{self.summary.value}</p>{self.table.value}</div>"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return _with_static_html(self.widget, self.to_html(), **kwargs)


def _best_first(ascending_ranks: list[float]) -> list[float]:
    """Turn ranks where 1 is the lowest value into ranks where 1 is the highest (ties keep sharing a rank)."""
    return [len(ascending_ranks) + 1 - r for r in ascending_ranks]


def _sort_value(value: float | None, descending: bool) -> tuple[bool, float]:
    """Sort key that puts missing values last."""
    if value is None:
        return (True, 0.0)
    return (False, -value if descending else value)
