"""Behaviour of `fog_maze`: a perfect maze seen through fog, solved only by remembering the history."""

from __future__ import annotations

import json
import random
import re
from collections import deque

import pytest

from agentic_rl_lab.envs.base import Message, tool_call_message
from agentic_rl_lab.envs.fog_maze import FogMaze, neighbour

# Every tool reply the agent can get from a valid move, and nothing else: no numbers, no map, no coordinates.
SIDES = r"(north|east|south|west)"
VIEW = rf"open: {SIDES}(, {SIDES})*(\. exit: {SIDES})?"
REPLY = re.compile(rf"(moved {SIDES}|wall: you stay)\. {VIEW}|exit reached")
OPENING = re.compile(rf"Find the exit\. {VIEW}")


def move(direction: str) -> Message:
    return tool_call_message("move", {"direction": direction})


def play(env: FogMaze, strategy: str, seed: int, history: list[Message] | None = None) -> list[Message]:
    """Run a scripted strategy to the end of the episode; return the full history."""
    history = history if history is not None else env.reset(seed)
    rng = random.Random(seed)
    while not env.done:
        action = FogMaze.strategies[strategy](history, rng)
        history += [action, *env.step(action).observation]
    return history


def reachable(hidden: dict) -> set:
    """Cells reachable from the start through the hidden map's passages (breadth-first search)."""
    links: dict = {}
    for a, b in hidden["passages"]:
        links.setdefault(a, []).append(b)
        links.setdefault(b, []).append(a)
    seen, queue = {hidden["start"]}, deque([hidden["start"]])
    while queue:
        for nxt in links.get(queue.popleft(), []):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def closed_side(env: FogMaze) -> str:
    return next(d for d in ("north", "east", "south", "west") if d not in env.open_sides[env.position])


def test_same_seed_same_maze_and_transitions() -> None:
    env, twin = FogMaze(), FogMaze()
    for seed in range(20):
        assert env.reset(seed) == twin.reset(seed)
        assert env.hidden_state() == twin.hidden_state()
        for direction in ["north", "east", "east", "south", "west", "south", "south"]:
            assert env.step(move(direction)).observation == twin.step(move(direction)).observation
        assert env.hidden_state() == twin.hidden_state()


def test_different_seeds_give_different_mazes() -> None:
    env = FogMaze()
    mazes = set()
    for seed in range(30):
        env.reset(seed)
        mazes.add(json.dumps(env.hidden_state()["passages"]))
    assert len(mazes) >= 28


@pytest.mark.parametrize("width, height", [(5, 5), (2, 2), (7, 3), (3, 8)])
def test_maze_is_perfect_start_in_a_corner_exit_farthest(width: int, height: int) -> None:
    env = FogMaze(width, height)
    cells = width * height
    for seed in range(100):
        env.reset(seed)
        hidden = env.hidden_state()
        # Connected with exactly cells - 1 passages: a spanning tree, so one path between any two cells.
        assert len(hidden["passages"]) == cells - 1
        assert len(reachable(hidden)) == cells
        assert hidden["start"][0] in (0, width - 1) and hidden["start"][1] in (0, height - 1)
        distances = env._distances(hidden["start"])
        assert distances[hidden["exit"]] == max(distances.values()) == hidden["shortest_path_length"]
        assert hidden["shortest_path_length"] >= width + height - 2


def test_expert_always_escapes_and_never_beats_the_shortest_path() -> None:
    env = FogMaze()
    for seed in range(300):
        play(env, "expert", seed)
        outcome = env.outcome()
        assert outcome.success, f"seed {seed}"
        assert outcome.num_steps >= env.shortest_path_length
        assert 0 < outcome.score <= 1
        assert env.metrics["invalid_actions"] == 0


def test_expert_works_from_a_history_it_did_not_write() -> None:
    # The expert's only state is the history: it takes over after random wandering and still finds the exit.
    env = FogMaze(max_turns=200)
    for seed in range(50):
        history = env.reset(seed)
        rng = random.Random(seed)
        for _ in range(10):
            if not env.done:
                action = FogMaze.strategies["random"](history, rng)
                history += [action, *env.step(action).observation]
        if not env.done:
            play(env, "expert", seed, history)
        assert env.outcome().success


def test_random_policy_is_always_valid() -> None:
    env = FogMaze()
    for seed in range(50):
        play(env, "random", seed)
        assert env.metrics["invalid_actions"] == 0
        assert env.metrics["turns"] == env.turn <= env.max_turns


def test_memory_pays_expert_beats_mediocre_beats_random() -> None:
    env = FogMaze()
    scores = {}
    for strategy in ("random", "mediocre", "expert"):
        total = 0.0
        for seed in range(100):
            play(env, strategy, seed)
            total += env.outcome().score
        scores[strategy] = total / 100
    assert scores["random"] < scores["mediocre"] < scores["expert"] < 1


def test_walking_the_shortest_path_scores_one() -> None:
    env = FogMaze()
    env.reset(7)
    path = [env.exit]
    distances = env._distances(env.start)
    while path[-1] != env.start:  # walk back from the exit, always to a cell one step closer to the start
        nearer = [neighbour(path[-1], d) for d in env.open_sides[path[-1]]]
        path.append(min(nearer, key=distances.__getitem__))
    path.reverse()
    for here, there in zip(path, path[1:], strict=False):
        direction = next(d for d in env.open_sides[here] if neighbour(here, d) == there)
        result = env.step(move(direction))
    assert result.done and result.observation[0]["content"] == "exit reached"
    assert env.outcome().score == 1.0 and env.outcome().num_steps == env.shortest_path_length


