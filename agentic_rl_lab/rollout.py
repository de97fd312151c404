"""Rollouts: run a policy in an environment and collect groups of trajectories.

GRPO needs *groups*: N trajectories that start from the same scenario (same environment, same seed), so that
their rewards can be compared with each other. `collect_groups` plays many groups at once and steps every
active trajectory in **lockstep**: at each turn it hands all their histories to the policy in one call, so a
batched policy (a language model) generates every next action in a single forward pass per token.

Failures are isolated. An environment or policy exception costs only the trajectory it happened in: it is
recorded on its group and the rest carries on, until more have failed than `max_exceptions` allows. A history that
outgrows the policy's context window is not a failure: the episode ends there, truncated, and is kept.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tqdm.auto import tqdm

from agentic_rl_lab.envs.base import Environment, Message
from agentic_rl_lab.trajectory import ActionError, Completion, RecordedException, Trajectory, TrajectoryGroup


@dataclass
class Action:
    """What a policy returns for one history: the assistant message, plus the sampled tokens if it has them."""

    message: Message
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


class Policy(Protocol):
    """Anything that maps histories to actions. It receives a whole batch so it can generate in one call."""

    def act(self, histories: Sequence[list[Message]], tools: list[dict[str, Any]]) -> list[Action | Exception]:
        """Return one `Action` per history, in the same order.

        A policy that can tell which history failed (one API request of many) may put the exception in place of
        its action: only that trajectory then fails. Raising fails the whole call, which is retried per history.
        """
        ...


class ContextFull(ValueError):
    """A policy's history no longer fits its context window with room for the next turn. The rollout ends that
    episode there, truncated like one that ran out of turns, with `metrics["context_full"]`: it is judged and
    trained on like any other, instead of being lost."""


class RolloutError(RuntimeError):
    """More rollouts failed than `max_exceptions` allows. `causes` holds every recorded exception."""

    def __init__(self, message: str, causes: list[RecordedException]) -> None:
        super().__init__(message)
        self.causes = causes


def collect_group(
    env: Environment,
    policy: Policy,
    seed: int,
    num_generations: int = 8,
    *,
    max_exceptions: int | float = 0,
    progress: bool = True,
) -> TrajectoryGroup:
    """Play `num_generations` trajectories of one scenario (`env` reset with `seed`). See `collect_groups`."""
    return collect_groups(env, policy, [seed], num_generations, max_exceptions=max_exceptions, progress=progress)[0]


def collect_groups(
    env: Environment,
    policy: Policy,
    seeds: Sequence[int],
    num_generations: int = 8,
    *,
    max_exceptions: int | float = 0,
    batch_size: int = 64,
    progress: bool = True,
) -> list[TrajectoryGroup]:
    """Play one group of `num_generations` trajectories per seed, stepping them in lockstep.

    - `env` is a template: every trajectory gets its own deep copy, reset with its group's seed.
    - `max_exceptions`: how many trajectories may fail before the whole collection raises `RolloutError`.
      A count (`3`) or, when between 0 and 1, a fraction of all trajectories (`0.1`).
    - `batch_size`: the most trajectories in flight at once (whole groups are kept together).
    """
    if num_generations < 1:
        raise ValueError(f"num_generations must be at least 1, got {num_generations}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    seeds = list(seeds)
    total = len(seeds) * num_generations
    budget = _ExceptionBudget(max_exceptions, total)
    groups = [TrajectoryGroup(env=env.name, seed=seed) for seed in seeds]
    groups_per_batch = max(1, batch_size // num_generations)
    with tqdm(total=total, desc=f"rollout {env.name}", unit="traj", disable=not progress) as bar:
        for start in range(0, len(groups), groups_per_batch):
            _play_lockstep(env, policy, groups[start : start + groups_per_batch], num_generations, budget, bar)
    return groups


@dataclass
class _Episode:
    """A trajectory being played: its own environment copy and the history so far."""

    group: TrajectoryGroup
    member: int
    env: Environment
    messages: list[Message]
    started: float = field(default_factory=time.perf_counter)
    completions: list[Completion] = field(default_factory=list)
    errors: list[ActionError] = field(default_factory=list)
    truncated: bool = False
    context_full: bool = False


def _play_lockstep(
    env: Environment,
    policy: Policy,
    groups: list[TrajectoryGroup],
    num_generations: int,
    budget: _ExceptionBudget,
    bar: tqdm,
) -> None:
    """Reset one episode per member, then step all active episodes together until every one is done."""
    finished: dict[int, list[tuple[int, Trajectory]]] = {id(group): [] for group in groups}
    active: list[_Episode] = []
    for group in groups:
        for member in range(num_generations):
            episode_env = copy.deepcopy(env)
            try:
                active.append(_Episode(group, member, episode_env, episode_env.reset(group.seed)))
            except Exception as exc:  # an environment that cannot even reset
                budget.record(group, member, exc, bar)

    tools = env.tool_schemas
    while active:
        actions = _act_isolated(policy, [episode.messages for episode in active], tools)
        still_active = []
        for episode, action in zip(active, actions):
            try:
                if isinstance(action, ContextFull):
                    done = _end_for_context(episode)
                elif isinstance(action, BaseException):
                    raise action
                else:
                    done = _apply(episode, action)
                if done:
                    finished[id(episode.group)].append((episode.member, _finish(episode)))
                    bar.update(1)
                else:
                    still_active.append(episode)
            except Exception as exc:
                budget.record(episode.group, episode.member, exc, bar)
        active = still_active
        _show_running_scores(bar, finished, budget)

    for group in groups:
        group.trajectories = [trajectory for _, trajectory in sorted(finished[id(group)], key=lambda x: x[0])]


def _act_isolated(policy: Policy, histories: list[list[Message]], tools: list[dict[str, Any]]) -> list[Any]:
    """One batched policy call; if it fails, retry one history at a time so only the culprit fails."""
    try:
        actions = policy.act(histories, tools)
        if len(actions) != len(histories):
            raise ValueError(f"policy returned {len(actions)} actions for {len(histories)} histories")
        return actions
    except Exception as batch_exc:
        if len(histories) == 1:
            return [batch_exc]
        if not isinstance(batch_exc, ContextFull):  # a full context ends an episode: expected, not worth a warning
            warnings.warn(f"batched policy call failed ({batch_exc!r}); retrying one history at a time", stacklevel=2)
        results: list[Any] = []
        for history in histories:
            try:
                (action,) = policy.act([history], tools)
                results.append(action)
            except Exception as exc:
                results.append(exc)
        return results


def _apply(episode: _Episode, action: Action) -> bool:
    """Step the episode's environment with `action` and append the action and observation to its history."""
    if not isinstance(action, Action):
        raise TypeError(f"a policy must return Action objects, got {type(action).__name__}")
    if not isinstance(action.message, dict):
        raise TypeError(f"Action.message must be a chat message dict, got {type(action.message).__name__}")
    message = {**action.message, "role": "assistant"}
    result = episode.env.step(message)
    episode.messages.append(message)
    if action.token_ids is not None:
        index = len(episode.messages) - 1
        episode.completions.append(
            Completion(message_index=index, token_ids=action.token_ids, logprobs=action.logprobs)
        )
    turn = result.info.get("turn", episode.env.turn)
    episode.errors.extend(ActionError(turn=turn, **error) for error in result.info.get("errors", []))
    episode.messages.extend(result.observation)
    episode.truncated = bool(result.info.get("truncated", False))
    return result.done


