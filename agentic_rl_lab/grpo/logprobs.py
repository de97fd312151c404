"""The log-probabilities the update needs: log π_θ(y_t) of every token the policy sampled, from one forward pass.

Two things make this more than `log_softmax(model(ids).logits)`:

1. **Go through the model's own causal-LM forward.** Unsloth builds its causal attention mask in the causal-LM
   forward (`CausalLM_fast_forward`), not in the decoder, and drops the padding mask in training mode: calling the
   decoder alone would let a token attend to later ones. So the forward is `model(..., output_hidden_states=True,
   logits_to_keep=1)`: the whole model runs, its LM head only on the last position, and the final hidden states
   come back (`hidden_states[-1]`, after the last norm, in transformers and in Unsloth alike). The price: every
   layer's input stays referenced until backward. Transformers' checkpointing keeps those anyway; Unsloth's moves
   them to CPU memory, so here they also stay on the GPU (for Qwen2.5-3B, 36 × 4,096 × 2,048 × 2 bytes = 0.6 GB a
   sequence of 4,096 tokens). `scripts/gpu_check.py` measures the update's peak memory with it.
2. **Bound the memory of the vocabulary.** Logits are (tokens × vocabulary): for Qwen's 151,936 words in float32,
   600 KB a token, 9.7 GB for 16,000 tokens. Only the assistant's tokens enter the loss (about 40% of a
   guess_number trajectory), so the LM head runs on those rows alone, and in chunks of at most `chunk_size` logits
   (rows × vocabulary) that are recomputed in the backward pass (activation checkpointing): at most one chunk's
   logits exist at a time, forward or backward. A small vocabulary fits in one chunk (cpu-tiny's 3,520 words:
   11,000 rows), which keeps its numbers those of a single matmul.

The shortcut in 2 gives the full pass's numbers only where the logits are the output embedding of the last hidden
state and nothing more: other models (Gemma 2 caps its logits, Cohere and Granite scale them) take the full pass.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from agentic_rl_lab.grpo.loss import token_logprobs

PLAIN_LM_HEADS = frozenset({"llama", "mistral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
"""Model types whose logits are exactly the output embedding applied to the body's last hidden state."""

CHUNK_SIZE = 256 * 151_936
"""Logits per LM-head chunk: 156 MB of float32 at a time, 256 rows of Qwen's 151,936-word vocabulary."""


def assistant_token_logprobs(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    mask: Tensor,
    temperature: float,
    chunk_size: int = CHUNK_SIZE,
) -> Tensor:
    """log π_θ(input_ids[:, t + 1]) at the sampling temperature, where `mask` (B, T-1) is 1; 0 elsewhere.

    Aligned like `token_logprobs`: result[b, t] is the log-probability of token t + 1 given tokens 0..t.
    """
    if getattr(model.config, "model_type", None) not in PLAIN_LM_HEADS:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        return token_logprobs(logits, input_ids, temperature) * mask
    output = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        output_hidden_states=True,
        logits_to_keep=1,  # the forward's own LM head runs on the last position only
        use_cache=False,
    )
    hidden = output.hidden_states[-1]  # (B, T, H), after the final norm
    picked = mask.bool()
    rows = hidden[:, :-1][picked]  # (N, H): the positions that predict a sampled token
    targets = input_ids[:, 1:][picked]  # (N,)
    head = model.get_output_embeddings()
    step = max(1, chunk_size // head.weight.shape[0])  # rows per chunk
    pieces = []
    for start in range(0, rows.shape[0], step):
        chunk = (head, rows[start : start + step], targets[start : start + step], temperature)
        if torch.is_grad_enabled():  # keep only the chunk's inputs; its logits are recomputed in backward
            pieces.append(checkpoint(_head_logprobs, *chunk, use_reentrant=False))
        else:
            pieces.append(_head_logprobs(*chunk))
    picked_logprobs = torch.cat(pieces) if pieces else hidden.new_zeros(0, dtype=torch.float32)
    result = torch.zeros(picked.shape, dtype=torch.float32, device=hidden.device)
    return result.masked_scatter(picked, picked_logprobs)


def _head_logprobs(head: torch.nn.Module, rows: Tensor, targets: Tensor, temperature: float) -> Tensor:
    """log_softmax(head(rows) / temperature) at `targets`, in float32 (bf16 log-probs are too coarse for ratios)."""
    logprobs = torch.log_softmax(head(rows).float() / temperature, dim=-1)  # (n, V)
    return logprobs.gather(-1, targets[:, None]).squeeze(-1)