BAD_ACTIONS = {
    "plain text": ({"role": "assistant", "content": "I go north."}, "no_tool_call"),
    "unknown tool": (tool_call_message("jump", {"direction": "north"}), "unknown_tool"),
    "malformed JSON": (
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "move", "arguments": "{north"}}]},
        "malformed_arguments",
    ),
    "missing argument": (tool_call_message("move", {}), "invalid_arguments"),
    "bad direction": (tool_call_message("move", {"direction": "up"}), "invalid_arguments"),
    "extra argument": (tool_call_message("move", {"direction": "north", "steps": 2}), "invalid_arguments"),
}


@pytest.mark.parametrize("case", BAD_ACTIONS)
def test_bad_action_is_an_error_observation_and_a_count(case: str) -> None:
    action, kind = BAD_ACTIONS[case]
    env = FogMaze()
    env.reset(0)
    before = env.hidden_state()
    result = env.step(action)
    assert result.observation[0]["content"].startswith("Error:")
    assert [error["kind"] for error in result.info["errors"]] == [kind]
    assert env.metrics[f"errors/{kind}"] == 1 and env.metrics["invalid_actions"] == 1
    assert env.turn == 1 and not result.done
    assert env.hidden_state()["position"] == before["position"]


def test_bad_direction_error_lists_the_directions_and_schema_is_an_enum() -> None:
    env = FogMaze()
    env.reset(0)
    reply = env.step(tool_call_message("move", {"direction": "up"})).observation[0]["content"]
    assert "north" in reply and "west" in reply
    schema = env.tool_schemas[0]["function"]["parameters"]
    assert schema["properties"]["direction"]["enum"] == ["north", "east", "south", "west"]
    assert schema["required"] == ["direction"]


def test_one_move_per_turn() -> None:
    env = FogMaze()
    env.reset(0)
    side = sorted(env.open_sides[env.position])[0]
    calls = [move(side)["tool_calls"][0], move(side)["tool_calls"][0]]
    calls[1] = {**calls[1], "id": "call_1"}
    result = env.step({"role": "assistant", "content": None, "tool_calls": calls})
    assert result.observation[0]["content"].startswith(f"moved {side}.")
    assert result.observation[1]["content"].startswith("Error: one move per turn")
    assert env.metrics["errors/invalid_arguments"] == 1
    assert env.position == neighbour(env.start, side)


def test_wall_bump_costs_a_turn_but_is_not_an_error() -> None:
    env = FogMaze()
    env.reset(3)
    start = env.position
    result = env.step(move(closed_side(env)))
    assert result.observation[0]["content"].startswith("wall: you stay. open: ")
    assert env.position == start and env.turn == 1
    assert env.metrics["invalid_actions"] == 0 and result.info["errors"] == []


def test_observations_never_reveal_the_hidden_state() -> None:
    env = FogMaze()
    for seed in range(100):
        history = play(env, "random", seed)
        opening = [m["content"] for m in history if m["role"] in ("system", "user")][:2]
        replies = [m["content"] for m in history if m["role"] == "tool"]
        assert OPENING.fullmatch(opening[1])
        for reply in replies:
            assert REPLY.fullmatch(reply), reply
        for text in [*opening, *replies]:
            assert not re.search(r"\d|[()+|~@]|---", text), text


def test_exit_shows_in_the_view_exactly_when_it_is_next_door() -> None:
    env = FogMaze()
    for seed in range(30):
        history = env.reset(seed)
        rng = random.Random(seed)
        while not env.done:
            action = FogMaze.strategies["random"](history, rng)
            observation = env.step(action).observation
            history += [action, *observation]
            if env.done:
                break
            beside = [d for d in env.open_sides[env.position] if neighbour(env.position, d) == env.exit]
            assert ("exit: " in observation[0]["content"]) == bool(beside)
            if beside:
                assert observation[0]["content"].endswith(f". exit: {beside[0]}")


def test_truncation_at_max_turns() -> None:
    env = FogMaze(max_turns=3)  # the exit is at least 8 moves away
    env.reset(0)
    results = [env.step(move("north")) for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert [r.info["truncated"] for r in results] == [False, False, True]
    assert results[-1].observation[-1]["content"].startswith("Out of turns")
    assert env.outcome().success is False and env.outcome().score == 0.0
    with pytest.raises(RuntimeError):
        env.step(move("north"))


def test_stepping_after_the_exit_raises() -> None:
    env = FogMaze()
    play(env, "expert", 1)
    assert env.done and env.outcome().success
    with pytest.raises(RuntimeError):
        env.step(move("north"))


def test_renders_show_the_truth_and_what_was_seen() -> None:
    env = FogMaze()
    env.reset(2)
    full, seen = env.render(), env.render_seen()
    assert len(full.splitlines()) == len(seen.splitlines()) == 2 * env.height + 1
    assert "@" in full and "E" in full and "~" not in full
    assert "E" not in seen and "S" not in seen  # fog everywhere but the start, where the agent stands
    labels = [line[1 + 4 * x : 4 + 4 * x] for line in seen.splitlines()[1::2] for x in range(env.width)]
    assert labels.count("~~~") == env.width * env.height - 1 and labels.count(" @ ") == 1
    play(env, "expert", 2)
    assert env.render_seen().count("~") < seen.count("~")
    assert env.hidden_state()["render"] == env.render()
    assert set(env.hidden_state()["visited"]) == env.visited


def test_constructor_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="at least 2 x 2"):
        FogMaze(width=1)
    with pytest.raises(ValueError, match="max_turns"):
        FogMaze(max_turns=0)
    assert FogMaze().max_turns == 40
    assert FogMaze(3, 4).max_turns == 2 * 11 - 5
