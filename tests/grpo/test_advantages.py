"""Advantages from judged groups: worked out by hand, groups without signal dropped, bad input refused."""

import math

import pytest

from agentic_rl_lab.grpo.advantages import compute_advantages, normalise_rewards
from agentic_rl_lab.trajectory import Trajectory, TrajectoryGroup


def trajectory(reward: float | None, turns: int = 1, turn_rewards: list | None = None) -> Trajectory:
    """A trajectory with `turns` assistant turns; only the reward and turn rewards matter here."""
    messages = [{"role": "user", "content": "Guess a number between 1 and 100."}]
    for turn in range(turns):
        messages += [{"role": "assistant", "content": f"guess {turn}"}, {"role": "user", "content": "higher"}]
    metadata = {} if turn_rewards is None else {"turn_rewards": turn_rewards}
    return Trajectory(env="guess_number", seed=7, messages=messages, reward=reward, metadata=metadata)


def group(*rewards: float | None, seed: int = 7) -> TrajectoryGroup:
    return TrajectoryGroup(env="guess_number", seed=seed, trajectories=[trajectory(r) for r in rewards])


def advantages_of(result) -> list[list[float]]:
    """The kept advantages, regrouped per group."""
    by_group: dict[int, list[float]] = {}
    for item in result.trajectories:
        by_group.setdefault(item.group, []).append(item.advantage)
    return list(by_group.values())


# ----- scale_rewards -------------------------------------------------------------------------------------------------
def test_group_scaling_divides_by_the_population_std_of_the_group():
    # Rewards [0, 1, 1, 2]: mean 1, deviations [-1, 0, 0, 1], variance (1 + 0 + 0 + 1) / 4 = 0.5, std 0.70711.
    # A = deviation / (0.70711 + 1e-4) = [-1.41401, 0, 0, +1.41401].
    result = compute_advantages([group(0, 1, 1, 2)])
    a = 1 / (math.sqrt(0.5) + 1e-4)
    assert a == pytest.approx(1.41401, abs=1e-5)
    assert advantages_of(result) == [pytest.approx([-a, 0.0, 0.0, a])]
    assert result.zero_advantage_groups == [] and result.num_groups == 1


def test_no_scaling_is_reward_minus_group_mean():
    # Dr. GRPO: [0, 1, 1, 2] - 1 = [-1, 0, 0, 1]; [10, 20] - 15 = [-5, 5]: the scale of the reward survives.
    result = compute_advantages([group(0, 1, 1, 2), group(10, 20)], scale_rewards="none")
    assert advantages_of(result) == [[-1.0, 0.0, 0.0, 1.0], [-5.0, 5.0]]


def test_batch_scaling_uses_one_std_for_the_whole_batch_and_the_group_mean():
    # Groups [0, 2], [4, 6], [3, 3]. Batch mean 3; squared deviations 9, 1, 1, 9, 0, 0 → variance 20 / 6,
    # std 1.82574. Group means 1 and 5, so A = ±1 / (1.82574 + 1e-4) = ±0.54770 in both kept groups
    # (group scaling would give ±1). The equal group [3, 3] is dropped but still counts in the batch std.
    result = compute_advantages([group(0, 2), group(4, 6), group(3, 3)], scale_rewards="batch")
    a = 1 / (math.sqrt(20 / 6) + 1e-4)
    assert a == pytest.approx(0.54770, abs=1e-5)
    assert advantages_of(result) == [pytest.approx([-a, a]), pytest.approx([-a, a])]
    assert result.zero_advantage_groups == [2]
    group_scaled = compute_advantages([group(0, 2), group(4, 6)], scale_rewards="group", eps=0.0)
    assert advantages_of(group_scaled) == [[-1.0, 1.0], [-1.0, 1.0]]


def test_eps_keeps_near_equal_rewards_from_blowing_up():
    # [0.5, 0.5 + 1e-9]: std 5e-10. Without eps the advantages would be ±1; with eps = 1e-4 they are
    # ±5e-10 / (5e-10 + 1e-4) ≈ ±5e-6: a rounding difference stays a rounding difference.
    (advantages,) = normalise_rewards([[0.5, 0.5 + 1e-9]])
    assert max(abs(a) for a in advantages) < 1e-5


# ----- groups without signal -----------------------------------------------------------------------------------------
def test_groups_whose_rewards_are_all_equal_are_dropped_and_counted():
    groups = [group(1, 1, 1), group(0, 1), group(0.5), group(0.1, 0.1, 0.1, seed=8)]
    result = compute_advantages(groups)
    assert result.zero_advantage_groups == [0, 2, 3]  # all equal, a single member, all equal
    assert result.num_zero_advantage_groups == 3 and result.num_groups == 4
    assert [(t.group, t.member) for t in result.trajectories] == [(1, 0), (1, 1)]


def test_an_all_equal_group_normalises_to_exact_zeros():
    # (0.1 + 0.1 + 0.1) / 3 = 0.10000000000000002 in floating point; the advantages must still be exactly 0.
    assert normalise_rewards([[0.1, 0.1, 0.1]], scale_rewards="none") == [[0.0, 0.0, 0.0]]


def test_trajectory_credit_gives_every_turn_the_trajectory_advantage():
    g = TrajectoryGroup(env="guess_number", seed=7, trajectories=[trajectory(0.0, turns=3), trajectory(1.0, turns=2)])
    first, second = compute_advantages([g], scale_rewards="none").trajectories
    assert first.turn_advantages == [-0.5, -0.5, -0.5] and second.turn_advantages == [0.5, 0.5]
    assert first.reward == 0.0 and first.advantage == -0.5