def _end_for_context(episode: _Episode) -> bool:
    """End an episode whose next prompt does not fit: truncated, with a last message that says why, so a judge
    reading the transcript knows it did not simply stop."""
    text = "The episode ended here: the conversation no longer fits the model's context window."
    episode.messages.append({"role": "user", "content": text})
    episode.truncated = episode.context_full = True
    return True


def _finish(episode: _Episode) -> Trajectory:
    """Freeze a finished episode into a `Trajectory`, with its ground-truth outcome and metrics."""
    metrics: dict[str, float | int | bool] = dict(episode.env.metrics)
    metrics["truncated"] = episode.truncated
    metrics["context_full"] = episode.context_full
    metrics["duration_s"] = time.perf_counter() - episode.started
    return Trajectory(
        env=episode.env.name,
        seed=episode.group.seed,
        messages=episode.messages,
        tools=episode.env.tool_schemas,
        completions=episode.completions,
        outcome=episode.env.outcome(),
        metrics=metrics,
        metadata={"member": episode.member},
        errors=episode.errors,
    )


def _show_running_scores(bar: tqdm, finished: dict[int, list[tuple[int, Trajectory]]], budget: Any) -> None:
    """Progress-bar postfix: running ground-truth score and success of finished trajectories, and failures."""
    done = [t for members in finished.values() for _, t in members if t.outcome is not None]
    if done:
        score = sum(t.outcome.score for t in done) / len(done)
        success = sum(t.outcome.success for t in done) / len(done)
        bar.set_postfix(score=f"{score:.3f}", success=f"{success:.0%}", failed=budget.count, refresh=False)


class _ExceptionBudget:
    """Counts failed trajectories and raises once there are more than `max_exceptions`."""

    def __init__(self, max_exceptions: int | float, total: int) -> None:
        if max_exceptions < 0:
            raise ValueError(f"max_exceptions must be >= 0, got {max_exceptions}")
        self.limit = max_exceptions * total if 0 < max_exceptions < 1 else max_exceptions
        self.causes: list[RecordedException] = []
        self.where: list[str] = []

    @property
    def count(self) -> int:
        return len(self.causes)

    def record(self, group: TrajectoryGroup, member: int, exc: Exception, bar: tqdm) -> None:
        recorded = RecordedException.from_exception(exc, member=member)
        group.exceptions.append(recorded)
        self.causes.append(recorded)
        self.where.append(f"seed {group.seed} member {member}: {recorded.type}: {recorded.message}")
        bar.update(1)
        if self.count > self.limit:
            summary = "; ".join(self.where[:5]) + (" ..." if self.count > 5 else "")
            raise RolloutError(
                f"{self.count} rollouts failed, more than max_exceptions={self.limit:g} allows: {summary}",
                self.causes,
            ) from exc
