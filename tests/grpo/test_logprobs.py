"""The update's log-probs: the full pass's numbers, causal in training mode, and never a whole (tokens × vocabulary)
tensor at once."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.grpo.logprobs import assistant_token_logprobs
from agentic_rl_lab.grpo.loss import token_logprobs
from agentic_rl_lab.grpo.tensors import collate, trajectory_to_sequence
from agentic_rl_lab.policies.hf import HFPolicy
from agentic_rl_lab.rollout import collect_group


@pytest.fixture
def model_and_tokenizer(small_model_dir):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(small_model_dir), AutoTokenizer.from_pretrained(small_model_dir)


def sampled_group(model, tokenizer, seed=3, n=4):
    policy = HFPolicy(model.eval(), tokenizer, temperature=1.0, max_new_tokens=32, seed=0)
    return collect_group(GuessNumber(), policy, seed=seed, num_generations=n, progress=False)


def test_the_assistant_only_logprobs_equal_the_full_forward_pass_under_the_mask(model_and_tokenizer):
    """The trainer runs the LM head on assistant positions only; a plain model, LoRA adapters that have moved, and
    the same adapters switched off (the reference) must all give the full pass's numbers, and a gradient."""
    from agentic_rl_lab.models import LoraSettings, attach_lora

    model, tokenizer = model_and_tokenizer
    sequences = [trajectory_to_sequence(t, tokenizer) for t in sampled_group(model, tokenizer).trajectories]
    batch = collate(sequences, [[0.0]] * len(sequences), tokenizer.pad_token_id)
    ids, attention, mask = batch.input_ids, batch.attention_mask, batch.assistant_mask[:, 1:]
    assert 0 < mask.sum() < mask.numel()

    def both(m):
        full = token_logprobs(m(input_ids=ids, attention_mask=attention).logits, ids, 0.6) * mask
        return full, assistant_token_logprobs(m, ids, attention, mask, 0.6)

    full, fast = both(model)
    assert torch.allclose(full, fast, atol=1e-5)
    peft_model = attach_lora(model, LoraSettings(r=4))
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.1)  # adapters that have trained: the output differs from the base model's
    full_adapted, fast_adapted = both(peft_model)
    assert torch.allclose(full_adapted, fast_adapted, atol=1e-5) and not torch.allclose(fast_adapted, fast, atol=1e-3)
    with peft_model.disable_adapter():
        assert torch.allclose(both(peft_model)[1], fast, atol=1e-5)
    fast_adapted.sum().backward()
    assert all(p.grad is not None for n, p in peft_model.named_parameters() if "lora_" in n)


def test_a_model_that_caps_its_logits_takes_the_full_forward_pass():
    """Gemma 2 squashes its logits after the LM head: the assistant-only shortcut would give other numbers."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    config = Gemma2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, final_logit_softcapping=0.5,
    )  # fmt: skip
    model = Gemma2ForCausalLM(config).eval()
    ids = torch.randint(0, 64, (2, 10))
    attention, mask = torch.ones_like(ids), torch.ones(2, 9)
    mask[:, :3] = 0
    with torch.no_grad():
        full = token_logprobs(model(input_ids=ids, attention_mask=attention).logits, ids, 0.7) * mask
        hidden = model.get_decoder()(input_ids=ids, attention_mask=attention).last_hidden_state
        uncapped = token_logprobs(model.get_output_embeddings()(hidden), ids, 0.7) * mask
        assert not torch.allclose(full, uncapped, atol=1e-3), "the cap matters for this model"
        assert torch.allclose(assistant_token_logprobs(model, ids, attention, mask, 0.7), full, atol=1e-6)


def test_a_later_token_never_changes_an_earlier_logprob_in_training_mode(model_and_tokenizer):
    """Causality of the update's forward, in train mode and right-padded as the trainer batches (Unsloth drops the
    padding mask in training and builds its causal mask in the causal-LM forward, which this goes through)."""
    from agentic_rl_lab.models import LoraSettings, attach_lora

    model, _ = model_and_tokenizer
    model = attach_lora(model, LoraSettings(r=4)).train()
    torch.manual_seed(1)
    ids = torch.randint(10, model.config.vocab_size, (2, 24))
    attention = torch.ones_like(ids)
    attention[1, 20:] = 0  # the second row is right-padded
    mask = attention[:, 1:].float()
    before = assistant_token_logprobs(model, ids, attention, mask, 0.7).detach()
    for position in (5, 12, 19):
        changed = ids.clone()
        changed[:, position] = (changed[:, position] + 7) % model.config.vocab_size
        after = assistant_token_logprobs(model, changed, attention, mask, 0.7).detach()
        # result[:, t] is log p(token t + 1 | tokens <= t): columns before position - 1 cannot see the change.
        assert torch.equal(after[:, : position - 1], before[:, : position - 1]), position
        assert not torch.allclose(after[:, position - 1 :], before[:, position - 1 :]), "the change is seen after"


def test_chunks_give_the_numbers_and_gradients_of_one_pass(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    sequences = [trajectory_to_sequence(t, tokenizer) for t in sampled_group(model, tokenizer).trajectories]
    batch = collate(sequences, [[0.0]] * len(sequences), tokenizer.pad_token_id)
    ids, attention, mask = batch.input_ids, batch.attention_mask, batch.assistant_mask[:, 1:]
    model.train()
    results = {}
    vocabulary = model.get_output_embeddings().weight.shape[0]
    for rows in (7, 10_000):  # many uneven chunks, or one
        model.zero_grad(set_to_none=True)
        logprobs = assistant_token_logprobs(model, ids, attention, mask, 0.6, chunk_size=rows * vocabulary)
        (logprobs * torch.linspace(-1, 1, logprobs.shape[1])).sum().backward()
        results[rows] = logprobs.detach(), [p.grad.clone() for p in model.parameters()]
    (chunked, chunked_grads), (whole, whole_grads) = results[7], results[10_000]
    assert mask.sum() > 7 * 3, "several chunks"
    torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-5)  # matmuls of other shapes round apart
    for a, b in zip(chunked_grads, whole_grads):
        assert (a - b).norm() <= 1e-4 * b.norm() and b.norm() > 0


def test_no_tensor_kept_for_backward_is_as_large_as_the_logits_of_all_assistant_tokens():
    """With Qwen's 151,936-word vocabulary on a tiny body: what autograd saves for the backward pass never holds
    more than one chunk of logits (the LM head's logits are recomputed chunk by chunk in backward)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=151_936, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=256,
    )  # fmt: skip
    model = LlamaForCausalLM(config).train()
    ids = torch.randint(0, config.vocab_size, (2, 100))
    attention, mask = torch.ones_like(ids), torch.ones(2, 99)
    largest = 0

    def pack(tensor):
        nonlocal largest
        largest = max(largest, tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logprobs = assistant_token_logprobs(model, ids, attention, mask, 1.0, chunk_size=32 * config.vocab_size)
    assert largest <= 32 * config.vocab_size, f"a saved tensor of {largest} elements"
    assert largest >= config.vocab_size * config.hidden_size, "the hook saw the LM head's weight"
    logprobs.sum().backward()
    assert model.lm_head.weight.grad is not None
    full = token_logprobs(model(input_ids=ids, attention_mask=attention).logits, ids) * mask
    torch.testing.assert_close(logprobs.detach(), full.detach(), rtol=0, atol=1e-5)
