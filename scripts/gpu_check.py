#!/usr/bin/env python3
"""The GPU tier, checked in one command: does the Unsloth path sample, train and fit as the notebooks say?

    python scripts/gpu_check.py          # on a CUDA machine with Unsloth (`pip install -e '.[gpu]'`); ~5 min
                                         # on an H100, estimated: it has not run on a GPU yet
    python scripts/gpu_check.py --cpu    # the same checks on cpu-tiny through Unsloth's CPU fallback (the tests run it)

It writes `benchmarks/results/gpu_check.json` (`--out` elsewhere): `device` (the GPU's name as torch reports it),
`mode`, `versions`, and `checks`, one object per check with `passed` and its figures.

No weights are downloaded. For each GPU tier it builds a model with the tier's real architecture and vocabulary
(`benchmarks/configs/`, Qwen2.5-3B for `t4`, Qwen2.5-7B for `a100`) and random weights, saves it, and loads it
through `agentic_rl_lab.models.load_model` with Unsloth; the tokenizer is cpu-tiny's. Random weights are enough for
what is checked here: shapes, memory, speed, and whether sampling and training see the same numbers. The `t4` tier
runs as a T4 would: float16 and `torch.cuda.set_per_process_memory_fraction` at 15 GiB.

The checks, per tier:
- `load`: load time and the memory the weights take.
- `causality`: in training mode, changing a later token never changes an earlier token's log-prob (Unsloth builds
  its causal mask in the causal-LM forward and drops the padding mask in training).
- `logprob_gap`: the sampler's log-probs against the trainer's for the same tokens, before and after one update
  at a large learning rate (a sampler that kept stale LoRA weights would lag by the update's whole effect).
- `gradient_checkpointing`: every decoder layer runs the update with checkpointing on, after a rollout.
- `kv_cache_reuse`: keeping the KV cache between turns gives the same greedy tokens as recomputing the history
  (`models.reuse_kv_cache` keeps it off under Unsloth until this passes).
- `rollout_memory`, `update_memory`: peak memory of one turn of the tier's `generation_batch_size` trajectories at
  a context of `max_seq_length`, and of one micro-batch update of `per_device_train_batch_size` such sequences.
- `trainer_self_judge_resume`: two trainer steps judged by the frozen base model (adapters off) through
  `HFJudgeBackend`, then a resume from the checkpoint to a third step.

On a machine without internet: `python scripts/gpu_check.py --download-wheels .gpu-wheels` (where pip reaches
PyPI) fetches `scripts/gpu-wheels.txt` into batches of at most 48 MiB, each of which fits beside the repository in
the 64 MiB a call carries (measured on 2026-12-06: three batches, 106 MiB in all). Carry one batch per call and
install it where the next call finds it (`.gpu-site/` is ignored by git, so it stays while the machine is warm):
`pip install --no-deps --no-index --target .gpu-site .gpu-wheels/batch-N/*.whl`; then, in the last call,
`PYTHONPATH=.gpu-site:. python scripts/gpu_check.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"t4": "qwen2.5-3b-instruct.json", "a100": "qwen2.5-7b-instruct.json"}
T4_MEMORY_GIB = 15.0
"""What Colab's T4 gives a process (16 GB on the card, about 15 GiB usable)."""
VERSIONS = ("torch", "transformers", "peft", "trl", "unsloth", "unsloth_zoo", "bitsandbytes", "xformers")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run on cpu-tiny with Unsloth's CPU fallback")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu_check.json")
    parser.add_argument("--tiers", nargs="*", default=["t4", "a100"], choices=["t4", "a100"], help="GPU tiers")
    parser.add_argument("--download-wheels", type=Path, metavar="DIR", help="fetch the wheels to carry, then stop")
    args = parser.parse_args()
    if args.download_wheels:
        download_wheels(args.download_wheels)
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded; a stray Hub call fails at once
    import torch

    if not args.cpu and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA GPU here; `--cpu` runs the same checks on cpu-tiny with Unsloth's CPU fallback")
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if not args.cpu else f"cpu: {platform.processor() or 'unknown'}",
        "mode": "cpu" if args.cpu else "gpu",
        "versions": {name: _version(name) for name in VERSIONS},
        "checks": [],
    }
    started = time.perf_counter()
    for tier in ["cpu-tiny"] if args.cpu else args.tiers:
        report["checks"] += check_tier(tier)
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["passed"] = all(check["passed"] for check in report["checks"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{sum(c['passed'] for c in report['checks'])}/{len(report['checks'])} passed in {report['seconds']} s")
    print(f"written: {args.out}")


# ----- one tier ---------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Setup:
    """What every check of a tier shares: the loaded model and the sizes to check it at."""

    tier: str
    loaded: Any
    memory_limit: float | None
    """Bytes the process may use (the T4's 15 GiB), or None."""
    on_gpu: bool
    small_env: Any
    """guess_number with 2 turns: quick trajectories for the numerical checks."""


def check_tier(tier: str) -> list[dict[str, Any]]:
    """Every check of one tier, each recorded as passed or failed with its figures; a failure never stops the rest."""
    import torch

    from agentic_rl_lab.envs import GuessNumber

    results: list[dict[str, Any]] = []
    on_gpu = tier != "cpu-tiny"
    memory_limit = None
    if tier == "t4":  # a T4 as Colab gives it: float16, 15 GiB
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, T4_MEMORY_GIB * 2**30 / total))
        memory_limit = T4_MEMORY_GIB * 2**30
    elif on_gpu:
        torch.cuda.set_per_process_memory_fraction(1.0)
    with tempfile.TemporaryDirectory(prefix=f"gpu-check-{tier}-") as work:
        loaded = _record(results, tier, "load", lambda: load_tier(tier, Path(work)))
        if loaded is None:
            return results
        setup = Setup(tier, loaded, memory_limit, on_gpu, GuessNumber(max_turns=2))
        checks: list[tuple[str, Callable[[Setup], dict[str, Any]]]] = [
            ("causality", check_causality),
            ("logprob_gap", check_logprob_gap),
            ("gradient_checkpointing", check_gradient_checkpointing),
            ("kv_cache_reuse", check_kv_cache_reuse),
            ("rollout_memory", check_rollout_memory),
            ("update_memory", check_update_memory),
            ("trainer_self_judge_resume", lambda s: check_trainer_self_judge_resume(s, Path(work) / "run")),
        ]
        for name, check in checks:
            _record(results, tier, name, lambda check=check, setup=setup: check(setup))
        del setup, loaded
        gc.collect()
        if on_gpu:
            torch.cuda.empty_cache()
    return results


