"""Interactive views for notebooks (ipywidgets). Look rather than read.

| viewer | what it shows | used in |
| --- | --- | --- |
| `EnvironmentPlayer(env, seed)` | be the agent: one form per tool, the hidden state behind a toggle | 01 |
| `TrajectoryViewer(groups)` | chat bubbles; what the agent saw against the hidden truth; reward, advantage | 01, 02 |
| `GroupScoreboard(group)` | per member: judge score against ground truth, rank, advantage, length, permutations | 03 |
| `TokenView(trajectory, tokenizer)` | each token of the training sequence: loss mask, advantage or ratio | 04 |
| `TrainingDashboard()` | live plots of a GRPO run: `GRPOTrainer(..., callbacks=[dashboard])` | 05 |

How to use any of them:
- Put the viewer last in a cell (or `display(viewer)`). `viewer.widget` is its ipywidgets tree.
- `viewer.to_html()` is a static rendering. It travels with the widget as `text/html`, so GitHub, nbviewer and
  CI logs, where widgets are not live, still show the view as it was when the cell ran.
- Each class docstring lists the attributes that hold its state (`num_bubbles`, `colours`, `rows`...): tests and
  exercises assert on them instead of on pixels.

`agentic_rl_lab.grpo` imports torch and `agentic_rl_lab.judge` an HTTP client, so the viewers import them when they
need them, and `import agentic_rl_lab.widgets` stays quick.
"""

from __future__ import annotations

import base64
import copy
import html
import io
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pandas as pd
from matplotlib.figure import Figure

from agentic_rl_lab.envs import make
from agentic_rl_lab.envs.base import Environment, Message, tool_call_message
from agentic_rl_lab.plots import plot_dashboard
from agentic_rl_lab.trajectory import Trajectory, TrajectoryGroup, load_groups

ROLE_COLOURS = {"system": "#eeeeee", "user": "#dbeafe", "assistant": "#dcfce7", "tool": "#fef3c7"}
MASK_COLOURS = {"context": "#e5e7eb", "assistant": "#86efac"}
"""TokenView's loss-mask colours: grey for context (no loss), green for the sampled tokens that are trained."""
MASK_UNDERLINE = "#16a34a"
POSITIVE, NEGATIVE = "#2563eb", "#dc2626"
"""Diverging colours for advantages and ratios: blue above the neutral value, red below."""
MAP_STYLE = "font-size:11px;line-height:1.1"
TEXT = "<div style='line-height:1.4'>{}</div>"
"""Wraps the HTML of a view: ipywidgets' `HTML` sets a line height for one-line labels, far too tall for text."""


def message_html(message: Message) -> str:
    """One message as a chat bubble: role, text, and any tool calls set apart in monospace. A tool result is
    indented under the call it answers, in monospace, so actions and observations never blur together."""
    role = message.get("role", "?")
    parts = [f"<b>{html.escape(role)}</b>"]
    if role == "tool":
        parts.append(f"<small>↳ result of {html.escape(str(message.get('tool_call_id', '?')))}</small><br>")
        parts.append(f"<code style='white-space:pre-wrap'>{html.escape(str(message.get('content', '')))}</code>")
    elif message.get("content"):
        parts.append(html.escape(str(message["content"])))
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        text = f"{function.get('name')}({function.get('arguments')})"
        parts.append(f"<code style='background:#fff;padding:1px 4px'>→ {html.escape(str(text))}</code>")
    indent = "margin:3px 0 3px 2em" if role == "tool" else "margin:3px 0"
    style = f"background:{ROLE_COLOURS.get(role, '#f5f5f5')};border-radius:8px;padding:4px 8px;{indent}"
    return f"<div class='arl-bubble arl-{html.escape(role)}' style='{style}'>{' '.join(parts)}</div>"


def _with_static_html(widget: widgets.Widget, static_html: str, **kwargs: Any) -> dict[str, Any]:
    """The widget's display bundle plus a static `text/html` copy. A live frontend renders the widget; GitHub and
    nbviewer cannot, and show the HTML instead."""
    bundle = widget._repr_mimebundle_(**kwargs)
    bundle["text/html"] = static_html
    return bundle


