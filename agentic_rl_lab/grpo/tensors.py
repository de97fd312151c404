"""From trajectories to training tensors, token in / token out.

A multi-turn trajectory becomes **one** token sequence: the opening prompt, then each assistant turn's *sampled*
token ids, with the environment's replies (and the next `<|im_start|>assistant` header) tokenized in between
(`agentic_rl_lab.chat.splice_sampled_tokens`, which the policy uses for its prompts too). The loss mask is 1 on
the sampled ids of every turn and 0 on everything else (system, user and tool tokens): the policy is trained on
what it did, never on what the environment said. `collate` then pads a list of sequences into tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agentic_rl_lab.chat import ChatTokens, splice_sampled_tokens
from agentic_rl_lab.trajectory import Trajectory


class NotTrainable(ValueError):
    """A trajectory without sampled token ids (an API model's), which can be judged and viewed, not trained on."""


def trajectory_to_sequence(trajectory: Trajectory, tokenizer: Any) -> ChatTokens:
    """Splice a trajectory's sampled ids between its tokenized context. Stops after the last sampled turn."""
    if not trajectory.completions:
        raise NotTrainable(
            f"{trajectory.env} seed={trajectory.seed}: no sampled token ids (an API policy gives none); "
            "such a trajectory can be judged and viewed, but not trained on"
        )
    sampled = {c.message_index: (c.token_ids, c.logprobs) for c in trajectory.completions}
    return splice_sampled_tokens(tokenizer, trajectory.messages, trajectory.tools, sampled)


@dataclass
class TrainingBatch:
    """Sequences right-padded into tensors, all (B, T), plus each token's advantage."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    assistant_mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor


def collate(sequences: list[ChatTokens], advantages: list[list[float]], pad_id: int) -> TrainingBatch:
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
        old_logprobs=torch.tensor([pad(s.sampled_logprobs, 0.0) for s in sequences], dtype=torch.float32),
        advantages=torch.tensor(per_token_advantage, dtype=torch.float32),
    )