def load_tier(tier: str, work: Path) -> dict[str, Any]:
    """Random weights with the tier's architecture, saved beside cpu-tiny's tokenizer, loaded with Unsloth."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from agentic_rl_lab.models import PROFILES, LoraSettings, load_model
    from agentic_rl_lab.tiny import default_model_path

    tokenizer = AutoTokenizer.from_pretrained(default_model_path(progress=False))
    if tier == "cpu-tiny":  # the committed model, through the GPU tiers' loader (Unsloth) on its CPU fallback
        directory = default_model_path(progress=False)
        profile = dataclasses.replace(
            PROFILES["t4"], name="cpu-tiny-unsloth", load_in_4bit=False, dtype="float32", max_seq_length=1024,
            max_new_tokens=16, generation_batch_size=8, per_device_eval_batch_size=8, per_device_train_batch_size=4,
            lora=LoraSettings(r=8, alpha=16),
        )  # fmt: skip
    else:
        profile = PROFILES[tier]
        has_bitsandbytes = _version("bitsandbytes") is not None
        if profile.load_in_4bit and not has_bitsandbytes:  # 16-bit weights take more memory: a safe upper bound
            profile = dataclasses.replace(profile, load_in_4bit=False)
        settings = json.loads((ROOT / "benchmarks" / "configs" / CONFIGS[tier]).read_text())
        settings.pop("_source")
        config = AutoConfig.for_model(**settings)
        directory = work / "model"
        started = time.perf_counter()
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, profile.dtype))
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        del model
        gc.collect()
        torch.cuda.empty_cache()
        build_seconds = time.perf_counter() - started
    if profile.load_in_4bit is False and tier == "t4":
        profile = dataclasses.replace(profile, estimate=profile.estimate + " (checked in 16-bit: no bitsandbytes)")
    _reset_peak()
    started = time.perf_counter()
    loaded = load_model(dataclasses.replace(profile, model_name=str(directory)))
    if tier == "cpu-tiny":  # Unsloth's GPU get_peft_model turns checkpointing on; its CPU fallback does not
        base = loaded.model.get_base_model()
        base.gradient_checkpointing_enable()
        base._unsloth_gradient_checkpointing = True
    figures = {
        "model": str(directory.name if tier != "cpu-tiny" else "cpu-tiny"),
        "parameters": sum(p.numel() for p in loaded.model.parameters()),
        "trainable": sum(p.numel() for p in loaded.model.parameters() if p.requires_grad),
        "dtype": profile.dtype,
        "load_in_4bit": profile.load_in_4bit,
        "seconds": round(time.perf_counter() - started, 1),
        "memory_after_load": _peak(),
    }
    if tier != "cpu-tiny":
        figures["build_seconds"] = round(build_seconds, 1)
    return {"passed": True, "loaded": loaded, **figures}


# ----- the checks -------------------------------------------------------------------------------------------------
def check_causality(setup: Setup) -> dict[str, Any]:
    """A later token changed, in training mode: earlier log-probs must not move."""
    import torch

    from agentic_rl_lab.grpo.logprobs import assistant_token_logprobs
    from agentic_rl_lab.models import for_training

    model = setup.loaded.model
    for_training(model)
    device = model.get_input_embeddings().weight.device
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(10, setup.loaded.tokenizer.vocab_size, (2, 64), generator=generator).to(device)
    attention = torch.ones_like(ids)
    attention[1, 50:] = 0  # right padding, as the trainer batches
    mask = attention[:, 1:].float()
    changed = ids.clone()
    changed[:, 40] = (changed[:, 40] + 1) % setup.loaded.tokenizer.vocab_size
    with torch.no_grad():  # one forward over both versions: the same kernel calls round both alike
        pair = torch.cat([ids, changed])
        both = assistant_token_logprobs(model, pair, attention.repeat(2, 1), mask.repeat(2, 1), 1.0)
    before, after = both[:2], both[2:]
    earlier = float((after[:, :39] - before[:, :39]).abs().max())
    later = float((after[:, 39:] - before[:, 39:]).abs().max())
    return {"passed": earlier < 1e-3 and later > 1e-3, "earlier_max_change": earlier, "later_max_change": later}


def check_logprob_gap(setup: Setup) -> dict[str, Any]:
    """Sampler against trainer on the same tokens, before and after one update at learning rate 5e-3."""
    from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer

    loaded = setup.loaded
    group = _varied_sample(setup, first_seed=1)
    with tempfile.TemporaryDirectory() as run_dir:
        config = GRPOConfig(
            **{**_small_training(setup), "learning_rate": 5e-3}, steps=1, num_generations=4, eval_every=0
        )
        trainer = GRPOTrainer(config, loaded.model, loaded.tokenizer, setup.small_env, None, run_dir, progress=False)
        gap_before, trainer_before = _gap(setup, group)
        for member, trajectory in enumerate(group.trajectories):
            trajectory.reward = member / len(group.trajectories)
        stats = trainer.update([group])
        _, trainer_after = _gap(setup, group)
        shift = float((trainer_after - trainer_before).abs().mean())
        gap_after, _ = _gap(setup, _sample(setup, seed=2))
    figures = {
        "gap_before_mean": gap_before,
        "gap_after_mean": gap_after,
        "update_shift_mean": shift,
        "optimizer_steps": stats["optimizer_steps"],
    }
    detectable = shift > 5 * gap_before
    figures["passed"] = bool(detectable and gap_after <= 2 * gap_before + 0.1 * shift)
    return figures


def check_gradient_checkpointing(setup: Setup) -> dict[str, Any]:
    """After a rollout (Unsloth's generate clears the flags), every decoder layer's update forward checkpoints."""
    import torch

    from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer

    loaded = setup.loaded
    flags: list[bool] = []
    hooks = [
        layer.register_forward_pre_hook(
            lambda module, args: flags.append(bool(module.gradient_checkpointing)) if torch.is_grad_enabled() else None
        )
        for layer in _decoder_layers(loaded.model)
    ]
    try:
        group = _sample(setup, seed=3)
        for member, trajectory in enumerate(group.trajectories):
            trajectory.reward = member / len(group.trajectories)
        with tempfile.TemporaryDirectory() as run_dir:
            config = GRPOConfig(**_small_training(setup), steps=1, num_generations=4, eval_every=0)
            trainer = GRPOTrainer(
                config, loaded.model, loaded.tokenizer, setup.small_env, None, run_dir, progress=False
            )
            trainer.update([group])
    finally:
        for hook in hooks:
            hook.remove()
    return {"passed": bool(flags) and all(flags), "layer_forwards": len(flags), "with_checkpointing": sum(flags)}


def check_kv_cache_reuse(setup: Setup) -> dict[str, Any]:
    """Greedy tokens with the KV cache kept between turns, against the history recomputed every turn."""
    from agentic_rl_lab.envs import GuessNumber
    from agentic_rl_lab.policies.hf import HFPolicy
    from agentic_rl_lab.rollout import collect_group

    loaded = setup.loaded
    tokens, counts = {}, {}
    for reuse in (False, True):
        policy = HFPolicy(loaded.model, loaded.tokenizer, temperature=0.0, max_new_tokens=16, reuse_cache=reuse)
        group = collect_group(GuessNumber(max_turns=3), policy, seed=5, num_generations=4, progress=False)
        tokens[reuse] = [c.token_ids for t in group.trajectories for c in t.completions]
        counts[reuse] = dict(policy.counts)
    same = sum(a == b for a, b in zip(tokens[True], tokens[False]))
    cached = counts[True].get("cached_tokens", 0)
    return {
        "passed": tokens[True] == tokens[False] and cached > 0,
        "turns": len(tokens[True]),
        "identical_turns": same,
        "cached_tokens": cached,
        "cache_unsupported": counts[True].get("cache_unsupported", 0),
    }


def check_rollout_memory(setup: Setup) -> dict[str, Any]:
    """One turn of `generation_batch_size` trajectories at the longest context the tier allows."""
    from agentic_rl_lab.policies.hf import HFPolicy

    loaded, profile = setup.loaded, setup.loaded.profile
    context = profile.max_seq_length - profile.max_new_tokens - 16
    history = _history_of(loaded.tokenizer, context)
    policy = HFPolicy(loaded.model, loaded.tokenizer, max_new_tokens=profile.max_new_tokens, seed=0)
    _reset_peak()
    started = time.perf_counter()
    actions = policy.act([history] * profile.generation_batch_size, [])
    seconds = time.perf_counter() - started
    return _memory_figures(
        setup,
        trajectories=profile.generation_batch_size,
        prompt_tokens=len(policy.prompt_ids(history, [])),
        sampled_tokens=sum(len(a.token_ids) for a in actions),
        seconds=round(seconds, 2),
    )


def check_update_memory(setup: Setup) -> dict[str, Any]:
    """One micro-batch of `per_device_train_batch_size` sequences of `max_seq_length` tokens, half of them sampled."""
    import torch

    from agentic_rl_lab.grpo.tensors import TrainingBatch
    from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer
    from agentic_rl_lab.models import autocast, for_training

    loaded, profile = setup.loaded, setup.loaded.profile
    rows, width = profile.per_device_train_batch_size, profile.max_seq_length
    generator = torch.Generator().manual_seed(0)
    assistant = (torch.arange(width) % 64 >= 32).float().repeat(rows, 1)  # alternating context and sampled turns
    batch = TrainingBatch(
        input_ids=torch.randint(10, loaded.tokenizer.vocab_size, (rows, width), generator=generator),
        attention_mask=torch.ones(rows, width, dtype=torch.long),
        assistant_mask=assistant,
        old_logprobs=torch.full((rows, width), -5.0),
        advantages=torch.randn(rows, width, generator=generator) * assistant,
    )
    with tempfile.TemporaryDirectory() as run_dir:
        config = GRPOConfig(**{**profile.training, "beta": 0.04}, steps=1, num_generations=4, eval_every=0)
        trainer = GRPOTrainer(config, loaded.model, loaded.tokenizer, setup.small_env, None, run_dir, progress=False)
        for_training(loaded.model)
        _reset_peak()
        started = time.perf_counter()
        with autocast(loaded.model):
            loss, _ = trainer.loss(batch)
        trainer.scaler.scale(loss).backward()
        seconds = time.perf_counter() - started
        trainer.optimizer.zero_grad(set_to_none=True)
    return _memory_figures(setup, sequences=rows, tokens_per_sequence=width, seconds=round(seconds, 2))


def check_trainer_self_judge_resume(setup: Setup, run_dir: Path) -> dict[str, Any]:
    """Two steps judged by the frozen base (adapters off), then a new trainer on the same folder resumes to three."""
    from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer
    from agentic_rl_lab.judge import HFJudgeBackend, RelativeJudge

    loaded = setup.loaded
    judge = RelativeJudge(
        HFJudgeBackend(loaded.model, loaded.tokenizer, max_new_tokens=64), cache=None, max_retries=0,
        on_failure="skip",
    )  # fmt: skip
    settings = {**_small_training(setup), "groups_per_step": 1, "num_generations": 4, "eval_every": 0}
    first = GRPOTrainer(
        GRPOConfig(**settings, steps=2), loaded.model, loaded.tokenizer, setup.small_env, judge, run_dir,
        progress=False,
    )  # fmt: skip
    metrics = first.train()
    resumed = GRPOTrainer(
        GRPOConfig(**settings, steps=3), loaded.model, loaded.tokenizer, setup.small_env, judge, run_dir,
        progress=False,
    )  # fmt: skip
    resumed_metrics = resumed.train()
    steps = [int(s) for s in resumed_metrics["step"]]
    return {
        "passed": list(metrics["step"]) == [0, 1] and steps == [0, 1, 2] and resumed.step == 3,
        "steps_logged": steps,
        "judge_calls": float(resumed_metrics["judge_calls"].sum()),
        "judged_groups": int(sum(1 - resumed_metrics["judge_skipped_groups"])),
        "seconds_judge": round(float(resumed_metrics["seconds_judge"].sum()), 2),
        "seconds_rollout": round(float(resumed_metrics["seconds_rollout"].sum()), 2),
        "seconds_update": round(float(resumed_metrics["seconds_update"].sum()), 2),
    }


# ----- helpers ----------------------------------------------------------------------------------------------------
def _small_training(setup: Setup) -> dict[str, Any]:
    """The tier's settings with short turns, for the numerical checks."""
    return {**setup.loaded.profile.training, "max_new_tokens": 32, "groups_per_step": 1}


def _sample(setup: Setup, seed: int) -> Any:
    from agentic_rl_lab.policies.hf import HFPolicy
    from agentic_rl_lab.rollout import collect_group

    policy = HFPolicy(setup.loaded.model, setup.loaded.tokenizer, temperature=1.0, max_new_tokens=32, seed=seed)
    return collect_group(setup.small_env, policy, seed=seed, num_generations=4, progress=False)


def _varied_sample(setup: Setup, first_seed: int, tries: int = 20) -> Any:
    """A group whose trajectories are not all the same tokens. Identical members with different rewards have
    advantages that sum to zero on every token, so the update would be a no-op and show nothing; a small model
    playing the opening of guess_number at temperature 1 samples four identical trajectories about one time in
    three."""
    for seed in range(first_seed, first_seed + tries):
        group = _sample(setup, seed)
        if len({tuple(i for c in t.completions for i in c.token_ids) for t in group.trajectories}) > 1:
            return group
    raise RuntimeError(f"{tries} groups in a row were 4 identical trajectories: the model samples deterministically")


def _gap(setup: Setup, group: Any) -> tuple[float, Any]:
    """Mean |sampler - trainer| log-prob over the group's sampled tokens, and the trainer's log-probs."""
    import torch

    from agentic_rl_lab.grpo.logprobs import assistant_token_logprobs
    from agentic_rl_lab.grpo.tensors import collate, trajectory_to_sequence
    from agentic_rl_lab.models import autocast, for_training

    loaded = setup.loaded
    sequences = [trajectory_to_sequence(t, loaded.tokenizer) for t in group.trajectories]
    batch = collate(sequences, [[0.0]] * len(sequences), loaded.tokenizer.pad_token_id)
    device = loaded.model.get_input_embeddings().weight.device
    mask = batch.assistant_mask[:, 1:].to(device)
    for_training(loaded.model)
    with torch.no_grad(), autocast(loaded.model):
        trainer = assistant_token_logprobs(
            loaded.model, batch.input_ids.to(device), batch.attention_mask.to(device), mask, 1.0
        )
    sampler = batch.old_logprobs[:, 1:].to(device)
    gap = float(((trainer - sampler).abs() * mask).sum() / mask.sum())
    return gap, trainer[mask.bool()]


def _history_of(tokenizer: Any, tokens: int) -> list[dict[str, str]]:
    """A one-message conversation of about `tokens` tokens."""
    words = " ".join(f"{i % 97}" for i in range(tokens))
    ids = tokenizer.encode(words, add_special_tokens=False)[: max(1, tokens - 16)]
    return [{"role": "user", "content": tokenizer.decode(ids)}]


def _decoder_layers(model: Any) -> list[Any]:
    return [m for m in model.modules() if hasattr(m, "gradient_checkpointing") and type(m).__name__.endswith("Layer")]


def _memory_figures(setup: Setup, **figures: Any) -> dict[str, Any]:
    peak = _peak()
    if not setup.on_gpu:
        return {"passed": True, "peak_memory": None, "note": "memory is measured on a GPU only", **figures}
    limit = setup.memory_limit
    return {
        "passed": limit is None or peak["max_reserved"] <= limit,
        "peak_memory": peak,
        "limit_bytes": limit,
        **figures,
    }


def _reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak() -> dict[str, int] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    return {"max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved()}


def _record(results: list[dict[str, Any]], tier: str, name: str, run: Callable[[], dict[str, Any]]) -> Any:
    """Run one check; keep its figures, or its error, and go on. Returns the loaded model for `load`."""
    started = time.perf_counter()
    try:
        figures = run()
    except Exception as exc:  # a check that crashes has failed; the others still run
        figures = {"passed": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
    loaded = figures.pop("loaded", None)
    results.append({"name": name, "tier": tier, **figures, "check_seconds": round(time.perf_counter() - started, 2)})
    print(f"{'PASS' if figures['passed'] else 'FAIL'}  {tier} {name}", flush=True)
    return loaded


def _version(name: str) -> str | None:
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version(name)
    return None


# ----- the wheels to carry ----------------------------------------------------------------------------------------
def download_wheels(folder: Path, batch_bytes: int = 48 * 2**20) -> None:
    """`pip download` the wheels in `scripts/gpu-wheels.txt` for CPython 3.11 on x86_64 Linux, then sort them into
    `batch-N` folders of at most `batch_bytes` each (64 MiB per call, less the repository's ~12 MB)."""
    specs = [
        line.strip() for line in (ROOT / "scripts" / "gpu-wheels.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    platforms = ["manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11"]
    command += [flag for p in platforms for flag in ("--platform", p)] + ["--dest", str(folder)]
    subprocess.run(command + specs, check=True)
    wheels = sorted(folder.glob("*.whl"), key=lambda path: -path.stat().st_size)
    batches: list[list[Path]] = []
    for wheel in wheels:  # first fit, largest first
        size = wheel.stat().st_size
        home = next((b for b in batches if sum(w.stat().st_size for w in b) + size <= batch_bytes), None)
        if home is None:
            batches.append(home := [])
        home.append(wheel)
    for number, batch in enumerate(batches, 1):
        target = folder / f"batch-{number}"
        target.mkdir(exist_ok=True)
        for wheel in batch:
            wheel.rename(target / wheel.name)
        print(f"{target}: {len(batch)} wheels, {sum(w.stat().st_size for w in target.glob('*.whl')) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
