"""The environments of the lab: POMDPs whose actions are tool calls and whose observations are tool results."""

from __future__ import annotations

from typing import Any

from agentic_rl_lab.envs.base import (
    ERROR_KINDS,
    Environment,
    InvalidAction,
    Message,
    Outcome,
    StepResult,
    Tool,
    ToolArguments,
    tool_call_message,
    tool_exchanges,
)
from agentic_rl_lab.envs.fog_maze import FogMaze
from agentic_rl_lab.envs.guess_number import GuessNumber
from agentic_rl_lab.envs.inbox_search import InboxSearch

ENVIRONMENTS: dict[str, type[Environment]] = {
    GuessNumber.name: GuessNumber,
    FogMaze.name: FogMaze,
    InboxSearch.name: InboxSearch,
}


def make(name: str, **kwargs: Any) -> Environment:
    """Build an environment by name, e.g. `make("guess_number", high=50)`."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {name!r}; choose one of: {', '.join(sorted(ENVIRONMENTS))}")
    return ENVIRONMENTS[name](**kwargs)


__all__ = [
    "ENVIRONMENTS",
    "ERROR_KINDS",
    "Environment",
    "FogMaze",
    "GuessNumber",
    "InboxSearch",
    "InvalidAction",
    "Message",
    "Outcome",
    "StepResult",
    "Tool",
    "ToolArguments",
    "make",
    "tool_call_message",
    "tool_exchanges",
]
