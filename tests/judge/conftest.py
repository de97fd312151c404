"""Fixtures for the judge tests: small real groups, a clean environment, and a private judge cache."""

import copy

import pytest

from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.rollout import collect_groups
from agentic_rl_lab.trajectory import TrajectoryGroup


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The default judge cache lives in the test's own folder, traffic stays on this machine, and no judge
    setting leaks in from the machine's environment."""
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "AGENTIC_RL_LAB_JUDGE_MODEL",
        "AGENTIC_RL_LAB_JUDGE_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("AGENTIC_RL_LAB_CACHE", str(tmp_path / "lab-cache"))


_GROUPS: list[TrajectoryGroup] = []


@pytest.fixture
def groups() -> list[TrajectoryGroup]:
    """Four guess_number groups of five trajectories by the mediocre scripted policy: real episodes whose
    ground-truth scores differ within each group. A fresh deep copy for every test."""
    if not _GROUPS:
        env = GuessNumber()
        _GROUPS.extend(collect_groups(env, ScriptedPolicy(env, "mediocre", seed=0), range(4), 5, progress=False))
    return copy.deepcopy(_GROUPS)
