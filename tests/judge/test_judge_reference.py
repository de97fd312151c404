"""The reference judge: ground truth, clearly labelled, with seeded knobs that each do one thing."""

import pytest

from agentic_rl_lab.envs.base import Outcome
from agentic_rl_lab.judge import JudgeError, JudgeRecord, ReferenceJudge
from agentic_rl_lab.judge import diagnostics as d
from agentic_rl_lab.judge.prompt import transcript_length
from agentic_rl_lab.trajectory import Trajectory, TrajectoryGroup


def rewards(group: TrajectoryGroup) -> list[float]:
    return [t.reward for t in group.trajectories]


def truths(group: TrajectoryGroup) -> list[float]:
    return [t.outcome.score for t in group.trajectories]


def flat_group(score: float = 0.5, size: int = 5, seed: int = 0) -> TrajectoryGroup:
    """Trajectories of equal ground truth and growing length: any difference in reward is the judge's doing."""
    trajectories = [
        Trajectory(
            env="toy",
            seed=seed,
            messages=[{"role": "user", "content": "go"}, {"role": "assistant", "content": "x" * (10 * (i + 1))}],
            outcome=Outcome(success=True, num_steps=1, score=score),
        )
        for i in range(size)
    ]
    return TrajectoryGroup(env="toy", seed=seed, trajectories=trajectories)


def test_without_knobs_the_reward_is_the_ground_truth_and_is_labelled_so(groups) -> None:
    for group in ReferenceJudge().score_groups(groups, progress=False):
        assert rewards(group) == truths(group)
        record = JudgeRecord.of(group)
        assert (record.judge, record.model) == ("reference", "ground truth (outcome.score)")
        assert record.requests == 0 and record.prompt_tokens == 0
        assert all(t.metadata["judge"]["explanation"].startswith("GROUND TRUTH") for t in group.trajectories)


def test_noise_is_seeded_and_lowers_agreement(groups) -> None:
    noisy = [ReferenceJudge(noise=0.3, seed=1).score(g.model_copy(deep=True)) for g in groups]
    again = [ReferenceJudge(noise=0.3, seed=1).score(g.model_copy(deep=True)) for g in groups]
    other = [ReferenceJudge(noise=0.3, seed=2).score(g.model_copy(deep=True)) for g in groups]
    assert [rewards(g) for g in noisy] == [rewards(g) for g in again]
    assert [rewards(g) for g in noisy] != [rewards(g) for g in other]
    assert all(0.0 <= r <= 1.0 for g in noisy for r in rewards(g))
    perfect = ReferenceJudge().score_groups(groups, progress=False)
    assert d.agreement(noisy)["pairwise_accuracy"] < d.agreement(perfect)["pairwise_accuracy"] == 1.0


def test_position_bias_favours_the_first_shown_linearly() -> None:
    group = ReferenceJudge(position_bias=0.2).score(flat_group())
    (call,) = JudgeRecord.of(group).calls
    assert [call.scores[id_] for id_ in call.order] == pytest.approx([0.7, 0.6, 0.5, 0.4, 0.3])
    assert d.position_bias([group])["first_minus_last"] == pytest.approx(0.4)


def test_averaging_permutations_washes_position_bias_out_of_the_rewards() -> None:
    def error(permutations: int) -> float:
        judge = ReferenceJudge(position_bias=0.2, permutations=permutations)
        judged = [judge.score(flat_group(seed=s)) for s in range(20)]
        return sum(abs(r - 0.5) for g in judged for r in rewards(g)) / (20 * 5)

    assert error(1) == pytest.approx(0.12)  # |0.2|, |0.1|, 0, |0.1|, |0.2| on average
    assert error(8) < error(2) < error(1)
    group = ReferenceJudge(position_bias=0.2, permutations=4).score(flat_group())
    assert 0 <= JudgeRecord.of(group).position_consistency < 1


def test_length_bias_rewards_the_longest_and_the_diagnostic_sees_it() -> None:
    group = ReferenceJudge(length_bias=0.1).score(flat_group())
    lengths = [transcript_length(t.messages) for t in group.trajectories]
    assert lengths == sorted(lengths)
    assert rewards(group) == pytest.approx([0.4, 0.45, 0.5, 0.55, 0.6])
    assert d.length_bias([group])["vs_error"] == pytest.approx(1.0)


def test_a_shared_call_offset_leaves_the_group_order_alone_and_separate_calls_do_not(groups) -> None:
    shared = [ReferenceJudge(call_offset=0.2, seed=3).score(flat_group(seed=s)) for s in range(10)]
    separate = [ReferenceJudge(call_offset=0.2, listwise=False, seed=3).score(flat_group(seed=s)) for s in range(10)]
    for group in shared:
        assert len(JudgeRecord.of(group).calls) == 1
        assert max(rewards(group)) - min(rewards(group)) == pytest.approx(0.0), "one offset for the whole group"
    for group in separate:
        assert len(JudgeRecord.of(group).calls) == 5
    assert sum(max(rewards(g)) - min(rewards(g)) for g in separate) > 0.5, "an offset per trajectory"
    listwise = [ReferenceJudge(call_offset=0.3, seed=3).score(g.model_copy(deep=True)) for g in groups]
    pointwise = [ReferenceJudge(call_offset=0.3, listwise=False, seed=3).score(g.model_copy(deep=True)) for g in groups]
    assert d.agreement(listwise)["spearman"] > d.agreement(pointwise)["spearman"]


def test_a_trajectory_without_ground_truth_fails_the_group_as_the_caller_chose() -> None:
    group = flat_group()
    group.trajectories[2].outcome = None
    with pytest.raises(JudgeError, match="trajectory 2 has no ground-truth outcome"):
        ReferenceJudge().score(group)
    with pytest.warns(UserWarning):
        assert ReferenceJudge(on_failure="skip").score(group) is None
    assert "no ground-truth outcome" in group.metadata["judge"]["skipped"]
    assert ReferenceJudge().score(TrajectoryGroup(env="toy", seed=0)) is None, "an empty group is skipped"
    with pytest.raises(ValueError, match="noise"):
        ReferenceJudge(noise=-1)
