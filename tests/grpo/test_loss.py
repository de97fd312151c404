"""The GRPO loss: every variant against numbers worked out by hand on 2 sequences × 3 tokens."""

import math

import pytest
import torch

from agentic_rl_lab.grpo import grpo_loss, token_logprobs

LOSS_VARIANTS = [
    ("grpo", "token"),
    ("dr_grpo", "token"),
    ("dapo", "token"),
    ("cispo", "token"),
    ("grpo", "sequence"),
    ("dr_grpo", "sequence"),
    ("dapo", "sequence"),
]


def leaf(values) -> torch.Tensor:
    """A float64 leaf tensor that records its gradient, so tests can read d loss / d logprob."""
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def with_ratios(ratios, logprobs=None):
    """(logprobs, old_logprobs) whose importance ratios exp(logprobs - old) are exactly `ratios`."""
    new = leaf(logprobs if logprobs is not None else [[-1.0] * len(ratios[0])] * len(ratios))
    return new, new.detach() - torch.tensor(ratios, dtype=torch.float64).log()


def grad_of(loss: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    (grad,) = torch.autograd.grad(loss, x)
    return grad


# ----- normalisation: grpo vs dr_grpo vs dapo on sequences of different lengths ---------------------------------------
# On-policy (ρ = 1) each token's loss is -A. Sequence 0 has 3 tokens with A = +2, sequence 1 has 2 tokens
# (the third is padding) with A = -1. Token losses: [-2, -2, -2] and [+1, +1, ·]. Sum over tokens: -6 + 2 = -4.
MASK = [[1, 1, 1], [1, 1, 0]]
ADVANTAGES = [2.0, -1.0]


@pytest.mark.parametrize(
    ("loss_type", "max_completion_length", "expected_loss", "expected_grad"),
    [
        # grpo: mean per sequence, then over sequences: (-2 + 1) / 2 = -0.5.
        #   d/d logp = -A / (tokens in its sequence × B): -2 / (3·2) = -1/3 and +1 / (2·2) = 0.25.
        ("grpo", None, -0.5, [[-1 / 3, -1 / 3, -1 / 3], [0.25, 0.25, 0.0]]),
        # dr_grpo: sum / (B × max_completion_length). Default T = 3: -4 / 6; with 4: -4 / 8 = -0.5.
        ("dr_grpo", None, -4 / 6, [[-2 / 6] * 3, [1 / 6, 1 / 6, 0.0]]),
        ("dr_grpo", 4, -0.5, [[-2 / 8] * 3, [1 / 8, 1 / 8, 0.0]]),
        # dapo: sum / active tokens = -4 / 5 = -0.8; every token weighs 1/5.
        ("dapo", None, -0.8, [[-0.4] * 3, [0.2, 0.2, 0.0]]),
    ],
)
def test_normalisations_differ_on_sequences_of_different_lengths(
    loss_type, max_completion_length, expected_loss, expected_grad
):
    logprobs = leaf([[-1.0, -2.0, -0.5], [-0.3, -1.2, 0.0]])
    loss, stats = grpo_loss(
        logprobs,
        logprobs.detach(),
        torch.tensor(ADVANTAGES, dtype=torch.float64),
        torch.tensor(MASK),
        loss_type=loss_type,
        max_completion_length=max_completion_length,
    )
    assert loss.item() == pytest.approx(expected_loss)
    torch.testing.assert_close(grad_of(loss, logprobs), torch.tensor(expected_grad, dtype=torch.float64))
    assert stats.num_tokens == 5 and stats.num_sequences == 2
    assert stats.ratio_mean == pytest.approx(1.0) and stats.approx_kl == pytest.approx(0.0)
    assert stats.clip_fraction == 0.0


# ----- clipping ------------------------------------------------------------------------------------------------------
# ε = 0.2, clip range [0.8, 1.2]. Sequence 0 has A = +1, sequence 1 has A = -1. Per token, -min(ρA, clip(ρ)A):
#   seq 0 (A=+1): ρ=1.0 → -1.0 (grad -ρA = -1.0)   ρ=1.5 → -min(1.5, 1.2) = -1.2, CLIPPED high (grad 0)
#                 ρ=0.7 → -min(0.7, 0.8) = -0.7 (grad -0.7; a low ratio with A > 0 is not clipped)
#   seq 1 (A=-1): ρ=1.1 → +1.1 (grad +1.1)         ρ=0.7 → -min(-0.7, -0.8) = +0.8, CLIPPED low (grad 0)
#                 ρ=1.3 → -min(-1.3, -1.2) = +1.3 (grad +1.3; a high ratio with A < 0 is not clipped)
# grpo: mean of (-1 - 1.2 - 0.7) / 3 and (1.1 + 0.8 + 1.3) / 3 = (-2.9 + 3.2) / 6 = 0.05; grads × 1/(3·2).
CLIP_RATIOS = [[1.0, 1.5, 0.7], [1.1, 0.7, 1.3]]


def test_clipping_zeroes_the_gradient_where_it_should_and_clip_fraction_counts_it():
    logprobs, old = with_ratios(CLIP_RATIOS)
    loss, stats = grpo_loss(logprobs, old, torch.tensor([1.0, -1.0]), torch.ones(2, 3), epsilon=0.2)
    assert loss.item() == pytest.approx(0.05)
    expected_grad = torch.tensor([[-1.0, 0.0, -0.7], [1.1, 0.0, 1.3]], dtype=torch.float64) / 6
    torch.testing.assert_close(grad_of(loss, logprobs), expected_grad)
    assert stats.clip_fraction_low == pytest.approx(1 / 6)  # seq 1, ρ = 0.7
    assert stats.clip_fraction_high == pytest.approx(1 / 6)  # seq 0, ρ = 1.5
    assert stats.clip_fraction == pytest.approx(2 / 6)
    assert stats.ratio_mean == pytest.approx((1.0 + 1.5 + 0.7 + 1.1 + 0.7 + 1.3) / 6)  # 1.05
    # approx_kl = mean of (ρ - 1) - log ρ over the six tokens.
    assert stats.approx_kl == pytest.approx(sum(r - 1 - math.log(r) for row in CLIP_RATIOS for r in row) / 6)


def test_epsilon_high_widens_only_the_upper_bound():
    # ε_high = 0.6: the range is [0.8, 1.6]. ρ = 1.5 with A > 0 is now inside: loss -1.5, grad -1.5 / 6.
    # The low clip (ρ = 0.7, A < 0) still applies. Loss: (-1 - 1.5 - 0.7 + 1.1 + 0.8 + 1.3) / 6 = 0
    logprobs, old = with_ratios(CLIP_RATIOS)
    loss, stats = grpo_loss(logprobs, old, torch.tensor([1.0, -1.0]), torch.ones(2, 3), epsilon_high=0.6)
    assert loss.item() == pytest.approx(0.0, abs=1e-12)
    expected_grad = torch.tensor([[-1.0, -1.5, -0.7], [1.1, 0.0, 1.3]], dtype=torch.float64) / 6
    torch.testing.assert_close(grad_of(loss, logprobs), expected_grad)
    assert stats.clip_fraction_high == 0.0 and stats.clip_fraction_low == pytest.approx(1 / 6)


# ----- CISPO ---------------------------------------------------------------------------------------------------------
def test_cispo_clips_the_weight_but_keeps_the_gradient():
    # ε = 1.0, ε_high = 0.4: the weight sg[clip(ρ, 0, 1.4)]. Per token -w·A·logp, normalised over 6 tokens.
    #   seq 0 (A=+1): w = 1.0, 1.4 (ρ = 1.5 capped), 0.7; logp = -1.0, -0.5, -2.0
    #                 -w·A·logp = 1.0, 0.7, 1.4 → 3.1;    grad -w·A = -1.0, -1.4, -0.7
    #   seq 1 (A=-1): w = 1.1, 0.7, 1.3;                  logp = -0.2, -1.0, -0.4
    #                 -w·A·logp = -0.22, -0.7, -0.52 → -1.44;   grad -w·A = 1.1, 0.7, 1.3
    # loss = (3.1 - 1.44) / 6 = 0.276666...; the capped token still gets gradient -1.4 / 6.
    logprobs, old = with_ratios(CLIP_RATIOS, logprobs=[[-1.0, -0.5, -2.0], [-0.2, -1.0, -0.4]])
    loss, stats = grpo_loss(
        logprobs, old, torch.tensor([1.0, -1.0]), torch.ones(2, 3), loss_type="cispo", epsilon=1.0, epsilon_high=0.4
    )
    assert loss.item() == pytest.approx(1.66 / 6)
    expected_grad = torch.tensor([[-1.0, -1.4, -0.7], [1.1, 0.7, 1.3]], dtype=torch.float64) / 6
    torch.testing.assert_close(grad_of(loss, logprobs), expected_grad)
    assert stats.clip_fraction_high == pytest.approx(1 / 6) and stats.clip_fraction_low == 0.0
    # The cap acts whatever the sign of A: with ε_high = 0.2 both ρ = 1.5 (A > 0) and ρ = 1.3 (A < 0) are capped.
    _, stats = grpo_loss(
        logprobs, old, torch.tensor([1.0, -1.0]), torch.ones(2, 3), loss_type="cispo", epsilon=1.0, epsilon_high=0.2
    )
    assert stats.clip_fraction_high == pytest.approx(2 / 6)


# ----- GSPO: the sequence-level ratio --------------------------------------------------------------------------------
def test_gspo_uses_one_ratio_per_sequence():
    # Token log-ratios: seq 0 [0.1, 0.2, 0.3] → mean 0.2 → s0 = e^0.2 = 1.2214 (above 1.2, A = +1: clipped);
    # seq 1 [-0.4, 0.0, masked] → mean -0.2 → s1 = e^-0.2 = 0.8187 (inside [0.8, 1.2], A = -1).
    # grpo loss: mean(-min(s0, 1.2), +s1) = (-1.2 + 0.81873) / 2 = -0.19063.
    # Gradient: seq 0 is clipped → 0. seq 1: d(+s1)/d logp_t = s1 / 2 (mean over its 2 tokens), / 2 sequences.
    old = torch.zeros(2, 3, dtype=torch.float64)
    logprobs = leaf([[0.1, 0.2, 0.3], [-0.4, 0.0, 999.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    loss, stats = grpo_loss(logprobs, old, torch.tensor([1.0, -1.0]), mask, importance_sampling_level="sequence")
    s1 = math.exp(-0.2)
    assert loss.item() == pytest.approx((-1.2 + s1) / 2)
    expected_grad = torch.tensor([[0.0, 0.0, 0.0], [s1 / 4, s1 / 4, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(grad_of(loss, logprobs), expected_grad)
    assert stats.clip_fraction_high == pytest.approx(3 / 5)  # the 3 tokens of seq 0, out of 5
    assert stats.ratio_mean == pytest.approx((3 * math.exp(0.2) + 2 * s1) / 5)


def test_gspo_keeps_per_token_credit():
    # One on-policy sequence of 2 tokens (s = 1) whose turns got A = +1 and A = -1. grpo loss: mean(-1, +1) = 0.
    # GSPO-token: d/d logp_t = -A_t · s / 2 = [-0.5, +0.5]: each token is pushed by its own advantage.
    # (Broadcasting exp(mean log ρ) instead would give -mean(A) · s / 2 = 0 to both: the credit would cancel.)
    logprobs = leaf([[-1.0, -2.0]])
    loss, _ = grpo_loss(
        logprobs, logprobs.detach(), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), importance_sampling_level="sequence"
    )
    assert loss.item() == 0.0
    torch.testing.assert_close(grad_of(loss, logprobs), torch.tensor([[-0.5, 0.5]], dtype=torch.float64))


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_gspo_matches_the_textbook_sequence_ratio_when_advantages_are_per_sequence(loss_type):
    # GSPO as TRL writes it: s_i = exp(masked mean of log ρ) with its gradient, broadcast to the tokens.
    torch.manual_seed(0)
    logprobs = leaf((-torch.rand(3, 5, dtype=torch.float64)).tolist())
    old = logprobs.detach() + 0.05 * torch.randn(3, 5, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0]])
    advantages = torch.tensor([0.7, -1.3, 0.4], dtype=torch.float64)
    loss, _ = grpo_loss(logprobs, old, advantages, mask, loss_type=loss_type, importance_sampling_level="sequence")

    s = torch.exp(((logprobs - old) * mask).sum(-1) / mask.sum(-1))[:, None].expand(3, 5)
    a = advantages[:, None]
    per_token = -torch.min(s * a, s.clamp(0.8, 1.2) * a) * mask
    reference = {
        "grpo": (per_token.sum(-1) / mask.sum(-1)).mean(),
        "dr_grpo": per_token.sum() / (3 * 5),
        "dapo": per_token.sum() / mask.sum(),
    }[loss_type]
    torch.testing.assert_close(loss, reference)
    torch.testing.assert_close(grad_of(loss, logprobs), grad_of(reference, logprobs))


# ----- KL to the reference -------------------------------------------------------------------------------------------
def test_kl_term_is_zero_when_ref_equals_policy_and_positive_otherwise():
    # A = 0, on-policy: only β·KL remains. With d = ref - logp = ±ln 2, k3 = e^d - d - 1:
    #   d = +ln 2: 2 - ln 2 - 1 = 0.30685;   d = -ln 2: 0.5 + ln 2 - 1 = 0.19315;   they sum to exactly 0.5.
    # grpo loss = β · mean(0.30685, 0.19315) = 0.1 · 0.25 = 0.025.
    # d k3 / d logp = 1 - e^d: -1 and +0.5, times β / 2 tokens → -0.05 and +0.025.
    logprobs = leaf([[-1.0, -2.0]])
    zeros, ones = torch.zeros(1, 2), torch.ones(1, 2)
    same, stats = grpo_loss(logprobs, logprobs.detach(), zeros, ones, beta=0.1, ref_logprobs=logprobs.detach())
    assert same.item() == 0.0 and stats.kl == 0.0

    ref = logprobs.detach() + torch.tensor([[math.log(2), -math.log(2)]], dtype=torch.float64)
    loss, stats = grpo_loss(logprobs, logprobs.detach(), zeros, ones, beta=0.1, ref_logprobs=ref)
    assert loss.item() == pytest.approx(0.025)
    assert stats.kl == pytest.approx(0.25)
    torch.testing.assert_close(grad_of(loss, logprobs), torch.tensor([[-0.05, 0.025]], dtype=torch.float64))


def test_ref_logprobs_with_beta_zero_are_only_reported():
    logprobs = leaf([[-1.0, -2.0]])
    ref = logprobs.detach() + 0.5
    loss, stats = grpo_loss(logprobs, logprobs.detach(), torch.ones(1), torch.ones(1, 2), ref_logprobs=ref)
    assert loss.item() == pytest.approx(-1.0)
    assert stats.kl == pytest.approx(math.exp(0.5) - 0.5 - 1)


# ----- behaviour shared by every variant -----------------------------------------------------------------------------
@pytest.mark.parametrize(("loss_type", "level"), LOSS_VARIANTS)
def test_zero_advantage_gives_zero_gradient(loss_type, level):
    """A group whose rewards are all equal has A = 0 everywhere, so it cannot move the policy."""
    logprobs, old = with_ratios(CLIP_RATIOS)
    loss, _ = grpo_loss(
        logprobs, old, torch.zeros(2), torch.ones(2, 3), loss_type=loss_type, importance_sampling_level=level
    )
    assert torch.equal(grad_of(loss, logprobs), torch.zeros(2, 3, dtype=torch.float64))


@pytest.mark.parametrize(("loss_type", "level"), LOSS_VARIANTS)
def test_masked_tokens_get_no_gradient_whatever_their_values(loss_type, level):
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    logprobs, old = with_ratios(CLIP_RATIOS)
    advantages = torch.tensor([[0.5, -1.0, 0.0], [0.0, 2.0, 1.0]], dtype=torch.float64)
    ref = old + 0.1
    kwargs = dict(loss_type=loss_type, importance_sampling_level=level, beta=0.04)
    loss, stats = grpo_loss(logprobs, old, advantages, mask, ref_logprobs=ref, **kwargs)

    # The same batch with absurd (but finite) values wherever the mask is 0.
    junk = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    logprobs2 = leaf((logprobs.detach() + 500.0 * junk).tolist())
    loss2, stats2 = grpo_loss(
        logprobs2, old - 700.0 * junk, advantages + 1e6 * junk, mask, ref_logprobs=ref + 900.0 * junk, **kwargs
    )
    torch.testing.assert_close(loss2, loss)
    grad = grad_of(loss2, logprobs2)
    assert torch.equal(grad * junk, torch.zeros_like(grad))
    torch.testing.assert_close(grad, grad_of(loss, logprobs))
    assert stats2 == stats


def test_per_sequence_advantages_broadcast_like_per_token_ones():
    logprobs, old = with_ratios(CLIP_RATIOS)
    mask = torch.tensor(MASK)
    per_sequence, _ = grpo_loss(logprobs, old, torch.tensor([1.0, -1.0]), mask)
    per_token, _ = grpo_loss(logprobs, old, torch.tensor([[1.0] * 3, [-1.0] * 3]), mask)
    assert per_sequence.item() == per_token.item()


def test_per_token_advantages_give_each_turn_its_own_credit():
    # On-policy dapo, 1 sequence: turn 1 is tokens 0-1 with A = +1, turn 2 is token 2 with A = -2.
    # Token losses -1, -1, +2 → loss 0 / 3 = 0; gradients -A / 3 = -1/3, -1/3, +2/3.
    logprobs = leaf([[-1.0, -1.0, -1.0]])
    loss, _ = grpo_loss(
        logprobs, logprobs.detach(), torch.tensor([[1.0, 1.0, -2.0]]), torch.ones(1, 3), loss_type="dapo"
    )
    assert loss.item() == pytest.approx(0.0)
    torch.testing.assert_close(grad_of(loss, logprobs), torch.tensor([[-1 / 3, -1 / 3, 2 / 3]], dtype=torch.float64))


@pytest.mark.parametrize("where", [(0, 1), (1, 2)])  # an assistant token, and a masked one
def test_nan_inputs_are_not_silently_masked(where):
    logprobs = leaf([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    bad = logprobs.detach().clone()
    bad[where] = float("nan")
    loss, _ = grpo_loss(logprobs, bad, torch.ones(2), torch.tensor(MASK))
    assert not torch.isfinite(loss)


# ----- input validation ----------------------------------------------------------------------------------------------
def test_invalid_inputs_are_refused_with_a_clear_message():
    lp, mask, adv = torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2)
    cases = [
        (dict(logprobs=torch.zeros(6)), "shape \\(B, T\\)"),
        (dict(old_logprobs=torch.zeros(2, 4)), "old_logprobs has shape \\(2, 4\\), expected \\(2, 3\\)"),
        (dict(mask=torch.ones(3, 3)), "mask has shape"),
        (dict(advantages=torch.zeros(3)), "advantages has shape \\(3,\\)"),
        (dict(mask=torch.full((2, 3), 0.5)), "only 0 and 1"),
        (dict(loss_type="ppo"), "unknown loss_type 'ppo'"),
        (dict(importance_sampling_level="group"), "unknown importance_sampling_level"),
        (dict(loss_type="cispo", importance_sampling_level="sequence"), "does not combine with loss_type='cispo'"),
        (dict(beta=0.1), "needs ref_logprobs"),
        (dict(beta=-0.1), "beta must be >= 0"),
        (dict(ref_logprobs=torch.zeros(2, 2)), "ref_logprobs has shape"),
        (dict(epsilon=-0.2), "epsilon and epsilon_high must be >= 0"),
        (dict(loss_type="dr_grpo", max_completion_length=0), "max_completion_length must be positive"),
    ]
    for overrides, message in cases:
        kwargs = dict(logprobs=lp, old_logprobs=lp, advantages=adv, mask=mask) | overrides
        with pytest.raises(ValueError, match=message):
            grpo_loss(**kwargs)


# ----- log-probs from logits -----------------------------------------------------------------------------
def test_token_logprobs_are_next_token_log_softmax_with_temperature():
    # One sequence of 3 tokens [1, 0, 1] over a vocabulary of 2. Position t predicts token t + 1:
    #   position 0, logits [0, 0], next token 0: log(1/2) = -ln 2
    #   position 1, logits [ln 3, 0], next token 1: probabilities [3/4, 1/4] → log(1/4) = -ln 4
    # The last position predicts nothing. At temperature 2 position 1 has logits [ln 3 / 2, 0] = [ln √3, 0],
    # probabilities [√3, 1] / (√3 + 1), so token 1 gets log(1 / (1 + √3)).
    logits = torch.tensor([[[0.0, 0.0], [math.log(3), 0.0], [5.0, -5.0]]])
    ids = torch.tensor([[1, 0, 1]])
    torch.testing.assert_close(token_logprobs(logits, ids), torch.tensor([[-math.log(2), -math.log(4)]]))
    at_2 = token_logprobs(logits, ids, temperature=2.0)
    torch.testing.assert_close(at_2, torch.tensor([[-math.log(2), -math.log(1 + math.sqrt(3))]]))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        token_logprobs(logits, ids, temperature=0.0)
    with pytest.raises(ValueError, match="input_ids has shape"):
        token_logprobs(logits, ids[:, :2])