# ----- per-turn credit -----------------------------------------------------------------------------------------------
def turn_group() -> TrajectoryGroup:
    # Member 0 won (reward 1) and its first turn earned a turn reward of 1; member 1 lost, no turn rewards.
    return TrajectoryGroup(
        env="guess_number",
        seed=7,
        trajectories=[trajectory(1.0, turns=2, turn_rewards=[1.0, 0.0]), trajectory(0.0, turns=2, turn_rewards=[0, 0])],
    )


def test_turn_credit_adds_normalised_turn_rewards_from_each_turn_to_the_end():
    # scale_rewards="none". Outcome: rewards [1, 0] - 0.5 = [+0.5, -0.5].
    # Turn rewards of the whole group [1, 0, 0, 0], mean 0.25 → [+0.75, -0.25 | -0.25, -0.25].
    # Turn k gets the outcome advantage + the sum from turn k to the last turn:
    #   member 0: [0.5 + 0.75 - 0.25, 0.5 - 0.25] = [1.0, 0.25]
    #   member 1: [-0.5 - 0.25 - 0.25, -0.5 - 0.25] = [-1.0, -0.75]
    first, second = compute_advantages([turn_group()], scale_rewards="none", credit_assignment="turn").trajectories
    assert first.advantage == 0.5 and first.turn_advantages == [1.0, 0.25]
    assert second.advantage == -0.5 and second.turn_advantages == [-1.0, -0.75]


def test_turn_credit_with_group_scaling():
    # eps = 0. Outcome [1, 0]: std 0.5 → [+1, -1]. Turn rewards [1, 0, 0, 0]: std sqrt((0.5625 + 3 · 0.0625) / 4)
    # = sqrt(0.1875) = 0.43301, so the deviations [0.75, -0.25, -0.25, -0.25] become [√3, -1/√3, -1/√3, -1/√3].
    #   member 0: [1 + √3 - 1/√3, 1 - 1/√3] = [2.15470, 0.42265]
    #   member 1: [-1 - 2/√3, -1 - 1/√3] = [-2.15470, -1.57735]
    result = compute_advantages([turn_group()], credit_assignment="turn", eps=0.0)
    r3 = math.sqrt(3)
    assert result.trajectories[0].turn_advantages == pytest.approx([1 + r3 - 1 / r3, 1 - 1 / r3])
    assert result.trajectories[1].turn_advantages == pytest.approx([-1 - 2 / r3, -1 - 1 / r3])
    assert result.trajectories[0].turn_advantages == pytest.approx([2.15470, 0.42265], abs=1e-5)


def test_turn_credit_keeps_a_group_whose_signal_is_only_in_the_turns():
    # Equal judged rewards, different turn rewards: signal only per turn, so the group is kept.
    # Outcome advantages 0; turn rewards [1, 0, 0, 1] - 0.5 → member 0: [0.5 - 0.5, -0.5], member 1: [0, 0.5].
    only_turns = TrajectoryGroup(
        env="guess_number",
        seed=1,
        trajectories=[trajectory(1.0, 2, [1.0, 0.0]), trajectory(1.0, 2, [0.0, 1.0])],
    )
    nothing = TrajectoryGroup(
        env="guess_number", seed=2, trajectories=[trajectory(1.0, 2, [0.5, 0.5]), trajectory(1.0, 2, [0.5, 0.5])]
    )
    alone = TrajectoryGroup(
        env="guess_number", seed=3, trajectories=[trajectory(1.0, 2, [1.0, 0.0])]
    )  # no one to compare
    result = compute_advantages([only_turns, nothing, alone], scale_rewards="none", credit_assignment="turn")
    assert result.zero_advantage_groups == [1, 2]
    assert [t.turn_advantages for t in result.trajectories] == [[0.0, -0.5], [0.0, 0.5]]


# ----- refused input -------------------------------------------------------------------------------------------------
def test_a_missing_reward_names_the_group_and_member():
    with pytest.raises(ValueError, match=r"group 1 \(guess_number seed=3\), member 2 has no reward"):
        compute_advantages([group(0, 1), group(0, 1, None, seed=3)])


def test_a_non_finite_reward_is_refused():
    with pytest.raises(ValueError, match="member 0 has reward nan"):
        compute_advantages([group(math.nan, 1)])


@pytest.mark.parametrize(
    ("turn_rewards", "message"),
    [
        (None, r"needs metadata\['turn_rewards'\]"),
        ([1.0], r"has 1 values, one number per assistant turn \(2 turns\)"),
        ([1.0, math.inf], "holds inf"),
        ([1.0, "high"], "holds 'high'"),
    ],
)
def test_bad_turn_rewards_are_refused(turn_rewards, message):
    g = TrajectoryGroup(env="guess_number", seed=7, trajectories=[trajectory(0.0, 2, [0, 0]), trajectory(1.0, 2)])
    g.trajectories[1].metadata = {} if turn_rewards is None else {"turn_rewards": turn_rewards}
    with pytest.raises(ValueError, match=r"group 0 \(guess_number seed=7\), member 1: .*" + message):
        compute_advantages([g], credit_assignment="turn")


def test_unknown_options_are_refused():
    with pytest.raises(ValueError, match="unknown scale_rewards 'std'"):
        compute_advantages([group(0, 1)], scale_rewards="std")
    with pytest.raises(ValueError, match="unknown credit_assignment 'token'"):
        compute_advantages([group(0, 1)], credit_assignment="token")
    with pytest.raises(ValueError, match="eps must be >= 0"):
        compute_advantages([group(0, 1)], eps=-1.0)
