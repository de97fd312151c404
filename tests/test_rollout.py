"""The rollout engine: groups, lockstep batching, timing, and failures isolated within a budget."""

import pytest

from agentic_rl_lab.envs import GuessNumber, InvalidAction
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.rollout import Action, RolloutError, collect_group, collect_groups


class CountingPolicy(ScriptedPolicy):
    """A scripted policy that records the size of every batch it is asked for."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch_sizes = []

    def act(self, histories, tools):
        self.batch_sizes.append(len(histories))
        return super().act(histories, tools)


def test_a_group_is_n_trajectories_of_the_same_scenario():
    env = GuessNumber()
    group = collect_group(env, ScriptedPolicy(env, "mediocre", seed=1), seed=42, num_generations=6, progress=False)
    assert (group.env, group.seed, len(group.trajectories), group.exceptions) == ("guess_number", 42, 6, [])
    goals = {str(t.messages[:2]) for t in group.trajectories}
    assert len(goals) == 1, "every member starts from the same goal"
    assert len({str(t.messages) for t in group.trajectories}) > 1, "a stochastic policy gives different members"
    for member, trajectory in enumerate(group.trajectories):
        assert trajectory.metadata["member"] == member
        assert trajectory.outcome.success != trajectory.metrics["truncated"]
        assert trajectory.metrics["duration_s"] > 0
        assert trajectory.metrics["turns"] == trajectory.num_turns == trajectory.outcome.num_steps
        assert trajectory.tools == env.tool_schemas
        roles = [m["role"] for m in trajectory.messages[2:]]
        out_of_turns = ["user"] if trajectory.metrics["truncated"] else []
        assert roles == ["assistant", "tool"] * trajectory.num_turns + out_of_turns


def test_active_trajectories_are_stepped_in_lockstep():
    env = GuessNumber()
    policy = CountingPolicy(env, "mediocre")
    groups = collect_groups(env, policy, seeds=[1, 2, 3], num_generations=4, progress=False)
    turns = [t.num_turns for g in groups for t in g.trajectories]
    assert policy.batch_sizes[0] == 12, "the first turn of all 12 trajectories is one policy call"
    assert len(policy.batch_sizes) == max(turns), "one policy call per turn, not per trajectory"
    assert policy.batch_sizes == sorted(policy.batch_sizes, reverse=True)
    assert sum(policy.batch_sizes) == sum(turns)


def test_batch_size_caps_trajectories_in_flight_and_keeps_groups_whole():
    env = GuessNumber()
    policy = CountingPolicy(env, "expert")
    groups = collect_groups(env, policy, seeds=range(5), num_generations=4, batch_size=8, progress=False)
    assert max(policy.batch_sizes) == 8
    assert [len(g.trajectories) for g in groups] == [4] * 5


def test_same_seeds_same_trajectories():
    env = GuessNumber()
    first = collect_groups(env, ScriptedPolicy(env, "mediocre", seed=5), range(4), 3, progress=False)
    second = collect_groups(env, ScriptedPolicy(env, "mediocre", seed=5), range(4), 3, progress=False)
    assert [t.messages for g in first for t in g.trajectories] == [t.messages for g in second for t in g.trajectories]


class ExplodingGuessNumber(GuessNumber):
    """An environment with a bug: guessing 13 crashes it (a real exception, not a bad action)."""

    def call_tool(self, name, arguments):
        if arguments.n == 13:
            raise ZeroDivisionError("bug in the environment")
        return super().call_tool(name, arguments)


def test_environment_failures_are_recorded_on_their_group_and_the_rest_continues():
    env = ExplodingGuessNumber()
    groups = collect_groups(env, ScriptedPolicy(env, "random", seed=0), range(10), 4, max_exceptions=40, progress=False)
    failures = [e for g in groups for e in g.exceptions]
    assert failures, "some random trajectories guess 13"
    assert all(e.type == "ZeroDivisionError" and "bug in the environment" in e.traceback for e in failures)
    assert sum(len(g.trajectories) for g in groups) + len(failures) == 40
    for group in groups:
        members = [t.metadata["member"] for t in group.trajectories] + [e.member for e in group.exceptions]
        assert sorted(members) == [0, 1, 2, 3]


def test_past_the_budget_the_collection_raises_with_every_cause():
    env = ExplodingGuessNumber()
    with pytest.raises(RolloutError, match="max_exceptions=1") as info:
        collect_groups(env, ScriptedPolicy(env, "random", seed=0), range(10), 4, max_exceptions=1, progress=False)
    assert len(info.value.causes) == 2
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_a_fractional_budget_is_a_share_of_all_trajectories():
    env = ExplodingGuessNumber()
    policy = ScriptedPolicy(env, "random", seed=0)
    groups = collect_groups(env, policy, range(10), 4, max_exceptions=0.5, progress=False)
    assert 0 < sum(len(g.exceptions) for g in groups) <= 20
    with pytest.raises(ValueError, match="max_exceptions"):
        collect_groups(env, policy, range(2), 2, max_exceptions=-1, progress=False)


class PickyPolicy(ScriptedPolicy):
    """Crashes on any history whose third guess is due after a 'higher', so a whole batch call fails."""

    def act(self, histories, tools):
        for history in histories:
            replies = [m["content"] for m in history if m["role"] == "tool"]
            if len(replies) == 2 and replies[-1].startswith("higher"):
                raise RuntimeError("policy crashed")
        return super().act(histories, tools)


def test_a_failing_batch_is_retried_one_history_at_a_time_so_only_the_culprits_fail():
    env = GuessNumber()
    with pytest.warns(UserWarning, match="one history at a time"):
        groups = collect_groups(env, PickyPolicy(env, "random", seed=3), range(6), 4, max_exceptions=24, progress=False)
    failed = [e for g in groups for e in g.exceptions]
    assert failed and all(e.message == "policy crashed" for e in failed)
    finished = [t for g in groups for t in g.trajectories]
    assert finished, "members that did not trigger the crash finish normally"
    assert len(failed) + len(finished) == 24


class ResettingFails(GuessNumber):
    def setup(self, rng):
        raise OSError("data file missing")


def test_policy_contract_violations_and_reset_failures_are_reported():
    class Mute:
        def act(self, histories, tools):
            return []

    with pytest.raises(RolloutError, match="returned 0 actions"):
        collect_group(GuessNumber(), Mute(), seed=0, num_generations=1, progress=False)

    class Shouty:
        def act(self, histories, tools):
            return ["GUESS 50"] * len(histories)

    with pytest.raises(RolloutError, match="Action"):
        collect_group(GuessNumber(), Shouty(), seed=0, num_generations=1, progress=False)
    with pytest.raises(RolloutError, match="data file missing"):
        collect_group(
            ResettingFails(), ScriptedPolicy(GuessNumber(), "expert"), seed=0, num_generations=2, progress=False
        )


def test_sampled_tokens_are_stored_against_their_message():
    class TokenPolicy(ScriptedPolicy):
        def act(self, histories, tools):
            return [Action(a.message, token_ids=[1, 2, 3], logprobs=[-0.5] * 3) for a in super().act(histories, tools)]

    env = GuessNumber()
    group = collect_group(env, TokenPolicy(env, "expert"), seed=4, num_generations=2, progress=False)
    trajectory = group.trajectories[0]
    assert len(trajectory.completions) == trajectory.num_turns
    for completion in trajectory.completions:
        assert trajectory.messages[completion.message_index]["role"] == "assistant"
        assert completion.logprobs == [-0.5] * 3


def test_invalid_actions_are_recorded_on_the_trajectory():
    class Sloppy(ScriptedPolicy):
        def act(self, histories, tools):
            actions = super().act(histories, tools)
            return [
                Action({"role": "assistant", "content": "I guess fifty"}) if len(h) == 2 else a
                for h, a in zip(histories, actions)
            ]

    env = GuessNumber()
    trajectory = collect_group(env, Sloppy(env, "expert"), seed=0, num_generations=1, progress=False).trajectories[0]
    assert [(e.turn, e.kind) for e in trajectory.errors] == [(1, "no_tool_call")]
    assert trajectory.metrics["invalid_actions"] == 1 and trajectory.outcome.success


def test_an_unknown_scripted_strategy_names_the_choices():
    with pytest.raises(ValueError, match="expert, hesitant, mediocre, random, repeating"):
        ScriptedPolicy(GuessNumber(), "genius")


def test_invalid_action_is_exported_for_custom_environments():
    assert issubclass(InvalidAction, Exception)


def test_a_policy_may_return_an_exception_in_place_of_one_action():
    class HalfBroken(ScriptedPolicy):
        def act(self, histories, tools):
            actions = super().act(histories, tools)
            return [TimeoutError("request 1 failed") if i == 1 else a for i, a in enumerate(actions)]

    env = GuessNumber()
    group = collect_group(env, HalfBroken(env, "expert"), seed=0, num_generations=3, max_exceptions=1, progress=False)
    assert [t.metadata["member"] for t in group.trajectories] == [0, 2]
    assert [(e.member, e.type) for e in group.exceptions] == [(1, "TimeoutError")]
