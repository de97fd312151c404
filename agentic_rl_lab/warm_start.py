"""Warm start: teach a model a new environment by imitating a scripted demonstrator, before GRPO.

GRPO can only reinforce what a policy already does some of the time. In a group where every trajectory fails, every
advantage is zero and the step teaches nothing; `cpu-tiny` on `inbox_search` fails every episode, so GRPO alone
would never start. A warm start fixes that with supervised fine-tuning (SFT) on demonstrations:

1. **Demonstrations.** A scripted strategy (`env.strategies[name]`) plays the environment through the rollout
   engine, one episode per scenario seed.
2. **Tokens.** Each episode is rendered with the model's chat template; the loss counts the assistant's tokens
   only, and where the demonstrator is random, it targets the demonstrator's whole distribution (see
   `agentic_rl_lab.tiny.demonstrator_distribution`).
3. **SFT.** Every weight of the base model is trained (the same loop that built `cpu-tiny`), then saved in the
   Hugging Face layout, so `HFPolicy.from_pretrained(path)` and `load_model(model_name=path)` load it.

Pick a demonstrator that is *coherent but mediocre*: it must finish the task often enough for the model to learn
the format and every skill it needs (at least a third of the time), and make mistakes that are choices, not missing
skills, so there is headroom that only RL can take. `inbox_search`'s `mediocre` gives up right after its search
40% of the time: the model learns to search, read and answer, and GRPO learns to stop giving up.

    from agentic_rl_lab.envs import InboxSearch
    path = warm_start(InboxSearch(), WarmStartConfig(strategy="mediocre"))   # minutes on 2 CPU cores, then cached

The result is cached under a key that hashes the rendered demonstrations, the config and the base model, so the
same call returns at once the second time, and a change anywhere (the environment, the demonstrator) trains anew.
An interrupted run resumes from its last checkpoint (every 25 steps).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_rl_lab.chat import render
from agentic_rl_lab.envs.base import Environment
from agentic_rl_lab.tiny import (
    DEFAULT_CONFIG,
    Example,
    cache_root,
    default_model_path,
    demonstrator_distribution,
    tokenize_episode,
    train_sft,
)
from agentic_rl_lab.trajectory import Trajectory

INFO_FILE = "warm_start.json"


@dataclass(frozen=True)
class WarmStartConfig:
    """What to imitate and how long. The defaults warm-start cpu-tiny on one environment in minutes on 2 cores."""

    strategy: str = "mediocre"
    """The scripted strategy to imitate, a key of `env.strategies`."""
    episodes: int = 1000
    """Demonstrations, one per scenario seed `seed * 1_000_000 + i` (never the held-out seeds, 900,000,000 up)."""
    sft_steps: int = 300
    batch_tokens: int = 5120
    """Tokens per SFT batch, padding included: about 6 inbox_search episodes."""
    learning_rate: float = 5e-4
    """Half of cpu-tiny's from-scratch rate: the base model already knows the chat format and the tools."""
    warmup_steps: int = 20
    loss_on: str = "assistant"
    """"assistant": the loss counts the demonstrator's tokens only (what the policy will write). "episode": every
    token from the first action on, the observations too. A search reply lists ids and subjects that the reply of
    `read_email` repeats, so predicting the observations is practice at copying from the context, the skill the
    actions need and that the assistant's few tokens teach slowly."""
    demonstrator_samples: int = 16
    """Extra draws from the demonstrator per turn for soft targets (0: the action it took only)."""
    seed: int = 0


def play_demonstrations(
    envs: Environment | Sequence[Environment], strategy: str, episodes: int, seed: int
) -> list[Trajectory]:
    """`episodes` scripted trajectories, one per scenario seed `seed * 1_000_000 + i`, shared out in turn among
    `envs` (variants of one task: several inboxes, say)."""
    from agentic_rl_lab.policies.scripted import ScriptedPolicy
    from agentic_rl_lab.rollout import collect_groups

    envs = [envs] if isinstance(envs, Environment) else list(envs)
    trajectories = []
    for index, env in enumerate(envs):
        policy = ScriptedPolicy(env, strategy, seed=seed + 7919 + index)  # not `seed`: episode 0's scenario RNG
        scenarios = range(seed * 1_000_000 + index, seed * 1_000_000 + episodes, len(envs))
        groups = collect_groups(env, policy, scenarios, 1, progress=False)
        trajectories += [t for group in groups for t in group.trajectories]
    return trajectories


