"""Supervised fine-tuning (SFT) on demonstrations: how a model learns to act before RL.

A scripted strategy plays an environment; the model learns to write what the strategy wrote. Building cpu-tiny
(`agentic_rl_lab.tiny`) and warm-starting it on a new task (`agentic_rl_lab.warm_start`) both run these steps:

1. **Play.** `play_demonstrations`: the strategy plays one episode per scenario seed of a demonstration block.
2. **Tokenize.** `tokenize_episode`: the chat template renders each episode; a mask marks the assistant's tokens,
   the only ones the loss counts.
3. **Soft targets.** `demonstrator_distribution`: where the demonstrator is random, the target is its whole
   distribution, estimated by drawing more actions on the same history, not the one action it took.
4. **Train.** `sft_loss` is the cross-entropy on the counted tokens; `train_sft` is AdamW with warm-up and cosine
   decay over batches of similar-length examples, checkpointed so that a killed run resumes where it stopped.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_rl_lab.chat import END_OF_TURN, assistant_text
from agentic_rl_lab.envs.base import Environment, Message, Strategy
from agentic_rl_lab.seeds import demonstration_seeds
from agentic_rl_lab.trajectory import Trajectory


# ----- 1. play --------------------------------------------------------------------------------------------------------
def play_demonstrations(
    envs: Environment | Sequence[Environment], strategy: str, episodes: int, seed: int
) -> list[Trajectory]:
    """`episodes` scripted trajectories, one per scenario seed of demonstration block `seed`, shared out in turn
    among `envs` (variants of one task: several inboxes, say)."""
    from agentic_rl_lab.policies.scripted import ScriptedPolicy
    from agentic_rl_lab.rollout import collect_groups

    envs = [envs] if isinstance(envs, Environment) else list(envs)
    trajectories = []
    for index, env in enumerate(envs):
        policy = ScriptedPolicy(env, strategy, seed=seed + 7919 + index)  # not `seed`: episode 0's scenario RNG
        scenarios = demonstration_seeds(seed, episodes)[index :: len(envs)]
        groups = collect_groups(env, policy, scenarios, 1, progress=False)
        trajectories += [t for group in groups for t in group.trajectories]
    return trajectories


# ----- 2. tokenize ----------------------------------------------------------------------------------------------------
@dataclass
class Example:
    """One demonstration, tokenized: `input_ids` of the whole conversation and, per token, whether the assistant
    wrote it (the SFT loss counts only those)."""

    env: str
    input_ids: list[int]
    assistant_mask: list[bool]
    soft_targets: dict[int, dict[int, float]] = field(default_factory=dict)
    """Position -> {token id: probability}: where the demonstrator could have written another token, the
    distribution it draws from, which the loss targets instead of the one token it wrote."""
    weights: dict[int, float] = field(default_factory=dict)
    """Position -> loss weight, for counted tokens that should weigh more (or less) than 1 in the mean."""


def tokenize_episode(tokenizer: Any, messages: list[Message], tools: list[Any] | None) -> tuple[list[int], list[bool]]:
    """Token ids of a rendered conversation, and a mask that is True on the tokens the assistant wrote.

    The chat template wraps each assistant turn in `{% generation %}`; transformers maps those characters to
    tokens. A turn's tokens are its text, its tool calls and the `<|im_end|>` that ends it.
    """
    encoded = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    return list(encoded["input_ids"]), [bool(m) for m in encoded["assistant_masks"]]


# ----- 3. soft targets ------------------------------------------------------------------------------------------------
def demonstrator_distribution(
    tokenizer: Any,
    strategy: Strategy,
    messages: list[Message],
    example: Example,
    samples: int,
    seed: str,
    cache: dict[str, list[int]] | None = None,
) -> dict[int, dict[int, float]]:
    """Soft targets for `example`: at each assistant turn, draw `samples` more actions from the strategy that
    played it, on the same history, and estimate the demonstrator's next-token distribution along the turn it
    wrote (its position in `example.input_ids` -> {token id: probability}).

    Why: SFT minimises the cross-entropy between the demonstrator's policy and the model's. With a random
    demonstrator one sampled action is a very noisy estimate of that policy: a uniform guess among 40 numbers says
    almost nothing about which numbers were possible. The same loss in expectation with `samples` draws per turn
    (policy distillation, as in Hinton et al. 2015) has far less variance.

    The estimate at token j of the written turn uses the draws that agree with it on tokens 0..j-1, which is
    P(token j | the tokens before it): right even when an action spans several tokens (`" 4"`, `"5"`) or
    alternatives differ in length. Positions where every agreeing draw picks the same token keep their hard
    target. `cache` maps actions to their tokens across calls.
    """
    spans = _runs(example.assistant_mask)
    turns = [index for index, message in enumerate(messages) if message.get("role") == "assistant"]
    encoded = {} if cache is None else cache

    def turn_ids(message: Message) -> list[int]:
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
        key = json.dumps([message.get("content"), calls])  # what the template renders: not the call ids
        if key not in encoded:
            encoded[key] = tokenizer.encode(assistant_text(message) + END_OF_TURN, add_special_tokens=False)
        return encoded[key]

    targets: dict[int, dict[int, float]] = {}
    for (start, end), index in zip(spans, turns):
        written = example.input_ids[start:end]
        if turn_ids(messages[index]) != written:  # the turn does not tokenize alone as in context: leave it
            continue
        rng = random.Random(f"{seed}/{index}")
        agreeing = [written] + [turn_ids(strategy(messages[:index], rng)) for _ in range(samples)]
        for j, token in enumerate(written):
            counts = Counter(ids[j] for ids in agreeing if len(ids) > j)
            if len(counts) > 1:
                total = sum(counts.values())
                targets[start + j] = {t: count / total for t, count in counts.items()}
            agreeing = [ids for ids in agreeing if len(ids) > j and ids[j] == token]  # those that share token j
    return targets


def _runs(mask: Sequence[bool]) -> list[tuple[int, int]]:
    """The (start, end) of every run of True in `mask`."""
    runs, start = [], None
    for position, value in enumerate([*mask, False]):
        if value and start is None:
            start = position
        elif not value and start is not None:
            runs.append((start, position))
            start = None
    return runs


def demonstration_examples(
    tokenizer: Any, demonstrations: Sequence[Trajectory], strategy: Strategy, samples: int, seed: str
) -> list[Example]:
    """Tokenize demonstrations that `strategy` played, with its distributions as soft targets when `samples` > 0
    (episode i's draws are seeded `f"{seed}/{i}"`)."""
    examples: list[Example] = []
    cache: dict[str, list[int]] = {}
    for episode, demo in enumerate(demonstrations):
        example = Example(demo.env, *tokenize_episode(tokenizer, demo.messages, demo.tools))
        if samples:
            example.soft_targets = demonstrator_distribution(
                tokenizer, strategy, demo.messages, example, samples, f"{seed}/{episode}", cache
            )
        examples.append(example)
    return examples


# ----- 4. train -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SFTConfig:
    """How long and how fast to fine-tune. `TinyConfig` and `WarmStartConfig` each set these for their job."""

    sft_steps: int = 2000
    batch_tokens: int = 5120
    """Tokens per batch, padding included."""
    learning_rate: float = 1e-3
    warmup_steps: int = 30
    min_learning_rate_ratio: float = 0.02
    """Cosine decay from `learning_rate` down to this fraction of it (1.0: constant after the warm-up)."""
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    bf16_autocast: bool | None = None
    """Matmuls in bfloat16, weights in float32. `None`: where the hardware computes bfloat16 natively."""
    seed: int = 0
    """Seeds the order of the batches."""


def sft_batches(examples: Sequence[Example], batch_tokens: int, rng: random.Random) -> Iterator[list[Example]]:
    """Endless batches of about `batch_tokens` tokens (padding included). Each epoch shuffles, then groups
    examples of similar length (sorted within windows of 64) so that little compute is spent on padding."""
    while True:
        order = list(examples)
        rng.shuffle(order)
        batches: list[list[Example]] = []
        for start in range(0, len(order), 64):
            window = sorted(order[start : start + 64], key=lambda e: len(e.input_ids))
            batch: list[Example] = []
            for example in window:
                longest = max([len(e.input_ids) for e in batch] + [len(example.input_ids)])
                if batch and longest * (len(batch) + 1) > batch_tokens:
                    batches.append(batch)
                    batch = []
                batch.append(example)
            batches.append(batch)
        rng.shuffle(batches)
        yield from batches


def sft_loss(model: Any, batch: Sequence[Example], pad_id: int) -> Any:
    """Mean cross-entropy over the assistant's tokens of a batch, against the demonstrator's distribution where
    the example has one (`Example.soft_targets`) and against the token it wrote elsewhere.

    Position t predicts token t+1, so a target counts if the assistant wrote token t+1; prompts, observations and
    padding are left out. Sequences are padded on the right, which needs no attention mask: under causal
    attention a real token never looks at the padding that follows it. Only the counted positions go through the
    output layer, which saves the largest matmul on the tokens that do not count.
    """
    import torch

    length = max(len(e.input_ids) for e in batch)
    ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
    counted = torch.zeros((len(batch), length), dtype=torch.bool)
    for row, example in enumerate(batch):
        ids[row, : len(example.input_ids)] = torch.tensor(example.input_ids)
        counted[row, : len(example.input_ids)] = torch.tensor(example.assistant_mask)
    device = model.get_input_embeddings().weight.device
    ids, counted = ids.to(device), counted.to(device)
    hidden = model.model(input_ids=ids).last_hidden_state  # (batch, length, hidden)
    predicts_counted = counted[:, 1:]  # (batch, length - 1): does position t predict an assistant token?
    logits = model.lm_head(hidden[:, :-1][predicts_counted])  # (targets, vocab)
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    loss = -logprobs.gather(1, ids[:, 1:][predicts_counted][:, None])[:, 0]  # (targets,) hard targets

    # Soft targets: row i of `logprobs` is the i-th counted (example, position); find the rows that have one.
    row_of = torch.full(predicts_counted.shape, -1, dtype=torch.long)
    row_of[predicts_counted.cpu()] = torch.arange(len(loss))
    rows, tokens, weights = [], [], []
    for b, example in enumerate(batch):
        for position, distribution in example.soft_targets.items():
            for token, probability in distribution.items():
                rows.append(int(row_of[b, position - 1]))
                tokens.append(token)
                weights.append(probability)
    if rows:
        rows_t, tokens_t = torch.tensor(rows, device=device), torch.tensor(tokens, device=device)
        weighted = -torch.tensor(weights, device=device) * logprobs[rows_t, tokens_t]
        soft = torch.zeros_like(loss).index_add(0, rows_t, weighted)
        loss = torch.where(torch.zeros_like(loss, dtype=torch.bool).index_fill(0, rows_t, True), soft, loss)
    if not any(example.weights for example in batch):
        return loss.mean()
    weight = torch.ones_like(loss)
    for b, example in enumerate(batch):
        for position, value in example.weights.items():
            row = int(row_of[b, position - 1])
            if row < 0:  # -1 would silently weigh the batch's last counted token instead
                raise ValueError(f"a {example.env} example weighs position {position}, which the loss does not count")
            weight[row] = value
    return (loss * weight).sum() / weight.sum()


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 matmuls natively (Intel AMX or AVX512-BF16)."""
    import torch

    return bool(torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())


@dataclass(frozen=True)
class Rehearsal:
    """Other examples that SFT keeps practising: a skill learned before (see `agentic_rl_lab.warm_start.copy_drill`)
    that the new examples would otherwise overwrite. Every `every`-th step before step `until` (0: to the end) is a
    batch of them, at `lr_scale` times the learning rate."""

    examples: Sequence[Example]
    batch_tokens: int
    every: int
    lr_scale: float = 1.0
    until: int = 0

    def at(self, step: int) -> bool:
        """Whether step `step` (counted from 0) is a rehearsal."""
        return (step + 1) % self.every == 0 and (not self.until or step < self.until)


def train_sft(
    model: Any,
    examples: Sequence[Example],
    config: SFTConfig,
    pad_id: int,
    progress: bool,
    checkpoint: Path | None = None,
    checkpoint_every: int = 50,
    rehearse: Rehearsal | None = None,
) -> list[float]:
    """AdamW with linear warmup and cosine decay over `config.sft_steps` batches; returns the loss of each step.

    It trains on the model's device: move the model to a GPU first and the same steps take seconds, not minutes.
    With `checkpoint` (a file), the state is saved there every `checkpoint_every` steps, and a rerun with the same
    arguments resumes from it: the same batches in the same order, as if it had never stopped.
    `rehearse` mixes batches of other examples in (see `Rehearsal`)."""
    import torch
    from tqdm.auto import tqdm

    rng = random.Random(config.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, betas=(0.9, 0.95), weight_decay=config.weight_decay
    )

    def learning_rate(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        progress_fraction = (step - config.warmup_steps) / max(1, config.sft_steps - config.warmup_steps)
        cosine = 0.5 * (1 + math.cos(math.pi * progress_fraction))
        return config.min_learning_rate_ratio + (1 - config.min_learning_rate_ratio) * cosine

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, learning_rate)
    batches = sft_batches(examples, config.batch_tokens, rng)
    if rehearse is not None:
        others = sft_batches(rehearse.examples, rehearse.batch_tokens, random.Random(config.seed + 1))
        batches = _interleave(batches, others, rehearse)
    device = model.get_input_embeddings().weight.device
    if device.type == "cuda":  # every CUDA GPU the lab supports computes bfloat16 natively
        autocast = config.bf16_autocast is not False and torch.cuda.is_bf16_supported()
    else:
        autocast = native_bf16() if config.bf16_autocast is None else config.bf16_autocast
    losses: list[float] = []
    if checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        losses = state["losses"]
        for _ in losses:  # the batches already trained on
            next(batches)
    model.train()
    steps = range(len(losses), config.sft_steps)
    with tqdm(steps, desc="SFT", unit="step", disable=not progress, initial=len(losses)) as bar:
        for step in bar:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                loss = sft_loss(model, next(batches), pad_id)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            if rehearse is not None and rehearse.at(step):  # a rehearsal batch: its own rate
                for group in optimizer.param_groups:
                    group["lr"] *= rehearse.lr_scale  # the schedule's next step sets the rate afresh
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}", refresh=False)
            if checkpoint is not None and ((step + 1) % checkpoint_every == 0 or step + 1 == config.sft_steps):
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "losses": losses}
                torch.save({**state, "schedule": schedule.state_dict()}, checkpoint.with_suffix(".tmp"))
                checkpoint.with_suffix(".tmp").replace(checkpoint)  # atomically: a kill never leaves half a file
    model.eval()
    return losses


def _interleave(
    main: Iterator[list[Example]], other: Iterator[list[Example]], rehearsal: Rehearsal
) -> Iterator[list[Example]]:
    """`main`'s batches, with one of `other`'s at each step that `rehearsal` says is one."""
    for step in itertools.count():
        yield next(other) if rehearsal.at(step) else next(main)
