"""Does GRPO teach the warm-started tiny model to answer questions about an inbox? The realistic task, learned.

    python benchmarks/inbox_learning.py                      # 3 training seeds, 80-110 minutes on 2 cores
    python benchmarks/inbox_learning.py --seeds 0 --steps 10  # a shorter try (the file says what ran)
    python benchmarks/inbox_learning.py --strategy second_look --out runs/second_look.json  # another demonstrator

1. **Warm start.** cpu-tiny (0% on `inbox_search`) imitates the `mediocre` demonstrator on practice inboxes
   (`agentic_rl_lab.warm_start`, `INBOX_WARM_START`): search for the question's entity and look at the best match
   only, then give up one time in five, else name the line it looks for, read it and answer with the line that
   states the fact (`warm_started_model_path`: a committed copy when one is current, else the cached build, else a
   new one).
2. **GRPO** with the reference judge (the environment's score: 0 for a wrong answer, 0.7-1 for a right one, more for
   citing exactly the emails that state it), on the train split's questions, sampling at temperature 0.8 to explore,
   once for each training seed (`SEEDS`).
3. **Evaluation** before and after, on the test split (questions about entities the train split never mentions),
   with the ground truth, never the judge, at the tier's temperature (0.6): the same `EVAL_EPISODES` episodes before
   and after each run (each a question drawn by its seed), so that a lift compares the two models on the same
   questions.

The script builds the warm start when no committed copy is current (`python -m agentic_rl_lab warm-start
inbox_search`, about 30 minutes on 2 cores), then trains. What GRPO can take: the demonstrator gives up on one
question in five it could answer, and a model that imitates it does too; reading instead is worth a right
answer most of the time. And a model samples its copies less surely than it ranks them: GRPO can sharpen them.

Targets (issue 21): warm-start success at least 30% and below 70%; GRPO lifts it by at least 15 points, with every
training seed (`success_lift_min`), each run in under 30 minutes on 2 cores. `success_before` and `success_after` at
the top level are the reference-judge runs' (after: the mean over the seeds; `runs` has each one). The LLM
judge of the CPU tier, the tiny judge, does not judge well enough yet (docs/tiny-judge.md): its run is reported as
not run.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

import agentic_rl_lab
from agentic_rl_lab.envs import InboxSearch
from agentic_rl_lab.envs.inbox_search import gave_up
from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer, evaluation_metrics
from agentic_rl_lab.judge import ReferenceJudge
from agentic_rl_lab.models import PROFILES, load_model
from agentic_rl_lab.seeds import HELD_OUT_SEED_START
from agentic_rl_lab.warm_start import (
    INBOX_WARM_START,
    inbox_warm_start_envs,
    load_info,
    warm_start,
    warm_started_model_path,
)

sys.path.insert(0, str(Path(__file__).parent))
from grpo_learning import CONFIG as GUESS_NUMBER_CONFIG  # noqa: E402
from grpo_learning import cpu_name  # noqa: E402  (a sibling script, not a package)

EVAL_TEMPERATURE = PROFILES["cpu-tiny"].temperature
"""The held-out evaluation samples at the tier's temperature (0.6), before and after, whatever the training's."""
CONFIG = dataclasses.replace(GUESS_NUMBER_CONFIG, learning_rate=3e-4, temperature=0.8)
"""guess_number's learning settings (`benchmarks/grpo_learning.py`: the tier's LoRA adapters, 8 groups of 8 a step,
4 optimizer steps of 16 trajectories) at half the tier's learning rate: at 6e-4 a run gave its gain back by step 60,
breaking its calls; at 3e-4 the same seed kept it. Sampled at 0.8 for training, to explore: at the tier's 0.6, 18 of
32 of the warm start's groups on the train split had eight equal rewards (14 never right), which teach nothing; at
0.8, 11 of 32. The KL term stays (`beta=0.04`): without it, and with 72 steps, one seed broke a fifth of its calls
(docs/warm-start.md)."""
SEEDS = [0, 1, 2]
"""Training seeds, one run each from the same warm start: one seed is not a measurement."""
EVAL_EPISODES = 2000
"""Held-out episodes per evaluation, before and after: the test split's 84 questions about 24 times each, about 1
point of noise. The same episodes both times: 400 of them once read the warm start at 32.75% where 2,000 read
34.25%, and a lift measured from one set to another carries that difference (docs/warm-start.md)."""
TARGETS = {"min_success_before": 0.30, "max_success_before": 0.70, "min_lift": 0.15, "max_wall_seconds": 30 * 60}


def tool_calls(groups_metrics: dict) -> float:
    """Mean tool calls per episode: every turn is one assistant message, which makes one call here."""
    return groups_metrics["eval_mean_turns"]


def evaluate(trainer: GRPOTrainer, episodes: int) -> dict:
    """`trainer.evaluate`'s metrics on the held-out questions, and how often the model gave up (`gave_up`: the
    demonstrator's choice that GRPO should unlearn)."""
    groups = trainer.evaluation_groups(episodes, temperature=EVAL_TEMPERATURE)
    gave_up_rate = sum(gave_up(t.messages) for g in groups for t in g.trajectories) / episodes
    return {**evaluation_metrics(groups), "eval_gave_up": gave_up_rate}


