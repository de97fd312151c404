"""The exercises at the end of every notebook, and the checks that grade them.

Each exercise is three cells:
1. the learner's cell: a function (or class) whose body is `raise NotImplementedError("TODO: ...")`;
2. the check: `exercises.check("1", check_..., answer)` calls one of the `check_...` functions below on the answer.
   Its `assert`s are written so that a wrong answer fails them, with a message that says what is wrong;
3. the solution, collapsed in JupyterLab and Colab: the reference answer, then `exercises.solution("1", ...)`.

The notebook's parameters cell sets `EXERCISES`. A learner runs with `"learner"`: a check raises until its TODO is
done. CI runs with `"ci"`: each check must *fail* on the untouched TODO (a check that passes an unfinished answer
would pass a wrong one too), each solution must pass, and `summary()` asserts that every exercise ran both ways.
tests/test_exercises.py feeds each check the wrong answers its docstring names.

The checks import what their notebook already uses, inside the function: notebook 01 never loads torch.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_rl_lab.envs import (
    Environment,
    FogMaze,
    GuessNumber,
    Message,
    Outcome,
    fog_maze,
    tool_call_message,
    tool_exchanges,
)
from agentic_rl_lab.envs.guess_number import feasible_interval

NOT_DONE = (AssertionError, NotImplementedError)
"""How a check says "not (yet) right": a failed `assert`, or the TODO's `raise NotImplementedError`."""


class Exercises:
    """Runs a notebook's exercise checks in `mode` "learner" or "ci", and records how each one went."""

    def __init__(self, mode: str = "learner") -> None:
        if mode not in ("learner", "ci"):
            raise ValueError(f'EXERCISES must be "learner" or "ci", got {mode!r}')
        self.mode = mode
        self.results: dict[str, dict[str, str]] = {}
        """Per exercise: what its check said about the learner's answer, and whether its solution passed."""

    def check(self, name: str, check: Callable[..., None], *answer: Any, **context: Any) -> None:
        """The check cell: run `check(*answer, **context)` on the learner's answer."""
        try:
            check(*answer, **context)
            failure = None
        except NOT_DONE as error:
            failure = f"{type(error).__name__}: {error}"
        self.results.setdefault(name, {})["check"] = failure or "passed"
        if self.mode == "learner":
            if failure:  # `from None`: the message says what is wrong; the check's own traceback would not help
                raise AssertionError(f"exercise {name} is not done yet. {failure}") from None
            print(f"exercise {name}: done, the check passes")
        elif failure is None:
            raise AssertionError(
                f"exercise {name}: the check passed the untouched TODO, so it would pass a wrong answer"
            )
        else:
            print(f"exercise {name}: the untouched TODO fails its check, as it should ({failure})")

    def solution(self, name: str, check: Callable[..., None], *answer: Any, **context: Any) -> None:
        """The solution cell: the same check must pass the reference answer, in either mode."""
        try:
            check(*answer, **context)
        except NOT_DONE as error:
            raise AssertionError(
                f"exercise {name}: the solution fails its check. {type(error).__name__}: {error}"
            ) from error
        self.results.setdefault(name, {})["solution"] = "passed"
        print(f"exercise {name}: the solution passes the check")

    def summary(self) -> None:
        """What ran. In "ci" mode, assert that every exercise (at least two) failed on its TODO and passed its
        solution: a notebook that skipped a check, or whose check passed the TODO, fails here."""
        for name, result in self.results.items():
            print(
                f"exercise {name}: check {result.get('check', 'not run')}; solution {result.get('solution', 'not run')}"
            )
        if self.mode == "ci":
            assert len(self.results) >= 2, f"a notebook needs at least two exercises; {len(self.results)} ran"
            for name, result in self.results.items():
                assert result.get("check", "passed") != "passed", f"exercise {name}: its check did not run on the TODO"
                assert result.get("solution") == "passed", f"exercise {name}: its solution did not run"


# ----- 01: agents as POMDPs ---------------------------------------------------------------------------------------
Strategy = Callable[[list[Message], random.Random], Message]
"""A scripted policy as notebook 01 writes them: the history so far and a random generator -> the next action."""


