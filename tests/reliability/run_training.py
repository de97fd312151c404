"""One small judged training run, in its own process, that can SIGKILL itself at a chosen point.

    python tests/reliability/run_training.py RUN_DIR JUDGE_URL STEPS [--kill POINT STEP] [--judge-cache]

trains the committed cpu-tiny model on guess_number (`tiny_config`) with a relative judge at JUDGE_URL, and prints
DONE at the end. With `--kill`, the process sends itself SIGKILL at POINT of training step STEP (0-based), every
time at the same place:

- `rollout`: at the second turn of the step's rollout (every trajectory has sampled its first turn);
- `judge`: once the judge model has answered the step's first group, before its scores are written;
- `update`: at the second micro-batch, after the first optimizer step has changed the weights in memory;
- `checkpoint`: halfway through writing `trainer_state.pt` of the checkpoint saved after the step;
- `trajectories`: halfway through the line of the step's second group in trajectories.jsonl;
- `metrics`: halfway through the step's line in metrics.jsonl;
- `resume`: while resuming (STEP is not used), halfway through rewriting trajectories.jsonl.

The tests import `tiny_config`, `make_env` and `llm_judge` from here too, so a run in a test and a run in this
process are the same run.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
from pathlib import Path
from typing import Any, Literal

import torch

from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.grpo import trainer as trainer_module
from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer
from agentic_rl_lab.judge import JudgeCache, OpenAIJudgeBackend, RelativeJudge
from agentic_rl_lab.policies.hf import HFPolicy
from agentic_rl_lab.tiny import EMBEDDED_MODEL_DIR

KEY_ENV = "LAB_RELIABILITY_API_KEY"
"""The judge's API key lives in this variable; the secrets test puts a sentinel in it and looks for it on disk."""
KILL_POINTS = ("rollout", "judge", "update", "checkpoint", "trajectories", "metrics", "resume")


def tiny_config(**overrides: Any) -> GRPOConfig:
    """The smallest run that still rolls out, judges, updates (two optimizer steps), logs and checkpoints every step."""
    settings = dict(
        steps=3,
        groups_per_step=2,
        num_generations=2,
        per_device_train_batch_size=2,
        max_new_tokens=16,
        temperature=1.5,  # hot enough that the members of a group mostly play differently
        eval_every=0,
        save_every=1,
        learning_rate=1e-3,
    )
    return GRPOConfig(**{**settings, **overrides})


def make_env() -> GuessNumber:
    return GuessNumber(max_turns=3)


def llm_judge(url: str, cache: JudgeCache | Literal["default"] | None = None) -> RelativeJudge:
    """The relative judge, asking the loopback server at `url` with the key in `KEY_ENV`, one request at a time."""
    backend = OpenAIJudgeBackend("judge-model", base_url=url, api_key_env=KEY_ENV, timeout=30.0, max_concurrency=1)
    return RelativeJudge(backend, cache=cache, max_retries=2, backoff_base=0.01)


def load_cpu_tiny() -> tuple[Any, Any]:
    """The committed cpu-tiny model in float32, and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL_DIR)
    return AutoModelForCausalLM.from_pretrained(EMBEDDED_MODEL_DIR, dtype=torch.float32), tokenizer


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def write_half(path: Path, data: bytes, mode: str = "ab") -> None:
    """Write the first half of `data` and make it durable, as a process killed mid-write leaves it."""
    with open(path, mode) as file:
        file.write(data[: len(data) // 2])
        file.flush()
        os.fsync(file.fileno())


def arm(trainer: GRPOTrainer, point: str, kill_step: int) -> None:
    """Patch the function at `point` so that it kills this process there, in training step `kill_step`."""
    current: dict[str, int | None] = {"step": None}  # None while resuming, before the first step
    calls: list[int] = []
    train_step = trainer.train_step

    def tracked_train_step(step: int) -> dict[str, float]:
        current["step"] = step
        return train_step(step)

    trainer.train_step = tracked_train_step

    def in_kill_step() -> bool:
        return current["step"] == kill_step

    if point == "rollout":
        act = HFPolicy.act

        def act_or_die(self: HFPolicy, histories: Any, tools: Any) -> Any:
            calls.append(in_kill_step())
            if calls.count(True) == 2:
                die()
            return act(self, histories, tools)

        HFPolicy.act = act_or_die
    elif point == "judge":
        complete = OpenAIJudgeBackend.complete

        def complete_then_die(self: OpenAIJudgeBackend, messages: Any, schema: Any) -> Any:
            reply = complete(self, messages, schema)
            if in_kill_step():
                die()
            return reply

        OpenAIJudgeBackend.complete = complete_then_die
    elif point == "update":
        loss = trainer.loss

        def loss_or_die(batch: Any) -> Any:
            calls.append(in_kill_step())
            if calls.count(True) == 2:
                die()
            return loss(batch)

        trainer.loss = loss_or_die
    elif point == "checkpoint":
        save = torch.save

        def save_half_then_die(obj: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
            if in_kill_step():
                buffer = io.BytesIO()
                save(obj, buffer)
                write_half(Path(path), buffer.getvalue(), mode="wb")
                die()
            return save(obj, path, *args, **kwargs)

        torch.save = save_half_then_die
    elif point in ("trajectories", "resume"):
        append_groups = trainer_module.append_groups

        def append_torn_then_die(path: Path, groups: list) -> None:
            if (point == "trajectories" and in_kill_step()) or (point == "resume" and current["step"] is None):
                append_groups(path, groups[:1])
                write_half(path, (groups[1].model_dump_json() + "\n").encode())
                die()
            append_groups(path, groups)

        trainer_module.append_groups = append_torn_then_die
    elif point == "metrics":
        append_line = trainer_module._append_line

        def append_torn_then_die(path: Path, line: str) -> None:
            if in_kill_step():
                write_half(path, (line + "\n").encode())
                die()
            append_line(path, line)

        trainer_module._append_line = append_torn_then_die
    else:
        raise ValueError(f"unknown kill point {point!r}; choose one of {KILL_POINTS}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("judge_url")
    parser.add_argument("steps", type=int)
    parser.add_argument("--kill", nargs=2, metavar=("POINT", "STEP"), help=f"one of {KILL_POINTS}, and a step")
    parser.add_argument("--judge-cache", action="store_true", help="keep judge answers in the default cache")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the model is tiny; one thread also keeps the run identical from process to process
    model, tokenizer = load_cpu_tiny()
    judge = llm_judge(args.judge_url, cache="default" if args.judge_cache else None)
    trainer = GRPOTrainer(
        tiny_config(steps=args.steps), model, tokenizer, make_env(), judge, args.run_dir, progress=False
    )
    if args.kill:
        arm(trainer, args.kill[0], int(args.kill[1]))
    trainer.train()
    print("DONE")


if __name__ == "__main__":
    main()
