"""Trajectories: the unit that agentic RL scores and trains on.

A `Trajectory` is one episode: the goal, every action and observation as OpenAI chat messages, the final
answer, and for each assistant turn the exact tokens the policy sampled. A `TrajectoryGroup` is N
trajectories of the *same* scenario (environment and seed). GRPO compares the members of a group with each
other, so the group, not the trajectory, is what a judge scores and what the trainer consumes.

Groups are stored as JSONL, one group per line, appended and fsynced one at a time so a crash loses at most
the group being written.
"""

from __future__ import annotations

import os
import traceback
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field

from agentic_rl_lab.envs.base import Message, Outcome


class Completion(BaseModel):
    """The tokens a policy sampled for one assistant turn, kept so training uses exactly what was sampled."""

    message_index: int
    """Index of the assistant message in `Trajectory.messages` that these tokens produced."""
    token_ids: list[int]
    logprobs: list[float] | None = None
    """Log-probability of each sampled token under the sampling policy (same length as `token_ids`)."""


class ActionError(BaseModel):
    """A bad action the environment answered with an error observation."""

    turn: int
    kind: str
    message: str


class Trajectory(BaseModel):
    """One episode of one scenario: messages, sampled tokens, reward and everything measured about it."""

    env: str
    seed: int
    messages: list[Message]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """The tool schemas the agent was given (OpenAI function format)."""
    completions: list[Completion] = Field(default_factory=list)
    reward: float | None = None
    """Set by a judge; `None` until the trajectory has been scored."""
    outcome: Outcome | None = None
    metrics: dict[str, float | int | bool] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    errors: list[ActionError] = Field(default_factory=list)

    @property
    def final_message(self) -> Message | None:
        """The last assistant message: the agent's final answer or final action."""
        return next((m for m in reversed(self.messages) if m.get("role") == "assistant"), None)

    @property
    def num_turns(self) -> int:
        """Number of assistant turns (actions)."""
        return sum(m.get("role") == "assistant" for m in self.messages)

    def _repr_html_(self) -> str:
        """A compact table for notebooks: the facts, then one row per message (long texts cut short)."""
        outcome = f"success={self.outcome.success}, score {self.outcome.score:.3f}" if self.outcome else "—"
        reward = "not judged" if self.reward is None else f"{self.reward:.3f}"
        title = f"<b>Trajectory</b> {self.env} seed={self.seed}: {self.num_turns} turns, reward {reward}, {outcome}"
        rows = []
        for message in self.messages:
            text = str(message.get("content") or "")
            for call in message.get("tool_calls") or []:
                function = call.get("function", {}) if isinstance(call, dict) else {}
                text += f" {function.get('name')}({function.get('arguments')})"
            rows.append({"role": message.get("role"), "text": text if len(text) <= 100 else text[:100] + " …"})
        return title + pd.DataFrame(rows).to_html(index=False)


class RecordedException(BaseModel):
    """An exception from an environment or policy, kept on the group instead of crashing the collection."""

    type: str
    message: str
    traceback: str
    member: int | None = None
    """Which member of the group failed, when known."""

    @classmethod
    def from_exception(cls, exc: BaseException, member: int | None = None) -> RecordedException:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(type=type(exc).__name__, message=str(exc), traceback=text, member=member)


class TrajectoryGroup(BaseModel):
    """N trajectories of the same scenario, plus the members that failed."""

    env: str
    seed: int
    trajectories: list[Trajectory] = Field(default_factory=list)
    exceptions: list[RecordedException] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    def to_dataframe(self) -> pd.DataFrame:
        """A pandas view with one row per trajectory."""
        return to_dataframe([self])

    def _repr_html_(self) -> str:
        title = f"<b>TrajectoryGroup</b> {self.env} seed={self.seed}: {len(self.trajectories)} trajectories"
        if self.exceptions:
            title += f", {len(self.exceptions)} failed"
        return title + self.to_dataframe().to_html(index=False, float_format=lambda x: f"{x:.3g}")


def to_dataframe(groups: Iterable[TrajectoryGroup]) -> pd.DataFrame:
    """One row per trajectory across `groups`: scenario, turns, errors, ground truth, reward and duration."""
    rows = []
    for group_index, group in enumerate(groups):
        for member, trajectory in enumerate(group.trajectories):
            outcome = trajectory.outcome
            rows.append(
                {
                    "group": group_index,
                    "env": trajectory.env,
                    "seed": trajectory.seed,
                    "member": member,
                    "turns": trajectory.num_turns,
                    "invalid_actions": len(trajectory.errors),
                    "success": outcome.success if outcome else None,
                    "score": outcome.score if outcome else None,
                    "reward": trajectory.reward,
                    "sampled_tokens": sum(len(c.token_ids) for c in trajectory.completions),
                    "duration_s": trajectory.metrics.get("duration_s"),
                }
            )
    return pd.DataFrame(rows)


# ----- JSONL store: one group per line --------------------------------------------------------------------------
def append_groups(path: str | Path, groups: Iterable[TrajectoryGroup]) -> None:
    """Append groups to a JSONL file, one line each, flushed and fsynced after every group.

    If an earlier crash left a half-written last line, it is cut off (with a warning) before appending, so the
    torn bytes never merge with a new group.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _drop_torn_tail(path)
    with path.open("a", encoding="utf-8") as file:
        for group in groups:
            file.write(group.model_dump_json() + "\n")
            file.flush()
            os.fsync(file.fileno())


def iter_groups(path: str | Path) -> Iterator[TrajectoryGroup]:
    """Read groups back one at a time. A truncated last line (a crash mid-write) is skipped with a warning;
    a corrupt line anywhere else raises, because that is not what a crash leaves behind."""
    path = Path(path)
    with path.open("r", encoding="utf-8") as file:
        lines = file.readlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield TrajectoryGroup.model_validate_json(line)
        except ValueError as exc:
            if number == len(lines) and not line.endswith("\n"):
                warnings.warn(
                    f"{path}: line {number} is incomplete (a write was interrupted); skipped it and kept the "
                    f"{number - 1} lines before it",
                    stacklevel=2,
                )
                return
            raise ValueError(f"{path}: line {number} is not a valid trajectory group: {exc}") from exc


def load_groups(path: str | Path) -> list[TrajectoryGroup]:
    """All groups in a JSONL file (see `iter_groups` for how a torn last line is handled)."""
    return list(iter_groups(path))


def _drop_torn_tail(path: Path) -> None:
    """Cut an unterminated last line left by a crash, so the next append starts on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as file:
        file.seek(-1, os.SEEK_END)
        if file.read(1) == b"\n":
            return
        file.seek(0)
        data = file.read()
        keep = data.rfind(b"\n") + 1
        file.truncate(keep)
    warnings.warn(
        f"{path}: removed an incomplete last line ({len(data) - keep} bytes) left by an interrupted write",
        stacklevel=3,
    )
