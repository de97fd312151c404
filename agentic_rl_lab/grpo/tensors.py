"""From trajectories to training tensors, token in / token out.

A multi-turn trajectory becomes **one** token sequence: the opening prompt, then each assistant turn's *sampled*
token ids, with the environment's replies (and the next `<|im_start|>assistant` header) tokenized in between.
The loss mask is 1 on the sampled ids of every turn and 0 on everything else (system, user and tool tokens):
the policy is trained on what it did, never on what the environment said.

Why not re-render the whole chat and tokenize it? Because the text the model sampled and the text the chat
template renders from the *parsed* message can tokenize differently (other JSON spacing, a different BPE split),
and training on tokens the model never produced drifts off-policy (verl and verifiers report this breaking
multi-turn training). So the sampled ids are spliced in exactly, and only the context between turns is
tokenized. With the ChatML template every turn boundary is a special token, so tokenizing the pieces gives the
same ids as tokenizing the whole; `tests/grpo/test_tensors.py` checks it against the prompts the policy saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agentic_rl_lab.chat import END_OF_TURN
from agentic_rl_lab.trajectory import Trajectory


class NotTrainable(ValueError):
    """A trajectory without sampled token ids (an API model's), which can be judged and viewed, not trained on."""


@dataclass
class TrainingSequence:
    """One trajectory as the trainer sees it. All lists have the same length (the sequence's tokens)."""

    input_ids: list[int]
    assistant_mask: list[int]
    """1 where the policy sampled the token (a loss is taken there), 0 on context."""
    old_logprobs: list[float]
    """Sampling-time log-probability of each assistant token; 0.0 on context (never used there)."""
    turn: list[int]
    """Which assistant turn each token belongs to (0, 1, ...), -1 on context: per-turn credit uses it."""

    def __len__(self) -> int:
        return len(self.input_ids)


def trajectory_to_sequence(trajectory: Trajectory, tokenizer: Any) -> TrainingSequence:
    """Splice a trajectory's sampled ids between its tokenized context. Stops after the last sampled turn."""
    if not trajectory.completions:
        raise NotTrainable(
            f"{trajectory.env} seed={trajectory.seed}: no sampled token ids (an API policy gives none); "
            "such a trajectory can be judged and viewed, but not trained on"
        )
    sampled = {c.message_index: (c.token_ids, c.logprobs) for c in trajectory.completions}
    return splice_sampled_tokens(tokenizer, trajectory.messages, trajectory.tools, sampled)


def splice_sampled_tokens(
    tokenizer: Any,
    messages: list[dict],
    tools: list[dict] | None,
    sampled: dict[int, tuple[list[int], list[float] | None]],
    add_generation_prompt: bool = False,
) -> TrainingSequence:
    """The conversation as tokens, with the assistant messages in `sampled` (message index -> (ids, logprobs))
    given by their sampled ids and everything else tokenized from the chat template.

    Without `add_generation_prompt` it stops after the last sampled message (a training sequence); with it, it
    continues to the end of `messages` and the `<|im_start|>assistant` header (a prompt). `HFPolicy` builds its
    prompts with this too, so the model reads exactly the tokens the trainer later trains on.
    """
    sequence = TrainingSequence([], [], [], [])
    rendered_until = 0  # characters of the rendered conversation already turned into tokens
    for turn, k in enumerate(sorted(sampled)):
        token_ids, logprobs = sampled[k]
        if messages[k].get("role") != "assistant":
            raise ValueError(f"sampled tokens point at message {k}, which is not an assistant message")
        # The context the policy read before this turn, minus what is already in the sequence.
        prompt = render(tokenizer, messages[:k], tools, add_generation_prompt=True)
        context_ids = tokenizer.encode(prompt[rendered_until:], add_special_tokens=False)
        sequence.input_ids += context_ids + list(token_ids)
        sequence.assistant_mask += [0] * len(context_ids) + [1] * len(token_ids)
        sequence.old_logprobs += [0.0] * len(context_ids) + list(logprobs or [0.0] * len(token_ids))
        sequence.turn += [-1] * len(context_ids) + [turn] * len(token_ids)
        rendered_until = rendered_through(tokenizer, messages[: k + 1], tools, token_ids)
    if add_generation_prompt:
        tail = tokenizer.encode(render(tokenizer, messages, tools, True)[rendered_until:], add_special_tokens=False)
        sequence.input_ids += tail
        sequence.assistant_mask += [0] * len(tail)
        sequence.old_logprobs += [0.0] * len(tail)
        sequence.turn += [-1] * len(tail)
    return sequence


def extend_prompt(
    tokenizer: Any, messages: list[dict], tools: list[dict] | None, prompt_ids: list[int], k: int, token_ids: list[int]
) -> list[int]:
    """The next prompt, grown from the last one: `prompt_ids` (what assistant message `k`, the last in `messages`,
    was sampled from), its sampled `token_ids`, then the messages after it and the `<|im_start|>assistant` header.

    The same ids as `splice_sampled_tokens(..., add_generation_prompt=True)`, in two renders instead of two per
    turn: a policy that remembers its last prompt need not rebuild the whole conversation every turn.
    """
    until = rendered_through(tokenizer, messages[: k + 1], tools, token_ids)
    tail = tokenizer.encode(render(tokenizer, messages, tools, True)[until:], add_special_tokens=False)
    return list(prompt_ids) + list(token_ids) + tail


def rendered_through(tokenizer: Any, messages: list[dict], tools: list[dict] | None, token_ids: list[int]) -> int:
    """How many characters of the rendered `messages` the last (assistant) message's sampled ids stand for: up to
    its end-of-turn marker, or to just before it when the turn was cut off by max_new_tokens (the template then
    adds the marker back, as context)."""
    until = render(tokenizer, messages, tools).rindex(END_OF_TURN)
    if list(token_ids[-1:]) == [tokenizer.convert_tokens_to_ids(END_OF_TURN)]:
        until += len(END_OF_TURN)
    return until


def render(tokenizer: Any, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool = False) -> str:
    """The chat template's text for `messages`, as the policy rendered it."""
    return tokenizer.apply_chat_template(
        messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False
    )


@dataclass
class TrainingBatch:
    """Sequences right-padded into tensors, all (B, T), plus each token's advantage."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    assistant_mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor


def collate(sequences: list[TrainingSequence], advantages: list[list[float]], pad_id: int) -> TrainingBatch:
    """Right-pad `sequences` into one batch. `advantages[i]` holds one value per assistant turn of sequence i
    (one value for trajectory-level credit: it is broadcast to every turn)."""
    width = max(len(s) for s in sequences)

    def pad(values: list, fill: float | int) -> list:
        return values + [fill] * (width - len(values))

    per_token_advantage = []
    for sequence, turn_advantages in zip(sequences, advantages):
        row = [turn_advantages[min(t, len(turn_advantages) - 1)] if t >= 0 else 0.0 for t in sequence.turn]
        per_token_advantage.append(pad(row, 0.0))
    return TrainingBatch(
        input_ids=torch.tensor([pad(s.input_ids, pad_id) for s in sequences]),
        attention_mask=torch.tensor([pad([1] * len(s), 0) for s in sequences]),
        assistant_mask=torch.tensor([pad(s.assistant_mask, 0) for s in sequences], dtype=torch.float32),
        old_logprobs=torch.tensor([pad(s.old_logprobs, 0.0) for s in sequences], dtype=torch.float32),
        advantages=torch.tensor(per_token_advantage, dtype=torch.float32),
    )
