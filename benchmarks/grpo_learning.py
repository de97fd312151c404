"""Does GRPO teach the warm-started cpu-tiny policy to guess better? The lab's learning benchmark.

    python benchmarks/grpo_learning.py                 # writes benchmarks/results/grpo_learning.json
    python benchmarks/grpo_learning.py --steps 20      # a shorter try (the file says how many steps ran)
    python benchmarks/grpo_learning.py --noise 0 --seed 1 --out /tmp/seed1.json
                                                       # another training seed: the same start and held-out seeds
    python benchmarks/grpo_learning.py --training full --noise 0
                                                       # all weights instead: writes results/grpo_learning_full.json
    python benchmarks/grpo_learning.py --judge tiny   # the tiny relative judge as the only reward:
                                                       # writes results/grpo_learning_llm_judge.json
    python benchmarks/grpo_learning.py --noise 0 --length-bias 0.3
                                                       # a judge that favours long episodes: reward hacking,
                                                       # results/grpo_learning_length_bias.json
    python benchmarks/grpo_learning.py --noise 0 --credit-assignment trajectory turn
                                                       # one advantage per episode against one per turn too (a
                                                       # guess the answers so far rule out earns 0), from the same
                                                       # start on the same seeds: results/grpo_learning_credit.json

The cpu-tiny model imitates a mediocre demonstrator on guess_number, `repeating`: binary search that guesses its
last number again about a quarter of the time (about 7.4 guesses on 1..100), while binary search alone needs 5.8.
GRPO with the reference judge (the ground-truth score, which falls linearly with the number of turns) should move
it toward binary search. "Guesses" below count every turn.

For each judge noise level (0, 0.1 and 0.3: the standard deviation of Gaussian noise added to every score) the
same starting model is trained from scratch, and evaluated before and after on the same held-out seeds with the
environment's ground truth, never the judge:

    gap_closed = (mean_guesses_before - mean_guesses_after) / (mean_guesses_before - optimum_mean_guesses)

Targets: gap_closed >= 0.5 with no drop in success (1 point of tolerance: 300-500 seeds measure success to about
±1.5 points), each run under 20 minutes on 2 CPU cores (aim: 0.9).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import tempfile
import time
from pathlib import Path

import torch

from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.envs.guess_number import optimal_mean_guesses
from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer
from agentic_rl_lab.judge import ReferenceJudge
from agentic_rl_lab.models import PROFILES, load_model
from agentic_rl_lab.seeds import HELD_OUT_SEED_START

CONFIG = GRPOConfig(
    **PROFILES["cpu-tiny"].sampling,
    steps=60,
    groups_per_step=8,
    num_generations=8,
    learning_rate=PROFILES["cpu-tiny"].learning_rate,
    per_device_train_batch_size=16,
    gradient_accumulation_steps=1,
    loss_type="grpo",
    scale_rewards="group",
    beta=0.04,
    eval_every=0,
    save_every=1000,
)
"""The tier's LoRA adapters (r=16 on every projection, 0.38M trainable weights; the reference is the model with them
off), one optimizer step per micro-batch of 16 trajectories: 4 updates per step of 64 trajectories.

The settings were chosen from a sweep on a GPU (an NVIDIA H200 lent for a few minutes, the same code on CUDA, 16 runs
at once), from the default build at the tier's temperature (0.6), noise 0, 500 held-out seeds: before, 7.01 guesses
and 89.8% success. Mean guesses (success) after 30 steps, one run each unless seeds are given:

| variant (everything else as above) | after 30 steps |
| --- | --- |
| these settings, training seeds 0 / 1 / 2 | 6.30 (93.2%) / 6.31 (91.8%) / 6.34 (92.2%) |
| `loss_type="dapo"` | 6.34 (91.8%) |
| `num_iterations=2` (each batch twice) | 6.37 (91.0%) |
| training at temperature 0.8 (evaluation at 0.6), seeds 0 / 1 | 6.37 (90.8%) / 6.33 (91.2%) |
| training at temperature 1.0, seeds 0 / 1 | 6.36 (92.2%) / 6.53 (88.0%) |
| the same, `scale_rewards="none"` | 6.44 (93.0%) |
| `scale_rewards="none"` (Dr. GRPO) | 6.53 (91.2%) |
| `beta=0` (no KL term) | 6.51 (88.0%) |
| learning rate 1e-3 | 6.43 (89.6%) |
| learning rate 1e-3, training at temperature 1.0 | 6.87 (82.8%) |
| `groups_per_step=16` (twice the data; 20 steps) | 6.41 (90.2%) |
| `num_generations=16` (twice the data; 20 steps) | 6.62 (88.4%) |

