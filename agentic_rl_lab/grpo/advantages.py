"""Advantages: how much better each trajectory did than the other members of its group.

GRPO has no value network. Its baseline is the group itself: the N trajectories of one scenario. A
trajectory's advantage is its reward minus the group's mean reward, usually divided by a standard deviation
(DeepSeekMath, Shao et al. 2024, eq. 3, "outcome supervision"):

    A_i = (r_i - mean(r_group)) / (std + eps)

`scale_rewards` picks the std, with TRL's names:
- `"group"`: the std of the group's rewards, so every group has unit spread (GRPO, TRL's default);
- `"batch"`: one std over every reward in the batch (Lite PPO): the mean is still the group's;
- `"none"`: no division at all (Dr. GRPO: dividing by the group std over-weights groups that are nearly
  all right or all wrong, a question-difficulty bias).
The std is the population std (divide by N), as in ART. TRL uses `torch.std`, which divides by N - 1 and
so gives advantages smaller by a factor sqrt((N - 1) / N). `eps` keeps a group whose rewards differ only by
rounding from producing huge advantages.

A group whose rewards are all equal (or that has fewer than two members) has every advantage zero: it
carries no signal. It is dropped, and its index is reported so the trainer can log `zero_advantage_groups`.
A trajectory of a kept group whose own advantage is zero is kept: it still counts in the loss's
normalisation, as in TRL (ART drops it).

Credit assignment is a switch:
- `"trajectory"` (default): every assistant turn gets the trajectory's advantage A_i.
- `"turn"`: for environments that also reward single turns. Each trajectory carries
  `metadata["turn_rewards"]`, one number per assistant turn, *in addition to* the judged `reward` (an
  environment that rewards only turns leaves the judge's reward equal across the group). Following
  DeepSeekMath's "process supervision" (§4.1.3), the turn rewards of all members of a group are normalised
  together, like the rewards above, and turn k receives the outcome advantage plus the normalised turn
  rewards from turn k to the end (an action earns credit for what follows it, not for what came before):

      A_{i,k} = A_i + sum_{k' >= k} (r_{i,k'} - mean(turn rewards of the group)) / (std + eps)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agentic_rl_lab.trajectory import Trajectory, TrajectoryGroup

ScaleRewards = Literal["group", "batch", "none"]
CreditAssignment = Literal["trajectory", "turn"]
SCALE_REWARDS = ("group", "batch", "none")
CREDIT_ASSIGNMENTS = ("trajectory", "turn")


@dataclass
class TrajectoryAdvantage:
    """The credit one trajectory of a kept group receives."""

    group: int
    """Index of the group in the list given to `compute_advantages`."""
    member: int
    """Index of the trajectory in `group.trajectories`."""
    reward: float
    """The judged reward r_i."""
    advantage: float
    """The outcome advantage A_i = (r_i - group mean) / (std + eps)."""
    turn_advantages: list[float]
    """One advantage per assistant turn, in message order: every token of the k-th assistant message gets
    `turn_advantages[k]`. Equal to `[advantage] * num_turns` under `credit_assignment="trajectory"`."""


@dataclass
class Advantages:
    """The advantages of a batch of groups, and the groups dropped because they carry no signal."""

    trajectories: list[TrajectoryAdvantage]
    """Every trajectory of every kept group, in input order."""
    zero_advantage_groups: list[int]
    """Indices of the dropped groups: all rewards equal (and all turn rewards equal), or fewer than 2 members."""
    num_groups: int
    """How many groups were given."""

    @property
    def num_zero_advantage_groups(self) -> int:
        """The `zero_advantage_groups` metric: how many groups were dropped."""
        return len(self.zero_advantage_groups)


def normalise_rewards(
    groups: Sequence[Sequence[float]], scale_rewards: ScaleRewards = "group", eps: float = 1e-4
) -> list[list[float]]:
    """(r - group mean) / (std + eps) for every reward of every group; the core arithmetic, on plain numbers.

    A group whose rewards are all equal gets exact zeros (not 1e-17 from rounding in the mean).
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"unknown scale_rewards {scale_rewards!r}; choose one of {SCALE_REWARDS}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    batch = [r for group in groups for r in group]
    batch_std = _std(batch) if batch else 0.0
    result = []
    for group in groups:
        if _all_equal(group):
            result.append([0.0] * len(group))
            continue
        mean = sum(group) / len(group)
        scale = {"group": _std(group) + eps, "batch": batch_std + eps, "none": 1.0}[scale_rewards]
        result.append([(r - mean) / scale for r in group])
    return result


