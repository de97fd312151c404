"""Scripted policies: hand-written strategies that read their state out of the history.

They are the baselines every learned policy is compared with, and the demonstrators that warm-start the tiny
model. Each environment module defines its strategies ("random", and "expert" where one exists); this class
makes any of them a batched `Policy` for the rollout engine.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from agentic_rl_lab.envs.base import Environment, Message
from agentic_rl_lab.rollout import Action


class ScriptedPolicy:
    """Play `env.strategies[strategy]` for every history. Seeded, so a collection is reproducible."""

    def __init__(self, env: Environment, strategy: str = "expert", seed: int = 0) -> None:
        if strategy not in env.strategies:
            choices = ", ".join(sorted(env.strategies))
            raise ValueError(f"{env.name} has no scripted strategy {strategy!r}; choose one of: {choices}")
        self.name = f"{env.name}:{strategy}"
        self.strategy = env.strategies[strategy]
        self.rng = random.Random(seed)

    def act(self, histories: Sequence[list[Message]], tools: list[dict[str, Any]]) -> list[Action]:
        return [Action(self.strategy(history, self.rng)) for history in histories]

    def __repr__(self) -> str:
        return f"ScriptedPolicy({self.name!r})"