@dataclass
class Episode:
    """One finished episode: every message, the ground truth, and how many actions were invalid."""

    history: list[Message]
    outcome: Outcome
    invalid_actions: int


def play(env: Environment, strategy: Strategy, seeds: Iterable[int]) -> list[Episode]:
    """One episode per scenario seed. Each episode gets one random generator for all its turns (a new one every
    turn would make the same "random" choice again and again), seeded apart from the scenario (a generator seeded
    like the environment's would draw its hidden secret)."""
    episodes = []
    for seed in seeds:
        rng = random.Random(f"strategy/{seed}")
        history = env.reset(seed)
        while not env.done:
            action = strategy(history, rng)
            history += [action, *env.step(action).observation]
        episodes.append(Episode(history, env.outcome(), env.metrics["invalid_actions"]))
    return episodes


def tool_call(action: Message) -> tuple[str, dict[str, Any]]:
    """The name and arguments of an action's one tool call."""
    calls = action.get("tool_calls") if isinstance(action, dict) else None
    assert calls and len(calls) == 1, f"an action is one tool call (tool_call_message), got {action!r}"
    arguments = calls[0]["function"]["arguments"]
    return calls[0]["function"]["name"], json.loads(arguments) if isinstance(arguments, str) else arguments


def check_third_strategy(third: Strategy, episodes: int = 300) -> None:
    """Exercise 01.1: every guess is one third of the way up the feasible interval (give or take rounding), no
    guess is wasted, and on the same secrets it needs more guesses than binary search and fewer than `mediocre`.
    Rejects binary search itself, `mediocre`'s random guess, and a third of the whole range instead of the interval.
    """
    env = GuessNumber()
    played = play(env, third, range(episodes))
    wasted = sum(episode.invalid_actions for episode in played)
    assert wasted == 0, f"{wasted} invalid actions in {episodes} games: every guess must be a valid guess(n)"
    for episode in played:
        for index, action in enumerate(episode.history):
            if action["role"] == "assistant":
                low, high = feasible_interval(episode.history[:index], env.low, env.high)
                n, target = tool_call(action)[1].get("n"), low + (high - low) / 3
                assert isinstance(n, int) and abs(n - target) <= 1, (
                    f"with {low}..{high} still possible, the guess was {n}; a third of the way up is {target:.1f}"
                )
    mean = {
        name: statistics.fmean(e.outcome.num_steps for e in play(env, env.strategies[name], range(episodes)))
        for name in ("expert", "mediocre")
    }
    mine = statistics.fmean(episode.outcome.num_steps for episode in played)
    print(f"third: {mine:.2f} guesses on average; expert {mean['expert']:.2f}, mediocre {mean['mediocre']:.2f}")
    assert mean["expert"] < mine < mean["mediocre"], (
        "it should need more guesses than binary search, fewer than mediocre"
    )


def check_memoryless_walker(walker: Strategy, mazes: int = 100, probes: int = 20) -> None:
    """Exercise 01.2: the walker makes a valid move from the latest observation alone, steps into the exit whenever
    it is in view, and escapes fewer mazes than the expert. It is probed on the histories of walkers that do reach
    the exit (`expert` and `mediocre`): after each, it must move as it does when shown only the latest observation,
    with the same random generator. Rejects `expert` and `mediocre` (they remember), a random walk that ignores the
    exit, and actions that are not a move.
    """
    maze = FogMaze()
    histories = [e.history for name in ("expert", "mediocre") for e in play(maze, maze.strategies[name], range(probes))]
    before_each_move = [h[:i] for h in histories for i, message in enumerate(h) if message["role"] == "assistant"]
    for k, history in enumerate(before_each_move):
        latest = history[-1]["content"]  # these walkers never make an invalid move, so this is always a view
        alone = [history[0], {"role": "user", "content": latest}]
        name, arguments = tool_call(walker(history, random.Random(k)))
        move = arguments.get("direction")
        assert name == "move" and move in fog_maze.DIRECTIONS, (
            f"a move is move(direction=north|east|south|west), got {name}({arguments})"
        )
        again = tool_call(walker(alone, random.Random(k)))[1].get("direction")
        assert move == again, (
            f"after {len(history)} messages it moved {move}, but shown only the latest observation ({latest!r}) it "
            f"moved {again}: a memoryless walker decides from the latest observation alone"
        )
        exit_side = fog_maze.latest_view(history)[1]
        assert exit_side in (None, move), f"the exit was in view ({latest!r}) but it moved {move}, not {exit_side}"
    success = {
        name: statistics.fmean(e.outcome.success for e in play(maze, strategy, range(mazes)))
        for name, strategy in (("memoryless", walker), ("expert", maze.strategies["expert"]))
    }
    print(f"escaped: memoryless {success['memoryless']:.0%} of {mazes} mazes, the expert {success['expert']:.0%}")
    assert success["memoryless"] < success["expert"], "without memory it should escape fewer mazes than the expert"


