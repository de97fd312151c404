"""Environment exceptions inside a tool, in every environment: within `max_exceptions` each failed trajectory is
recorded on its group with its traceback and the others finish; one past it, the collection raises with every
cause. (tests/test_rollout.py covers the budget's arithmetic on guess_number.)"""

import pytest

from agentic_rl_lab.envs import ENVIRONMENTS
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.rollout import RolloutError, collect_groups

SEEDS, NUM_GENERATIONS, BROKEN_SEED = [0, 1, 2], 2, 1


def with_a_broken_tool(environment):
    """The environment, with a bug in its tools: any tool call in scenario `BROKEN_SEED` raises."""

    def call_tool(self, name, arguments):
        if self.seed == BROKEN_SEED:
            raise RuntimeError(f"bug in {self.name}'s tool {name}")
        return environment.call_tool(self, name, arguments)

    return type(f"Broken{environment.__name__}", (environment,), {"call_tool": call_tool})


def collect(environment, max_exceptions):
    env = with_a_broken_tool(environment)()
    policy = ScriptedPolicy(env, "random", seed=0)  # valid calls, so the tool runs on the first turn
    return collect_groups(env, policy, SEEDS, NUM_GENERATIONS, max_exceptions=max_exceptions, progress=False)


def test_tool_exceptions_within_max_exceptions_are_recorded_and_the_rest_finishes(fault_report):
    injected = recorded = finished = 0
    for environment in ENVIRONMENTS.values():
        groups = collect(environment, max_exceptions=NUM_GENERATIONS)
        for group in groups:
            failures = [e for e in group.exceptions if e.type == "RuntimeError" and "bug in" in e.traceback]
            injected += NUM_GENERATIONS * (group.seed == BROKEN_SEED)
            recorded += len(failures)
            finished += len(group.trajectories)
            members = sorted([t.metadata["member"] for t in group.trajectories] + [e.member for e in group.exceptions])
            assert members == list(range(NUM_GENERATIONS)), "every member is a trajectory or a recorded failure"
    expected = len(ENVIRONMENTS) * len(SEEDS) * NUM_GENERATIONS
    lost = expected - finished - recorded
    fault_report.record(
        "environment: tool exception within max_exceptions",
        injected=injected,
        outcome=(
            f"{recorded} of {injected} failed trajectories recorded on their groups with the traceback, in "
            f"{len(ENVIRONMENTS)} environments; the other {finished} finished"
        ),
        lost=lost,
    )
    assert recorded == injected and lost == 0


def test_one_tool_exception_past_max_exceptions_stops_the_collection_with_every_cause(fault_report):
    injected = reported = 0
    for environment in ENVIRONMENTS.values():
        with pytest.raises(RolloutError, match=rf"max_exceptions={NUM_GENERATIONS - 1} allows") as error:
            collect(environment, max_exceptions=NUM_GENERATIONS - 1)
        injected += NUM_GENERATIONS
        reported += sum("bug in" in cause.traceback for cause in error.value.causes)
    fault_report.record(
        "environment: tool exception past max_exceptions",
        injected=injected,
        outcome=(
            f"RolloutError in each of {len(ENVIRONMENTS)} environments, naming the budget; {reported} of {injected} "
            "failures among its causes, with their tracebacks"
        ),
        lost=injected - reported,
    )
    assert reported == injected
