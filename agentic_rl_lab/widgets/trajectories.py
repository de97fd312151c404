"""`TrajectoryViewer(groups)`: browse groups of trajectories. Chat bubbles; what the agent saw against the hidden
truth; reward, advantage (notebooks 01, 02; also 05 and 06).

`replay` recovers the hidden truth by playing a trajectory's actions again, and `advantages_by_member` computes the
GRPO advantages shown here and in `GroupScoreboard`. `agentic_rl_lab.grpo` imports torch, so it is imported only
when advantages are computed.
"""

from __future__ import annotations

import copy
import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from agentic_rl_lab.envs import make
from agentic_rl_lab.envs.base import Environment
from agentic_rl_lab.trajectory import Trajectory, TrajectoryGroup, load_groups
from agentic_rl_lab.widgets._html import TEXT, _diverging_bar, _with_static_html, message_html

MAP_STYLE = "font-size:11px;line-height:1.1"


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
