"""Tiers: which model a notebook runs, how it loads, how it is fine-tuned, and how long it may speak.

Every notebook's parameters cell holds `TIER = "auto"`: a GPU tier where CUDA is present, `cpu-tiny` elsewhere.

| tier | model | loads with |
| --- | --- | --- |
| `cpu-tiny` | the lab's own ~5M Llama, built locally (`agentic_rl_lab.tiny`) | transformers, CPU |
| `cpu-small` | Qwen2.5-0.5B-Instruct from the Hub (needs internet) | transformers, CPU |
| `t4` | Qwen2.5-3B-Instruct, 4-bit (1.5B also fits) | Unsloth, free Colab T4 |
| `a100` | Qwen2.5-7B-Instruct | Unsloth |

Every tier fine-tunes LoRA adapters, so the reference model for the KL term is the same weights with the adapters
switched off (`cpu-tiny` too: see `CPU_TINY_LEARNING_RATE`).

Unsloth is imported only inside `load_model`, when a tier asks for it (and by the mode switches below, for a
model it loaded): `import agentic_rl_lab` never imports unsloth or vllm. Unsloth's CPU fallback loads,
LoRA-trains and samples without a GPU; its vLLM fast inference and 4-bit loading need CUDA, and asking for them
without a GPU fails with a message naming the CPU options.

The last part of this module is the one code path that sampling and training share on every tier, with what
Unsloth needs and plain transformers does not: the mode switches (`for_inference`, `for_training`), whether the
KV cache is kept between turns (`reuse_kv_cache`), and mixed precision for float16 (`autocast`,
`needs_loss_scaling`). The policy, the trainer, the evaluation and the notebooks all go through these.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSettings:
    """A LoRA adapter (peft): rank `r`, scale `alpha / r`, on the named projection layers."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ALL_LINEAR


@dataclass(frozen=True)
class TierProfile:
    """Everything a tier fixes about its policy model."""

    name: str
    model_name: str
    """A Hub id, or a local directory in the Hugging Face layout; `"tiny"` means the lab's own built model."""
    loader: Literal["transformers", "unsloth"]
    dtype: Literal["float32", "bfloat16", "float16"]
    load_in_4bit: bool
    lora: LoraSettings | None
    """`None`: fine-tune every weight, with a frozen copy as the reference model."""
    max_seq_length: int
    max_new_tokens: int
    """Per assistant turn."""
    learning_rate: float = 5e-6
    """The GRPO learning rate for this tier's adapters: cpu-tiny's was measured (`CPU_TINY_LEARNING_RATE`); the
    others use ART's default for LoRA on Qwen models (5e-6), not measured here."""
    temperature: float = 1.0
    """Sampling temperature for rollouts, and for the logprobs the trainer recomputes (see `CPU_TINY_TEMPERATURE`)."""
    top_p: float = 1.0
    generation_batch_size: int = 64
    """Trajectories sampled at once, in lockstep, during training. Their KV caches grow with every turn, so this
    bounds the memory of a rollout."""
    per_device_eval_batch_size: int = 128
    """Trajectories sampled at once in the held-out evaluation."""
    per_device_train_batch_size: int = 16
    """Sequences per forward and backward pass of the update."""
    estimate: str = ""
    """Expected runtime and memory, with where the figure comes from, until measured on the tier's hardware."""

    @property
    def sampling(self) -> dict[str, Any]:
        """The tier's sampling settings, as keyword arguments for `HFPolicy` and `GRPOConfig`: one place to set them."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_new_tokens": self.max_new_tokens}

    @property
    def training(self) -> dict[str, Any]:
        """The tier's settings for `GRPOConfig`: sampling, learning rate and the batch sizes that fit its memory."""
        return {
            **self.sampling,
            "learning_rate": self.learning_rate,
            "generation_batch_size": self.generation_batch_size,
            "per_device_eval_batch_size": self.per_device_eval_batch_size,
            "per_device_train_batch_size": self.per_device_train_batch_size,
        }


