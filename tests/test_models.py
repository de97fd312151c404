"""Tier profiles and model loading: transformers on cpu-tiny, and Unsloth's real loading path on its CPU fallback."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentic_rl_lab.models import PROFILES, TIERS, LoraSettings, choose_tier, load_model


def test_tiers_resolve_and_unknown_tiers_name_the_choices():
    assert TIERS == ("cpu-tiny", "cpu-small", "t4", "a100")
    assert choose_tier("t4") == ("t4", "asked for explicitly")
    tier, why = choose_tier("auto")
    assert tier == "cpu-tiny" and "no CUDA" in why  # this machine has no GPU
    with pytest.raises(ValueError, match="cpu-tiny, cpu-small, t4, a100"):
        choose_tier("h100")


def test_every_tier_trains_lora_and_the_gpu_tiers_load_with_unsloth():
    assert PROFILES["cpu-tiny"].loader == "transformers"
    assert all(profile.lora is not None for profile in PROFILES.values()), "the reference is the adapters switched off"
    for tier in ("t4", "a100"):
        assert PROFILES[tier].loader == "unsloth" and PROFILES[tier].lora is not None
    assert PROFILES["t4"].load_in_4bit
    assert all(profile.estimate for profile in PROFILES.values()), "every tier states its runtime and memory"


def test_the_tiny_model_loads_with_plain_transformers(small_model_dir):
    loaded = load_model("cpu-tiny", model_name=small_model_dir, add_lora=False)
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    with_adapters = load_model("cpu-tiny", model_name=small_model_dir).model
    trainable = {name for name, p in with_adapters.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable), "cpu-tiny trains its LoRA adapters only"
    assert loaded.tokenizer.padding_side == "left"
    assert loaded.tokenizer.tokenize(" 50") == ["Ġ50"], "the trained tokenizer, not a digit-splitting one"


@pytest.mark.parametrize("missing", ["./no-such-model", "~/no-such-model", Path("no-such-model")])
def test_a_model_directory_that_does_not_exist_is_named_not_taken_for_a_hub_id(missing):
    with pytest.raises(FileNotFoundError, match="no model directory at .*no-such-model"):
        load_model("cpu-tiny", model_name=missing)


def test_lora_adapters_are_added_by_peft_on_a_transformers_tier(small_model_dir):
    import dataclasses

    profile = dataclasses.replace(PROFILES["cpu-small"], model_name=str(small_model_dir), lora=LoraSettings(r=4))
    loaded = load_model(profile)
    trainable = sum(p.numel() for p in loaded.model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in loaded.model.parameters())
    assert 0 < trainable < total / 5
    with loaded.model.disable_adapter():  # the reference model: same weights, adapters off
        pass


def test_gpu_only_features_without_a_gpu_fail_with_the_cpu_options():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU.*cpu-tiny"):
        load_model("t4")  # 4-bit
    with pytest.raises(ValueError, match="fast_inference"):
        load_model("cpu-tiny", fast_inference=True)
    assert "unsloth" not in sys.modules, "the check happens before Unsloth is imported"


UNSLOTH_SCRIPT = """
import dataclasses, json, sys
import torch
from agentic_rl_lab.models import PROFILES, LoraSettings, load_model

path = sys.argv[1]
profile = dataclasses.replace(
    PROFILES["t4"], model_name=path, load_in_4bit=False, dtype="float32", max_seq_length=512,
    lora=LoraSettings(r=8, alpha=16, target_modules=("q_proj", "k_proj", "v_proj", "o_proj")),
)
loaded = load_model(profile)
model, tokenizer = loaded.model, loaded.tokenizer
trainable = [p for p in model.parameters() if p.requires_grad]
batch = tokenizer(["<|im_start|>user\\nhello<|im_end|>"], return_tensors="pt")
loss = model(**batch, labels=batch["input_ids"]).loss
loss.backward()
grad = sum(float(p.grad.abs().sum()) for p in trainable if p.grad is not None)
model.eval()
out = model.generate(**batch, max_new_tokens=5, do_sample=False)
from agentic_rl_lab.grpo.loss import token_logprobs
from agentic_rl_lab.grpo.logprobs import assistant_token_logprobs
ids = batch["input_ids"]
mask = torch.ones(ids.shape[0], ids.shape[1] - 1)
with torch.no_grad():  # the trainer's LM head on assistant tokens only, through Unsloth's patched model
    full = token_logprobs(model(**batch).logits, ids, 0.7)
    head_only = assistant_token_logprobs(model, ids, batch["attention_mask"], mask, 0.7)
