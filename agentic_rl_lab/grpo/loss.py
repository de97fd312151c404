"""The GRPO loss on per-token tensors, in the order of the paper's objective.

Every tensor is (B, T): B sequences (trajectories) padded to T tokens, and `mask` is 1 on the assistant
tokens the policy sampled (0 on system, user and tool tokens and on padding). For sequence i and token t:

    log ρ_it = log π_θ(y_it) - log π_old(y_it)                          1. log-ratio against the sampler
    ρ_it     = exp(log ρ_it)                 (token)                    2. importance ratio
             = exp(mean_t' log ρ_it')        (sequence: GSPO)
    L_it     = -min(ρ A, clip(ρ, 1 - ε, 1 + ε_high) A)                  3. clipped surrogate (PPO)
             = -sg[clip(ρ, 1 - ε, 1 + ε_high)] A log π_θ   (cispo; sg = stop-gradient)
             + β (exp(d) - d - 1),  d = log π_ref - log π_θ             4. k3 KL to the reference
    loss     = normalise(L over mask)                                    5. per `loss_type`

`loss_type` only changes step 3 (cispo) and step 5:
- `grpo`:    mean over each sequence's tokens, then mean over sequences (DeepSeekMath). A token of a short
             sequence weighs more than one of a long sequence: the length bias Dr. GRPO points out.
- `dr_grpo`: sum over all tokens / (B × max_completion_length), a constant (Dr. GRPO, Liu et al. 2025).
- `dapo`:    sum over all tokens / number of assistant tokens: every token weighs the same (DAPO, Yu et al.).
- `cispo`:   CISPO (MiniMax-M1, 2025): a REINFORCE-style loss weighted by the clipped, detached ratio, so a
             clipped token still gets a gradient (PPO clipping would zero it). Normalised like `dapo`.

Clipping. The same bounds [1 - ε, 1 + ε_high] serve every loss_type (as in ART); ε_high = None means ε.
- PPO clip (grpo, dr_grpo, dapo): ε = 0.2; DAPO's "clip-higher" raises ε_high to 0.28 so unlikely tokens can
  gain probability faster. Clipping zeroes a token's gradient when ρ > 1 + ε_high with A > 0, or ρ < 1 - ε
  with A < 0: the update already moved that token far enough.
- cispo: the bounds clip the detached weight, never the gradient. CISPO's usual range is [0, 5]: epsilon=1.0,
  epsilon_high=4.0 (ART's defaults; TRL writes the same cap as epsilon_high=5.0, an absolute bound).
- GSPO clips the sequence ratio, which stays near 1: the GSPO paper uses ε = 3e-4, ε_high = 4e-4.

Dr. GRPO's constant. `max_completion_length` is the most assistant tokens one trajectory can hold; for
multi-turn agents, max turns × max new tokens per turn. Keep it fixed for a run, so the loss scale does not
change with how much a batch is padded. None means T.

Gradient accumulation. Each call normalises over its own micro-batch. To match one big batch, weight each
micro-batch's loss by its share of the batch: of its sequences for grpo and dr_grpo, of its tokens for dapo and
cispo (`items_in_batch`).

Inputs are not cleaned: a NaN anywhere, even under mask 0, makes the loss NaN, so the trainer's guard sees
it and skips the step instead of training on garbage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

LossType = Literal["grpo", "dr_grpo", "dapo", "cispo"]
ImportanceSamplingLevel = Literal["token", "sequence"]
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "cispo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")


@dataclass
class LossStats:
    """Diagnostics of one loss evaluation. Fractions and means are over assistant tokens (mask 1)."""

    clip_fraction: float
    """Share of tokens that clipping acted on: `clip_fraction_low + clip_fraction_high`."""
    clip_fraction_low: float
    """ρ < 1 - ε with A < 0: the gradient is zero (cispo: ρ < 1 - ε, the weight was raised; any A)."""
    clip_fraction_high: float
    """ρ > 1 + ε_high with A > 0: the gradient is zero (cispo: ρ > 1 + ε_high, the weight was capped; any A)."""
    approx_kl: float
    """How far the policy moved since sampling: k3 estimate of KL(π_old ‖ π_θ), mean of (ρ - 1) - log ρ over
    tokens with the per-token ρ (CleanRL's `approx_kl`). 0 on the first update of a batch."""
    ratio_mean: float
    """Mean importance ratio (the sequence ratio for GSPO). 1 on the first update of a batch."""
    kl: float | None
    """k3 estimate of KL(π_θ ‖ π_ref), mean over tokens; None when no `ref_logprobs` were given."""
    num_tokens: int
    """Assistant tokens in the batch (the sum of `mask`)."""
    num_sequences: int
    """B."""


def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss_type: LossType = "grpo",
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    ref_logprobs: Tensor | None = None,
    importance_sampling_level: ImportanceSamplingLevel = "token",
    max_completion_length: int | None = None,
) -> tuple[Tensor, LossStats]:
    """The GRPO loss of a batch (a scalar to minimise) and its diagnostics; the variants are in the module doc.

    Args:
        logprobs: (B, T) log π_θ of the sampled tokens under the policy being trained; carries the gradient.
        old_logprobs: (B, T) log π_old of the same tokens at sampling time; a constant.
        advantages: (B, T) per token (per-turn credit), or (B,) one per sequence.
        mask: (B, T) 1 on assistant tokens; tokens with 0 get no gradient, whatever the tensors hold there.
        loss_type: "grpo", "dr_grpo", "dapo" or "cispo": the normalisation (and cispo's surrogate).
        epsilon: ρ is clipped below at 1 - ε (PPO's 0.2; CISPO: 1.0, i.e. no lower bound).
        epsilon_high: ρ is clipped above at 1 + ε_high; None means ε (DAPO: 0.28; CISPO: 4.0).
        beta: weight of the KL to the reference; 0 (TRL's and ART's default) leaves it out.
        ref_logprobs: (B, T) log π_ref of the sampled tokens; required if beta > 0, else only reported.
        importance_sampling_level: "token" (GRPO) or "sequence" (GSPO; not with cispo, as in TRL).
        max_completion_length: dr_grpo's constant per sequence; None means T (see the module doc).
    """
    _check_inputs(logprobs, old_logprobs, advantages, mask, ref_logprobs, beta)
    check_loss_options(loss_type, importance_sampling_level, epsilon, epsilon_high, max_completion_length)
    eps_low, eps_high = epsilon, epsilon if epsilon_high is None else epsilon_high
    mask = mask.to(logprobs.dtype)
    advantages = (advantages[:, None] if advantages.dim() == 1 else advantages).expand_as(logprobs).detach()
    tokens = mask.sum(-1)  # (B,) assistant tokens of each sequence

    # 1. Log-ratio per token. Multiplying by the mask (not indexing) keeps padding out of exp() while a NaN
    #    still propagates (NaN · 0 = NaN).
    log_ratio = (logprobs - old_logprobs.detach()) * mask
    # 2. Importance ratio. "sequence" is GSPO-token (Zheng et al. 2025, eq. 13): every token's value is the
    #    sequence ratio exp(mean log ρ), the gradient flows through each token's own log π_θ. With one
    #    advantage per sequence this is exactly GSPO; with per-turn advantages each token keeps its credit.
    if importance_sampling_level == "sequence":
        sequence_log_ratio = log_ratio.sum(-1, keepdim=True) / tokens.clamp(min=1)[:, None]  # (B, 1)
        ratio = torch.exp(sequence_log_ratio.detach() + (logprobs - logprobs.detach()) * mask)
    else:
        ratio = torch.exp(log_ratio)
    # 3. Clipped surrogate: ascend ρA, but take no credit for moving ρ beyond the clip range.
    clipped_ratio = ratio.clamp(1 - eps_low, 1 + eps_high)
    if loss_type == "cispo":
        per_token_loss = -clipped_ratio.detach() * advantages * logprobs
    else:
        per_token_loss = -torch.min(ratio * advantages, clipped_ratio * advantages)
    # 4. KL to the reference, k3 estimator (Schulman 2020): unbiased, always >= 0, 0 where π_θ = π_ref.
    per_token_kl = None
    if ref_logprobs is not None:
        ref_log_ratio = (ref_logprobs.detach() - logprobs) * mask
        per_token_kl = torch.exp(ref_log_ratio) - ref_log_ratio - 1
        if beta > 0:
            per_token_loss = per_token_loss + beta * per_token_kl
    # 5. Normalise over the assistant tokens.
    per_token_loss = per_token_loss * mask
    if loss_type == "grpo":
        loss = (per_token_loss.sum(-1) / tokens.clamp(min=1)).mean()
    elif loss_type == "dr_grpo":
        loss = per_token_loss.sum() / (logprobs.shape[0] * (max_completion_length or logprobs.shape[1]))
    else:  # dapo, cispo
        loss = per_token_loss.sum() / mask.sum().clamp(min=1)

    stats = _loss_stats(ratio, log_ratio, advantages, mask, per_token_kl, loss_type, eps_low, eps_high)
    return loss, stats