def _format(value: float | None, spec: str = ".3f") -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _blend(colour: str, strength: float) -> str:
    """`colour` mixed into white: strength 0 gives white, 1 the colour itself."""
    strength = min(1.0, max(0.0, strength))
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(255 + (c - 255) * strength):02x}" for c in rgb)


def _bar(value: float | None, colour: str, scale: float = 1.0, label: str = "") -> str:
    """An inline horizontal bar, `value / scale` of a 100px track."""
    width = 0 if value is None or math.isnan(value) else round(100 * min(1.0, max(0.0, value / scale)))
    track = "display:inline-block;width:100px;height:10px;background:#f3f4f6;vertical-align:middle"
    fill = f"display:block;width:{width}px;height:10px;background:{colour}"
    return f"<span style='{track}'><span style='{fill}'></span></span> {label}"


def _diverging_bar(value: float | None, scale: float) -> str:
    """An inline bar centred on 0: right and blue when positive, left and red when negative."""
    if value is None or math.isnan(value):
        return "—"
    half = round(60 * min(1.0, abs(value) / scale)) if scale > 0 else 0
    left = 60 - half if value < 0 else 60
    colour = NEGATIVE if value < 0 else POSITIVE
    track = "position:relative;display:inline-block;width:120px;height:10px;background:#f3f4f6;vertical-align:middle"
    fill = f"position:absolute;left:{left}px;width:{half}px;height:10px;background:{colour}"
    axis = "position:absolute;left:60px;width:1px;height:10px;background:#111"
    return f"<span style='{track}'><span style='{fill}'></span><span style='{axis}'></span></span> {value:+.2f}"


# ----- EnvironmentPlayer: be the agent ----------------------------------------------------------------------------
def _field_for(name: str, schema: dict[str, Any]) -> widgets.Widget:
    """An input widget for one tool argument, chosen from its JSON schema."""
    if "enum" in schema:
        return widgets.Dropdown(options=schema["enum"], description=name)
    if schema.get("type") == "integer":
        return widgets.IntText(description=name)
    if schema.get("type") == "array":
        return widgets.Text(description=name, placeholder="comma, separated")
    return widgets.Text(description=name)


class EnvironmentPlayer:
    """Play an environment by hand. `player.widget` is the UI; `player.call(tool, **arguments)` does the same
    as filling a form and pressing its button, for scripts and tests."""

    def __init__(self, env: Environment, seed: int = 0) -> None:
        self.env = env
        self.history: list[Message] = env.reset(seed)
        self.chat = widgets.HTML()
        self.hidden = widgets.HTML()
        self.reveal = widgets.ToggleButton(description="reveal hidden state", value=False, icon="eye")
        self.reveal.observe(lambda _: self._render(), names="value")
        self.forms = [self._form(tool.schema()["function"]) for tool in env.tools]
        self.widget = widgets.VBox([*self.forms, self.chat, self.reveal, self.hidden])
        self._render()

    def _form(self, function: dict[str, Any]) -> widgets.Widget:
        properties = function["parameters"].get("properties", {})
        fields = {name: _field_for(name, schema) for name, schema in properties.items()}
        button = widgets.Button(description=function["name"], button_style="primary")

        def on_click(_: Any) -> None:
            arguments = {}
            for name, field in fields.items():
                value = field.value
                if properties[name].get("type") == "array":
                    value = [part.strip() for part in value.split(",") if part.strip()]
                arguments[name] = value
            self.call(function["name"], **arguments)

        button.on_click(on_click)
        return widgets.HBox([button, *fields.values()])

    def call(self, tool: str, **arguments: Any) -> list[Message]:
        """Send one tool call as the agent's action; return the observation."""
        if self.env.done:
            return []
        action = tool_call_message(tool, arguments, call_id=f"call_{self.env.turn}")
        result = self.env.step(action)
        self.history += [action, *result.observation]
        self._render()
        return result.observation

    def _render(self) -> None:
        status = f"<i>turn {self.env.turn}/{self.env.max_turns}{' — episode over' if self.env.done else ''}</i>"
        self.chat.value = "".join(message_html(m) for m in self.history) + status
        if self.reveal.value or self.env.done:
            state = json.dumps(self.env.hidden_state(), default=str, indent=1)
            outcome = f"<br><b>outcome</b>: {html.escape(str(self.env.outcome()))}" if self.env.done else ""
            self.hidden.value = (
                f"<b>hidden state</b> (never shown to the agent):<pre>{html.escape(state)}</pre>{outcome}"
            )
        else:
            self.hidden.value = "<i>hidden state concealed: the agent never sees it</i>"

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


