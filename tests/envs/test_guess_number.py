"""guess_number, and through it the shared POMDP rules of `Environment` (bad actions, truncation, hiding)."""

import json
import random
import re
from functools import cache

import pytest

from agentic_rl_lab.envs import ERROR_KINDS, GuessNumber, make, tool_call_message, tool_exchanges
from agentic_rl_lab.envs.guess_number import feasible_interval, optimal_mean_guesses


def play(env, strategy, seed, rng_seed=0):
    """Play one episode with a scripted strategy; return the history and every step result."""
    rng = random.Random(rng_seed)
    history = env.reset(seed)
    results = []
    while not env.done:
        action = env.strategies[strategy](history, rng)
        result = env.step(action)
        history += [action, *result.observation]
        results.append(result)
    return history, results


def test_same_seed_same_episode_and_different_seeds_differ():
    env = GuessNumber()
    first, _ = play(env, "mediocre", seed=7)
    second, _ = play(env, "mediocre", seed=7)
    assert first == second
    secrets = set()
    for seed in range(50):
        env.reset(seed)
        secrets.add(env.hidden_state()["secret"])
    assert len(secrets) > 30


def test_answers_point_towards_the_secret():
    env = GuessNumber(low=1, high=100)
    env.reset(3)
    secret = env.hidden_state()["secret"]
    for n in (1, 50, 100):
        if n == secret:
            continue
        reply = env.step(tool_call_message("guess", {"n": n})).observation[0]["content"]
        assert reply == f"{'higher' if secret > n else 'lower'} than {n}"
    result = env.step(tool_call_message("guess", {"n": secret}))
    assert result.done and result.observation[0]["content"] == "correct"
    assert env.outcome().success


BAD_ACTIONS = {
    "no_tool_call": "I think it is 42",
    "malformed_tool_call": {"role": "assistant", "tool_calls": [{"name": "guess"}]},
    "unknown_tool": tool_call_message("shout", {"n": 3}),
    "malformed_arguments": {
        "role": "assistant",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "guess", "arguments": "{n: 4"}}],
    },
    "invalid_arguments": tool_call_message("guess", {}),  # missing n
}


@pytest.mark.parametrize("kind", sorted(BAD_ACTIONS))
def test_every_bad_action_is_an_error_observation_not_an_exception(kind):
    env = GuessNumber()
    env.reset(0)
    result = env.step(BAD_ACTIONS[kind])
    assert not result.done
    assert result.observation[0]["content"].startswith("Error:")
    assert [error["kind"] for error in result.info["errors"]] == [kind]
    assert env.metrics[f"errors/{kind}"] == 1
    assert env.metrics["invalid_actions"] == 1
    assert env.metrics["turns"] == 1


@pytest.mark.parametrize(
    "arguments",
    [{"n": 0}, {"n": 101}, {"n": "50"}, {"n": 50.5}, {"n": 50, "m": 1}, {"n": None}, {"n": True}, "[1, 2]", "50"],
)
def test_out_of_range_mistyped_and_extra_arguments_are_invalid(arguments):
    env = GuessNumber()
    env.reset(0)
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = {"id": "c1", "type": "function", "function": {"name": "guess", "arguments": raw}}
    result = env.step({"role": "assistant", "content": None, "tool_calls": [call]})
    assert result.observation == [{"role": "tool", "tool_call_id": "c1", "content": result.observation[0]["content"]}]
    assert result.observation[0]["content"].startswith("Error:")
    assert env.metrics["invalid_actions"] == 1
    assert env.metrics["errors/invalid_arguments"] + env.metrics["errors/malformed_arguments"] == 1


def test_weird_actions_never_raise():
    env = GuessNumber()
    env.reset(0)
    for action in [
        {},
        {"role": "assistant"},
        {"tool_calls": "guess"},
        {"tool_calls": [None]},
        "",
        {"tool_calls": [{}]},
    ]:
        result = env.step(action)
        assert result.observation and "Error" in result.observation[0]["content"]
        if result.done:
            break
    assert set(env.error_counts) <= set(ERROR_KINDS)


