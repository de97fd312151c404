"""The notebooks' exercise checks reject plausible wrong answers and pass the reference ones, and the harness fails
a notebook whose check would pass an untouched TODO (agentic_rl_lab/exercises.py)."""

import copy
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer

from agentic_rl_lab import exercises
from agentic_rl_lab.chat import END_OF_TURN, assistant_text
from agentic_rl_lab.envs import GuessNumber, fog_maze, guess_number, tool_call_message, tool_exchanges
from agentic_rl_lab.envs.guess_number import feasible_interval
from agentic_rl_lab.judge import GroupJudge, JudgeCall, JudgeRecord, ReferenceJudge
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.rollout import Action, collect_groups
from agentic_rl_lab.seeds import held_out_seeds
from agentic_rl_lab.trajectory import Completion, Trajectory, TrajectoryGroup, append_groups

TINY_MODEL = Path(exercises.__file__).parent / "data" / "tiny-model"


def todo(*args, **kwargs):
    raise NotImplementedError("TODO: your code here")


def rejects(check, *args, **kwargs) -> str:
    """The message with which `check` rejects an answer (it must reject it)."""
    with pytest.raises(AssertionError) as error:
        check(*args, **kwargs)
    return str(error.value)


# ----- the harness --------------------------------------------------------------------------------------------------
def never_passes(answer):
    """A check. (It raises rather than asserts: pytest would add its own explanation to an assert's message.)"""
    if answer != "right":
        raise AssertionError("the answer is not right")


def test_a_learner_is_stopped_by_the_todo_and_by_a_wrong_answer_and_passes_with_the_right_one(capsys):
    run = exercises.Exercises("learner")
    with pytest.raises(AssertionError, match="exercise 1 is not done yet. NotImplementedError: TODO"):
        run.check("1", lambda answer: answer(), todo)
    with pytest.raises(AssertionError, match="not done yet. AssertionError: the answer is not right"):
        run.check("1", never_passes, "wrong")
    run.check("1", never_passes, "right")
    assert "exercise 1: done" in capsys.readouterr().out


def test_a_bug_in_the_learners_code_is_raised_as_itself_not_graded():
    with pytest.raises(ZeroDivisionError):
        exercises.Exercises("learner").check("1", lambda answer: answer(), lambda: 1 / 0)


def test_ci_wants_each_check_to_fail_its_todo_and_each_solution_to_pass():
    run = exercises.Exercises("ci")
    run.check("1", never_passes, "wrong")  # the untouched TODO fails: as it should
    run.solution("1", never_passes, "right")
    with pytest.raises(AssertionError, match="passed the untouched TODO"):
        run.check("2", never_passes, "right")
    with pytest.raises(AssertionError, match="the solution fails its check"):
        exercises.Exercises("ci").solution("1", never_passes, "wrong")


def test_the_ci_summary_fails_a_notebook_whose_exercise_did_not_run_both_ways():
    run = exercises.Exercises("ci")
    run.check("1", never_passes, "wrong")
    run.solution("1", never_passes, "right")
    with pytest.raises(AssertionError, match="at least two exercises"):
        run.summary()
    run.check("2", never_passes, "wrong")
    with pytest.raises(AssertionError, match="exercise 2: its solution did not run"):
        run.summary()
    run.solution("2", never_passes, "right")
    run.summary()
    failed = {"check": "AssertionError: the answer is not right", "solution": "passed"}
    assert run.results == {"1": failed, "2": failed}


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="learner"):
        exercises.Exercises("solutions")


