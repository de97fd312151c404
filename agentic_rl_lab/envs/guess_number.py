"""`guess_number`: find a hidden integer with the tool `guess(n)`, which answers "higher than n", "lower than n" or
"correct".

A second tool, `interval()`, tells which integers can still hold the secret. It never tells the agent anything
its own history does not already say, yet costs a turn like a guess: a tool a sloppy agent leans on, and a habit
that GRPO can train away.

The toy POMDP of the lab. The hidden state is one number; each observation is one word. The best any strategy
can do is binary search, which makes this task a yardstick: a trained agent's mean number of guesses can be
compared with the information-theoretic optimum (`optimal_mean_guesses`).
"""

from __future__ import annotations

import random
from typing import Any

from agentic_rl_lab.envs.base import (
    Environment,
    InvalidAction,
    Message,
    Outcome,
    Tool,
    ToolArguments,
    tool_call_message,
    tool_exchanges,
)


class GuessArguments(ToolArguments):
    n: int


class NoArguments(ToolArguments):
    pass


class GuessNumber(Environment):
    """Guess a secret integer in `[low, high]`; each guess is one turn."""

    name = "guess_number"

    def __init__(self, low: int = 1, high: int = 100, max_turns: int = 12) -> None:
        super().__init__(max_turns)
        if low >= high:
            raise ValueError(f"need low < high, got low={low}, high={high}")
        self.low, self.high = low, high
        self.tools = [
            Tool("guess", f"Guess the secret integer n ({low} <= n <= {high}).", GuessArguments),
            Tool("interval", "Ask which integers can still hold the secret, given your guesses.", NoArguments),
        ]

    def setup(self, rng: random.Random) -> list[Message]:
        self.secret = rng.randint(self.low, self.high)
        self.guesses: list[int] = []
        self.found = False
        return [
            {"role": "system", "content": "You play a guessing game. Call the tool guess with an integer."},
            {
                "role": "user",
                "content": f"I am thinking of an integer from {self.low} to {self.high}. Find it in as few "
                "guesses as possible.",
            },
        ]

    def call_tool(self, name: str, arguments: Any) -> tuple[str, bool]:
        if name == "interval":
            below = [g for g in self.guesses if g < self.secret]
            above = [g for g in self.guesses if g > self.secret]
            return f"from {max(below, default=self.low - 1) + 1} to {min(above, default=self.high + 1) - 1}", False
        n = arguments.n
        if not self.low <= n <= self.high:
            raise InvalidAction(f"n must be between {self.low} and {self.high}, got {n}.")
        self.guesses.append(n)
        if n == self.secret:
            self.found = True
            return "correct", True
        # The answer names the guess ("higher than 50"): the observation reads on its own, in one message.
        return f"{'higher' if self.secret > n else 'lower'} than {n}", False

    def outcome(self) -> Outcome:
        """Success is finding the number. Score falls linearly with turns used, so the policy that maximises
        the expected score is the one that minimises the expected number of guesses: binary search."""
        score = (self.max_turns - self.turn + 1) / self.max_turns if self.found else 0.0
        return Outcome(success=self.found, num_steps=self.turn, score=score)

    def hidden_state(self) -> dict[str, Any]:
        return {"secret": self.secret, "guesses": list(self.guesses)}

    def turn_rewards(self, messages: list[Message]) -> list[float]:
        return consistent_guesses(messages)


def optimal_mean_guesses(low: int = 1, high: int = 100) -> float:
    """The fewest guesses any strategy needs on average, for a secret drawn uniformly from `[low, high]`.

    Every strategy is a binary search tree over the candidates: a secret at depth d costs d guesses. The
    tree with the smallest total depth is complete, with 2**(d-1) nodes at depth d, which binary search builds.
    """
    remaining, depth, total = high - low + 1, 1, 0
    count = remaining
    while remaining > 0:
        at_depth = min(2 ** (depth - 1), remaining)
        total += depth * at_depth
        remaining -= at_depth
        depth += 1
    return total / count


# ----- scripted policies: each reads the feasible interval out of the history, the agent's only state ---------
def feasible_interval(history: list[Message], low: int, high: int) -> tuple[int, int]:
    """The interval that can still hold the secret, given every guess and answer in the history."""
    for name, arguments, reply in tool_exchanges(history):
        n = arguments.get("n")
        if name != "guess" or not isinstance(n, int):
            continue
        if reply.startswith("higher"):
            low = max(low, n + 1)
        elif reply.startswith("lower"):
            high = min(high, n - 1)
    return low, max(low, high)