def items_in_batch(loss_type: str, mask: Tensor) -> int:
    """What step 5 averages over: sequences for grpo and dr_grpo, assistant tokens for dapo and cispo. Weight each
    micro-batch's loss by its share of these to accumulate the gradient of one big batch (TRL's
    `num_items_in_batch`)."""
    return int(mask.sum()) if loss_type in ("dapo", "cispo") else mask.shape[0]


@torch.no_grad()
def _loss_stats(
    ratio: Tensor,
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    per_token_kl: Tensor | None,
    loss_type: str,
    eps_low: float,
    eps_high: float,
) -> LossStats:
    """The diagnostics CleanRL and TRL log, as masked means over assistant tokens."""
    num_tokens = mask.sum()

    def masked_mean(x: Tensor) -> float:
        return ((x * mask).sum() / num_tokens.clamp(min=1)).item()

    low, high = ratio < 1 - eps_low, ratio > 1 + eps_high
    if loss_type != "cispo":  # PPO clipping zeroes the gradient only where it caps the gain
        low, high = low & (advantages < 0), high & (advantages > 0)
    token_ratio = torch.exp(log_ratio)
    return LossStats(
        clip_fraction=masked_mean((low | high).to(mask.dtype)),
        clip_fraction_low=masked_mean(low.to(mask.dtype)),
        clip_fraction_high=masked_mean(high.to(mask.dtype)),
        approx_kl=masked_mean(token_ratio - 1 - log_ratio),
        ratio_mean=masked_mean(ratio),
        kl=None if per_token_kl is None else masked_mean(per_token_kl),
        num_tokens=int(num_tokens.item()),
        num_sequences=ratio.shape[0],
    )