def warm_start(
    env: Environment | Sequence[Environment],
    config: WarmStartConfig = WarmStartConfig(),
    base: str | Path | None = None,
    root: str | Path | None = None,
    progress: bool = True,
) -> Path:
    """Fine-tune `base` (default: cpu-tiny) to imitate `config.strategy` on `env`; returns the model's directory.

    `env` may be several variants of one task, which share the demonstrations out: where one variant would let the
    model memorise its facts instead of reading them (one inbox's 366 answers), many make it learn to read.

    Cached under `root` (default: the lab's cache, see `agentic_rl_lab.tiny.cache_root`). The directory holds the
    model, its tokenizer and `warm_start.json` (the config, the demonstrations, the loss of every step, timings).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    variants = [env] if isinstance(env, Environment) else list(env)
    env = variants[0]  # the first variant names the task
    if config.loss_on not in ("assistant", "episode"):
        raise ValueError(f"loss_on must be 'assistant' or 'episode', got {config.loss_on!r}")
    if config.strategy not in env.strategies:
        choices = ", ".join(sorted(env.strategies)) or "none"
        raise ValueError(f"{env.name} has no scripted strategy {config.strategy!r} to imitate; it has: {choices}")
    base = Path(base) if base is not None else default_model_path(progress=progress)
    started = time.perf_counter()
    demos = play_demonstrations(variants, config.strategy, config.episodes, config.seed)
    rendered = [render(t.messages, t.tools) for t in demos]

    digest = hashlib.sha256()
    for part in [json.dumps(dataclasses.asdict(config), sort_keys=True), *rendered]:
        digest.update(part.encode())
    for weights in sorted(base.glob("*.safetensors")):
        digest.update(hashlib.sha256(weights.read_bytes()).digest())
    final = (
        Path(root if root is not None else cache_root())
        / f"warm-{env.name}-{config.strategy}-{digest.hexdigest()[:12]}"
    )
    if final.is_dir():
        return final
    # A fixed name, not a temporary one: a rerun after a crash finds the checkpoint and resumes.
    work = final.with_name(f".partial-{final.name}")
    work.mkdir(parents=True, exist_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    context = tokenizer.model_max_length
    strategy = env.strategies[config.strategy]
    examples, cache = [], {}
    for episode, demo in enumerate(demos):
        example = Example(env.name, *tokenize_episode(tokenizer, demo.messages, demo.tools))
        if len(example.input_ids) > context:
            raise ValueError(
                f"demonstration {episode} of {env.name} has {len(example.input_ids)} tokens, more than the model's "
                f"context ({context}): shorten the episodes (max_turns) or use a model with a longer context"
            )
        if config.demonstrator_samples:
            example.soft_targets = demonstrator_distribution(
                tokenizer,
                strategy,
                demo.messages,
                example,
                config.demonstrator_samples,
                f"{config.seed}/{episode}",
                cache,
            )
        if config.loss_on == "episode":
            first = example.assistant_mask.index(True) if any(example.assistant_mask) else len(example.input_ids)
            example.assistant_mask = [position >= first for position in range(len(example.input_ids))]
        examples.append(example)
    prepared = time.perf_counter()

    sft = dataclasses.replace(
        DEFAULT_CONFIG,
        seed=config.seed,
        sft_steps=config.sft_steps,
        batch_tokens=config.batch_tokens,
        learning_rate=config.learning_rate,
        warmup_steps=config.warmup_steps,
    )
    losses = train_sft(model, examples, sft, tokenizer.pad_token_id, progress, work / "checkpoint.pt", 25)
    model.save_pretrained(work)
    tokenizer.save_pretrained(work)
    lengths = sorted(len(e.input_ids) for e in examples)
    info = {
        "env": env.name,
        "config": dataclasses.asdict(config),
        "base": base.name,
        "demonstrations": {
            "episodes": len(examples),
            "success_rate": statistics.mean(t.outcome.success for t in demos),
            "tokens": sum(lengths),
            "loss_tokens": sum(sum(e.assistant_mask) for e in examples),
            "median_tokens": lengths[len(lengths) // 2],
            "max_tokens": lengths[-1],
        },
        "losses": [round(x, 4) for x in losses],
        "seconds": {"prepare": round(prepared - started, 1), "sft": round(time.perf_counter() - prepared, 1)},
        "threads": torch.get_num_threads(),
    }
    (work / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    (work / "checkpoint.pt").unlink()
    try:
        os.rename(work, final)
    except OSError:
        if not final.is_dir():  # not "another process finished first": a real error
            raise
        shutil.rmtree(work, ignore_errors=True)
    return final


def load_info(path: str | Path) -> dict[str, Any]:
    """The `warm_start.json` of a warm-started model directory."""
    return json.loads((Path(path) / INFO_FILE).read_text())


# ----- the committed warm start: cpu-tiny on inbox_search ------------------------------------------------------------
EMBEDDED_INBOX_DIR = Path(__file__).resolve().parent / "data" / "inbox-model"
"""Where the inbox warm start is committed in bfloat16 once a recipe meets its targets (none does yet, so nothing is
there and `inbox_model_path` builds it): `python -m agentic_rl_lab warm-start-inbox --export <this folder>`."""
PRACTICE_INBOXES = 20
"""Inboxes the demonstrations are shared among: other draws of the same generator (`inbox_data.practice_inboxes`)."""
INBOX_WARM_START = WarmStartConfig(
    strategy="mediocre", episodes=3000, sft_steps=1500, learning_rate=1e-3, loss_on="episode"
)
"""The recipe. Its demonstrations are spread over many inboxes, so that a small model cannot memorise one inbox's
answers and must read them off the emails, and the loss counts the observations too, which repeat what a search
listed: practice at copying from the context. It does not work yet: the model searches well, then reads and
answers what it did not copy (0% of held-out questions). docs/warm-start.md has what each recipe measured and what
to try next."""


def inbox_warm_start_envs() -> list[Environment]:
    """`inbox_search` on the train questions of each practice inbox (never the lab's own inbox: its test split is
    the held-out evaluation)."""
    from agentic_rl_lab.envs.inbox_data import practice_inboxes
    from agentic_rl_lab.envs.inbox_search import InboxSearch

    directories = practice_inboxes(PRACTICE_INBOXES, cache_root() / "practice-inboxes")
    return [InboxSearch(split="train", data_dir=directory) for directory in directories]


def inbox_model_path(progress: bool = True) -> Path:
    """cpu-tiny warm-started on `inbox_search`: the committed copy when its `warm_start.json` records
    `INBOX_WARM_START`, else the cached build, warm-starting it first if needed (about 15 minutes on 2 cores)."""
    info = EMBEDDED_INBOX_DIR / INFO_FILE
    if info.is_file() and json.loads(info.read_text())["config"] == dataclasses.asdict(INBOX_WARM_START):
        return EMBEDDED_INBOX_DIR
    return warm_start(inbox_warm_start_envs(), INBOX_WARM_START, progress=progress)