def new_trainer(config: GRPOConfig, model_dir: Path, run_dir: str) -> GRPOTrainer:
    """The warm start with fresh LoRA adapters, to train on the train split and evaluate on the test split."""
    torch.manual_seed(config.seed)
    loaded = load_model("cpu-tiny", model_name=model_dir)
    env, eval_env = InboxSearch(split="train"), InboxSearch(split="test")
    return GRPOTrainer(config, loaded.model, loaded.tokenizer, env, ReferenceJudge(), run_dir, eval_env=eval_env)


def train_and_evaluate(config: GRPOConfig, model_dir: Path, episodes: int) -> dict:
    """One training seed: GRPO from the warm start, then the held-out evaluation."""
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = new_trainer(config, model_dir, run_dir)
        started = time.perf_counter()
        metrics = trainer.train()
        train_seconds = time.perf_counter() - started
        after = evaluate(trainer, episodes)
    print(f"seed {config.seed}, after:", json.dumps(after), flush=True)
    seconds = metrics[["seconds_rollout", "seconds_judge", "seconds_update"]].sum()
    return {
        "seed": config.seed,
        "success_after": after["eval_success"],
        "mean_tool_calls_after": tool_calls(after),
        "score_after": after["eval_score"],
        "gave_up_after": after["eval_gave_up"],
        "valid_turn_rate_after": after["eval_valid_turn_rate"],
        "wall_seconds": round(train_seconds, 1),
        "seconds_by_phase": {name.removeprefix("seconds_"): round(float(v), 1) for name, v in seconds.items()},
        "train_reward_by_step": [round(float(x), 4) for x in metrics["reward_mean"]],
        "train_success_by_step": [round(float(x), 4) for x in metrics["train_success"]],
    }