# ----- 02: collecting trajectories --------------------------------------------------------------------------------
def check_bisector(policy: Any, scenarios: int = 50) -> None:
    """Exercise 02.1: `policy.act(histories, tools)` returns one `rollout.Action` per history, and the policy plays
    binary search: each of `scenarios` games found in at most 7 guesses (2**7 > 100), none wasted. Rejects a
    random guess inside the interval (`mediocre` needs 8 or more in about a third of games) and bare messages."""
    from agentic_rl_lab.rollout import Action, collect_groups

    env = GuessNumber()
    opening = env.reset(0)
    actions = policy.act([opening, opening], env.tool_schemas)
    assert isinstance(actions, list) and len(actions) == 2 and all(isinstance(a, Action) for a in actions), (
        f"act must return a list with one rollout.Action per history (Action(message)), got {actions!r}"
    )
    trajectories = [t for g in collect_groups(env, policy, range(scenarios), 2, progress=False) for t in g.trajectories]
    worst = max(trajectories, key=lambda t: (not t.outcome.success, t.num_turns, bool(t.errors)))
    print(f"{len(trajectories)} games; the worst took {worst.num_turns} guesses")
    assert worst.outcome.success and worst.num_turns <= 7 and not worst.errors, (
        f"scenario {worst.seed}: {worst.num_turns} turns, success {worst.outcome.success}, errors {worst.errors}; "
        "binary search finds any number of 1..100 in at most 7 valid guesses"
    )


def check_longest_turn(longest_turn: Callable[[list[Any]], tuple[Any, Any]], groups: list[Any], tokenizer: Any) -> None:
    """Exercise 02.2: `longest_turn(groups)` returns (trajectory, completion) for an assistant turn with the most
    sampled tokens of all groups, the completion one of that trajectory's own, whose ids decode to its message's
    text. Rejects the first turn, the longest trajectory's turn, and a completion paired with another trajectory."""
    from agentic_rl_lab.chat import END_OF_TURN, assistant_text

    trajectory, completion = longest_turn(groups)
    most = max(len(c.token_ids) for g in groups for t in g.trajectories for c in t.completions)
    assert len(completion.token_ids) == most, (
        f"that turn sampled {len(completion.token_ids)} tokens; the longest {most}"
    )
    assert completion in trajectory.completions, "return the trajectory that the completion belongs to"
    text = tokenizer.decode(completion.token_ids).removesuffix(END_OF_TURN)
    print(f"{most} tokens: {text!r}")
    assert text == assistant_text(trajectory.messages[completion.message_index]), "its ids do not decode to its message"


