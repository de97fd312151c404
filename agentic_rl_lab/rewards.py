"""Where the reward of a training run comes from, on each tier: a judge chosen by name.

`--judge reference` is the ground truth (`ReferenceJudge`), the controlled experiment. `--judge relative` (or
`absolute`) is an LLM judge, and which one depends on what is there:
1. an OpenAI-compatible endpoint, when `AGENTIC_RL_LAB_JUDGE_MODEL` names a model (with `OPENAI_BASE_URL` and an API
   key from Colab Secrets or `OPENAI_API_KEY`);
2. else, on a GPU tier, the policy's own base model with its LoRA adapters off (self-judging, `HFJudgeBackend`);
3. else, on a CPU tier, the lab's tiny judge (`agentic_rl_lab/tiny_judge.py`).
The training command, the demo and notebook 05 all choose here, and say which judge they got.
"""

from __future__ import annotations

import os
from typing import Any


def judge_source(name: str, tier: str) -> str:
    """Where `--judge NAME`'s scores come from on `tier`, decided before any model loads: `reference` (the ground
    truth), `endpoint` (an OpenAI-compatible judge model named by `AGENTIC_RL_LAB_JUDGE_MODEL`, with
    `OPENAI_BASE_URL` and `OPENAI_API_KEY`), `self` (a GPU tier's base model, its LoRA adapters off) or `tiny` (on
    the CPU tiers, the lab's own tiny judge, `agentic_rl_lab/data/tiny-judge`)."""
    from agentic_rl_lab.judge.backends import JUDGE_MODEL_ENV
    from agentic_rl_lab.models import PROFILES
    from agentic_rl_lab.tiny_judge import EMBEDDED_JUDGE_DIR

    if name == "reference":
        return "reference"
    if os.environ.get(JUDGE_MODEL_ENV):
        return "endpoint"
    if PROFILES[tier].loader == "unsloth":
        return "self"
    if (EMBEDDED_JUDGE_DIR / "config.json").exists():
        return "tiny"
    raise ValueError(
        f"no judge model given for --judge {name} on tier {tier}: set {JUDGE_MODEL_ENV} to a model served by an "
        "OpenAI-compatible endpoint (and OPENAI_BASE_URL, OPENAI_API_KEY), or build the tiny judge "
        "(python -m agentic_rl_lab build-tiny-judge --export agentic_rl_lab/data/tiny-judge)."
    )


def make_judge(
    source: str, name: str, noise: float, seed: int, loaded: Any, batch_size: int, rubric: str | None = None
) -> tuple[Any, str]:
    """The judge `judge_source` chose, and one line that says which it is. `rubric` (default: the general one, see
    `judge.prompt.rubric_for` for a task's) is for the LLM judges but the tiny one, which was trained on its own."""
    from agentic_rl_lab import judge

    if source == "reference":
        return judge.ReferenceJudge(noise=noise, seed=seed), f"the reference judge (ground truth, noise {noise})"
    if source == "tiny":
        from agentic_rl_lab.tiny_judge import make_tiny_judge

        said = f"the tiny judge (agentic_rl_lab/data/tiny-judge), {batch_size} groups per generate call"
        return make_tiny_judge(name, batch_size=batch_size, on_failure="skip"), f"the {name} judge: {said}"
    if source == "endpoint":
        backend = judge.OpenAIJudgeBackend()
        said = f"{backend.model} at {backend.endpoint}"
    else:
        model_name = f"{loaded.profile.model_name} (base weights, adapters off)"
        backend = judge.HFJudgeBackend(loaded.model, loaded.tokenizer, model_name=model_name, batch_size=batch_size)
        said = f"the policy's own base model, {model_name}, {batch_size} groups per generate call"
    kind = judge.RelativeJudge if name == "relative" else judge.AbsoluteJudge
    return kind(backend, rubric=rubric or judge.DEFAULT_RUBRIC, on_failure="skip"), f"the {name} judge: {said}"