def test_every_tool_call_in_a_turn_gets_a_reply_and_calls_after_the_end_do_not_run():
    env = GuessNumber()
    env.reset(0)
    secret = env.hidden_state()["secret"]
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "guess", "arguments": json.dumps({"n": n})}}
        for i, n in enumerate([secret, secret])
    ]
    result = env.step({"role": "assistant", "content": None, "tool_calls": calls})
    assert result.done
    assert [m["tool_call_id"] for m in result.observation] == ["c0", "c1"]
    assert result.observation[0]["content"] == "correct"
    assert result.observation[1]["content"].startswith("Not run")
    assert env.hidden_state()["guesses"] == [secret]


def test_episode_is_truncated_at_max_turns():
    env = GuessNumber(max_turns=3)
    env.reset(0)
    for turn in range(1, 4):
        result = env.step("no idea")
        assert result.info["turn"] == turn
    assert result.done and result.info["truncated"]
    assert "Out of turns" in result.observation[-1]["content"]
    assert env.outcome().success is False and env.outcome().score == 0.0
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("again")


def test_step_before_reset_raises_a_clear_error():
    with pytest.raises(RuntimeError, match="reset"):
        GuessNumber().step("hello")


def test_bad_constructor_and_seed_arguments_are_rejected():
    with pytest.raises(ValueError, match="low < high"):
        GuessNumber(low=5, high=5)
    with pytest.raises(ValueError, match="max_turns"):
        GuessNumber(max_turns=0)
    with pytest.raises(TypeError, match="seed"):
        GuessNumber().reset("3")
    with pytest.raises(ValueError, match="unknown environment"):
        make("guess_numbers")


@pytest.mark.parametrize("strategy", ["random", "mediocre", "expert"])
def test_hidden_secret_never_appears_in_an_observation(strategy):
    env = GuessNumber()
    for seed in range(200):
        history, results = play(env, strategy, seed)
        public = {env.low, env.high, env.max_turns}  # stated in the goal, the tool schema or the rules
        for (_, arguments, _), result in zip(tool_exchanges(history), results):
            for message in result.observation:  # an answer may repeat the agent's own guess: "lower than 50"
                numbers = {int(x) for x in re.findall(r"-?\d+", message["content"])}
                assert numbers <= public | {arguments.get("n")}
                assert "secret" not in message["content"]


def test_history_is_the_state_the_feasible_interval_is_read_from_it():
    env = GuessNumber()
    history, _ = play(env, "expert", seed=11)
    secret = env.hidden_state()["secret"]
    for cut in range(2, len(history) + 1):
        low, high = feasible_interval(history[:cut], 1, 100)
        assert low <= secret <= high
    assert [name for name, _, _ in tool_exchanges(history)] == ["guess"] * env.turn


def test_scripted_strategies_are_valid_and_ranked():
    env = GuessNumber()
    mean_guesses = {}
    for strategy in ["random", "mediocre", "expert"]:
        turns, wins = 0, 0
        for seed in range(300):
            play(env, strategy, seed)
            assert env.metrics["invalid_actions"] == 0
            turns += env.turn
            wins += env.outcome().success
        mean_guesses[strategy] = turns / 300
        if strategy != "random":
            assert wins >= 0.95 * 300
    assert mean_guesses["expert"] < mean_guesses["mediocre"] < mean_guesses["random"]
    assert abs(mean_guesses["expert"] - optimal_mean_guesses()) < 0.25
    assert 6.9 < mean_guesses["mediocre"] < 7.9


def test_interval_tool_says_only_what_the_history_already_says():
    """`interval()` answers the feasible interval read from the history: never more (it does not leak the secret),
    never less; it costs a turn like a guess."""
    env = GuessNumber()
    for seed in range(100):
        history, rng = env.reset(seed), random.Random(seed)
        while not env.done:
            action = env.strategies["mediocre"](history, rng)
            if rng.random() < 0.5:
                action = tool_call_message("interval", {})
            result = env.step(action)
            history += [action, *result.observation]
            if action["tool_calls"][0]["function"]["name"] == "interval":
                low, high = feasible_interval(history, 1, 100)
                assert result.observation[0]["content"] == f"from {low} to {high}"
                assert not env.outcome().success
    env.reset(0)
    assert env.step(tool_call_message("interval", {})).observation[0]["content"] == "from 1 to 100"
    assert env.turn == 1
    bad = env.step(tool_call_message("interval", {"n": 3}))  # it takes no arguments
    assert bad.observation[0]["content"].startswith("Error") and env.metrics["invalid_actions"] == 1