# ----- 03: relative judging ---------------------------------------------------------------------------------------
def check_guess_count_judge(judge: Any, groups_per_strategy: int = 6) -> None:
    """Exercise 03.1: the judge's rewards equal the ground truth on `guess_number` groups of `mediocre` (finds the
    number in varied turns) and `random` (mostly runs out of turns), with `outcome` hidden from it. Rejects a judge
    that reads `outcome`, counts every message rather than the assistant's, or forgets to score failures 0."""
    import copy

    from agentic_rl_lab.policies import ScriptedPolicy
    from agentic_rl_lab.rollout import collect_groups

    env = GuessNumber()
    groups = [
        g
        for name in ("mediocre", "random")
        for g in collect_groups(env, ScriptedPolicy(env, name), range(groups_per_strategy), 4, progress=False)
    ]
    blinded = copy.deepcopy(groups)
    for trajectory in (t for g in blinded for t in g.trajectories):
        trajectory.outcome = None  # the ground truth, which no LLM judge sees
    try:
        scored = judge.score_groups(blinded, progress=False)
    except (AttributeError, TypeError) as error:
        raise AssertionError(
            f"judging failed ({error!r}); the check hides `outcome`: read only the messages"
        ) from error
    assert len(scored) == len(groups), f"the judge skipped {len(groups) - len(scored)} groups"
    for truth, judged in zip((t for g in groups for t in g.trajectories), (t for g in blinded for t in g.trajectories)):
        assert judged.reward is not None and abs(judged.reward - truth.outcome.score) < 1e-9, (
            f"{truth.num_turns} turns, last reply {truth.messages[-1]['content']!r}: scored {judged.reward}, "
            f"ground truth {truth.outcome.score}"
        )
    print(f"{sum(len(g.trajectories) for g in groups)} trajectories, every reward equal to the ground truth")


def check_first_minus_last(first_minus_last: Callable[[list[Any]], float], *judged: list[Any]) -> None:
    """Exercise 03.2: `first_minus_last(groups)` equals `diagnostics.position_bias(groups)["first_minus_last"]` on
    each list of judged groups given (one call per group, and several). Rejects last minus first, and a mean over
    groups of their first call only."""
    from agentic_rl_lab.judge import diagnostics

    for groups in judged:
        mine, library = first_minus_last(groups), diagnostics.position_bias(groups)["first_minus_last"]
        print(f"first minus last: by hand {mine:.4f}, diagnostics.position_bias {library:.4f}")
        assert abs(mine - library) < 1e-9, "read every call of every group: its `order` and its `scores`"


# ----- 04: GRPO step by step --------------------------------------------------------------------------------------
def check_dr_grpo_advantages(dr_grpo_advantages: Callable[[list[float]], list[float]], rewards: list[float]) -> None:
    """Exercise 04.1: A_i = r_i - mean(r), as `compute_advantages(scale_rewards="none")` computes it, on `rewards`,
    on half of them and on (1, 0, ..., 0). Rejects the std-scaled advantages and an empty list."""
    from agentic_rl_lab.grpo import compute_advantages
    from agentic_rl_lab.trajectory import Trajectory, TrajectoryGroup

    for case in (list(rewards), [0.5 * r for r in rewards], [1.0] + [0.0] * (len(rewards) - 1)):
        group = TrajectoryGroup(
            env="any", seed=0, trajectories=[Trajectory(env="any", seed=0, messages=[], reward=r) for r in case]
        )
        library = [a.advantage for a in compute_advantages([group], scale_rewards="none").trajectories]
        library = library or [0.0] * len(case)  # a group whose rewards are all equal is dropped: no signal
        mine = list(dr_grpo_advantages(case))
        assert len(mine) == len(case), f"{len(mine)} advantages for {len(case)} rewards"
        assert all(abs(a - b) < 1e-9 for a, b in zip(mine, library)), f"rewards {case}: {mine}, expected {library}"
    print("by hand = compute_advantages(scale_rewards='none'), on the group's rewards and on two other lists")