def consistent_guesses(messages: list[Message]) -> list[float]:
    """1.0 for each turn that guesses a number the answers before it still allow, else 0.0: a repeat of a wrong
    guess, a guess outside the interval, or any other call wastes the turn. A process reward for each turn, which
    the outcome (found it, in how many guesses) gives only to the episode as a whole."""
    low, high = _bounds(messages)
    rewards = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        allowed_low, allowed_high = feasible_interval(messages[:index], low, high)
        calls = tool_exchanges([message])  # [(name, arguments, "")] for each call that parses
        n = calls[0][1].get("n") if len(calls) == 1 and calls[0][0] == "guess" else None
        rewards.append(float(isinstance(n, int) and not isinstance(n, bool) and allowed_low <= n <= allowed_high))
    return rewards


def _bounds(history: list[Message]) -> tuple[int, int]:
    """Read the game's range from the goal message, as an agent would."""
    words = [int(w) for w in history[1]["content"].replace(".", " ").split() if w.lstrip("-").isdigit()]
    return words[0], words[1]


def expert(history: list[Message], rng: random.Random) -> Message:
    """Binary search: always guess the middle of the feasible interval."""
    low, high = feasible_interval(history, *_bounds(history))
    return tool_call_message("guess", {"n": (low + high) // 2}, f"call_{len(history)}")


def mediocre(history: list[Message], rng: random.Random) -> Message:
    """Always a consistent guess, but uniformly at random inside the feasible interval: about 7.4 guesses
    on 1..100 against binary search's 5.8. The demonstrator that leaves GRPO real headroom."""
    low, high = feasible_interval(history, *_bounds(history))
    return tool_call_message("guess", {"n": rng.randint(low, high)}, f"call_{len(history)}")


def hesitant(history: list[Message], rng: random.Random, check_probability: float = 0.3) -> Message:
    """Binary search that, before a guess, asks `interval()` with probability 0.3 (never twice in a row): it
    spends turns on what its history already says. About 7.5 turns on 1..100 against binary search's 5.8: a habit
    for GRPO to train away in a model that can follow it (a ~5M one could not, see `repeating`).
    """
    exchanges = tool_exchanges(history)
    just_checked = bool(exchanges) and exchanges[-1][0] == "interval"
    if not just_checked and rng.random() < check_probability:
        return tool_call_message("interval", {}, f"call_{len(history)}")
    return expert(history, rng)


def repeating(history: list[Message], rng: random.Random, repeat_probability: float = 0.25) -> Message:
    """Binary search that, with probability 0.25 at every turn after the first, guesses its last number again,
    as if to make sure: about 7.4 guesses on 1..100 (98.5% found within 12 turns) against binary search's 5.8.

    The demonstrator of the cpu-tiny model: as wasteful as `mediocre`, but one a ~5M model can imitate.
    Binary search on a fixed range is one tree, in which every number sits at one node, so the next guess follows
    from the last guess and its answer alone, the two messages right before the turn; a repeat keeps them there.
    `mediocre`'s uniform guess asks the model to compute the interval from the whole history, and `hesitant`'s
    `interval()` turns push the last guess back by a varying distance: a 5M model learned neither (measured, see
    docs/tiny-model.md). GRPO's headroom is one decision per turn: repeat, or move on.
    """
    guesses = [arguments.get("n") for name, arguments, _ in tool_exchanges(history) if name == "guess"]
    if guesses and isinstance(guesses[-1], int) and rng.random() < repeat_probability:
        return tool_call_message("guess", {"n": guesses[-1]}, f"call_{len(history)}")
    return expert(history, rng)


def random_valid(history: list[Message], rng: random.Random) -> Message:
    """A valid call every turn, ignoring the history: any number in the game's range."""
    low, high = _bounds(history)
    return tool_call_message("guess", {"n": rng.randint(low, high)}, f"call_{len(history)}")


GuessNumber.strategies = {
    "random": random_valid,
    "mediocre": mediocre,
    "hesitant": hesitant,
    "repeating": repeating,
    "expert": expert,
}