No variant beat these settings. Run longer (4 runs at once), the same settings went on to 6.23, 6.23 and 6.38 guesses
after 40 steps and 6.24, 6.26 and 6.26 after 60 (success 93-94%) for seeds 0, 1 and 2: gap_closed 0.52-0.64.

On 2 cores of an AMD EPYC (11-12 s a step), training seed 0 closed 0.60 of the gap after 40 steps and 0.55 after 60
(this file); seed 1 closed 0.50 after 40 (6.40 guesses, 90.4% success) and 0.60 after 60 (6.28, 93.0%); seed 2
closed 0.52 after 60 (6.36, 91.2%): 0.56 on average over the three seeds at 60 steps. From 40 to 60 steps the figure
moves about as much as from seed to seed, and both are within the evaluation's own noise: 500 seeds measure mean
guesses to about ±0.09 (one standard error, estimated from the 8-9% of episodes that fail at 12 guesses), ±0.08 in
gap_closed. The benchmark trains 60 steps, where no run measured fell under 0.5: about 12 minutes on that CPU,
inside the 20.

Where the gap is. After training, the episodes that succeed take 5.82-5.88 guesses, binary search's 5.8: GRPO
removed the repeats, one decision per turn, which every group meets many times. What is left is the 6-7% of episodes
that fail (a wrong number deep in the search, then wandering to the 12-turn limit, 12 guesses each), which caps
gap_closed near 0.65 at this success rate; 0.9 would need about 98.5%. Each failure is a wrong number at one node of
the search tree, a rare state that GRPO meets a few times a run; a longer SFT lowers the rate but also sharpens the
repeats away at temperature 0.6, taking GRPO's headroom with it (docs/tiny-model.md).

Earlier settings, measured on the 1,600-step build (7.17 guesses, 83% success before; 300 held-out seeds), trained
every weight, with worse results:

| training, loss_type | learning rate | beta | mean guesses (success) after 20-25 / 40-50 / 60-75 / 100-120 steps |
| --- | --- | --- | --- |
| full, `dapo` | 6e-5 | 0 | 40 steps: 7.10 (78%, 500 seeds) |
| full, `dapo` | 1.2e-4 | 0 | 40 steps: 7.94 (58%, 75% valid turns: the format broke) |
| full, `grpo` | 6e-5 | 0 | 6.96 (78%) / 6.94 (78%) / 6.70 (82%) / 7.17 (74%) |
| full, `grpo` | 6e-5 | 0.04 | 6.72 (83%) / 6.64 (85%) / 6.93 (79%) / 6.62 (83%) |
| the same, on an AMD EPYC | 6e-5 | 0.04 | 6.88 (81%) / 7.57 (71%, 96.7% valid turns) |
| LoRA, `grpo` | 6e-4 | 0.04 | 50 steps, 500 seeds: 6.63 (86.2%, from 83.8%): gap closed 0.42 |