# ----- TrajectoryViewer: browse groups ----------------------------------------------------------------------------
def replay(trajectory: Trajectory, env: Environment | None = None) -> Environment:
    """Play a trajectory's actions again in a fresh environment, to recover the hidden state the agent faced.

    Environments are deterministic given the seed and the actions, so this needs nothing but the trajectory.
    Every observation must come back as recorded; if one does not, the trajectory came from an environment built
    with other settings, and a `ValueError` says so. `env` is a template for such an environment (not modified).
    """
    env = copy.deepcopy(env) if env is not None else make(trajectory.env)
    messages = trajectory.messages
    opening = env.reset(trajectory.seed)
    if messages[: len(opening)] != opening:
        raise ValueError(
            f"the opening of {trajectory.env} seed={trajectory.seed} differs from the recorded one: the environment "
            "was built with other settings; pass env=<an environment built like that one>"
        )
    k = len(opening)
    while k < len(messages):
        if messages[k].get("role") != "assistant" or env.done:
            raise ValueError(f"message {k} of the trajectory is not where the replayed episode has an action")
        observation = env.step(messages[k]).observation
        if messages[k + 1 : k + 1 + len(observation)] != observation:
            raise ValueError(f"the replayed observation after message {k} differs from the recorded one")
        k += 1 + len(observation)
    return env


def advantages_by_member(
    groups: Sequence[TrajectoryGroup], scale_rewards: str = "group"
) -> tuple[dict[tuple[int, int], float], set[int]]:
    """GRPO advantages of every judged group, keyed by (group index, member index), and the groups dropped for
    carrying no signal (all rewards equal). Groups with an unjudged member are left out: no reward, no advantage."""
    judged = [
        index
        for index, group in enumerate(groups)
        if group.trajectories and all(t.reward is not None and math.isfinite(t.reward) for t in group.trajectories)
    ]
    if not judged:
        return {}, set()
    from agentic_rl_lab.grpo.advantages import compute_advantages  # imports torch through agentic_rl_lab.grpo

    result = compute_advantages([groups[g] for g in judged], scale_rewards=scale_rewards)
    values = {(judged[item.group], item.member): item.advantage for item in result.trajectories}
    return values, {judged[g] for g in result.zero_advantage_groups}