def check_full_mask(everywhere: Any, attention_mask: Any, assistant_mask: Any) -> None:
    """Exercise 04.2: the loss mask of every real token, token by token: 1 wherever a real token is predicted (the
    prompt, the tool results and the sampled tokens), 0 on padding. Like the assistant mask it is shifted by one
    (position t predicts token t + 1), so it is `attention_mask[:, 1:]`. Rejects the unchanged mask, its inverse,
    all ones (padding), and the attention mask unshifted or shifted the wrong way."""
    import torch

    assert torch.is_tensor(everywhere), f"a tensor like `mask`, got {type(everywhere).__name__}"
    assert everywhere.shape == assistant_mask.shape, (
        f"shape {tuple(everywhere.shape)}, the loss mask's is {tuple(assistant_mask.shape)}: it covers the predicted "
        "tokens, input_ids[:, 1:]"
    )
    everywhere, intended = everywhere.detach().float().cpu(), attention_mask[:, 1:].float().cpu()
    assert not torch.equal(everywhere, assistant_mask.float().cpu()), "that is still the assistant mask"
    padding = int(((intended == 0) & (everywhere != 0)).sum())
    assert padding == 0, f"it trains on {padding} padding positions: 0 where attention_mask[:, 1:] is 0"
    assert torch.equal(everywhere, intended), (
        "1 on every real predicted token: the prompt, the tool results and the sampled tokens"
    )


# ----- 05: the training loop --------------------------------------------------------------------------------------
def check_noisy_judge(
    train: Callable[[float, str], Any], run_dir: str, noise: float, first_run: Any, steps: int
) -> None:
    """Exercise 05.1: `train(noise, run_dir)` trains a second, complete run in `run_dir`, from the starting model,
    with rewards from a reference judge of that noise, and returns its metrics. Rejects a judge without noise,
    the first run's folder (it resumes a finished run), a shorter run, and continuing from the trained model."""
    from agentic_rl_lab.judge import JudgeRecord
    from agentic_rl_lab.trajectory import load_groups

    metrics = train(noise, run_dir)
    trained = metrics[~metrics["eval_only"].astype(bool)]
    assert list(trained["step"]) == list(range(steps)), f"it trained steps {list(trained['step'])}, not 0..{steps - 1}"
    evals, first_evals = (m.dropna(subset=["eval_mean_turns"]) for m in (metrics, first_run))
    evaluated = [(row.step, bool(row.eval_only)) for row in evals.itertuples()]
    assert evaluated[:1] == [(0, True)] and evaluated[-1:] == [(steps - 1, False)], "evaluate before and after training"
    start, first_start = evals["eval_mean_turns"].iloc[0], first_evals["eval_mean_turns"].iloc[0]
    assert abs(start - first_start) <= 0.25, (  # equal on a CPU; a GPU's kernels may change a few samples
        f"before training it needed {start:.2f} guesses, the first run's model {first_start:.2f}: start from the "
        "starting model (load_model again), not from the one the first run trained"
    )
    rollouts = Path(run_dir) / "trajectories.jsonl"
    assert rollouts.exists(), f"no rollouts in {run_dir}: train the new run there (GRPOTrainer's run_dir)"
    groups = load_groups(rollouts)
    assert groups and {JudgeRecord.of(g).judge for g in groups} == {"reference"}, (
        f"judge with ReferenceJudge in {run_dir}"
    )
    spread = statistics.pstdev(t.reward - t.outcome.score for g in groups for t in g.trajectories)
    assert spread > noise / 3, f"its rewards differ from the ground truth by {spread:.3f} (std): pass noise={noise}"
    for name, run in (("first run", first_evals), (f"noise {noise}", evals)):
        print(f"{name}: {run['eval_mean_turns'].iloc[0]:.2f} -> {run['eval_mean_turns'].iloc[-1]:.2f} guesses")


def check_resume(resume: Callable[[str], Any], run_dir: str, trainer: Any, steps: int) -> None:
    """Exercise 05.2: `resume(run_dir)` builds a new trainer on the finished run's folder, as after a restart, and
    trains it: it must end at the last step, with the same metrics, having written no new rollout. Rejects the old
    trainer, a new one that was not trained, a new folder, and more steps."""
    rollouts = Path(run_dir) / "trajectories.jsonl"
    written, before = rollouts.read_text().count("\n"), trainer.metrics()
    resumed = resume(run_dir)
    assert resumed is not trainer, "build a new GRPOTrainer, as a restarted kernel would; `trainer` knows it is done"
    assert Path(resumed.run_dir).resolve() == Path(run_dir).resolve(), f"resume the run in {run_dir}"
    assert resumed.step == steps, f"the trainer is at step {resumed.step}, not {steps}: train() loads the checkpoint"
    after = resumed.metrics()
    assert list(after["step"]) == list(before["step"]), f"steps {list(after['step'])}, were {list(before['step'])}"
    assert after["reward_mean"].equals(before["reward_mean"]), "the metrics changed: it trained again"
    assert rollouts.read_text().count("\n") == written, "it wrote new rollouts: it trained again"
    print(f"resumed at step {resumed.step}: no new step, the metrics as they were")


