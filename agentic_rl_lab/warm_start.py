"""Warm start: teach a model a new environment by imitating a scripted demonstrator, before GRPO.

GRPO can only reinforce what a policy already does some of the time. In a group where every trajectory fails, every
advantage is zero and the step teaches nothing; `cpu-tiny` on `inbox_search` fails every episode, so GRPO alone
would never start. A warm start fixes that with supervised fine-tuning (SFT) on demonstrations:

0. **A copying drill (optional).** Random token sequences shown twice, the loss on the repeat. A task whose
   actions copy from tool replies (an email id, a date) needs a model that can copy from its context at all.
   Small transformers learn that abruptly, after a plateau (induction heads, Olsson et al. 2022), and the few
   copies in an episode did not get cpu-tiny past the plateau in 4,000 steps; short drills do, in minutes. Drills
   whose two copies lie far apart (`gap`), between demonstration steps, carry the skill to an episode's distances.
1. **Demonstrations.** A scripted strategy (`env.strategies[name]`) plays the environment through the rollout
   engine, one episode per scenario seed.
2. **Tokens.** Each episode is rendered with the model's chat template; the loss counts the assistant's tokens
   only, and where the demonstrator is random, it targets the demonstrator's whole distribution (see
   `agentic_rl_lab.sft.demonstrator_distribution`).
3. **SFT.** Every weight of the base model is trained (the same loop that built `cpu-tiny`), then saved in the
   Hugging Face layout, so `HFPolicy.from_pretrained(path)` and `load_model(model_name=path)` load it.

Pick a demonstrator that is *coherent but mediocre*: it must finish the task often enough for the model to learn
the format and every skill it needs (at least a third of the time), and make mistakes that are choices, not missing
skills, so there is headroom that only RL can take. `inbox_search`'s `mediocre` gives up right after its search
one time in five: the model learns to search, read and answer, and GRPO learns to stop giving up.

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
import random
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_rl_lab.chat import END_OF_TURN, START_OF_TURN, render
from agentic_rl_lab.envs.base import Environment
from agentic_rl_lab.sft import (
    Example,
    Rehearsal,
    SFTConfig,
    demonstration_examples,
    play_demonstrations,
    train_sft,
)
from agentic_rl_lab.tiny import cache_root, default_model_path

INFO_FILE = "warm_start.json"


@dataclass(frozen=True)
class WarmStartConfig:
    """What to imitate and how long. The defaults warm-start cpu-tiny on one environment in minutes on 2 cores."""

    strategy: str = "mediocre"
    """The scripted strategy to imitate, a key of `env.strategies`."""
    episodes: int = 1000
    """Demonstrations, from demonstration block `seed` (`agentic_rl_lab.seeds`: never a held-out scenario)."""
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
    copy_drill_steps: int = 0
    """Steps of the copying drill before the demonstrations (0: none). See `copy_drill`."""
    copy_drill_every: int = 0
    """Then every this many steps of the demonstrations is a drill step too (0: none). Measured on inbox_search:
    without them the demonstrations erased the drilled copying (69% of drill tokens right, then 0.9%), and the model
    ended worse than with no drill at all (24% valid turns)."""
    copy_drill_gap: int = 0
    """Those drills put up to this many random tokens between their two copies (see `copy_drill`)."""
    copy_drill_alphabet: int = 0
    """Those drills draw each sequence from this many tokens (0: the whole vocabulary), so that copying needs two or
    three tokens of context, as a value after a recurring `:` does (see `copy_drill`)."""
    copy_drill_batch_tokens: int = 560
    """Tokens per batch of those drills (the drill phase's are `COPY_DRILL_BATCH_TOKENS`)."""
    copy_drill_learning_rate: float | None = None
    """Their learning rate (None: the demonstrations')."""
    copy_drill_until: int = 0
    """They stop after this many steps (0: at the end), so that the last steps are the demonstrations' alone. Measured:
    with drills to the end, the model copied ids (97% right on held-out demonstrations) but repeated itself when it
    sampled ("Reykeykjavik", the same call over and over): 57% valid turns, 0% success."""
    copy_weight: float = 1.0
    """Loss weight of the demonstrator's tokens that copy from the question or a tool reply (see `weigh_copies`); 1:
    like any other."""
    min_learning_rate_ratio: float = 0.02
    """The demonstrations' learning rate decays to this fraction of `learning_rate` (1.0: constant)."""
    seed: int = 0


COPY_DRILL_LENGTHS = (8, 24)
"""Tokens in a drill's sequence (shown twice): short, so that a step is cheap and there are many of them."""
COPY_DRILL_BATCH_TOKENS = 560
"""About 16 drills a step. What ends the plateau is the number of steps, not of tokens: measured on cpu-tiny, 16
drills a step started copying after 1,500-1,750 steps in one run (89% right at 2,000) and were still on the way
at 2,500 in another; 4,600-token steps of drills mixed with episodes had not started after 400."""
COPY_DRILL_LEARNING_RATE = 2e-3
"""Constant after a warm-up of 50 steps."""


def copy_drill(tokenizer: Any, count: int, seed: int, gap: int = 0, alphabet: int = 0) -> list[Example]:
    """`count` drills: a random sequence of tokens, up to `gap` other random tokens, an end of turn, the same
    sequence again. Only the repeat after its first token counts in the loss: each of those tokens can be predicted
    by finding the previous token earlier in the context and copying what followed it, which is exactly what an
    induction head does. The gap makes the copy reach as far back as an episode's do (an id in a search reply is
    40-80 tokens before the call that needs it); without it, measured, the copying learned on drills stayed there.

    `alphabet` > 0 draws each sequence from that many tokens only, so each token recurs in it and the one before
    is not enough to know where to copy from: the two or three before are. An email's values need that: in
    `Room: Pegasus` and `Date: 2025-03-27`, what follows `:` or `-` depends on what came before it."""
    rng = random.Random(seed)
    special = set(tokenizer.all_special_ids)
    vocabulary = [i for i in range(len(tokenizer)) if i not in special]
    separator = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    drills = []
    for _ in range(count):
        letters = rng.sample(vocabulary, alphabet) if alphabet else vocabulary
        sequence = rng.choices(letters, k=rng.randint(*COPY_DRILL_LENGTHS))
        filler = rng.choices(vocabulary, k=rng.randint(0, gap))
        n, m = len(sequence), len(filler)
        ids = [*sequence, *filler, separator, *sequence]
        drills.append(Example("copy_drill", ids, [False] * (n + m + 2) + [True] * (n - 1)))
    return drills


def weigh_copies(example: Example, weight: float, turn_start: int) -> None:
    """Weigh `weight` in the loss each counted token that copies from the question or an earlier tool reply: one that
    continues a pair of tokens seen there (`191` after `e`, once a search listed `e191`), or a token seen there that
    the system prompt never uses (` Glacier`, from a question about the Glacier review). Those are the tokens only
    copying predicts, a few in an episode of hundreds: weighted, they carry the loss as in a drill. `turn_start` is
    the token that opens a message (`<|im_start|>`): the system prompt is the first message, and its tokens (the
    tools' schema) are the call's format, not a copy."""
    ids, mask = example.input_ids, example.assistant_mask
    starts = [position for position, token in enumerate(ids) if token == turn_start]
    since = starts[1] if len(starts) > 1 else len(ids)
    system = set(ids[:since])
    pairs: set[tuple[int, int]] = set()
    tokens: set[int] = set()
    for position in range(since + 1, len(ids)):
        pair = (ids[position - 1], ids[position])
        if mask[position] and (pair in pairs or pair[1] in tokens):
            example.weights[position] = weight
        elif not mask[position] and not mask[position - 1]:  # inside the question or a tool reply (or a header)
            pairs.add(pair)
            if pair[1] not in system:
                tokens.add(pair[1])


def copying_accuracy(model: Any, drills: Sequence[Example]) -> float:
    """The share of counted drill tokens that the model's most likely next token gets right: near 0 before the
    plateau ends (1 in the vocabulary's size), near 1 once the model copies."""
    import torch

    right = total = 0
    device = model.get_input_embeddings().weight.device
    with torch.no_grad():
        for drill in drills:
            predicted = model(input_ids=torch.tensor([drill.input_ids], device=device)).logits[0].argmax(-1).tolist()
            counted = [p for p, is_counted in enumerate(drill.assistant_mask) if is_counted]
            right += sum(predicted[p - 1] == drill.input_ids[p] for p in counted)
            total += len(counted)
    return round(right / total, 4)


def cache_key(env_name: str, config: WarmStartConfig, rendered: Sequence[str], base: Path) -> str:
    """The build's name: a hash of the recipe, the demonstrations as the model reads them, and the base weights.
    A change to any of them (a demonstrator's wording, say) is a new build; `warm_start.json` records the name, so a
    committed copy can be checked against today's code (`recipe_cache_key`)."""
    digest = hashlib.sha256()
    for part in [json.dumps(dataclasses.asdict(config), sort_keys=True), *rendered]:
        digest.update(part.encode())
    for weights in sorted(base.glob("*.safetensors")):
        digest.update(hashlib.sha256(weights.read_bytes()).digest())
    return f"warm-{env_name}-{config.strategy}-{digest.hexdigest()[:12]}"


def warm_start(
    env: Environment | Sequence[Environment],
    config: WarmStartConfig = WarmStartConfig(),
    base: str | Path | None = None,
    root: str | Path | None = None,
    progress: bool = True,
    device: str | None = None,
) -> Path:
    """Fine-tune `base` (default: cpu-tiny) to imitate `config.strategy` on `env`; returns the model's directory.

    `env` may be several variants of one task, which share the demonstrations out: where one variant would let the
    model memorise its facts instead of reading them (one inbox's 366 answers), many make it learn to read.

    Cached under `root` (default: the lab's cache, see `agentic_rl_lab.tiny.cache_root`). The directory holds the
    model, its tokenizer and `warm_start.json` (the config, the demonstrations, the loss of every step, timings).
    `device` trains there (default: the GPU when there is one); the saved weights are float32 on the CPU either way.
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

    final = Path(root if root is not None else cache_root()) / cache_key(env.name, config, rendered, base)
    if final.is_dir():
        return final
    # A fixed name, not a temporary one: a rerun after a crash finds the checkpoint and resumes.
    work = final.with_name(f".partial-{final.name}")
    work.mkdir(parents=True, exist_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(base)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).to(device)
    context = tokenizer.model_max_length
    strategy = env.strategies[config.strategy]
    examples = demonstration_examples(tokenizer, demos, strategy, config.demonstrator_samples, str(config.seed))
    for episode, example in enumerate(examples):
        if len(example.input_ids) > context:
            raise ValueError(
                f"demonstration {episode} of {env.name} has {len(example.input_ids)} tokens, more than the model's "
                f"context ({context}): shorten the episodes (max_turns) or use a model with a longer context"
            )
        if config.loss_on == "episode":
            first = example.assistant_mask.index(True) if any(example.assistant_mask) else len(example.input_ids)
            example.assistant_mask = [position >= first for position in range(len(example.input_ids))]
        if config.copy_weight != 1.0:
            weigh_copies(example, config.copy_weight, tokenizer.convert_tokens_to_ids(START_OF_TURN))
    prepared = time.perf_counter()

    drill_losses: list[float] = []
    copy_accuracy = copy_accuracy_after = None
    if config.copy_drill_steps:
        drill = SFTConfig(
            seed=config.seed,
            sft_steps=config.copy_drill_steps,
            batch_tokens=COPY_DRILL_BATCH_TOKENS,
            learning_rate=COPY_DRILL_LEARNING_RATE,
            warmup_steps=50,
            min_learning_rate_ratio=1.0,  # constant: a decaying rate can stall on the plateau
        )
        drills = copy_drill(tokenizer, config.copy_drill_steps * 17, config.seed)  # ~1 epoch: each drill seen once
        drill_losses = train_sft(model, drills, drill, tokenizer.pad_token_id, progress, work / "drill.pt", 250)
        copy_accuracy = copying_accuracy(model, copy_drill(tokenizer, 200, seed=config.seed + 1))
    drilled = time.perf_counter()

    sft = SFTConfig(
        seed=config.seed,
        sft_steps=config.sft_steps,
        batch_tokens=config.batch_tokens,
        learning_rate=config.learning_rate,
        warmup_steps=config.warmup_steps,
        min_learning_rate_ratio=config.min_learning_rate_ratio,
    )
    rehearse = None
    if config.copy_drill_steps and config.copy_drill_every:
        per_batch = max(1, config.copy_drill_batch_tokens // (32 + config.copy_drill_gap // 2))  # about
        count = (config.sft_steps // config.copy_drill_every + 1) * per_batch
        drills = copy_drill(tokenizer, count, config.seed + 2, config.copy_drill_gap, config.copy_drill_alphabet)
        rate = config.copy_drill_learning_rate or config.learning_rate
        rehearse = Rehearsal(
            drills,
            config.copy_drill_batch_tokens,
            config.copy_drill_every,
            rate / config.learning_rate,
            config.copy_drill_until,
        )
    losses = train_sft(model, examples, sft, tokenizer.pad_token_id, progress, work / "checkpoint.pt", 25, rehearse)
    if config.copy_drill_steps:  # is the copying still there after the demonstrations?
        copy_accuracy_after = copying_accuracy(
            model, copy_drill(tokenizer, 200, config.seed + 1, config.copy_drill_gap, config.copy_drill_alphabet)
        )
    model.cpu().save_pretrained(work)
    tokenizer.save_pretrained(work)
    lengths = sorted(len(e.input_ids) for e in examples)
    info = {
        "env": env.name,
        "cache_key": final.name,
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
        "copy_drill_losses": [round(x, 4) for x in drill_losses],
        "copy_accuracy": copy_accuracy,
        "copy_accuracy_after": copy_accuracy_after,
        "losses": [round(x, 4) for x in losses],
        "seconds": {
            "prepare": round(prepared - started, 1),
            "copy_drill": round(drilled - prepared, 1),
            "sft": round(time.perf_counter() - drilled, 1),
        },
        "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "threads": torch.get_num_threads(),
    }
    (work / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    for state in ("checkpoint.pt", "drill.pt"):
        (work / state).unlink(missing_ok=True)
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


# ----- the committed warm starts: cpu-tiny on inbox_search and on fog_maze ------------------------------------------
PRACTICE_INBOXES = 20
"""Inboxes the demonstrations are shared among: other draws of the same generator (`inbox_data.practice_inboxes`)."""
INBOX_WARM_START = WarmStartConfig(
    strategy="mediocre",
    episodes=4500,
    sft_steps=6000,
    batch_tokens=1536,
    learning_rate=5e-4,
    copy_drill_steps=3000,
    copy_drill_every=3,
    copy_drill_gap=250,
    copy_drill_batch_tokens=2048,
    copy_drill_learning_rate=1e-3,
    copy_weight=10.0,
    min_learning_rate_ratio=1.0,
)
"""Copying first, then the demonstrations with copying kept alive: 3,000 steps of short drills end the induction-head
plateau; then demonstrations (about 2 episodes a step, the tokens copied from the question or a tool reply weighing
10) with every third step a drill whose copies are up to 250 tokens apart, as far as an episode's, to the end. The
demonstrations are spread over many inboxes, so that a small model cannot memorise one inbox's answers and must read
them off the emails. Why each part, and what every other recipe measured: docs/warm-start.md."""
FOG_MAZE_WARM_START = WarmStartConfig(strategy="mediocre", episodes=1500, sft_steps=800, learning_rate=1e-3)
"""`fog_maze`'s `mediocre` walks at random but never turns back unless at a dead end, and steps into the exit when
it sees it (61-71% success): each move reads the latest view and the last move, a few tokens back, so no drill."""


def inbox_warm_start_envs() -> list[Environment]:
    """`inbox_search` on the train questions of each practice inbox (never the lab's own inbox: its test split is
    the held-out evaluation)."""
    from agentic_rl_lab.envs.inbox_data import practice_inboxes
    from agentic_rl_lab.envs.inbox_search import InboxSearch

    directories = practice_inboxes(PRACTICE_INBOXES, cache_root() / "practice-inboxes")
    return [InboxSearch(split="train", data_dir=directory) for directory in directories]


def fog_maze_warm_start_envs() -> list[Environment]:
    """`fog_maze` as registered: a new maze for every scenario seed, so the held-out seeds are new mazes."""
    from agentic_rl_lab.envs.fog_maze import FogMaze

    return [FogMaze()]


@dataclass(frozen=True)
class Recipe:
    """A committed warm start: how it is made, and where its bfloat16 copy lives in the package."""

    config: WarmStartConfig
    envs: Callable[[], list[Environment]]
    directory: Path


DATA_DIR = Path(__file__).resolve().parent / "data"
RECIPES = {
    "inbox_search": Recipe(INBOX_WARM_START, inbox_warm_start_envs, DATA_DIR / "inbox-model"),
    "fog_maze": Recipe(FOG_MAZE_WARM_START, fog_maze_warm_start_envs, DATA_DIR / "fog-maze-model"),
}
"""`python -m agentic_rl_lab warm-start <env> --export <directory>` builds one (or finds it in the cache) and
commits it, in bfloat16, where `warm_started_model_path` looks first."""


def recipe_cache_key(env_name: str) -> str:
    """The `cache_key` that `env_name`'s recipe builds today (it plays the demonstrations: seconds)."""
    recipe = RECIPES[env_name]
    variants = recipe.envs()
    demos = play_demonstrations(variants, recipe.config.strategy, recipe.config.episodes, recipe.config.seed)
    rendered = [render(t.messages, t.tools) for t in demos]
    return cache_key(variants[0].name, recipe.config, rendered, default_model_path(progress=False))


def warm_started_model_path(env_name: str, progress: bool = True) -> Path:
    """cpu-tiny warm-started on `env_name`: the committed copy when its `warm_start.json` records the recipe, else
    the cached build, warm-starting it first if needed (20-40 minutes on 2 cores)."""
    if env_name not in RECIPES:
        raise ValueError(f"no warm-start recipe for {env_name!r}; there are: {', '.join(RECIPES)}")
    recipe = RECIPES[env_name]
    info = recipe.directory / INFO_FILE
    if info.is_file() and json.loads(info.read_text())["config"] == dataclasses.asdict(recipe.config):
        return recipe.directory
    return warm_start(recipe.envs(), recipe.config, progress=progress)