def compute_advantages(
    groups: Sequence[TrajectoryGroup],
    *,
    scale_rewards: ScaleRewards = "group",
    credit_assignment: CreditAssignment = "trajectory",
    eps: float = 1e-4,
) -> Advantages:
    """Group-normalised advantages of judged groups; groups without signal are dropped and listed.

    Args:
        groups: judged groups: every trajectory needs a finite `reward` (and, for `credit_assignment="turn"`,
            `metadata["turn_rewards"]` with one finite number per assistant turn).
        scale_rewards: the std that divides `r - mean`: `"group"`, `"batch"` or `"none"` (see the module doc).
        credit_assignment: `"trajectory"` gives every turn the trajectory's advantage; `"turn"` adds the
            normalised rewards of that turn and the turns after it.
        eps: added to the std in the denominator, so near-equal rewards cannot blow up.
    """
    if credit_assignment not in CREDIT_ASSIGNMENTS:
        raise ValueError(f"unknown credit_assignment {credit_assignment!r}; choose one of {CREDIT_ASSIGNMENTS}")
    rewards = [[_reward(group, g, m, t) for m, t in enumerate(group.trajectories)] for g, group in enumerate(groups)]
    outcome = normalise_rewards(rewards, scale_rewards, eps)
    if credit_assignment == "turn":
        turn_rewards = [
            [_turn_rewards(group, g, m, t) for m, t in enumerate(group.trajectories)] for g, group in enumerate(groups)
        ]
        # Normalise all turn rewards of a group together, then give each turn the sum from it to the end.
        flat = normalise_rewards(
            [[r for member in group for r in member] for group in turn_rewards], scale_rewards, eps
        )
        process = [_returns_to_go(_split_like(normalised, group)) for normalised, group in zip(flat, turn_rewards)]

    kept, dropped = [], []
    for g, group in enumerate(groups):
        no_signal = _all_equal(rewards[g])
        if credit_assignment == "turn":
            no_signal = no_signal and _all_equal([r for member in turn_rewards[g] for r in member])
        if len(rewards[g]) < 2 or no_signal:
            dropped.append(g)
            continue
        for m, trajectory in enumerate(group.trajectories):
            a = outcome[g][m]
            turn_adv = [a + p for p in process[g][m]] if credit_assignment == "turn" else [a] * trajectory.num_turns
            kept.append(TrajectoryAdvantage(g, m, rewards[g][m], a, turn_adv))
    return Advantages(trajectories=kept, zero_advantage_groups=dropped, num_groups=len(groups))


# ----- helpers ----------------------------------------------------------------------------------------------------
def _std(values: Sequence[float]) -> float:
    """Population standard deviation (divide by N)."""
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _all_equal(values: Sequence[float]) -> bool:
    return len(values) == 0 or max(values) == min(values)


def _returns_to_go(turns: list[list[float]]) -> list[list[float]]:
    """[[a, b, c]] -> [[a + b + c, b + c, c]]: each turn's credit for itself and everything after it."""
    result = []
    for member in turns:
        total, togo = 0.0, []
        for value in reversed(member):
            total += value
            togo.append(total)
        result.append(togo[::-1])
    return result


def _split_like(flat: list[float], nested: list[list[float]]) -> list[list[float]]:
    """Cut `flat` into pieces as long as the lists of `nested`."""
    pieces, start = [], 0
    for member in nested:
        pieces.append(flat[start : start + len(member)])
        start += len(member)
    return pieces


def _where(group: TrajectoryGroup, g: int, m: int) -> str:
    return f"group {g} ({group.env} seed={group.seed}), member {m}"


def _reward(group: TrajectoryGroup, g: int, m: int, trajectory: Trajectory) -> float:
    if trajectory.reward is None:
        raise ValueError(f"{_where(group, g, m)} has no reward: judge every group before computing advantages")
    if not math.isfinite(trajectory.reward):
        raise ValueError(f"{_where(group, g, m)} has reward {trajectory.reward}: a judge must return finite rewards")
    return float(trajectory.reward)


def _turn_rewards(group: TrajectoryGroup, g: int, m: int, trajectory: Trajectory) -> list[float]:
    turn_rewards = trajectory.metadata.get("turn_rewards")
    expected = f"one number per assistant turn ({trajectory.num_turns} turns)"
    if not isinstance(turn_rewards, list):
        raise ValueError(
            f"{_where(group, g, m)}: credit_assignment='turn' needs metadata['turn_rewards'], {expected}; "
            f"got {turn_rewards!r}. Use credit_assignment='trajectory' for environments without turn rewards"
        )
    if len(turn_rewards) != trajectory.num_turns:
        raise ValueError(f"{_where(group, g, m)}: metadata['turn_rewards'] has {len(turn_rewards)} values, {expected}")
    for value in turn_rewards:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{_where(group, g, m)}: metadata['turn_rewards'] holds {value!r}, {expected}")
    return [float(value) for value in turn_rewards]