# ----- 01 -----------------------------------------------------------------------------------------------------------
def third(history, rng):
    low, high = feasible_interval(history, 1, 100)
    return tool_call_message("guess", {"n": low + (high - low) // 3}, f"call_{len(history)}")


def third_of_the_range(history, rng):
    """Forgets the interval: a third of 1..100 every time."""
    return tool_call_message("guess", {"n": 34}, f"call_{len(history)}")


def test_01_the_third_strategy_check_passes_the_reference_and_rejects_other_strategies():
    exercises.check_third_strategy(third)
    assert "a third of the way up" in rejects(exercises.check_third_strategy, guess_number.expert)
    assert "a third of the way up" in rejects(exercises.check_third_strategy, guess_number.mediocre)
    assert "a third of the way up" in rejects(exercises.check_third_strategy, third_of_the_range)


def memoryless(history, rng):
    open_directions, exit_direction = fog_maze.latest_view(history)
    return tool_call_message("move", {"direction": exit_direction or rng.choice(open_directions)}, "call_0")


def shouts(history, rng):
    return tool_call_message("shout", {"direction": "north"}, "call_0")


def test_01_the_memoryless_walker_check_rejects_walkers_that_remember_or_ignore_the_exit():
    exercises.check_memoryless_walker(memoryless)
    assert "memoryless walker decides" in rejects(exercises.check_memoryless_walker, fog_maze.expert)
    assert "memoryless walker decides" in rejects(exercises.check_memoryless_walker, fog_maze.mediocre)
    assert "the exit was in view" in rejects(exercises.check_memoryless_walker, fog_maze.random_valid)
    assert "a move is move(" in rejects(exercises.check_memoryless_walker, shouts)


def test_01_play_keeps_one_generator_per_episode_apart_from_the_scenarios():
    """The old harness gave each turn a fresh `Random(seed)`: the "random" walker then repeated one choice, and
    `mediocre` guessed the secret at once (the environment draws it from a generator with the same seed)."""
    played = exercises.play(GuessNumber(), guess_number.mediocre, range(300))
    assert statistics.fmean(e.outcome.num_steps for e in played) > 6.5


# ----- 02 -----------------------------------------------------------------------------------------------------------
class Bisector:
    def act(self, histories, tools):
        return [Action(guess_number.expert(history, random.Random(0))) for history in histories]


class Mediocre:
    def act(self, histories, tools):
        return [Action(guess_number.mediocre(history, random.Random(len(history)))) for history in histories]


class BareMessages:
    def act(self, histories, tools):
        return [guess_number.expert(history, random.Random(0)) for history in histories]


def test_02_the_bisector_check_wants_actions_and_binary_search():
    exercises.check_bisector(Bisector())
    assert "at most 7 valid guesses" in rejects(exercises.check_bisector, Mediocre())
    assert "one rollout.Action per history" in rejects(exercises.check_bisector, BareMessages())


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TINY_MODEL)


def trajectory_of(tokenizer, guesses: list[int]) -> Trajectory:
    """A guess_number trajectory whose assistant turns carry the token ids of their text."""
    messages, completions = [{"role": "user", "content": "Find it."}], []
    for n in guesses:
        message = tool_call_message("guess", {"n": n})
        messages += [message, {"role": "tool", "content": "lower", "tool_call_id": "call_0"}]
        ids = tokenizer.encode(assistant_text(message) + END_OF_TURN, add_special_tokens=False)
        completions.append(Completion(message_index=len(messages) - 2, token_ids=ids))
    return Trajectory(env="guess_number", seed=0, messages=messages, completions=completions)


def test_02_the_longest_turn_check_wants_the_turn_with_the_most_tokens_and_its_own_trajectory(tokenizer):
    short_but_many = trajectory_of(tokenizer, [5, 6, 7, 8])  # the most turns, few tokens each
    longest = trajectory_of(tokenizer, [3, 123456789])  # its second turn has the most tokens
    groups = [TrajectoryGroup(env="guess_number", seed=0, trajectories=[short_but_many, longest])]

    def reference(groups):
        pairs = [(t, c) for g in groups for t in g.trajectories for c in t.completions]
        return max(pairs, key=lambda pair: len(pair[1].token_ids))

    exercises.check_longest_turn(reference, groups, tokenizer)
    first_turn = lambda groups: (short_but_many, short_but_many.completions[0])  # noqa: E731
    longest_trajectory = lambda groups: (short_but_many, short_but_many.completions[-1])  # noqa: E731
    mismatched = lambda groups: (short_but_many, longest.completions[1])  # noqa: E731
    assert "the longest" in rejects(exercises.check_longest_turn, first_turn, groups, tokenizer)
    assert "the longest" in rejects(exercises.check_longest_turn, longest_trajectory, groups, tokenizer)
    assert "belongs to" in rejects(exercises.check_longest_turn, mismatched, groups, tokenizer)


# ----- 03 -----------------------------------------------------------------------------------------------------------
class GuessCountJudge(GroupJudge):
    name = "guess-count"
    model_name = "counts guesses"
    count_all_messages = False
    failures_score_zero = True

    def judge(self, group, shown, permutation, record):
        call = JudgeCall(permutation=permutation, members={s.id: s.member for s in shown}, order=[s.id for s in shown])
        for s in shown:
            messages = group.trajectories[s.member].messages
            guesses = len(messages) if self.count_all_messages else sum(m["role"] == "assistant" for m in messages)
            found = messages[-1]["role"] == "tool" and messages[-1]["content"] == "correct"
            call.scores[s.id] = (12 - guesses + 1) / 12 if found or not self.failures_score_zero else 0.0
        record.calls.append(call)


class ReadsTheOutcome(GuessCountJudge):
    def judge(self, group, shown, permutation, record):
        call = JudgeCall(permutation=permutation, members={s.id: s.member for s in shown}, order=[s.id for s in shown])
        call.scores.update({s.id: group.trajectories[s.member].outcome.score for s in shown})
        record.calls.append(call)


def test_03_the_judge_check_hides_the_outcome_and_wants_the_ground_truth_from_the_messages():
    exercises.check_guess_count_judge(GuessCountJudge())
    assert "read only the messages" in rejects(exercises.check_guess_count_judge, ReadsTheOutcome())
    counts_all = GuessCountJudge()
    counts_all.count_all_messages = True
    assert "ground truth" in rejects(exercises.check_guess_count_judge, counts_all)
    forgets_failures = GuessCountJudge()
    forgets_failures.failures_score_zero = False
    assert "ground truth 0.0" in rejects(exercises.check_guess_count_judge, forgets_failures)


def test_03_the_position_bias_check_wants_every_call_first_minus_last():
    env = GuessNumber()
    groups = collect_groups(env, ScriptedPolicy(env, "mediocre"), range(6), 5, progress=False)
    judges = [ReferenceJudge(noise=0.1, position_bias=0.2, permutations=k) for k in (1, 3)]
    judged = [judge.score_groups(copy.deepcopy(groups), progress=False) for judge in judges]

    def calls(groups, first_only=False):
        return [c for g in groups for c in JudgeRecord.of(g).calls[: 1 if first_only else None]]

    def reference(groups):
        return statistics.fmean(c.scores[c.order[0]] - c.scores[c.order[-1]] for c in calls(groups))

    def last_minus_first(groups):
        return -reference(groups)

    def first_call_only(groups):
        return statistics.fmean(c.scores[c.order[0]] - c.scores[c.order[-1]] for c in calls(groups, True))

    exercises.check_first_minus_last(reference, *judged)
    assert "every call" in rejects(exercises.check_first_minus_last, last_minus_first, *judged)
    assert "every call" in rejects(exercises.check_first_minus_last, first_call_only, *judged)


# ----- 04 -----------------------------------------------------------------------------------------------------------
def test_04_the_dr_grpo_check_rejects_scaled_and_missing_advantages():
    rewards = [0.9, 0.5, 0.5, 0.0]
    exercises.check_dr_grpo_advantages(lambda r: [x - statistics.fmean(r) for x in r], rewards)
    scaled = lambda r: [(x - statistics.fmean(r)) / statistics.pstdev(r) for x in r]  # noqa: E731
    assert "expected" in rejects(exercises.check_dr_grpo_advantages, scaled, rewards)
    assert "0 advantages for 4 rewards" in rejects(exercises.check_dr_grpo_advantages, lambda r: [], rewards)


def test_04_the_mask_check_wants_exactly_every_real_predicted_token():
    attention = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
    mask = torch.tensor([[0, 0, 1, 1, 0, 0, 0], [0, 0, 1, 0, 0, 1, 1]], dtype=torch.float)  # shifted, like `mask`
    exercises.check_full_mask(attention[:, 1:].float(), attention, mask)
    assert "still the assistant mask" in rejects(exercises.check_full_mask, mask.clone(), attention, mask)
    assert "padding" in rejects(exercises.check_full_mask, torch.ones_like(mask), attention, mask)
    assert "padding" in rejects(exercises.check_full_mask, attention[:, :-1].float(), attention, mask)
    assert "padding" in rejects(exercises.check_full_mask, 1 - mask, attention, mask)
    tool_results_only = attention[:, 1:] * (1 - mask)
    assert "the sampled tokens" in rejects(exercises.check_full_mask, tool_results_only, attention, mask)
    assert "shape" in rejects(exercises.check_full_mask, attention.float(), attention, mask)
    assert "a tensor" in rejects(exercises.check_full_mask, attention[:, 1:].tolist(), attention, mask)


# ----- 05 -----------------------------------------------------------------------------------------------------------
def fake_run(run_dir, noise: float, steps: int = 2, start_turns: float = 7.4) -> pd.DataFrame:
    """What a training run leaves behind, as far as the noisy-judge check reads it: judged groups on disk, and
    the metrics (an evaluation before the first step and after the last)."""
    env = GuessNumber()
    groups = collect_groups(env, ScriptedPolicy(env, "mediocre"), range(4 * steps), 4, progress=False)
    append_groups(run_dir / "trajectories.jsonl", ReferenceJudge(noise=noise).score_groups(groups, progress=False))
    rows = [{"step": 0, "eval_mean_turns": start_turns, "eval_only": True}]
    rows += [{"step": s, "reward_mean": 0.5, "eval_only": False} for s in range(steps)]
    rows[-1]["eval_mean_turns"] = start_turns - 0.5
    return pd.DataFrame(rows)


def test_05_the_noisy_judge_check_wants_a_new_complete_run_from_the_start_with_a_noisy_judge(tmp_path):
    (tmp_path / "first").mkdir()
    first = fake_run(tmp_path / "first", noise=0.0)

    def check(train, folder: str) -> None:
        exercises.check_noisy_judge(train, run_dir=str(tmp_path / folder), noise=0.3, first_run=first, steps=2)

    def noisy_run(**change):
        def train(noise: float, run_dir: str) -> pd.DataFrame:
            Path(run_dir).mkdir()
            return fake_run(Path(run_dir), **{"noise": noise, **change})

        return train

    check(noisy_run(), "reference")
    assert "pass noise=0.3" in rejects(check, noisy_run(noise=0.0), "without-noise")
    assert "not 0..1" in rejects(check, noisy_run(steps=1), "shorter")
    assert "start from the starting model" in rejects(check, noisy_run(start_turns=6.5), "trained-model")
    assert "train the new run there" in rejects(check, lambda noise, run_dir: first, "first-run-resumed")


@dataclass
class Trainer:
    """What the resume check reads of a `GRPOTrainer`: its folder, its step and its metrics. (A real run takes
    half a minute on 2 cores; notebook 05 runs the real one.)"""

    run_dir: Path
    step: int
    history: list[dict]

    def metrics(self) -> pd.DataFrame:
        return pd.DataFrame(self.history)


def test_05_the_resume_check_wants_a_new_trainer_that_resumes_without_new_steps(tmp_path):
    rows = [{"step": 0, "eval_only": True}, {"step": 0, "reward_mean": 0.4, "eval_only": False}]
    (tmp_path / "trajectories.jsonl").write_text("{}\n")
    trainer, run_dir = Trainer(tmp_path, 1, rows), str(tmp_path)

    def trains_again(folder, steps=1, reward=0.5):
        with (tmp_path / "trajectories.jsonl").open("a") as file:
            file.write("{}\n")
        return Trainer(Path(folder), steps, [*rows[:1], {**rows[1], "reward_mean": reward}])

    exercises.check_resume(lambda folder: Trainer(Path(folder), 1, list(rows)), run_dir, trainer, steps=1)
    assert "build a new GRPOTrainer" in rejects(exercises.check_resume, lambda folder: trainer, run_dir, trainer, 1)
    not_trained = lambda folder: Trainer(Path(folder), 0, [])  # noqa: E731
    assert "train() loads" in rejects(exercises.check_resume, not_trained, run_dir, trainer, 1)
    elsewhere = lambda folder: Trainer(tmp_path / "elsewhere", 1, list(rows))  # noqa: E731
    assert "resume the run in" in rejects(exercises.check_resume, elsewhere, run_dir, trainer, 1)
    one_more = lambda folder: trains_again(folder, steps=2)  # noqa: E731
    assert "not 1" in rejects(exercises.check_resume, one_more, run_dir, trainer, 1)
    assert "it trained again" in rejects(exercises.check_resume, trains_again, run_dir, trainer, 1)
    assert "it trained again" in rejects(
        exercises.check_resume, lambda f: trains_again(f, reward=0.4), run_dir, trainer, 1
    )


# ----- 06: your own environment -------------------------------------------------------------------------------------
def notebook_thermostat():
    """The `Thermostat` class as notebook 06 writes it (its cell, executed), with the notebook's two strategies."""
    import json

    notebook = json.loads((Path(__file__).parents[1] / "notebooks" / "06_your_own_environment.ipynb").read_text())
    sources = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    namespace: dict = {"tool_call_message": tool_call_message}  # imported by an earlier cell
    exec(next(s for s in sources if s.lstrip().startswith("import random") and "class Thermostat" in s), namespace)
    exec(next(s for s in sources if "def stepping" in s).split("HELD_OUT =")[0], namespace)
    return namespace["Thermostat"]


def test_06_the_search_expert_check_wants_binary_search():
    thermostat = notebook_thermostat()
    env = thermostat()

    def bisecting(history, rng, nudge=0, wrong_way=False):
        low, high = env.low, env.high
        for _, arguments, reply in tool_exchanges(history):
            cold = reply.startswith("too cold") != wrong_way
            if reply.startswith("too"):
                low, high = (
                    (max(low, arguments["degrees"] + 1), high) if cold else (low, min(high, arguments["degrees"] - 1))
                )
        middle = min(env.high, max(env.low, (low + high) // 2 + nudge))
        return tool_call_message("set_thermostat", {"degrees": middle}, f"call_{len(history)}")

    exercises.check_search_expert(bisecting, env)
    assert "binary search needs" in rejects(exercises.check_search_expert, thermostat.strategies["stepping"], env)
    assert "never found it" in rejects(exercises.check_search_expert, lambda h, r: bisecting(h, r, wrong_way=True), env)
    ignores = lambda h, r: tool_call_message("set_thermostat", {"degrees": 20}, f"call_{len(h)}")  # noqa: E731
    assert "never found it" in rejects(exercises.check_search_expert, ignores, env)
    outside = lambda h, r: tool_call_message("set_thermostat", {"degrees": 99}, f"call_{len(h)}")  # noqa: E731
    assert "invalid calls" in rejects(exercises.check_search_expert, outside, env)


def test_06_the_success_rate_check_wants_the_models_share_of_successes():
    env = GuessNumber()
    seeds = held_out_seeds(100)

    def measured(model_dir, episodes, what="success"):
        from agentic_rl_lab.models import load_model
        from agentic_rl_lab.policies import HFPolicy

        loaded = load_model("cpu-tiny", model_name=model_dir, add_lora=False)
        policy = HFPolicy(loaded.model, loaded.tokenizer, **loaded.profile.sampling, seed=0)
        groups = collect_groups(env, policy, seeds[:episodes], 1, progress=False)
        values = [getattr(t.outcome, what) for g in groups for t in g.trajectories]
        return sum(values) / episodes if what == "success" else float(statistics.mean(values))

    check = lambda answer: exercises.check_success_rate(answer, TINY_MODEL, env, seeds, "cpu-tiny", 0, 24)  # noqa: E731
    check(measured)
    assert "share between 0 and 1" in rejects(check, lambda d, n: float(measured(d, n) * n) + 1.0)
    assert "count successes" in rejects(check, lambda d, n: measured(d, n, what="score"))
    assert "the model succeeds on" in rejects(check, lambda d, n: measured(d, n) * 0.8)
