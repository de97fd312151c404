"""The lab's GRPO trainer against TRL's, step for step, on the same model and the same work.

    .venv-trl/bin/python benchmarks/vs_trl.py     # writes benchmarks/results/vs_trl.json (~3 min on 2 cores)

It runs in `.venv-trl` (made by `python3 scripts/lab.py test`), where TRL trains on a CPU (TRL >= 1.16; the 1.15
of `.venv` cannot). Both trainers run in this one process, one after the other, each from a fresh copy of cpu-tiny
with the tier's LoRA adapters (r=16 on every projection), with the same batch (2 scenarios x `num_generations` 8),
learning rate (constant), `loss_type` ("dapo"), beta 0, temperature, one optimizer step per batch, no gradient
checkpointing and float32:

- **single turn**: one `guess_number` guess, rewarded by its closeness to the secret (1 - |guess - secret| / 99;
  0 for an answer that is not a valid guess). TRL's plain `GRPOTrainer` generates from the prompt the lab's
  policy reads (the same text, so the same tokens) and scores with the same closeness function.
- **multi turn**: whole `guess_number` episodes (up to 12 guesses), rewarded by the reference judge (the ground
  truth). TRL plays them through the lab's `rollout_func` (`agentic_rl_lab.integrations.trl`).

Per trainer and setting: the median seconds per step over `MEASURED` steps after `WARMUP`, with min and max, split
into rollout (generation, for TRL the `rollout_func` or its own generation) and the rest (judge, log-probs, loss,
backward, optimizer). `trl_step_ratio` is ours over TRL's median step: below 1 means the lab's trainer is faster.
Target (issue 22): at most 1.0 in both settings; aim 0.8.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from agentic_rl_lab.chat import apply_template, parse_assistant_text
from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer
from agentic_rl_lab.integrations.trl import judge_reward, make_rollout_func, scenario_dataset
from agentic_rl_lab.judge import ReferenceJudge
from agentic_rl_lab.judge.base import GroupJudge, JudgeCall, JudgeRecord, Shown
from agentic_rl_lab.models import PROFILES, load_model
from agentic_rl_lab.trajectory import TrajectoryGroup

OUT = Path(__file__).parent / "results" / "vs_trl.json"
WARMUP, MEASURED = 2, 15
GROUPS, NUM_GENERATIONS = 2, 8
PROFILE = PROFILES["cpu-tiny"]
SETTINGS = {
    "single_turn": {"max_turns": 1, "max_new_tokens": 32, "temperature": 1.0},
    "multi_turn": {"max_turns": 12, "max_new_tokens": 32, "temperature": PROFILE.sampling["temperature"]},
}
"""Single turn samples at temperature 1, yet cpu-tiny's first guess is 50 in every sample (measured: all 15 steps), so
every group's rewards tie; the lab's trainer skips an update without signal while TRL computes it anyway, and the
single-turn ratio compares the lab's rollout with TRL's whole step. Multi turn is the like-for-like figure."""


# ----- the single-turn reward, one function for both trainers ---------------------------------------------------
def closeness(message: dict[str, Any], secret: int, low: int = 1, high: int = 100) -> float:
    """1 for the secret, falling linearly to 0 at the far end of the range; 0 for anything but one valid guess."""
    calls = message.get("tool_calls") or []
    if len(calls) != 1 or calls[0]["function"]["name"] != "guess":
        return 0.0
    try:
        guess = int(json.loads(calls[0]["function"]["arguments"])["n"])
    except (ValueError, KeyError, TypeError):
        return 0.0
    return max(0.0, 1 - abs(guess - secret) / (high - low)) if low <= guess <= high else 0.0


def secret_of(seed: int) -> int:
    env = GuessNumber(max_turns=1)
    env.reset(seed)
    return env.secret


class ClosenessJudge(GroupJudge):
    """The lab's side of the single-turn reward: `closeness` of each trajectory's one guess."""

    name = "closeness"
    model_name = "closeness to the secret"

    def judge(self, group: TrajectoryGroup, shown: list[Shown], permutation: int, record: JudgeRecord) -> None:
        call = JudgeCall(permutation=permutation, members={s.id: s.member for s in shown}, order=[s.id for s in shown])
        record.calls.append(call)
        secret = secret_of(group.seed)
        for s in shown:
            turns = [m for m in group.trajectories[s.member].messages if m.get("role") == "assistant"]
            call.scores[s.id] = closeness(turns[0], secret) if turns else 0.0


def trl_closeness(completions: list[str], secret: list[int], **kwargs: Any) -> list[float]:
    return [closeness(parse_assistant_text(text)[0], s) for text, s in zip(completions, secret)]


# ----- the two trainers -------------------------------------------------------------------------------------------
def fresh_model() -> tuple[Any, Any]:
    torch.manual_seed(0)
    loaded = load_model("cpu-tiny", add_lora=True)
    return loaded.model, loaded.tokenizer


def run_lab(setting: str, steps: int, work: Path) -> list[dict[str, float]]:
    model, tokenizer = fresh_model()
    env = GuessNumber(max_turns=SETTINGS[setting]["max_turns"])
    judge = ClosenessJudge() if setting == "single_turn" else ReferenceJudge()
    config = GRPOConfig(
        steps=steps, groups_per_step=GROUPS, num_generations=NUM_GENERATIONS, learning_rate=PROFILE.learning_rate,
        per_device_train_batch_size=GROUPS * NUM_GENERATIONS, loss_type="dapo", beta=0.0,
        temperature=SETTINGS[setting]["temperature"], max_new_tokens=SETTINGS[setting]["max_new_tokens"],
        eval_every=0, save_every=10_000,
    )  # fmt: skip
    rows: list[dict[str, float]] = []
    clock = [time.perf_counter()]

    def timed(trainer: Any, row: dict[str, float]) -> None:
        now = time.perf_counter()
        no_signal = row.get("zero_advantage_groups", 0) / GROUPS
        rows.append({"step": now - clock[0], "rollout": row["seconds_rollout"], "no_signal": no_signal})
        clock[0] = now

    trainer = GRPOTrainer(config, model, tokenizer, env, judge, work / f"lab-{setting}", callbacks=[timed],
                          progress=False)  # fmt: skip
    clock[0] = time.perf_counter()
    trainer.train()
    return rows


def run_trl(setting: str, steps: int, work: Path) -> list[dict[str, float]]:
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    model, tokenizer = fresh_model()
    env = GuessNumber(max_turns=SETTINGS[setting]["max_turns"])
    args = TRLConfig(
        output_dir=str(work / f"trl-{setting}"), max_steps=steps, per_device_train_batch_size=GROUPS * NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS, learning_rate=PROFILE.learning_rate, lr_scheduler_type="constant",
        loss_type="dapo", beta=0.0, temperature=SETTINGS[setting]["temperature"],
        max_completion_length=SETTINGS[setting]["max_new_tokens"] if setting == "single_turn" else 1024,
        gradient_checkpointing=False, bf16=False, use_cpu=True, logging_steps=1, report_to="none",
        save_strategy="no", seed=0, weight_decay=0.0, max_grad_norm=1.0,
    )  # fmt: skip
    seeds = range(10_000)
    rollout_seconds = [0.0]
    if setting == "single_turn":
        rows = []
        for seed in seeds:
            opening = env.reset(seed)
            prompt = apply_template(tokenizer, opening, env.tool_schemas, add_generation_prompt=True)
            rows.append({"prompt": prompt, "secret": env.secret})
        from datasets import Dataset

        trainer = TRLTrainer(model=model, processing_class=tokenizer, reward_funcs=trl_closeness, args=args,
                             train_dataset=Dataset.from_list(rows))  # fmt: skip
        generate = trainer._generate

        def timed_generate(*a: Any, **k: Any) -> Any:
            started = time.perf_counter()
            try:
                return generate(*a, **k)
            finally:
                rollout_seconds[0] += time.perf_counter() - started

        trainer._generate = timed_generate
    else:
        rollout = make_rollout_func(env, max_new_tokens=SETTINGS[setting]["max_new_tokens"])

        def timed_rollout(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
            started = time.perf_counter()
            try:
                return rollout(prompts, trainer)
            finally:
                rollout_seconds[0] += time.perf_counter() - started

        reward = judge_reward(ReferenceJudge())
        trainer = TRLTrainer(model=model, processing_class=tokenizer, reward_funcs=reward, args=args,
                             train_dataset=scenario_dataset(env, seeds), rollout_func=timed_rollout)  # fmt: skip
    measured: list[dict[str, float]] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            rollout_seconds[0] = 0.0
            self.started = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            measured.append({"step": time.perf_counter() - self.started, "rollout": rollout_seconds[0]})

    trainer.add_callback(Timer())
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "frac_reward_zero_std" in entry]
    for row, entry in zip(measured, logged):
        row["no_signal"] = entry["frac_reward_zero_std"]
    return measured


def summary(rows: list[dict[str, float]], warmup: int) -> dict[str, Any]:
    kept = rows[warmup:]
    steps = [r["step"] for r in kept]
    rollouts = [r["rollout"] for r in kept]
    rest = [r["step"] - r["rollout"] for r in kept]
    return {
        "median_step_s": round(statistics.median(steps), 3),
        "min_step_s": round(min(steps), 3),
        "max_step_s": round(max(steps), 3),
        "median_rollout_s": round(statistics.median(rollouts), 3),
        "median_rest_s": round(statistics.median(rest), 3),
        "steps_measured": len(kept),
        "groups_without_signal": round(statistics.fmean(r.get("no_signal", 0.0) for r in kept), 3),
        "step_s": [round(s, 3) for s in steps],
    }


def main() -> None:
    import trl

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--warmup", type=int, default=WARMUP)
    parser.add_argument("--measured", type=int, default=MEASURED, help="steps timed after the warm-up")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(torch.get_num_threads())
    report: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        "trl": trl.__version__,
        "torch": torch.__version__,
        "batch": f"{GROUPS} scenarios x {NUM_GENERATIONS} generations",
        "warmup_steps": args.warmup,
        "target": {"trl_step_ratio": 1.0, "aim": 0.8},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for setting in args.settings:
            steps = args.warmup + args.measured
            lab = summary(run_lab(setting, steps, Path(tmp)), args.warmup)
            theirs = summary(run_trl(setting, steps, Path(tmp)), args.warmup)
            ratio = round(lab["median_step_s"] / theirs["median_step_s"], 3)
            report[setting] = {"lab": lab, "trl": theirs, "trl_step_ratio": ratio, "met": ratio <= 1.0}
            print(setting, json.dumps(report[setting]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