class Progress:
    """What an interrupted run of this benchmark already measured (each part is many minutes of CPU), kept next to
    the results, so that running it again goes on from there instead of starting over. Each part is kept with the
    settings it was measured under, and read back only under the same ones: "before" depends on the warm start and
    the evaluation, not on the training's settings, so a run that changes only those measures it once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done: dict = json.loads(path.read_text()) if path.exists() else {}

    def measure(self, name: str, settings: dict, measurement: Callable[[], dict]) -> dict:
        saved = self.done.get(name)
        if saved is not None and saved["settings"] == settings:
            print(f"{name}: measured by an earlier run, read from {self.path}", flush=True)
            return saved["result"]
        self.done[name] = {"settings": settings, "result": measurement()}
        work = self.path.with_suffix(".tmp")
        work.write_text(json.dumps(self.done))
        os.replace(work, self.path)  # whole or not at all, even when killed mid-write
        return self.done[name]["result"]


def code_digest(files: list[Path] | None = None) -> str:
    """A digest of the code a measurement ran (by default the package and the benchmark scripts): a saved part
    measured by other code is measured again."""
    if files is None:
        package, scripts = Path(agentic_rl_lab.__file__).parent, Path(__file__).parent
        files = sorted(package.rglob("*.py")) + sorted(scripts.glob("*.py"))
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=CONFIG.steps, help="GRPO steps")
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES, help="held-out episodes, before and after")
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS, help="training seeds, one run each")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "inbox_learning.json")
    parser.add_argument(
        "--strategy",
        default=INBOX_WARM_START.strategy,
        choices=sorted(set(InboxSearch.strategies) - {"random"}),
        help="the demonstrator the warm start imitates (another than the committed recipe's is built: 30 minutes)",
    )
    args = parser.parse_args()
    torch.set_num_threads(2)
    config = dataclasses.replace(CONFIG, steps=args.steps)

    started = time.perf_counter()
    if args.strategy == INBOX_WARM_START.strategy:
        model_dir = warm_started_model_path("inbox_search")
    else:
        recipe = dataclasses.replace(INBOX_WARM_START, strategy=args.strategy)
        model_dir = warm_start(inbox_warm_start_envs(), recipe)
    warm_seconds = time.perf_counter() - started
    info = load_info(model_dir)
    evaluation = {  # everything "before" depends on: the model, the questions and how they are sampled
        "warm_start": info["cache_key"],
        "episodes": args.eval_episodes,
        "eval_temperature": EVAL_TEMPERATURE,
        "sampling": {name: getattr(config, name) for name in ("top_p", "max_new_tokens", "per_device_eval_batch_size")},
        "code": code_digest(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    progress = Progress(args.out.with_suffix(".partial.json"))

    def measure_before() -> dict:  # the same model and questions for every seed
        with tempfile.TemporaryDirectory() as run_dir:
            return evaluate(new_trainer(config, model_dir, run_dir), args.eval_episodes)

    before = progress.measure("before", evaluation, measure_before)
    print("before:", json.dumps(before), flush=True)
    runs = [
        progress.measure(
            f"seed {seed}",
            {**evaluation, "config": dataclasses.asdict(dataclasses.replace(config, seed=seed))},
            lambda seed=seed: train_and_evaluate(dataclasses.replace(config, seed=seed), model_dir, args.eval_episodes),
        )
        for seed in args.seeds
    ]

    def mean(key: str) -> float:
        return statistics.mean(run[key] for run in runs)

    for run in runs:
        run["success_lift"] = run["success_after"] - before["eval_success"]
    lifts = [run["success_lift"] for run in runs]
    report = {
        "env": "inbox_search",
        "tier": "cpu-tiny, warm-started on inbox_search",
        "judge": "reference",
        "seeds": args.seeds,
        "success_before": before["eval_success"],
        "success_after": mean("success_after"),
        "success_lift": statistics.mean(lifts),
        "success_lift_min": min(lifts),
        "mean_tool_calls_before": tool_calls(before),
        "mean_tool_calls_after": mean("mean_tool_calls_after"),
        "score_before": before["eval_score"],
        "score_after": mean("score_after"),
        "gave_up_before": before["eval_gave_up"],
        "gave_up_after": mean("gave_up_after"),
        "valid_turn_rate_before": before["eval_valid_turn_rate"],
        "valid_turn_rate_after": mean("valid_turn_rate_after"),
        "wall_seconds": max(run["wall_seconds"] for run in runs),
        "runs": runs,
        "warm_start": {
            "model": str(model_dir.name),
            "cache_key": info["cache_key"],
            "config": info["config"],
            "demonstrator_success_on_its_episodes": info["demonstrations"]["success_rate"],
            "sft_seconds": info["seconds"]["sft"],
            "seconds_to_get_it_here": round(warm_seconds, 1),
        },
        "llm_judge": {
            "ran": False,
            "why": "the tiny judge reads pairs, not yet groups of 8 (docs/tiny-judge.md, issue 20): none is committed",
        },
        "eval": {
            "split": "test",
            "first_seed": HELD_OUT_SEED_START,
            "episodes_before": args.eval_episodes,
            "episodes_after": args.eval_episodes,
            "temperature": EVAL_TEMPERATURE,
        },
        "config": {**dataclasses.asdict(config), "seed": args.seeds},
        "threads": torch.get_num_threads(),
        "cpu": cpu_name(),
        "targets": TARGETS,
        "met": TARGETS["min_success_before"] <= before["eval_success"] < TARGETS["max_success_before"]
        and min(lifts) >= TARGETS["min_lift"]
        and all(run["wall_seconds"] <= TARGETS["max_wall_seconds"] for run in runs),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    progress.path.unlink()
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))
    return report


if __name__ == "__main__":
    main()
