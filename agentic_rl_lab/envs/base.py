"""An LLM agent's environment, framed as a POMDP.

- **Action**: one assistant message, OpenAI chat format. It is plain text or a list of tool calls.
- **Observation**: the messages the environment sends back: tool results (`role="tool"`) or user messages.
- **Hidden state**: whatever the environment keeps to itself (a secret number, a maze map, the answer to a
  question). The agent never sees it.
- **Agent state**: the interaction history, i.e. every message so far. Because the agent cannot see the
  hidden state, the history is all it has to act on, so the history *is* its state.

`Environment` does the bookkeeping that every task shares: it validates tool calls, turns bad actions into
error observations the agent can read (bad actions never raise), counts them, and truncates at `max_turns`.
A concrete task only says what its tools do (`call_tool`) and how well the episode went (`outcome`).
"""

from __future__ import annotations

import json
import random
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

Message = dict[str, Any]
"""One OpenAI chat message: `{"role": ..., "content": ..., "tool_calls": [...], "tool_call_id": ...}`."""

Strategy = Callable[[list[Message], random.Random], Message]
"""A scripted policy: reads the history (the agent's state) and returns the next action."""

ERROR_KINDS = (
    "no_tool_call",  # plain text where a tool call was required
    "malformed_tool_call",  # the tool call itself is not an OpenAI tool call
    "unknown_tool",  # a tool the environment does not have
    "malformed_arguments",  # arguments are not a JSON object
    "invalid_arguments",  # missing, extra, mistyped or out-of-range arguments
)
"""Every way an action can be bad. Each one becomes an error observation and a count in `metrics`."""


class InvalidAction(Exception):
    """Raised inside `call_tool` for an argument the schema cannot check, like a number out of range.

    The environment catches it and shows the message to the agent; it never reaches the caller.
    """


class ToolArguments(BaseModel):
    """Base for a tool's arguments. Strict: `"7"` is not a number and unknown arguments are errors."""

    model_config = ConfigDict(extra="forbid", strict=True)