# ----- 06: your own environment -----------------------------------------------------------------------------------
def check_search_expert(strategy: Strategy, env: Any, episodes: int = 300) -> None:
    """Exercise 06.1: `strategy` plays the notebook's thermostat (any task with `low`, `high` and one integer
    argument) as well as binary search: every episode found, every call valid, and on the same scenarios no more
    turns on average than the check's own bisection. Rejects `stepping` (too many turns), a bisection that ignores
    the replies or the range (it fails or wastes turns), and one that moves the wrong way on a reply."""

    def reference(history: list[Message], rng: random.Random) -> Message:
        low, high = env.low, env.high
        for _, arguments, reply in tool_exchanges(history):
            value = next(iter(arguments.values()))
            if reply.startswith("too cold"):
                low = max(low, value + 1)
            elif reply.startswith("too warm"):
                high = min(high, value - 1)
        return _same_call(env, (low + high) // 2, len(history))

    played = play(env, strategy, range(episodes))
    invalid = sum(e.invalid_actions for e in played)
    assert invalid == 0, f"{invalid} invalid calls: every setting must be inside [{env.low}, {env.high}]"
    failed = sum(not e.outcome.success for e in played)
    assert failed == 0, f"{failed} of {episodes} episodes never found it: narrow the interval with every reply"
    turns = statistics.mean(e.outcome.num_steps for e in played)
    best = statistics.mean(e.outcome.num_steps for e in play(env, reference, range(episodes)))
    assert turns <= best + 0.05, f"{turns:.2f} turns on average; binary search needs {best:.2f} on these scenarios"
    print(f"{turns:.2f} turns on average, as binary search ({best:.2f})")


def _same_call(env: Any, value: int, length: int) -> Message:
    """The task's one tool, called with `value` as its one argument."""
    tool = env.tools[0]
    (argument,) = tool.arguments.model_fields
    return tool_call_message(tool.name, {argument: value}, f"call_{length}")


def check_success_rate(
    success_rate: Callable[[Any, int], float], model_dir: Any, env: Any, seeds: range, tier: str, seed: int,
    episodes: int = 48,
) -> None:  # fmt: skip
    """Exercise 06.2: `success_rate(model_dir, episodes)` is the share of the first `episodes` held-out scenarios
    that the model succeeds at, sampled with its tier's settings. Rejects a count instead of a share, the mean score
    instead of success, and a figure 0.1 or more away from the check's own measurement on the same seeds."""
    from agentic_rl_lab.models import load_model
    from agentic_rl_lab.policies import HFPolicy
    from agentic_rl_lab.rollout import collect_groups

    episodes = min(episodes, len(seeds))
    got = success_rate(model_dir, episodes)
    assert isinstance(got, float) and 0.0 <= got <= 1.0, f"return a share between 0 and 1, got {got!r}"
    loaded = load_model(tier, model_name=model_dir, add_lora=False)
    policy = HFPolicy(loaded.model, loaded.tokenizer, **loaded.profile.sampling, seed=seed)
    groups = collect_groups(env, policy, seeds[:episodes], 1, progress=False)
    trajectories = [t for g in groups for t in g.trajectories]
    expected = sum(t.outcome.success for t in trajectories) / episodes
    score = statistics.mean(t.outcome.score for t in trajectories)
    assert abs(got - expected) <= 0.1, f"{got:.3f}, but the model succeeds on {expected:.3f} of these scenarios" + (
        " (that is its mean score: count successes)" if abs(got - score) < 1e-9 else ""
    )
    print(f"success rate {got:.3f} (the check measured {expected:.3f})")
