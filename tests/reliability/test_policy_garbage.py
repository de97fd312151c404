"""Policy garbage, in every environment: random bytes, endless text to `max_new_tokens`, a prompt longer than the
context window, an empty completion. Each ends in an error observation, or a truncated trajectory with a metric;
no trajectory is lost, and every one can still be turned into training tokens.

The garbage comes out of the real cpu-tiny model through the real `HFPolicy`: a logits processor added to its
`generate` forces the tokens, so decoding, parsing and the token-in/token-out prompts all see it.
"""

import pytest
import torch
from run_training import load_cpu_tiny
from transformers import LogitsProcessorList

from agentic_rl_lab.envs import ENVIRONMENTS, make
from agentic_rl_lab.grpo.tensors import trajectory_to_sequence
from agentic_rl_lab.policies.hf import HFPolicy
from agentic_rl_lab.rollout import collect_group

MAX_NEW_TOKENS = 12
NUM_GENERATIONS = 2


class Forced:
    """A logits processor that replaces the model's choice with `choose(scores) -> one token id per row`. It runs
    after the policy's own recorder, so the logged log-probabilities are the model's, of the forced tokens."""

    def __init__(self, choose):
        self.choose = choose

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        chosen = self.choose(scores)
        return torch.full_like(scores, -torch.inf).scatter(1, chosen[:, None], 0.0)


def random_bytes(policy):
    """Uniformly random token ids over the model's whole output: byte pieces that need not form UTF-8, every special
    token (`<tool_call>`, `<|im_start|>`, the pad token) but the end of turn, so each turn runs to `max_new_tokens`,
    and the padding rows past the tokenizer's vocabulary, ids it cannot decode."""
    generator = torch.Generator().manual_seed(0)

    def choose(scores):
        ids = torch.randint(scores.shape[1] - 1, (scores.shape[0],), generator=generator)
        return ids + (ids >= policy.end_of_turn_id).long()  # every id but the end of turn

    return Forced(choose)


def endless_text(policy):
    """The model's own text, with the end of turn forbidden: it writes on until `max_new_tokens` cuts it."""

    def choose(scores):
        scores = scores.clone()
        scores[:, policy.end_of_turn_id] = -torch.inf
        return torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=torch.Generator().manual_seed(0))[:, 0]

    return Forced(choose)


def empty_completion(policy):
    """The end of turn at once: an empty message."""
    return Forced(lambda scores: torch.full((scores.shape[0],), policy.end_of_turn_id))


@pytest.fixture(scope="module")
def cpu_tiny():
    return load_cpu_tiny()


def play(env_name, policy, monkeypatch, garbage=None):
    """One group of `NUM_GENERATIONS` trajectories of `env_name` (2 turns at most), with `garbage` forced."""
    if garbage is not None:
        generate = policy.model.generate
        processor = garbage(policy)

        def forced_generate(*args, logits_processor, **kwargs):
            return generate(*args, logits_processor=LogitsProcessorList([*logits_processor, processor]), **kwargs)

        monkeypatch.setattr(policy.model, "generate", forced_generate)
    return collect_group(make(env_name, max_turns=2), policy, seed=0, num_generations=NUM_GENERATIONS, progress=False)


def trainable(trajectory, tokenizer):
    """The trajectory turns into training tokens whose sampled part is exactly what the policy sampled."""
    sequence = trajectory_to_sequence(trajectory, tokenizer)
    sampled = [i for i, m in zip(sequence.input_ids, sequence.assistant_mask) if m]
    return sampled == [i for c in trajectory.completions for i in c.token_ids]


@pytest.mark.parametrize(
    "garbage", [random_bytes, endless_text, empty_completion], ids=["random-bytes", "endless", "empty"]
)
def test_garbage_turns_get_an_error_observation_in_every_environment(garbage, cpu_tiny, monkeypatch, fault_report):
    model, tokenizer = cpu_tiny
    turns = answered = errors = kept = trained = cut = 0
    for name in ENVIRONMENTS:
        policy = HFPolicy(model, tokenizer, temperature=1.0, max_new_tokens=MAX_NEW_TOKENS, seed=0)
        with monkeypatch.context() as patch:
            group = play(name, policy, patch, garbage)
        kept += len(group.trajectories)
        for trajectory in group.trajectories:
            turns += trajectory.num_turns
            errors += trajectory.metrics["invalid_actions"]
            for completion in trajectory.completions:  # every turn is followed by what the environment said
                answered += trajectory.messages[completion.message_index + 1]["role"] in ("tool", "user")
            trained += trainable(trajectory, tokenizer)
        cut += policy.counts["truncated_turns"]
    expected = len(ENVIRONMENTS) * NUM_GENERATIONS
    lost = expected - kept + (kept - trained) + (turns - answered)
    fault_report.record(
        f"policy garbage: {garbage.__name__.replace('_', ' ')}",
        injected=turns,
        outcome=(
            f"{turns} garbage turns in {len(ENVIRONMENTS)} environments: {answered} answered by an observation, "
            f"{errors} of them error observations counted in metrics['invalid_actions'], {cut} cut at "
            f"max_new_tokens (policy.counts['truncated_turns']); {kept} of {expected} trajectories kept, {trained} "
            "trainable"
        ),
        lost=lost,
    )
    assert lost == 0 and turns == 2 * expected, "every trajectory played both of its turns"
    if garbage is endless_text:
        assert cut == turns, "every turn ran to max_new_tokens and was counted"
    else:
        assert errors == turns, "every turn of garbage was answered with an error observation"
        assert cut == (turns if garbage is random_bytes else 0)


def test_a_prompt_past_the_context_window_ends_the_episode_truncated_in_every_environment(
    cpu_tiny, monkeypatch, fault_report
):
    model, tokenizer = cpu_tiny
    overflows = context_full = kept = trained = 0
    for name in ENVIRONMENTS:
        policy = HFPolicy(model, tokenizer, temperature=1.0, max_new_tokens=MAX_NEW_TOKENS, seed=0)
        env = make(name, max_turns=2)
        first_prompt = policy.prompt_ids(env.reset(0), env.tool_schemas)
        policy.context_length = len(first_prompt) + MAX_NEW_TOKENS + 2  # the first turn fits, the second cannot
        group = play(name, policy, monkeypatch)
        kept += len(group.trajectories)
        for trajectory in group.trajectories:
            overflows += trajectory.num_turns == 1
            context_full += trajectory.metrics["context_full"] and trajectory.metrics["truncated"]
            assert "context window" in trajectory.messages[-1]["content"], "the transcript says why it ended"
            trained += trainable(trajectory, tokenizer)
            assert len(trajectory_to_sequence(trajectory, tokenizer)) <= policy.context_length
    expected = len(ENVIRONMENTS) * NUM_GENERATIONS
    lost = expected - kept + (kept - trained)
    fault_report.record(
        "policy garbage: prompt past the context window",
        injected=overflows,
        outcome=(
            f"{overflows} second turns whose prompt did not fit, in {len(ENVIRONMENTS)} environments: {context_full} "
            f"trajectories ended truncated with metrics['context_full']; {kept} of {expected} kept, {trained} trainable"
        ),
        lost=lost,
    )
    assert overflows == context_full == expected and lost == 0