CPU_TINY_LEARNING_RATE = 6e-4
"""`cpu-tiny` trains LoRA adapters (r=16 on every projection, 0.38M of its 5M weights) at 6e-4, the settings of the
learning benchmark (`benchmarks/grpo_learning.py`). Adapters start at zero and move few weights, so they take a 10x
larger step than full fine-tuning (6e-5). Measured on guess_number (noise 0, 500 held-out seeds): on the 1,600-step
build full fine-tuning closed 35% of the gap to the optimum in 50 steps, LoRA 42%, with success up 2 points; on the
2,000-step build LoRA closed 50-60% on 2 CPU cores (training seeds 0-2, 40 and 60 steps) and 52-64% in GPU runs
(seeds 0-2), success flat or up, while full fine-tuning had lost success on longer runs. LoRA leaves the embeddings
and norms alone, which is the likely reason (not isolated)."""

CPU_TINY_TEMPERATURE = 0.6
"""`cpu-tiny` samples at 0.6. Its SFT imitates a demonstrator that repeats a guess a quarter of the time, and at
temperature 1 the model's small probabilities on wrong numbers add up over a dozen turns: one wrong guess deep in
the search puts the history off the demonstrations, and the episode wanders. Measured on 500 held-out guess_number
seeds (`benchmarks/tiny_policy.py`):

| temperature | success | format-valid turns | mean guesses |
| --- | --- | --- | --- |
| 1.0 | 66% | 98% | 8.51 |
| 0.6 | 87% | 99.9% | 7.17 |

(the demonstrator: 98.6% and 7.33; binary search: 5.8). At 0.6 the model plays its demonstrator's game, and the
headroom GRPO needs, the repeats, is still there. Training recomputes logprobs at the same temperature."""

PROFILES: dict[str, TierProfile] = {
    profile.name: profile
    for profile in [
        TierProfile(
            name="cpu-tiny", model_name="tiny", loader="transformers", dtype="float32", load_in_4bit=False,
            lora=LoraSettings(), learning_rate=CPU_TINY_LEARNING_RATE, max_seq_length=3072, max_new_tokens=64,
            temperature=CPU_TINY_TEMPERATURE,
            estimate="measured on 2 CPU cores: committed in agentic_rl_lab/data/tiny-model (a 15-45 minute build), "
            "130-340 sampled tokens/s for one trajectory, 480-1,100 for a group of 8 (AMD EPYC-Intel AMX), <3 GB RAM",
        ),
        TierProfile(
            name="cpu-small", model_name="Qwen/Qwen2.5-0.5B-Instruct", loader="transformers", dtype="float32",
            load_in_4bit=False, lora=LoraSettings(r=16, alpha=32), max_seq_length=4096, max_new_tokens=256,
            estimate="estimate: ~2-4 GB RAM; tens of tokens/s on a laptop CPU (unmeasured here: no Hub access)",
        ),
        TierProfile(
            name="t4", model_name="unsloth/Qwen2.5-3B-Instruct", loader="unsloth", dtype="float16",
            load_in_4bit=True, lora=LoraSettings(r=16, alpha=32), max_seq_length=4096, max_new_tokens=256,
            generation_batch_size=16, per_device_eval_batch_size=16, per_device_train_batch_size=2,
            estimate="estimate, not measured (scripts/gpu_check.py measures it): Qwen2.5-3B in 4-bit is ~2.5 GB; "
            "16 sequences of 4,096 tokens hold 36 KB of KV cache per token (36 layers, 2 KV heads of 128), 2.4 GB",
        ),
        TierProfile(
            name="a100", model_name="unsloth/Qwen2.5-7B-Instruct", loader="unsloth", dtype="bfloat16",
            load_in_4bit=False, lora=LoraSettings(r=32, alpha=64), max_seq_length=8192, max_new_tokens=512,
            generation_batch_size=32, per_device_eval_batch_size=32, per_device_train_batch_size=4,
            estimate="estimate, not measured (scripts/gpu_check.py measures it): Qwen2.5-7B in bfloat16 is 15 GB; "
            "32 sequences of 8,192 tokens hold 56 KB of KV cache per token (28 layers, 4 KV heads of 128), 15 GB",
        ),
    ]
}  # fmt: skip
TIERS = tuple(PROFILES)