@dataclass(frozen=True)
class Tool:
    """One tool the agent can call. Its OpenAI function schema is derived from `arguments`."""

    name: str
    description: str
    arguments: type[ToolArguments]

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema for this tool, as sent in `tools=[...]`."""
        parameters = self.arguments.model_json_schema()
        parameters.pop("title", None)
        for prop in parameters.get("properties", {}).values():
            prop.pop("title", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }


class Outcome(BaseModel):
    """Ground truth about a finished episode, computed from the hidden state.

    For evaluation and the reference judge only: never shown to the agent or to an LLM judge.
    """

    model_config = ConfigDict(frozen=True)

    success: bool
    num_steps: int
    score: float
    """Quality in [0, 1]: 0 for failure, 1 for the best possible episode."""


@dataclass
class StepResult:
    """What `Environment.step` returns: the observation messages, whether the episode ended, and info."""

    observation: list[Message]
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class Environment(ABC):
    """A POMDP for a tool-using LLM agent. Subclasses set `name`, `tools` and `max_turns`.

    Protocol: `messages = env.reset(seed)`, then `env.step(action)` until `done`, then `env.outcome()`.
    """

    name: ClassVar[str]
    strategies: ClassVar[dict[str, Strategy]] = {}
    """Scripted policies for this task by name: "random" (random valid calls), and "expert" where one exists."""
    rubric: ClassVar[str] = ""
    """What good work means for this task, as bullet points an LLM judge adds to the general rubric (see
    `agentic_rl_lab.judge.prompt.rubric_for`); empty when the general one says enough."""
    tools: list[Tool]
    max_turns: int

    def __init__(self, max_turns: int) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.max_turns = max_turns
        self.turn = 0
        self.done = True
        self.error_counts: Counter[str] = Counter()
        self._has_reset = False

    # ----- what a task implements -------------------------------------------------------------------------
    @abstractmethod
    def setup(self, rng: random.Random) -> list[Message]:
        """Draw the hidden state from `rng` and return the opening messages (system prompt and goal)."""

    @abstractmethod
    def call_tool(self, name: str, arguments: ToolArguments) -> tuple[str, bool]:
        """Run a validated tool call; return the tool's reply and whether the episode is now over.

        Raise `InvalidAction` for bad arguments the schema cannot catch (the agent sees the message).
        """

    @abstractmethod
    def outcome(self) -> Outcome:
        """Ground truth for the episode so far (success, steps, score). Never shown to the agent."""

    @abstractmethod
    def hidden_state(self) -> dict[str, Any]:
        """The true state, for teaching displays and tests. Never shown to the agent."""

    def turn_rewards(self, messages: list[Message]) -> list[float] | None:
        """A reward for each assistant turn of a finished episode (process supervision), for GRPO's
        `credit_assignment="turn"`; None, the default, for a task that rewards only the outcome."""
        return None

    # ----- the shared POMDP loop --------------------------------------------------------------------------
    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function schemas, the form a chat API or chat template expects."""
        return [tool.schema() for tool in self.tools]

    def reset(self, seed: int) -> list[Message]:
        """Start a new episode. The same seed always gives the same hidden state and opening messages."""
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self.seed = seed
        self.turn = 0
        self.done = False
        self.error_counts = Counter()
        self._has_reset = True
        return self.setup(random.Random(seed))

    def step(self, action: Message | str) -> StepResult:
        """Apply one action (an assistant message) and return the observation.

        Bad actions never raise: they produce an error observation and a count in `metrics`.
        Stepping a finished episode is a programming error, so that one does raise.
        """
        if not self._has_reset:
            raise RuntimeError("call env.reset(seed) before env.step(action)")
        if self.done:
            raise RuntimeError("the episode is over; call env.reset(seed) to start a new one")
        self.turn += 1
        message = {"role": "assistant", "content": action} if isinstance(action, str) else action
        observation, errors = self._respond(message)
        truncated = not self.done and self.turn >= self.max_turns
        if truncated:
            self.done = True
            observation.append(
                {"role": "user", "content": f"Out of turns: the episode ended after {self.max_turns} turns."}
            )
        return StepResult(observation, self.done, {"errors": errors, "truncated": truncated, "turn": self.turn})

    @property
    def metrics(self) -> dict[str, int]:
        """Counts for the episode so far: turns, invalid actions, and each kind of error."""
        counts = {f"errors/{kind}": self.error_counts[kind] for kind in ERROR_KINDS}
        return {"turns": self.turn, "invalid_actions": sum(self.error_counts.values()), **counts}

    def _respond(self, message: Any) -> tuple[list[Message], list[dict[str, str]]]:
        """Answer every tool call in `message`; collect an error record for each bad one."""
        errors: list[dict[str, str]] = []

        def error(kind: str, text: str) -> str:
            self.error_counts[kind] += 1
            errors.append({"kind": kind, "message": text})
            return f"Error: {text}"

        tool_calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not tool_calls:
            names = ", ".join(tool.name for tool in self.tools)
            text = error("no_tool_call", f"reply with a tool call; the tools are: {names}.")
            return [{"role": "user", "content": text}], errors
        if not isinstance(tool_calls, list):
            text = error("malformed_tool_call", "tool_calls must be a list of tool calls.")
            return [{"role": "user", "content": text}], errors

        observation = []
        for index, call in enumerate(tool_calls):
            call_id = (call.get("id") if isinstance(call, dict) else None) or f"call_{index}"
            if self.done:
                reply = "Not run: the episode ended with an earlier call."
            else:
                reply = self._run_call(call, error)
            observation.append({"role": "tool", "tool_call_id": str(call_id), "content": reply})
        return observation, errors

    def _run_call(self, call: Any, error: Any) -> str:
        """Validate one OpenAI tool call, run it, and return the text the agent will read."""
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return error("malformed_tool_call", 'a tool call needs {"function": {"name": ..., "arguments": ...}}.')
        tool = next((t for t in self.tools if t.name == function["name"]), None)
        if tool is None:
            names = ", ".join(t.name for t in self.tools)
            return error("unknown_tool", f"there is no tool named {function['name']!r}; the tools are: {names}.")
        raw = function.get("arguments", "{}")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as exc:
            return error("malformed_arguments", f"the arguments of {tool.name} are not valid JSON ({exc.msg}).")
        if not isinstance(arguments, dict):
            return error("malformed_arguments", f"the arguments of {tool.name} must be a JSON object.")
        try:
            parsed = tool.arguments.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            return error("invalid_arguments", f"bad arguments for {tool.name}: {problems}.")
        try:
            reply, self.done = self.call_tool(tool.name, parsed)
        except InvalidAction as exc:
            return error("invalid_arguments", str(exc))
        return reply


# ----- helpers for writing actions and reading histories ----------------------------------------------------
def tool_call_message(name: str, arguments: dict[str, Any], call_id: str = "call_0") -> Message:
    """An assistant message that calls one tool, in OpenAI format (arguments as a JSON string)."""
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def tool_exchanges(history: list[Message]) -> list[tuple[str, dict[str, Any], str]]:
    """Pair every tool call in `history` with its reply: `[(tool name, arguments, reply text), ...]`.

    This is how a policy reads its state out of the history. A reply is matched by `tool_call_id` among the
    tool messages that follow the call's turn (ids may repeat across turns). Calls whose arguments do not
    parse are skipped.
    """
    exchanges = []
    for position, message in enumerate(history):
        if message.get("role") != "assistant" or not isinstance(message.get("tool_calls"), list):
            continue
        replies = {}
        for later in history[position + 1 :]:
            if later.get("role") != "tool":
                break
            replies.setdefault(later.get("tool_call_id"), later.get("content", ""))
        for index, call in enumerate(message["tool_calls"]):
            try:
                function = call["function"]
                raw = function.get("arguments", "{}")
                arguments = json.loads(raw) if isinstance(raw, str) else dict(raw)
                exchanges.append((function["name"], arguments, replies.get(call.get("id") or f"call_{index}", "")))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
    return exchanges