from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.policies import HFPolicy
from agentic_rl_lab.rollout import collect_group
turns = {}
for reuse in (False, True):  # HFPolicy's KV cache between turns, through Unsloth's patched generate
    policy = HFPolicy(model, tokenizer, seed=0, max_new_tokens=16, reuse_cache=reuse)
    group = collect_group(GuessNumber(), policy, seed=1, num_generations=2, progress=False)
    turns[reuse] = [c.token_ids for t in group.trajectories for c in t.completions]

# One trainer step, recording Unsloth's mode switches and the layers' gradient-checkpointing flags. Checkpointing
# is switched on as Unsloth's GPU get_peft_model does (the CPU fallback leaves it off).
from unsloth import FastLanguageModel
from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer
from agentic_rl_lab.judge import ReferenceJudge
from agentic_rl_lab.models import reuse_kv_cache, uses_unsloth

calls, flags = [], []
for name in ("for_inference", "for_training"):
    def recorded(m, *args, _original=getattr(FastLanguageModel, name), _name=name, **kwargs):
        calls.append(_name)
        return _original(m, *args, **kwargs)
    setattr(FastLanguageModel, name, staticmethod(recorded))
model.get_base_model().gradient_checkpointing_enable()
model.get_base_model()._unsloth_gradient_checkpointing = True
def record_checkpointing(layer, args):
    if torch.is_grad_enabled():
        flags.append(layer.gradient_checkpointing)
for layer in model.get_base_model().model.layers:
    layer.register_forward_pre_hook(record_checkpointing)

class Spread(ReferenceJudge):
    def score_groups(self, groups, progress=True):
        for group in groups:
            for member, trajectory in enumerate(group.trajectories):
                trajectory.reward = member / len(group.trajectories)
        return list(groups)

config = GRPOConfig(steps=1, groups_per_step=1, num_generations=4, per_device_train_batch_size=4, max_new_tokens=16,
                    eval_every=1, eval_episodes=2, save_every=1, learning_rate=1e-3)
row = GRPOTrainer(config, model, tokenizer, GuessNumber(), Spread(), sys.argv[2], progress=False).train().iloc[-1]
print("RESULT " + json.dumps({
    "uses_unsloth": uses_unsloth(model),
    "reuse_kv_cache": reuse_kv_cache(model),
    "default_policy_reuses_cache": HFPolicy(model, tokenizer).reuse_cache,
    "mode_calls": calls,
    "checkpointing_in_updates": flags,
    "optimizer_steps": int(row["optimizer_steps"]),
    "policy_turns": len(turns[True]),
    "cache_changes_nothing": turns[True] == turns[False],
    "cached_tokens": policy.counts["cached_tokens"],
    "unsloth_imported": "unsloth" in sys.modules,
    "model_class": type(model).__name__,
    "trainable": sum(p.numel() for p in trainable),
    "total": sum(p.numel() for p in model.parameters()),
    "loss": float(loss),
    "grad": grad,
    "new_tokens": out.shape[1] - batch["input_ids"].shape[1],
    "head_only_difference": float((full - head_only).abs().max()),
    "tokens_50": tokenizer.tokenize(" 50"),
}))
"""


def test_unsloth_loads_lora_trains_and_samples_the_tiny_model_on_cpu(small_model_dir, tmp_path):
    # A subprocess: importing unsloth patches transformers for the whole process.
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(UNSLOTH_SCRIPT), str(small_model_dir), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, f"Unsloth path failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    report = json.loads(lines[-1].removeprefix("RESULT "))
    assert report["unsloth_imported"]
    assert report["model_class"].startswith("PeftModel")
    assert 0 < report["trainable"] < report["total"] / 5
    assert report["loss"] > 0 and report["grad"] > 0, "the LoRA adapters receive gradients"
    assert report["new_tokens"] >= 1
    assert report["head_only_difference"] < 1e-4, "the trainer's assistant-only log-probs match the full pass"
    assert report["tokens_50"] == ["Ġ50"]
    assert report["policy_turns"] > 2 and report["cache_changes_nothing"] and report["cached_tokens"] > 0
    # The one code path: Unsloth's mode switches, in order, with checkpointing back on for every update forward.
    assert report["uses_unsloth"] and not report["reuse_kv_cache"] and not report["default_policy_reuses_cache"]
    calls = report["mode_calls"]
    assert calls.count("for_training") == 1 and calls.index("for_training") > 0, calls  # sampled, then updated
    assert calls[-1] == "for_inference", "the evaluation after the step samples in inference mode"
    assert report["optimizer_steps"] == 1
    assert report["checkpointing_in_updates"] and all(report["checkpointing_in_updates"]), (
        "every decoder layer ran the update with gradient checkpointing on, after rollouts switched it off"
    )
