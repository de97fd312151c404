"""Our GRPO loss and advantages against TRL's own code, fed the same inputs.

The lab writes its loss so a learner can read it; these tests keep it equal to what the field's reference computes.
TRL's code runs as it is, not rewritten here: `GRPOTrainer._compute_loss` is called on a stand-in trainer whose
only model output is the log-prob tensor we give it, and the advantage arithmetic is cut out of
`GRPOTrainer._generate_and_score_completions` and executed. So a TRL release that changes a formula we follow
fails here, and so does one that moves the code out from under the test: either way someone looks.

The intended differences, each asserted:
- the std of `scale_rewards`: ours divides by N (as ART), TRL's by N - 1;
- cispo's bounds: TRL caps the detached ratio at `epsilon_high` (an absolute bound, 5.0), ours clips it to
  [1 - epsilon, 1 + epsilon_high]; with epsilon = 1 (no lower bound) and epsilon_high = 4 they are the same;
- TRL divides the loss by its gradient-accumulation steps; ours weights micro-batches itself (`items_in_batch`).
"""

from __future__ import annotations

import inspect
import textwrap
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trl import GRPOTrainer
from trl.trainer.utils import nanstd

from agentic_rl_lab.grpo.advantages import normalise_rewards
from agentic_rl_lab.grpo.loss import grpo_loss

B, T = 6, 12
MAX_COMPLETION_LENGTH = 16


def batch(seed: int, per_token_advantages: bool = False) -> dict[str, torch.Tensor]:
    """A batch like a multi-turn one: padding at the end, tool-result tokens inside the completion, ratios on both
    sides of the clip range, advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, T + 1, (B,), generator=g)
    completion_mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    tool_mask = (torch.rand(B, T, generator=g) > 0.25).double()  # 0 on tool-result tokens
    tool_mask[:, 0] = 1.0  # every sequence starts with a sampled token
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    logprobs = old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.3
    ref = old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.1
    shape = (B, T) if per_token_advantages else (B,)
    advantages = torch.randn(*shape, generator=g, dtype=torch.float64)
    return dict(
        logprobs=logprobs, old=old, ref=ref, advantages=advantages, completion_mask=completion_mask, tool_mask=tool_mask
    )


def trl_loss(data: dict[str, torch.Tensor], *, loss_type: str, level: str, beta: float, epsilon: float,
             epsilon_high: float) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """TRL's `_compute_loss` on `data`, and the gradient with respect to the log-probs."""
    logprobs = data["logprobs"].clone().requires_grad_(True)
    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (logprobs, torch.zeros_like(logprobs), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        loss_type=loss_type,
        epsilon_low=epsilon,
        epsilon_high=epsilon_high,
        use_vllm=False,
        max_completion_length=MAX_COMPLETION_LENGTH,
        current_gradient_accumulation_steps=1,
        _entropy_bonus_enabled=False,
        model=SimpleNamespace(training=True),
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        accelerator=SimpleNamespace(num_processes=1, gather=lambda x: x, reduce=lambda x, reduction: x),
        _metrics=defaultdict(lambda: defaultdict(list)),
    )
    mask = data["completion_mask"] * data["tool_mask"]
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": data["completion_mask"],
        "tool_mask": data["tool_mask"],
        "advantages": data["advantages"],
        "old_per_token_logps": data["old"],
        "ref_per_token_logps": data["ref"],
        "num_items_in_batch": mask.sum(),
    }
    loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    loss.backward()
    return loss.detach(), logprobs.grad


def our_loss(data: dict[str, torch.Tensor], *, loss_type: str, level: str, beta: float, epsilon: float,
             epsilon_high: float) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    logprobs = data["logprobs"].clone().requires_grad_(True)
    loss, _ = grpo_loss(
        logprobs, data["old"], data["advantages"], data["completion_mask"] * data["tool_mask"],
        loss_type=loss_type, importance_sampling_level=level, beta=beta, ref_logprobs=data["ref"],
        epsilon=epsilon, epsilon_high=epsilon_high, max_completion_length=MAX_COMPLETION_LENGTH,
    )  # fmt: skip
    loss.backward()
    return loss.detach(), logprobs.grad