def choose_tier(requested: str = "auto") -> tuple[str, str]:
    """Resolve `requested` to a tier name and say why; `"auto"` picks from the GPU that is present, if any."""
    if requested != "auto":
        if requested not in PROFILES:
            raise ValueError(f"unknown tier {requested!r}; choose 'auto' or one of: {', '.join(TIERS)}")
        return requested, "asked for explicitly"
    try:
        import torch
    except ImportError:
        return "cpu-tiny", "torch is not installed, so no GPU can be used"
    if not torch.cuda.is_available():
        return "cpu-tiny", "no CUDA GPU found"
    name = torch.cuda.get_device_name(0)
    memory_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    tier = "a100" if memory_gib >= 35 else "t4"
    return tier, f"found {name} with {memory_gib:.0f} GiB"


@dataclass
class LoadedModel:
    """A policy model ready for sampling and training, with its tokenizer and the profile it came from."""

    model: Any
    tokenizer: Any
    profile: TierProfile


def load_model(
    tier: str | TierProfile = "cpu-tiny",
    *,
    model_name: str | Path | None = None,
    fast_inference: bool = False,
    add_lora: bool = True,
) -> LoadedModel:
    """Load a tier's model and tokenizer and, when the tier uses LoRA and `add_lora`, attach fresh adapters.

    `model_name` overrides the profile's model (a Hub id or a local directory). `fast_inference` asks Unsloth for
    its vLLM engine (GPU only).
    """
    profile = PROFILES[choose_tier(tier)[0]] if isinstance(tier, str) else tier
    if model_name is not None:
        profile = dataclasses.replace(profile, model_name=_hub_id_or_directory(model_name))
    if fast_inference and profile.loader != "unsloth":
        raise ValueError(f"fast_inference is Unsloth's vLLM engine; tier {profile.name} loads with transformers")
    if profile.model_name == "tiny":
        from agentic_rl_lab.tiny import default_model_path

        profile = dataclasses.replace(profile, model_name=str(default_model_path()))
    if profile.loader == "unsloth":
        return _load_with_unsloth(profile, fast_inference, add_lora)
    return _load_with_transformers(profile, add_lora)


def _hub_id_or_directory(name: str | Path) -> str:
    """A path (a `Path`, or text starting with `.`, `/` or `~`) must be a directory: otherwise transformers would
    take it for a Hub id and fail with a message about repo names."""
    if isinstance(name, Path) or str(name).startswith((".", "/", "~")):
        path = Path(name).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"no model directory at {name} (a Hub id looks like Qwen/Qwen2.5-0.5B-Instruct)")
        return str(path)
    return str(name)


def _load_with_transformers(profile: TierProfile, add_lora: bool) -> LoadedModel:
    """`AutoModelForCausalLM` + `AutoTokenizer` (left padding, for batched generation), then peft LoRA."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if profile.load_in_4bit:
        raise ValueError("4-bit loading goes through Unsloth (tiers t4/a100); transformers tiers load full precision")
    tokenizer = AutoTokenizer.from_pretrained(profile.model_name, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(profile.model_name, dtype=getattr(torch, profile.dtype))
    if profile.lora is not None and add_lora:
        model = attach_lora(model, profile.lora)
    return LoadedModel(model, tokenizer, profile)


def attach_lora(model: Any, lora: LoraSettings) -> Any:
    """Wrap `model` in fresh peft LoRA adapters on those of `lora.target_modules` it has; only they train."""
    from peft import LoraConfig, get_peft_model

    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [m for m in lora.target_modules if m in present]
    if not targets:
        raise ValueError(f"none of the LoRA target modules {lora.target_modules} exist in this model")
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets)
    return get_peft_model(model, config)


def _load_with_unsloth(profile: TierProfile, fast_inference: bool, add_lora: bool) -> LoadedModel:
    """`FastLanguageModel.from_pretrained` + `get_peft_model`. Unsloth is imported here and nowhere else."""
    import torch

    if (fast_inference or profile.load_in_4bit) and not torch.cuda.is_available():
        wanted = " and ".join(
            what
            for what, on in (("fast_inference (vLLM)", fast_inference), ("4-bit loading", profile.load_in_4bit))
            if on
        )
        raise RuntimeError(
            f"{wanted} needs a CUDA GPU, and none is available. On a CPU use tier 'cpu-tiny' or 'cpu-small' "
            "(transformers), or Unsloth's CPU fallback with a 16/32-bit profile: "
            "dataclasses.replace(PROFILES['t4'], load_in_4bit=False, dtype='float32') and fast_inference=False."
        )
    try:
        from unsloth import FastLanguageModel
    except ImportError as exc:
        raise ImportError(
            f"tier {profile.name} loads with Unsloth, which is not installed: pip install 'agentic-rl-lab[gpu]' "
            "(on a CUDA machine), or use tier 'cpu-tiny'."
        ) from exc
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=profile.model_name,
        max_seq_length=profile.max_seq_length,
        dtype=getattr(torch, profile.dtype),
        load_in_4bit=profile.load_in_4bit,
        fast_inference=fast_inference,
    )
    tokenizer.padding_side = "left"
    if profile.lora is not None and add_lora:
        model = FastLanguageModel.get_peft_model(
            model,
            r=profile.lora.r,
            lora_alpha=profile.lora.alpha,
            lora_dropout=profile.lora.dropout,
            target_modules=list(profile.lora.target_modules),
            use_gradient_checkpointing="unsloth" if torch.cuda.is_available() else False,
            random_state=0,
        )
    return LoadedModel(model, tokenizer, profile)


# ----- one code path for sampling and training, under transformers and under Unsloth -----------------------------
def uses_unsloth(model: Any) -> bool:
    """Whether Unsloth loaded `model`: its loaders set `max_seq_length` on the model they return (on a GPU and on
    the CPU fallback), which transformers' models do not have."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "unsloth" in sys.modules and hasattr(base, "max_seq_length")