def token_logprobs(logits: Tensor, input_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-probability of each next token, as the sampler computed it: log_softmax(logits / temperature).

    logits (B, L, V) come from a forward pass over input_ids (B, L); the result is (B, L - 1) with
    result[b, t] = log p(input_ids[b, t + 1] | input_ids[b, : t + 1]), so it lines up with `input_ids[:, 1:]`
    (and a mask of it, `mask[:, 1:]`). Computed in float32: bf16 log-probs are too coarse for ratios near 1.
    """
    _check_logits(logits, temperature)
    if input_ids.shape != logits.shape[:2]:
        raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}, expected {tuple(logits.shape[:2])} (B, L)")
    logp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)  # (B, L - 1, V)
    return logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)


# ----- input checks -----------------------------------------------------------------------------------------------
def _check_inputs(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    ref_logprobs: Tensor | None,
    beta: float,
) -> None:
    if logprobs.dim() != 2 or not logprobs.is_floating_point():
        raise ValueError(
            f"logprobs must be a float tensor of shape (B, T), got {logprobs.dtype} {tuple(logprobs.shape)}"
        )
    shape = tuple(logprobs.shape)
    named = {"old_logprobs": old_logprobs, "mask": mask, "ref_logprobs": ref_logprobs}
    for name, tensor in named.items():
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {shape} like logprobs")
    if tuple(advantages.shape) not in (shape, shape[:1]):
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)}; expected {shape} (per token) "
            f"or {shape[:1]} (per sequence)"
        )
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError("mask must hold only 0 and 1 (1 on assistant tokens)")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if beta > 0 and ref_logprobs is None:
        raise ValueError(f"beta={beta} needs ref_logprobs (the reference policy's log-probs); or set beta=0")


def check_loss_options(
    loss_type: str,
    importance_sampling_level: str,
    epsilon: float,
    epsilon_high: float | None,
    max_completion_length: int | None,
) -> None:
    """Raise ValueError on a loss setting `grpo_loss` cannot use (the trainer checks its config with it too)."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}; choose one of {LOSS_TYPES}")
    if importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            f"unknown importance_sampling_level {importance_sampling_level!r}; "
            f"choose one of {IMPORTANCE_SAMPLING_LEVELS}"
        )
    if importance_sampling_level == "sequence" and loss_type == "cispo":
        raise ValueError("importance_sampling_level='sequence' (GSPO) does not combine with loss_type='cispo' (TRL)")
    if epsilon < 0 or (epsilon_high is not None and epsilon_high < 0):
        raise ValueError(f"epsilon and epsilon_high must be >= 0, got {epsilon} and {epsilon_high}")
    if max_completion_length is not None and max_completion_length <= 0:
        raise ValueError(f"max_completion_length must be positive, got {max_completion_length}")


def _check_logits(logits: Tensor, temperature: float) -> None:
    if logits.dim() != 3:
        raise ValueError(f"logits must have shape (B, L, V), got {tuple(logits.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