CLIPPED = dict(epsilon=0.2, epsilon_high=0.28)


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_the_clipped_losses_and_their_gradients_are_trls(loss_type: str, level: str, beta: float) -> None:
    for seed in range(3):
        for per_token in (False, True):
            data = batch(seed, per_token)
            if level == "sequence" and per_token:
                continue  # GSPO's sequence ratio with per-token credit: TRL has no such case
            ours = our_loss(data, loss_type=loss_type, level=level, beta=beta, **CLIPPED)
            theirs = trl_loss(data, loss_type=loss_type, level=level, beta=beta, **CLIPPED)
            torch.testing.assert_close(ours[0], theirs[0], rtol=0, atol=1e-6)
            torch.testing.assert_close(ours[1], theirs[1], rtol=0, atol=1e-6)
            assert theirs[1].abs().sum() > 0 and (theirs[1] == 0).any(), "the batch exercises clipping and masking"


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_cispo_is_trls_when_the_bounds_mean_the_same(beta: float) -> None:
    for seed in range(3):
        data = batch(seed)
        data["logprobs"] = data["old"] + 1.2 * (data["logprobs"] - data["old"]).sign() * 1.5  # ratios near 0 and 6
        ours = our_loss(data, loss_type="cispo", level="token", beta=beta, epsilon=1.0, epsilon_high=4.0)
        theirs = trl_loss(data, loss_type="cispo", level="token", beta=beta, epsilon=0.2, epsilon_high=5.0)
        torch.testing.assert_close(ours[0], theirs[0], rtol=0, atol=1e-6)
        torch.testing.assert_close(ours[1], theirs[1], rtol=0, atol=1e-6)


def test_cispo_differs_from_trl_only_where_our_lower_bound_raises_the_weight() -> None:
    data = batch(0)
    mask = data["completion_mask"] * data["tool_mask"]
    ratio = torch.exp(data["logprobs"] - data["old"])
    ours = our_loss(data, loss_type="cispo", level="token", beta=0.0, epsilon=0.2, epsilon_high=4.0)[1]
    theirs = trl_loss(data, loss_type="cispo", level="token", beta=0.0, epsilon=0.2, epsilon_high=5.0)[1]
    raised = (ratio < 0.8) & (mask > 0)
    assert raised.any()
    torch.testing.assert_close(ours[~raised], theirs[~raised], rtol=0, atol=1e-6)
    assert (ours[raised] - theirs[raised]).abs().min() > 0


# ----- advantages ----------------------------------------------------------------------------------------------
def trl_advantages(rewards: list[list[float]], scale_rewards: str) -> torch.Tensor:
    """TRL's own advantage code (one reward function, `sum_then_normalize`), cut from the trainer and run."""
    source = textwrap.dedent(inspect.getsource(GRPOTrainer._generate_and_score_completions))
    start = source.index('if self.multi_objective_aggregation == "sum_then_normalize":')
    end = source.index("\n", source.index("is_std_zero = torch.isclose", start))
    block = textwrap.dedent(source[start:end].split("\n", 1)[1])  # the body of the `if`
    flat = torch.tensor([r for group in rewards for r in group], dtype=torch.float64)
    namespace = {
        "self": SimpleNamespace(reward_weights=torch.ones(1, dtype=torch.float64), scale_rewards=scale_rewards),
        "rewards_per_func": flat[:, None],
        "unscorable_mask": torch.zeros(len(flat), dtype=torch.bool),
        "num_generations": len(rewards[0]),
        "device": "cpu",
        "torch": torch,
        "nanstd": nanstd,
    }
    exec(compile(block, "trl-advantages", "exec"), namespace)
    return namespace["advantages"]


def _population_to_sample(groups: list[list[float]], scale_rewards: str) -> torch.Tensor:
    """What our advantages become with TRL's std (N - 1) in place of ours (N): the one intended difference."""
    flat = torch.tensor([r for group in groups for r in group], dtype=torch.float64)
    grouped = flat.view(len(groups), -1)
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).flatten()
    if scale_rewards == "none":
        return centred
    std = grouped.std(dim=1, keepdim=True).expand_as(grouped).flatten() if scale_rewards == "group" else flat.std()
    return centred / (std + 1e-4)


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_advantages_are_trls_but_for_the_std_of_n(scale_rewards: str) -> None:
    g = torch.Generator().manual_seed(0)
    groups = torch.rand(5, 8, generator=g, dtype=torch.float64).round(decimals=1).tolist()
    groups[2] = [0.5] * 8  # no signal: zero advantages on both sides
    theirs = trl_advantages(groups, scale_rewards)
    ours = torch.tensor([a for group in normalise_rewards(groups, scale_rewards) for a in group], dtype=torch.float64)
    assert theirs[16:24].abs().max() == 0 and ours[16:24].abs().max() == 0
    torch.testing.assert_close(_population_to_sample(groups, scale_rewards), theirs, rtol=0, atol=1e-6)
    if scale_rewards == "none":
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    else:  # the same centred rewards, over a std of N rather than N - 1
        moved = theirs != 0
        n = 8 if scale_rewards == "group" else 40
        expected = torch.full_like(theirs[moved], (n / (n - 1)) ** 0.5)
        torch.testing.assert_close(ours[moved] / theirs[moved], expected, rtol=1e-3, atol=0)