Why `grpo` with a KL term. `dapo` weighs every token the same, so a long failed episode (12 turns, negative
advantage) pushes its format tokens down more than a short success pushes them up; `grpo` gives each trajectory the
same weight, and the KL term holds the format in place (without it, full fine-tuning drifted after about 60 steps,
and LoRA lost success). Fully fine-tuned, the model lost success; with LoRA, which leaves the embeddings and the norms
alone, it kept it (that the embeddings are why is a guess, not isolated). One run says little: the same settings,
seeds and start model gave 6.64 on one CPU and 7.57 on another after 50 steps of full fine-tuning; their first
rollouts are identical, then the CPUs round the updates differently and the runs part."""
LEARNING_RATES = {"lora": PROFILES["cpu-tiny"].learning_rate, "full": 6e-5}
"""Adapters start at zero and move only a few weights, so they take a 10x larger step than full fine-tuning."""
NOISES = (0.0, 0.1, 0.3)
EVAL_SEEDS = 500
TARGETS = {"min_gap_closed": 0.5, "aim_gap_closed": 0.9, "max_wall_seconds": 20 * 60}
LLM_JUDGE_TARGETS = {"min_gap_closed": 0.4, "max_wall_seconds": 30 * 60}
"""With the tiny judge as the reward (issue 20): 0.4 of the gap, against 0.55 for the ground truth; judging adds a
generate call per step."""


def run(
    noise: float,
    config: GRPOConfig,
    eval_seeds: int,
    before: dict | None,
    training: str = "lora",
    judge: str = "reference",
    length_bias: float = 0.0,
) -> dict:
    """Train a fresh copy of the cpu-tiny model with a judge of this noise; evaluate before and after.
    `training`: "lora" (the tier's peft adapters) or "full" (every weight, a frozen copy as reference).
    `judge`: "reference" (the ground truth, plus `noise`) or "tiny" (the tiny relative judge, `noise` unused)."""
    loaded = load_model("cpu-tiny", add_lora=training == "lora")  # the tier's adapters, or every weight
    model = loaded.model
    env = GuessNumber()
    with tempfile.TemporaryDirectory() as run_dir:
        if judge == "tiny":
            from agentic_rl_lab.tiny_judge import make_tiny_judge

            reward = make_tiny_judge("relative", batch_size=config.groups_per_step, on_failure="skip")
        else:
            reward = ReferenceJudge(noise=noise, length_bias=length_bias, seed=config.seed)
        trainer = GRPOTrainer(config, model, loaded.tokenizer, env, reward, run_dir)
        if before is None:
            before = trainer.evaluate(eval_seeds)
        started = time.perf_counter()
        metrics = trainer.train()
        train_seconds = time.perf_counter() - started
        after = trainer.evaluate(eval_seeds)
    optimum = optimal_mean_guesses(env.low, env.high)
    targets = LLM_JUDGE_TARGETS if judge == "tiny" else TARGETS
    gap = (before["eval_mean_turns"] - after["eval_mean_turns"]) / (before["eval_mean_turns"] - optimum)
    seconds = metrics[["seconds_rollout", "seconds_judge", "seconds_update"]].sum()
    return {
        "judge_noise": noise,
        "judge_length_bias": length_bias,
        "training": training,
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "mean_guesses_before": before["eval_mean_turns"],
        "mean_guesses_after": after["eval_mean_turns"],
        "success_before": before["eval_success"],
        "success_after": after["eval_success"],
        "valid_turn_rate_before": before["eval_valid_turn_rate"],
        "valid_turn_rate_after": after["eval_valid_turn_rate"],
        "optimum_mean_guesses": optimum,
        "gap_closed": gap,
        "wall_seconds": round(train_seconds, 1),
        "seconds_by_phase": {name.removeprefix("seconds_"): round(float(v), 1) for name, v in seconds.items()},
        "judge_share_of_step_time": round(float(seconds["seconds_judge"] / seconds.sum()), 3),
        "judge_skipped_groups": int(metrics["judge_skipped_groups"].sum()),
        "train_reward_first_5_steps": float(metrics["reward_mean"].head(5).mean()),
        "train_reward_last_5_steps": float(metrics["reward_mean"].tail(5).mean()),
        "train_mean_turns_by_step": [round(float(x), 3) for x in metrics["train_mean_turns"]],
        "train_reward_by_step": [round(float(x), 4) for x in metrics["reward_mean"]],
        "train_score_by_step": [round(float(x), 4) for x in metrics["train_score"]],
        "met": round(gap, 9) >= targets["min_gap_closed"]  # 0.592 / 1.184 is 0.4999... in floating point
        and after["eval_success"] >= before["eval_success"] - 0.01
        and train_seconds <= targets["max_wall_seconds"],
        "_before": before,
    }


def cpu_name() -> str:
    """The CPU's model name, as Linux reports it (`platform.processor()` is often empty there)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=CONFIG.steps, help="GRPO steps per run")
    parser.add_argument("--noise", type=float, nargs="+", default=list(NOISES), help="judge noise levels")
    parser.add_argument("--eval-seeds", type=int, default=EVAL_SEEDS, help="held-out seeds for each evaluation")
    parser.add_argument("--training", choices=["lora", "full"], default="lora", help="LoRA adapters, or all weights")
    parser.add_argument("--learning-rate", type=float, default=None, help=f"default: {LEARNING_RATES}")
    seed_help = "training seed: scenarios, sampling and judge noise (the held-out evaluation stays the same)"
    parser.add_argument("--seed", type=int, default=CONFIG.seed, help=seed_help)
    out_help = "default: results/grpo_learning.json (_full.json with --training full)"
    parser.add_argument("--out", default=None, help=out_help)
    judge_help = "reference: the ground truth (with --noise); tiny: the tiny relative judge, the LLM judge of the CPU"
    parser.add_argument("--judge", choices=["reference", "tiny"], default="reference", help=judge_help)
    bias_help = "ReferenceJudge's length_bias: the longest episode of a group gains it, the shortest loses it"
    parser.add_argument("--length-bias", type=float, default=0.0, help=bias_help)
    credit_help = "trajectory: one advantage per episode; turn: plus guess_number's reward for each turn (one run each)"
    credit = {"nargs": "+", "choices": ["trajectory", "turn"], "default": ["trajectory"]}
    parser.add_argument("--credit-assignment", **credit, help=credit_help)
    args = parser.parse_args()
    if args.judge == "tiny":
        args.noise = [0.0]  # the tiny judge's errors are its own
    torch.set_num_threads(2)
    learning_rate = args.learning_rate or LEARNING_RATES[args.training]
    config = dataclasses.replace(CONFIG, steps=args.steps, learning_rate=learning_rate, seed=args.seed)

    name = "grpo_learning.json" if args.training == "lora" else "grpo_learning_full.json"
    if args.judge == "tiny":
        name = "grpo_learning_llm_judge.json"
    elif args.length_bias:
        name = "grpo_learning_length_bias.json"
    elif args.credit_assignment != ["trajectory"]:
        name = "grpo_learning_credit.json"
    out = Path(args.out or Path(__file__).parent / "results" / name)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "env": "guess_number",
        "tier": "cpu-tiny",
        "judge": "reference" if args.judge == "reference" else "tiny relative judge (agentic_rl_lab/data/tiny-judge)",
        "eval_seeds": {"first": HELD_OUT_SEED_START, "count": args.eval_seeds, "temperature": config.temperature},
        "config": dataclasses.asdict(config),
        "threads": torch.get_num_threads(),
        "cpu": cpu_name(),  # wall_seconds depend on it: about 2.5x apart between the CPUs measured
        "targets": LLM_JUDGE_TARGETS if args.judge == "tiny" else TARGETS,
    }
    runs, before = [], None
    arms = [(noise, credit) for noise in args.noise for credit in args.credit_assignment]
    for noise, credit in arms:
        torch.manual_seed(config.seed)
        arm = dataclasses.replace(config, credit_assignment=credit)
        result = run(noise, arm, args.eval_seeds, before, args.training, args.judge, args.length_bias)
        result["credit_assignment"] = credit
        before = result.pop("_before")  # the same start model and seeds: evaluate it once
        runs.append(result)
        print(json.dumps({k: v for k, v in result.items() if not k.endswith("_by_step")}, indent=2))
        report.update({k: v for k, v in runs[0].items() if not k.endswith("_by_step")})  # first run, flat
        report["runs"] = runs
        out.write_text(json.dumps(report, indent=2) + "\n")  # after every run: a crash keeps the finished ones
        print(f"wrote {out} ({len(runs)} of {len(arms)} runs)")
    return report


if __name__ == "__main__":
    main()