def for_inference(model: Any) -> None:
    """Put `model` in sampling mode: Unsloth's `FastLanguageModel.for_inference`, else `model.eval()`.

    Unsloth's `generate` switches to inference mode by itself; doing it here too keeps the order of the mode
    switches the same on every tier, which is what `for_training` undoes."""
    if uses_unsloth(model):
        from unsloth import FastLanguageModel

        FastLanguageModel.for_inference(model)
    else:
        model.eval()


def for_training(model: Any) -> None:
    """Put `model` in update mode: Unsloth's `FastLanguageModel.for_training`, else `model.train()`.

    Under Unsloth this is not `model.train()`: its `for_inference` (which its `generate` calls) clears every
    layer's gradient-checkpointing flag, and only `for_training` sets them back. With `model.train()` every update
    after the first rollout would run without checkpointing, and need several times the memory."""
    if uses_unsloth(model):
        from unsloth import FastLanguageModel

        FastLanguageModel.for_training(model)
    else:
        model.train()


def reuse_kv_cache(model: Any) -> bool:
    """Whether `HFPolicy` keeps each trajectory's KV cache for its next turn, when not told.

    Yes under transformers: tested token for token against recomputing the history (`tests/policies/test_hf.py`).
    No under Unsloth for now: its `generate` converts a cache it is given and drops its own decode buffers, a path
    whose tokens have not been compared with a fresh prefill on a GPU yet (`scripts/gpu_check.py` compares them;
    the Unsloth CPU fallback, which is plain transformers, keeps the same tokens)."""
    return not uses_unsloth(model)


def compute_dtype(model: Any) -> Any:
    """The floating-point type the model computes in: that of its input embeddings (never quantized)."""
    return model.get_input_embeddings().weight.dtype


def needs_loss_scaling(model: Any) -> bool:
    """float16 has 5 exponent bits: gradients below ~6e-8 round to zero. Training in float16 (a T4 has no
    bfloat16) therefore multiplies the loss by a large factor before backward and divides the gradients by it
    before the step (`torch.amp.GradScaler`); bfloat16 and float32 have float32's range and need none."""
    import torch

    return compute_dtype(model) == torch.float16


@contextlib.contextmanager
def autocast(model: Any) -> Iterator[None]:
    """Mixed precision for a training forward on a GPU: matmuls in the model's 16-bit type, reductions in float32,
    as transformers' Trainer does for `fp16`/`bf16`. The trainable weights (LoRA adapters) stay float32: peft and
    Unsloth both keep them so. A no-op on a CPU and for float32 models."""
    import torch

    device = model.get_input_embeddings().weight.device
    dtype = compute_dtype(model)
    enabled = device.type == "cuda" and dtype in (torch.float16, torch.bfloat16)
    with torch.autocast(device_type=device.type, dtype=dtype, enabled=enabled):
        yield