class TrajectoryViewer:
    """Browse groups of trajectories: chat bubbles on the left; on the right what the agent saw against the
    hidden truth, then the reward, the judge's explanation and the advantage.

    `groups`: a group, a list of groups, or the path of a JSONL file of groups (`trajectory.append_groups`).
    `env`: a template environment, needed only for trajectories of an environment built with non-default settings
    (the hidden truth is recovered by replaying the actions, see `replay`). `scale_rewards`: as in GRPO.

    State: `group_index`, `member_index`, `trajectory`, `num_bubbles` (bubbles shown), `advantage` (None when the
    group is not judged), `hidden` (the replayed hidden state, or None), `chat.value` and `side.value` (HTML).
    `next()`, `previous()` and `show(group, member)` do what the buttons and dropdowns do.
    """

    def __init__(
        self,
        groups: TrajectoryGroup | Sequence[TrajectoryGroup] | str | Path,
        *,
        env: Environment | None = None,
        scale_rewards: str = "group",
    ) -> None:
        if isinstance(groups, (str, Path)):
            groups = load_groups(groups)
        elif isinstance(groups, TrajectoryGroup):
            groups = [groups]
        self.groups = list(groups)
        self.order = [(g, m) for g, group in enumerate(self.groups) for m in range(len(group.trajectories))]
        if not self.order:
            raise ValueError("these groups hold no trajectories to show (every rollout failed, or the list is empty)")
        self.env = env
        self.advantages, self.no_signal = advantages_by_member(self.groups, scale_rewards)
        self.group_index, self.member_index = self.order[0]
        self.hidden: dict[str, Any] | None = None
        self.num_bubbles = 0
        self._updating = False

        self.group_picker = widgets.Dropdown(
            options=[(self._group_label(g), g) for g in range(len(self.groups))], description="group"
        )
        self.member_picker = widgets.Dropdown(description="trajectory")
        self.previous_button = widgets.Button(description="◀ previous", tooltip="previous trajectory")
        self.next_button = widgets.Button(description="next ▶", tooltip="next trajectory")
        self.position = widgets.HTML()
        self.position.add_class("arl-position")
        self.chat = widgets.HTML(layout=widgets.Layout(width="58%", max_height="520px", overflow="auto"))
        self.side = widgets.HTML(layout=widgets.Layout(width="42%", max_height="520px", overflow="auto"))
        self.group_picker.observe(lambda change: self._picked(change["new"], 0), names="value")
        self.member_picker.observe(lambda change: self._picked(self.group_index, change["new"]), names="value")
        self.previous_button.on_click(lambda _: self.previous())
        self.next_button.on_click(lambda _: self.next())
        controls = widgets.HBox([self.previous_button, self.next_button, self.group_picker, self.member_picker])
        self.widget = widgets.VBox([controls, self.position, widgets.HBox([self.chat, self.side])])
        self.widget.add_class("arl-trajectory-viewer")
        self.show(*self.order[0])

    @property
    def trajectory(self) -> Trajectory:
        """The trajectory on screen."""
        return self.groups[self.group_index].trajectories[self.member_index]

    @property
    def advantage(self) -> float | None:
        """The advantage of the trajectory on screen: 0 in a group without signal, None if not judged."""
        if self.group_index in self.no_signal:
            return 0.0
        return self.advantages.get((self.group_index, self.member_index))

    def next(self) -> None:
        """Show the next trajectory, moving on to the next group after a group's last member."""
        at = self.order.index((self.group_index, self.member_index))
        self.show(*self.order[(at + 1) % len(self.order)])

    def previous(self) -> None:
        at = self.order.index((self.group_index, self.member_index))
        self.show(*self.order[(at - 1) % len(self.order)])

    def show(self, group: int, member: int) -> None:
        """Show member `member` of group `group` (indices into `groups` and its `trajectories`)."""
        if (group, member) not in self.order:
            raise IndexError(f"there is no trajectory {member} in group {group}")
        self.group_index, self.member_index = group, member
        self._updating = True  # setting the dropdowns below must not trigger another show()
        try:
            self.group_picker.value = group
            self.member_picker.options = [
                (self._member_label(group, m), m) for m in range(len(self.groups[group].trajectories))
            ]
            self.member_picker.value = member
        finally:
            self._updating = False
        trajectory = self.trajectory
        self.num_bubbles = len(trajectory.messages)
        self.chat.value = TEXT.format("".join(message_html(m) for m in trajectory.messages))
        self.side.value = TEXT.format(self._side_html(trajectory))
        self.position.value = (
            f"group {group + 1}/{len(self.groups)} · trajectory {member + 1}/{len(self.groups[group].trajectories)}"
        )

    def _picked(self, group: int, member: int) -> None:
        if self._updating or group is None or member is None:
            return
        if not self.groups[group].trajectories:
            self.chat.value = f"<i>group {group} has no trajectories: {len(self.groups[group].exceptions)} failed</i>"
            return
        self.show(group, member if member < len(self.groups[group].trajectories) else 0)

    def _group_label(self, g: int) -> str:
        group = self.groups[g]
        failed = f", {len(group.exceptions)} failed" if group.exceptions else ""
        return f"{g}: {group.env} seed={group.seed} ({len(group.trajectories)}{failed})"

    def _member_label(self, g: int, m: int) -> str:
        reward = self.groups[g].trajectories[m].reward
        return f"{m}" + ("" if reward is None else f" · reward {reward:.2f}")

    def _side_html(self, trajectory: Trajectory) -> str:
        parts = [self._truth_html(trajectory), self._judge_html(trajectory), self._advantage_html()]
        return "".join(parts) + _facts_html(trajectory)

    def _truth_html(self, trajectory: Trajectory) -> str:
        """What the agent saw (its observations) against the hidden state, recovered by replaying the episode."""
        roles = [m.get("role") for m in trajectory.messages]
        first_action = roles.index("assistant") if "assistant" in roles else len(roles)
        observations = [m for m in trajectory.messages[first_action:] if m.get("role") in ("tool", "user")]
        last = html.escape(str(observations[-1].get("content", ""))[:300]) if observations else "—"
        saw = f"{len(observations)} observations; the last: <code style='white-space:pre-wrap'>{last}</code>"
        try:
            env = replay(trajectory, self.env)
            self.hidden = env.hidden_state()
        except Exception as exc:  # a custom or differently configured environment: say so, show the outcome only
            self.hidden, env = None, None
            hidden = f"<i>could not replay the episode: {html.escape(str(exc))}</i>"
        else:
            maps = {k: v for k, v in self.hidden.items() if isinstance(v, str) and "\n" in v}
            rest = {k: v for k, v in self.hidden.items() if k not in maps}
            text = json.dumps(rest, default=str)
            text = text if len(text) < 400 else text[:400] + " …"
            hidden = "".join(f"<pre style='{MAP_STYLE}'>{html.escape(v)}</pre>" for v in maps.values())
            hidden += f"<code style='white-space:pre-wrap'>{html.escape(text)}</code><br>"
        if env is not None and hasattr(env, "render_seen"):  # fog_maze: the map as far as the agent has seen it
            saw += f"<pre style='{MAP_STYLE}'>{html.escape(env.render_seen())}</pre>"
        outcome = trajectory.outcome
        truth = f"success={outcome.success}, {outcome.num_steps} steps, score {outcome.score:.3f}" if outcome else "—"
        return (
            "<div class='arl-truth'><b>What the agent saw</b><br>"
            f"{saw}<br><b>The hidden truth</b> (never shown to the agent)<br>{hidden}"
            f"<b>ground truth</b>: {truth}</div>"
        )

    def _judge_html(self, trajectory: Trajectory) -> str:
        verdict = trajectory.metadata.get("judge")
        if trajectory.reward is None:
            return "<p><b>reward</b>: <i>not judged yet</i></p>"
        text = f"<p><b>reward</b>: {trajectory.reward:.3f}"
        if verdict:
            judge, model = html.escape(str(verdict.get("judge"))), html.escape(str(verdict.get("model")))
            text += f" from the {judge} judge ({model})"
            scores = verdict.get("scores") or []
            if len(scores) > 1:
                per = ", ".join(f"{s:.2f} at position {p}" for s, p in zip(scores, verdict.get("positions", [])))
                text += f"<br>{len(scores)} permutations: {per}"
            explanation = html.escape(str(verdict.get("explanation", "")))
            text += f"<br><b>judge's explanation</b>: <i>{explanation}</i>"
        return text + "</p>"

    def _advantage_html(self) -> str:
        if self.group_index in self.no_signal:
            return "<p><b>advantage</b>: 0 (every reward in this group is equal: no signal, the group is dropped)</p>"
        advantage = self.advantage
        if advantage is None:
            return "<p><b>advantage</b>: <i>needs a reward for every member of the group</i></p>"
        rewards = [t.reward for t in self.groups[self.group_index].trajectories]
        mean = sum(rewards) / len(rewards)
        return (
            f"<p><b>advantage</b>: {_diverging_bar(advantage, 2.0)} "
            f"<small>(reward {self.trajectory.reward:.3f} against the group mean {mean:.3f})</small></p>"
        )

    def to_html(self) -> str:
        """The trajectory on screen, statically: position, bubbles, and the side panel."""
        return (
            f"<div class='arl-trajectory-viewer'><p>{self.position.value} <i>(static view)</i></p>"
            f"<div style='display:flex;gap:12px'><div style='flex:58%'>{self.chat.value}</div>"
            f"<div style='flex:42%'>{self.side.value}</div></div></div>"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return _with_static_html(self.widget, self.to_html(), **kwargs)


def _facts_html(trajectory: Trajectory) -> str:
    kinds = ", ".join(sorted({e.kind for e in trajectory.errors}))
    tokens = sum(len(c.token_ids) for c in trajectory.completions)
    return (
        f"<p><small>{trajectory.num_turns} turns · {len(trajectory.errors)} invalid actions"
        f"{f' ({kinds})' if kinds else ''} · {tokens} sampled tokens</small></p>"
    )


# ----- GroupScoreboard: how the judge ranked one group -------------------------------------------------------------
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


# ----- TokenView: what the loss sees --------------------------------------------------------------------------------
class TokenView:
    """Every token of a trajectory's training sequence (`grpo.tensors.trajectory_to_sequence`), coloured by the
    loss mask: green where the policy sampled the token (a loss is taken), grey on context (system, user, tool
    and template tokens, never trained on).

    `advantages`: one number for the whole trajectory, one per assistant turn, one per assistant token, or one
    per token of the sequence. `ratios`: probability ratios π_θ/π_old after an update, one per assistant token or
    one per token; tokens outside [1 - epsilon, 1 + epsilon] (where clipping can act) get a black outline. Both
    colour only assistant tokens: context keeps its grey, because it has no loss to weight.

    State: `tokens` (each token's text), `token_ids`, `mask` (the assistant mask), `turn`, `mode` ("loss mask",
    "advantage" or "ratio"), `values` (per token, None on context), `colours` (one CSS colour per token),
    `outlined` (ratio mode: outside the clip range). `show(mode)` switches the colouring.
    """

    def __init__(
        self,
        trajectory: Trajectory,
        tokenizer: Any,
        advantages: float | Sequence[float] | Any | None = None,
        ratios: Sequence[float] | Any | None = None,
        *,
        epsilon: float = 0.2,
        mode: str | None = None,
    ) -> None:
        from agentic_rl_lab.grpo.tensors import trajectory_to_sequence  # imports torch

        sequence = trajectory_to_sequence(trajectory, tokenizer)
        self.token_ids = list(sequence.input_ids)
        self.mask = list(sequence.assistant_mask)
        self.turn = list(sequence.turn)
        self.tokens = [tokenizer.decode([token_id]) for token_id in self.token_ids]
        self.epsilon = epsilon
        self.layers: dict[str, list[float | None] | None] = {"loss mask": None}
        if advantages is not None:
            self.layers["advantage"] = self._per_token(advantages, "advantages", per_turn=True)
        if ratios is not None:
            self.layers["ratio"] = self._per_token(ratios, "ratios", per_turn=False)
        mode = mode or list(self.layers)[-1]
        self.picker = widgets.ToggleButtons(options=list(self.layers), value=mode, description="colour by")
        self.picker.observe(lambda change: self.show(change["new"]), names="value")
        self.legend = widgets.HTML()
        self.text = widgets.HTML(layout=widgets.Layout(max_height="420px", overflow="auto"))
        self.widget = widgets.VBox([self.picker, self.legend, self.text])
        self.widget.add_class("arl-token-view")
        self.show(mode)

    def _per_token(self, values: Any, name: str, per_turn: bool) -> list[float | None]:
        """Spread `values` over the tokens of the sequence: context tokens get None."""
        if hasattr(values, "tolist"):  # a tensor or an array
            values = values.tolist()
        if isinstance(values, (int, float)):
            values = [float(values)] * sum(self.mask)
        values = [float(v) for v in values]
        assistant = [i for i, m in enumerate(self.mask) if m]
        turns = max(self.turn) + 1
        if len(values) == len(self.tokens):
            return [v if m else None for v, m in zip(values, self.mask)]
        if len(values) == len(assistant):
            spread: list[float | None] = [None] * len(self.tokens)
            for i, v in zip(assistant, values):
                spread[i] = v
            return spread
        if per_turn and len(values) == turns:
            return [values[t] if m else None for t, m in zip(self.turn, self.mask)]
        expected = f"{len(self.tokens)} (every token) or {len(assistant)} (assistant tokens)"
        expected += f" or {turns} (assistant turns)" if per_turn else ""
        raise ValueError(f"got {len(values)} {name} for a sequence that needs {expected}")

    def show(self, mode: str) -> None:
        """Colour the tokens by "loss mask", "advantage" or "ratio" (the last two when given)."""
        if mode not in self.layers:
            raise ValueError(f"no {mode!r} colouring; this view has {list(self.layers)}")
        if self.picker.value != mode:
            self.picker.value = mode  # its observer calls show(mode) again, with the buttons in step
            return
        self.mode = mode
        self.values = self.layers[mode] or [None] * len(self.tokens)
        self.outlined = [False] * len(self.tokens)
        self.colours = []
        finite = [abs(v) for v in self.values if v is not None and math.isfinite(v)]
        scale = max(finite + [1e-9]) if mode == "advantage" else math.log1p(2 * self.epsilon)
        for i, (m, value) in enumerate(zip(self.mask, self.values)):
            if not m:
                self.colours.append(MASK_COLOURS["context"])
            elif mode == "advantage" and value is not None:
                self.colours.append(_blend(POSITIVE if value >= 0 else NEGATIVE, abs(value) / scale))
            elif mode == "ratio" and value is not None:
                log_ratio = math.log(max(value, 1e-12))
                self.colours.append(_blend(POSITIVE if log_ratio >= 0 else NEGATIVE, abs(log_ratio) / scale))
                self.outlined[i] = not 1 - self.epsilon <= value <= 1 + self.epsilon
            else:
                self.colours.append(MASK_COLOURS["assistant"])
        self.legend.value = TEXT.format(self._legend_html())
        self.text.value = self._tokens_html()

    def _legend_html(self) -> str:
        trained = sum(self.mask)
        swatch = "display:inline-block;width:12px;height:12px;vertical-align:middle;background:{}"
        context = f"<span style='{swatch.format(MASK_COLOURS['context'])}'></span> context: no loss"
        counts = f"{len(self.tokens)} tokens: {trained} trained (assistant), {len(self.tokens) - trained} context. "
        if self.mode == "loss mask":
            return counts + f"<span style='{swatch.format(MASK_COLOURS['assistant'])}'></span> trained · {context}"
        if self.mode == "advantage":
            return counts + f"blue: advantage > 0 (made more likely), red: < 0 (less likely) · {context}"
        return counts + (
            f"blue: ratio > 1, red: < 1; outlined: outside [{1 - self.epsilon:g}, {1 + self.epsilon:g}], "
            f"where clipping can act · {context}"
        )

    def _tokens_html(self) -> str:
        spans = []
        for i, (token, colour) in enumerate(zip(self.tokens, self.colours)):
            kind = "assistant" if self.mask[i] else "context"
            value = self.values[i]
            title = f"#{i} id={self.token_ids[i]} {kind}" + ("" if value is None else f" {self.mode}={value:.3f}")
            outline = "outline:2px solid #000;" if self.outlined[i] else ""
            if self.mask[i]:  # a green underline keeps the loss mask visible under every colouring
                outline += f"border-bottom:2px solid {MASK_UNDERLINE};"
            text = html.escape(token).replace("\n", "↵\n")
            spans.append(
                f"<span class='arl-token arl-{kind}' title='{html.escape(title)}' "
                f"style='background:{colour};{outline}border-radius:2px;margin:0 1px'>{text}</span>"
            )
        style = "font-family:monospace;font-size:12px;white-space:pre-wrap;line-height:1.7"
        return f"<div style='{style}'>{''.join(spans)}</div>"

    def to_html(self) -> str:
        return f"<div class='arl-token-view'><p>{self.legend.value}</p>{self.text.value}</div>"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return _with_static_html(self.widget, self.to_html(), **kwargs)


# ----- TrainingDashboard: live plots of a run -----------------------------------------------------------------------
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
