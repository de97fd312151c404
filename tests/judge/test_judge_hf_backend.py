"""The in-process Hugging Face backend, on a tiny randomly initialised Llama built here in a second.

Such a model writes garbage, so these tests check the plumbing: the prompt goes through the chat template,
generation runs with the adapters off, garbage is an invalid answer that is retried and then fails clearly, and a
`generate` that writes valid JSON is read, score by id.
"""

import json
import re

import pytest
import torch

from agentic_rl_lab.judge import HFJudgeBackend, JudgeError, JudgeRecord, RelativeJudge
from agentic_rl_lab.judge.prompt import RELATIVE_SYSTEM

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tiny():
    """A byte-level BPE tokenizer with a ChatML template, and a one-layer Llama with 16 hidden units."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|im_start|>", "<|im_end|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator([RELATIVE_SYSTEM, '{"scores": [{"trajectory_id": "t1", "score": 0.5}]}'] * 3, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|pad|>", chat_template=TEMPLATE
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16384,
    )
    return LlamaForCausalLM(config).eval(), tokenizer


def valid_generate(model, tokenizer, seen: list):
    """A stand-in for `model.generate` that reads the ids in the prompt and writes a valid answer."""

    def generate(input_ids, attention_mask=None, **kwargs):
        seen.append({"prompt": tokenizer.decode(input_ids[0]), **kwargs})
        ids = re.findall(r'<trajectory id="(t\d+)">', seen[-1]["prompt"])
        answer = {"scores": [{"trajectory_id": i, "explanation": "ok", "score": int(i[1:]) / 10} for i in ids]}
        new = tokenizer(json.dumps(answer), add_special_tokens=False, return_tensors="pt")["input_ids"]
        return torch.cat([input_ids, new], dim=1)

    return generate


def test_the_prompt_goes_through_the_chat_template_and_garbage_fails_after_the_retries(tiny, groups) -> None:
    model, tokenizer = tiny
    backend = HFJudgeBackend(model, tokenizer, model_name="tiny-judge", max_new_tokens=8)
    judge = RelativeJudge(backend, max_retries=1, cache=None)
    with pytest.raises(JudgeError, match="no valid answer after 2 attempts") as raised:
        judge.score(groups[0])
    attempts = raised.value.record.calls[0].attempts
    assert len(attempts) == 2 and all(a.error.startswith("invalid answer") for a in attempts)
    first = attempts[0].request
    assert first["prompt"].startswith("<|im_start|>system\nYou are judging how well AI agents")
    assert first["prompt"].endswith("<|im_start|>assistant\n"), "the generation prompt is added"
    assert attempts[0].usage.prompt_tokens == len(tokenizer(first["prompt"], add_special_tokens=False)["input_ids"])
    assert 0 < attempts[0].usage.completion_tokens <= 8
    assert attempts[1].request["messages"][-1]["content"].startswith("Your answer could not be used")

    with pytest.warns(UserWarning, match="skipped the group"):
        skipping = RelativeJudge(backend, max_retries=0, cache=None, on_failure="skip")
        assert skipping.score(groups[1]) is None


def test_a_valid_answer_from_generate_is_read_and_scored_by_id(tiny, groups, monkeypatch) -> None:
    model, tokenizer = tiny
    seen: list = []
    monkeypatch.setattr(model, "generate", valid_generate(model, tokenizer, seen))
    group = RelativeJudge(HFJudgeBackend(model, tokenizer, max_new_tokens=300), cache=None).score(groups[0])
    (call,) = JudgeRecord.of(group).calls
    for id_, member in call.members.items():
        assert group.trajectories[member].reward == int(id_[1:]) / 10
    assert seen[0]["max_new_tokens"] == 300 and seen[0]["do_sample"] is False
    assert call.attempts[0].raw_response["finish_reason"] == "stop"


def test_a_lora_policy_judges_with_its_adapters_off_and_gets_them_back(tiny, groups, monkeypatch) -> None:
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    model, tokenizer = tiny
    policy = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora_layers = [module for module in policy.modules() if isinstance(module, LoraLayer)]
    states = []
    generate = valid_generate(policy, tokenizer, [])

    def spying_generate(**kwargs):
        states.append([layer.disable_adapters for layer in lora_layers])
        return generate(**kwargs)

    monkeypatch.setattr(policy, "generate", spying_generate)
    backend = HFJudgeBackend(policy, tokenizer, model_name="policy-base")
    RelativeJudge(backend, cache=None).score(groups[0])
    assert states == [[True] * len(lora_layers)], "generation ran on the base weights"
    assert not any(layer.disable_adapters for layer in lora_layers), "the adapters are on again for training"
    assert backend.settings()["adapters_disabled"] is True
    policy.unload()  # leave the module-scoped tiny model without LoRA layers for other tests


def test_groups_judged_together_share_one_batched_generate_call(tiny, groups, monkeypatch) -> None:
    """Four groups, `batch_size=4`: one `generate` call with four prompts (left-padded), each group scored by its
    own ids."""
    model, tokenizer = tiny
    calls = []

    def generate(input_ids, attention_mask=None, **kwargs):
        calls.append(input_ids.shape[0])
        rows = []
        for row in range(input_ids.shape[0]):
            prompt = tokenizer.decode(input_ids[row][attention_mask[row].bool()])
            ids = re.findall(r'<trajectory id="(t\d+)">', prompt)
            answer = {"scores": [{"trajectory_id": i, "explanation": "ok", "score": int(i[1:]) / 10} for i in ids]}
            rows.append(tokenizer(json.dumps(answer) + "<|im_end|>", add_special_tokens=False)["input_ids"])
        width = max(len(r) for r in rows)
        new = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, new], dim=1)

    monkeypatch.setattr(model, "generate", generate)
    backend = HFJudgeBackend(model, tokenizer, max_new_tokens=300, batch_size=4)
    judged = RelativeJudge(backend, cache=None).score_groups(groups, progress=False)
    assert calls == [4] and backend.batcher.calls == 1
    for group in judged:
        (call,) = JudgeRecord.of(group).calls
        assert {group.trajectories[m].reward for m in call.members.values()} == {int(i[1:]) / 10 for i in call.members}
        assert all(a.raw_response["finish_reason"] == "stop" for a in call.attempts)


def test_a_batched_prompt_gets_the_tokens_it_gets_alone(tiny, groups) -> None:
    """Left padding and the attention mask keep each row's greedy answer what it is unbatched."""
    model, tokenizer = tiny
    backend = HFJudgeBackend(model, tokenizer, max_new_tokens=6, batch_size=3)
    prompts = ["<|im_start|>user\nshort<|im_end|>\n", "<|im_start|>user\n" + "a much longer prompt " * 8, "x"]
    together = backend._generate(prompts)
    alone = [backend._generate([prompt])[0] for prompt in prompts]
    assert together == alone
    assert [n for n, _ in together] == [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]


def test_the_batcher_gathers_concurrent_requests_and_fails_a_batch_together() -> None:
    import threading

    from agentic_rl_lab.judge.backends import GenerateBatcher

    seen = []

    def run(items):
        seen.append(list(items))
        if "boom" in items:
            raise RuntimeError("out of memory")
        return [item.upper() for item in items]

    batcher = GenerateBatcher(run, size=4, wait=5.0)
    results, errors = {}, {}

    def ask(item):
        try:
            results[item] = batcher.submit(item)
        except RuntimeError as exc:
            errors[item] = str(exc)

    threads = [threading.Thread(target=ask, args=(item,)) for item in ["a", "b", "c", "d", "e", "f", "g", "boom"]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(len(batch) for batch in seen) == [4, 4], "two full batches, no waiting for the 5 s timeout"
    failed = next(batch for batch in seen if "boom" in batch)
    assert set(errors) == set(failed) and set(errors.values()) == {"out of memory"}
    assert results == {item: item.upper() for batch in seen if batch is not failed for item in batch}
    alone = GenerateBatcher(run, size=4, wait=0.01)
    assert alone.submit("z") == "Z" and seen[-1] == ["z"], "a lone request runs after the short wait"