def test_hesitant_is_binary_search_that_wastes_turns_on_interval():
    """Every guess of `hesitant` is binary search's; before about 30% of its guesses it asks `interval()`, never
    twice in a row, so it needs about 7.5 turns where binary search needs 5.8, and almost never runs out."""
    env, turns, wins, checks, guesses = GuessNumber(), 0, 0, 0, 0
    for seed in range(600):
        history, _ = play(env, "hesitant", seed, rng_seed=seed + 10_000)
        names = [name for name, _, _ in tool_exchanges(history)]
        assert "interval interval" not in " ".join(names)
        for cut, message in enumerate(history):
            call = message.get("tool_calls", [{}])[0].get("function", {})
            if call.get("name") == "guess":
                expected = env.strategies["expert"](history[:cut], random.Random(0))
                assert call == expected["tool_calls"][0]["function"]
        checks, guesses = checks + names.count("interval"), guesses + names.count("guess")
        turns += env.turn
        wins += env.outcome().success
        assert env.metrics["invalid_actions"] == 0
    assert 0.25 < checks / guesses < 0.35
    assert 7.2 < turns / 600 < 7.9 and wins / 600 > 0.99


def test_repeating_is_binary_search_that_sometimes_guesses_its_last_number_again():
    """Every guess of `repeating` is binary search's or a repeat of its previous guess, which it makes about 25% of
    the time: about 7.4 guesses where binary search needs 5.8, and it rarely runs out of turns."""
    env, turns, wins, repeats, moves = GuessNumber(), 0, 0, 0, 0
    for seed in range(600):
        history, _ = play(env, "repeating", seed, rng_seed=seed + 10_000)
        exchanges = tool_exchanges(history)
        assert {name for name, _, _ in exchanges} == {"guess"}
        for turn in range(1, len(exchanges)):
            n, previous = exchanges[turn][1]["n"], exchanges[turn - 1][1]["n"]
            low, high = feasible_interval(history[: 3 + 2 * turn], 1, 100)  # what the history said before it
            assert n in ((low + high) // 2, previous)
            repeats, moves = repeats + (n == previous), moves + 1
        turns += env.turn
        wins += env.outcome().success
    assert 0.22 < repeats / moves < 0.28
    assert 7.1 < turns / 600 < 7.7 and wins / 600 > 0.97


@cache
def brute_force_optimum(size: int) -> float:
    """Total guesses over all secrets, minimised over every first guess (dynamic programming)."""
    if size == 0:
        return 0
    return size + min(brute_force_optimum(k) + brute_force_optimum(size - 1 - k) for k in range(size))


@pytest.mark.parametrize("size", [1, 2, 3, 7, 10, 33, 100])
def test_optimal_mean_guesses_matches_brute_force(size):
    assert optimal_mean_guesses(1, size) == pytest.approx(brute_force_optimum(size) / size)


def test_score_falls_linearly_with_turns():
    env = GuessNumber(max_turns=10)
    env.reset(0)
    secret = env.hidden_state()["secret"]
    env.step(tool_call_message("guess", {"n": 1 if secret != 1 else 2}))
    env.step(tool_call_message("guess", {"n": secret}))
    assert env.outcome().score == pytest.approx(0.9)
    assert env.outcome().num_steps == 2


def test_tool_schema_is_an_openai_function():
    schema, interval = GuessNumber().tool_schemas
    assert interval["function"]["name"] == "interval" and interval["function"]["parameters"]["properties"] == {}
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "guess"
    assert schema["function"]["parameters"]["required"] == ["n"]
    assert schema["function"]["parameters"]["properties"]["n"] == {"type": "integer"}


def test_a_turn_is_rewarded_when_its_guess_is_one_the_answers_so_far_allow():
    from agentic_rl_lab.envs.guess_number import consistent_guesses

    env = GuessNumber()
    history = env.reset(seed=0)  # the secret is drawn from the seed
    secret = env.hidden_state()["secret"]
    wrong = 50 if secret != 50 else 51
    outside = 1 if wrong < secret else 100  # ruled out by the answer to `wrong`
    turns = [("guess", {"n": wrong}), ("guess", {"n": wrong}), ("guess", {"n": outside}), ("interval", {})]
    turns += [("guess", {"n": True}), ("guess", {"n": secret})]
    for name, arguments in turns:
        call = tool_call_message(name, arguments, f"call_{len(history)}")
        result = env.step(call)
        history += [call, *result.observation]
    assert consistent_guesses(history) == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert env.turn_rewards(history) == consistent_guesses(history)
