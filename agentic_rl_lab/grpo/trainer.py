"""The GRPO training loop: rollout → judge → update, one step at a time, safe to kill and resume.

Each step:
1. sample scenarios (seeds) for the step;
2. collect a group of `num_generations` trajectories per scenario, with the policy in inference mode;
3. judge every group (the judge writes each trajectory's reward; for `credit_assignment="turn"` the task also
   rewards each turn, `Environment.turn_rewards`);
4. compute group-normalised advantages, and turn each trajectory into the tokens it sampled;
5. update the policy (`GRPOTrainer.update`, one numbered scroll): micro-batches, gradient accumulation, loss
   scaling in float16, gradient clipping, a guard against NaN/inf;
6. write the step's metrics and trajectories;
7. checkpoint (atomically, with a SHA-256 of every file) every `save_every` steps.

A held-out evaluation every `eval_every` steps uses the environment's ground truth, never the judge. Restarting
the same run folder resumes from the last complete checkpoint: nothing is repeated, nothing is lost, and the
logs written after that checkpoint are cut back so they show each step once. A write that fails (a full disk)
names its file and leaves the last checkpoint intact; a checkpoint or log line that is damaged stops the resume
with the file (and line) named, instead of training on from it. `tests/reliability/` injects each of these faults.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import torch
from tqdm.auto import tqdm

from agentic_rl_lab.envs import Environment
from agentic_rl_lab.grpo.advantages import CREDIT_ASSIGNMENTS, SCALE_REWARDS, compute_advantages
from agentic_rl_lab.grpo.logprobs import assistant_token_logprobs
from agentic_rl_lab.grpo.loss import LossStats, check_loss_options, grpo_loss, items_in_batch
from agentic_rl_lab.grpo.tensors import NotTrainable, TrainingBatch, collate, trajectory_to_sequence
from agentic_rl_lab.models import autocast, for_inference, for_training, needs_loss_scaling
from agentic_rl_lab.policies.hf import HFPolicy
from agentic_rl_lab.rollout import collect_groups
from agentic_rl_lab.seeds import held_out_seeds, training_seeds
from agentic_rl_lab.trajectory import TrajectoryGroup, append_groups, iter_groups

CHECKSUMS = "checksums.json"
"""In every checkpoint, written last: the SHA-256 of each of its files, checked before a run resumes from it."""


class CorruptCheckpoint(ValueError):
    """A checkpoint file is missing or is not what was written (truncated, garbled): the run will not resume from it."""


@dataclass
class GRPOConfig:
    """Every knob of a run. Names follow TRL's `GRPOConfig` where TRL has the knob."""

    steps: int = 100
    """Training steps (one rollout → judge → update cycle each)."""
    groups_per_step: int = 8
    """Scenarios per step; each gives one group."""
    num_generations: int = 8
    """Trajectories per scenario: the group size G."""
    learning_rate: float = 1e-4
    """AdamW's step size (each tier has its own: `TierProfile.learning_rate`)."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global norm before each optimizer step."""
    generation_batch_size: int = 64
    """Trajectories sampled at once during training rollouts (their KV caches are what fills a GPU)."""
    per_device_eval_batch_size: int = 128
    """Trajectories sampled at once in the held-out evaluation."""
    per_device_train_batch_size: int = 16
    """Sequences per forward/backward pass."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step; the rest of the step's batch gives further optimizer steps (1, TRL's
    default: a step of 8 groups of 8 makes 4 optimizer steps, the setting the learning benchmark measured)."""
    num_iterations: int = 1
    """Passes over each step's batch (μ). Above 1, later passes train on off-policy data and clipping matters."""
    loss_type: Literal["grpo", "dr_grpo", "dapo", "cispo"] = "dapo"
    """How per-token losses are averaged, and CISPO's surrogate (`agentic_rl_lab/grpo/loss.py`)."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Divide advantages by the group's reward std, the batch's, or not at all (Dr. GRPO)."""
    epsilon: float = 0.2
    """Lower clipping bound: the ratio is clipped at 1 - epsilon."""
    epsilon_high: float | None = None
    """Upper clipping bound, 1 + epsilon_high (DAPO's clip-higher: 0.28); None means epsilon."""
    beta: float = 0.0
    """KL weight against the reference model (the starting weights). 0 needs no reference."""
    importance_sampling_level: Literal["token", "sequence"] = "token"
    """One ratio per token, or one per sequence (GSPO)."""
    credit_assignment: Literal["trajectory", "turn"] = "trajectory"
    """One advantage for the whole trajectory, or one per assistant turn (`grpo/advantages.py`)."""
    temperature: float = 1.0
    """Sampling temperature; the update recomputes log-probs at the same one."""
    top_p: float = 1.0
    """Nucleus sampling; the recorded log-probs stay those of the untruncated distribution."""
    max_new_tokens: int = 64
    """Per assistant turn."""
    eval_every: int = 10
    """Held-out evaluation every this many steps (and before the first and after the last); 0 disables it."""
    eval_episodes: int = 100
    """Held-out scenarios per evaluation, one trajectory each."""
    save_every: int = 5
    """Checkpoint every this many steps (and after the last)."""
    keep_checkpoints: int = 2
    """How many of the newest checkpoints stay on disk."""
    seed: int = 0
    """Seeds the scenarios, the sampling and the shuffling of the update."""

    def __post_init__(self) -> None:
        """Refuse a setting that cannot train now, before rollouts spend minutes on it."""
        check_loss_options(self.loss_type, self.importance_sampling_level, self.epsilon, self.epsilon_high, None)
        for name, choices in (("scale_rewards", SCALE_REWARDS), ("credit_assignment", CREDIT_ASSIGNMENTS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; choose one of {choices}")
        at_least = {
            "steps": 0,
            "num_generations": 2,  # GRPO learns from the differences between the trajectories of a group
            "eval_every": 0,
            "groups_per_step": 1,
            "generation_batch_size": 1,
            "per_device_eval_batch_size": 1,
            "per_device_train_batch_size": 1,
            "gradient_accumulation_steps": 1,
            "num_iterations": 1,
            "max_new_tokens": 1,
            "eval_episodes": 1,
            "save_every": 1,
            "keep_checkpoints": 1,
        }
        for name, low in at_least.items():
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        for name in ("learning_rate", "max_grad_norm", "temperature"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be positive and finite, got {getattr(self, name)!r}")
        if not 0 <= self.beta < math.inf:
            raise ValueError(f"beta must be >= 0 and finite, got {self.beta!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")


class GRPOTrainer:
    """Train `model` (a causal LM with `tokenizer`) on `env` with rewards from `judge`, writing to `run_dir`.

    `reference_model`: the frozen reference for the KL term. None means: the same model with LoRA adapters
    disabled if it is a peft model, else a frozen copy of the starting weights (made only when `beta > 0`).
    `callbacks` are called after every step with `(trainer, metrics_row)`: the live dashboard uses this.
    """

    def __init__(
        self,
        config: GRPOConfig,
        model: Any,
        tokenizer: Any,
        env: Environment,
        judge: Any,
        run_dir: str | Path,
        *,
        eval_env: Environment | None = None,
        reference_model: Any | None = None,
        callbacks: Sequence[Callable[[GRPOTrainer, dict[str, float]], None]] = (),
        progress: bool = True,
    ) -> None:
        self.config, self.model, self.tokenizer, self.env, self.judge = config, model, tokenizer, env, judge
        self.eval_env = eval_env or env
        if config.credit_assignment == "turn" and type(env).turn_rewards is Environment.turn_rewards:
            raise ValueError(f"credit_assignment='turn' needs a task that rewards single turns; {env.name} does not")
        self.run_dir = Path(run_dir)
        self.callbacks = list(callbacks)
        self.progress = progress
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=0.0)
        self.scaler = torch.amp.GradScaler(model.device.type, enabled=needs_loss_scaling(model))
        """Loss scaling for float16 (`models.needs_loss_scaling`); switched off, each of its calls does nothing."""
        if self.scaler.is_enabled() and any(p.dtype != torch.float32 for p in trainable):
            raise ValueError(
                "float16 training keeps the weights it trains in float32 (mixed precision): load the model with "
                "LoRA adapters (peft and Unsloth make them float32), or in float32"
            )
        self.reference_model = reference_model
        if config.beta > 0 and reference_model is None and not hasattr(model, "disable_adapter"):
            self.reference_model = copy.deepcopy(model).eval().requires_grad_(False)
        self.step = 0
        self.history: list[dict[str, float]] = []
        self._check_saved_config()  # refuse now, not after a model load and a first rollout

    # ----- the loop ---------------------------------------------------------------------------------------------------
    def train(self) -> pd.DataFrame:
        """Run (or resume) the training until `config.steps`; returns the metrics, one row per step."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        self._resume()
        if self.step == 0 and self.config.eval_every and not self._has_eval(0):
            self._log({"step": 0, **self.evaluate()}, eval_only=True)
        bar = tqdm(range(self.step, self.config.steps), desc="GRPO", unit="step", disable=not self.progress)
        for step in bar:
            row = self.train_step(step)
            self.step = step + 1
            if self.config.eval_every and (self.step % self.config.eval_every == 0 or self.step == self.config.steps):
                row.update(self.evaluate())
            self._log(row)
            bar.set_postfix(reward=f"{row['reward_mean']:.3f}", success=f"{row['train_success']:.0%}", refresh=False)
            if self.step % self.config.save_every == 0 or self.step == self.config.steps:
                self.save_checkpoint()
            for callback in self.callbacks:
                callback(self, row)
        return self.metrics()

    def train_step(self, step: int) -> dict[str, float]:
        """One rollout → judge → update cycle. Returns the step's metrics."""
        config = self.config
        row: dict[str, float] = {"step": step}
        started = time.perf_counter()
        seeds = training_seeds(config.seed, step, config.groups_per_step)
        for_inference(self.model)
        policy = self._policy(seed=config.seed * 1_000_003 + step)
        groups = collect_groups(
            self.env, policy, seeds, config.num_generations, progress=False, batch_size=config.generation_batch_size
        )
        row["seconds_rollout"] = time.perf_counter() - started

        started = time.perf_counter()
        judged = self.judge.score_groups(groups, progress=False)
        if config.credit_assignment == "turn":  # the task's reward for each turn, beside the judge's for the whole
            for trajectory in (t for g in judged for t in g.trajectories):
                trajectory.metadata["turn_rewards"] = self.env.turn_rewards(trajectory.messages)
        row["seconds_judge"] = time.perf_counter() - started
        row["judge_calls"] = sum(g.metadata.get("judge", {}).get("requests", 0) for g in groups)
        row["judge_skipped_groups"] = len(groups) - len(judged)
        for group in groups:
            group.metadata["step"] = step
        _write(self.run_dir / "trajectories.jsonl", lambda path: append_groups(path, groups))

        trajectories = [t for g in groups for t in g.trajectories]
        rewards = [t.reward for t in trajectories if t.reward is not None]
        row["reward_mean"] = sum(rewards) / max(1, len(rewards))
        row["reward_std"] = _std(rewards)
        row["train_success"] = sum(t.outcome.success for t in trajectories) / max(1, len(trajectories))
        row["train_score"] = sum(t.outcome.score for t in trajectories) / max(1, len(trajectories))  # ground truth
        row["train_mean_turns"] = sum(t.num_turns for t in trajectories) / max(1, len(trajectories))
        row["completion_tokens"] = sum(len(c.token_ids) for t in trajectories for c in t.completions) / max(
            1, len(trajectories)
        )

        started = time.perf_counter()
        row.update(self.update(judged))
        row["seconds_update"] = time.perf_counter() - started
        return row

    # ----- 4 and 5: advantages and the update ------------------------------------------------------------------------
    def update(self, groups: list[TrajectoryGroup]) -> dict[str, float]:
        """Steps 4 and 5 of the loop for judged `groups`, in order. Returns the update's metrics."""
        config = self.config
        # 4a. Advantages: each trajectory's reward against its group's; groups with equal rewards carry no signal.
        advantages = compute_advantages(
            groups, scale_rewards=config.scale_rewards, credit_assignment=config.credit_assignment
        )
        stats: dict[str, float] = {
            "zero_advantage_groups": advantages.num_zero_advantage_groups,
            "trained_trajectories": len(advantages.trajectories),
            "untrainable_trajectories": 0,
        }
        # 4b. Token in, token out: each trajectory as the ids it sampled, with an advantage for each of its turns.
        examples = []
        for item in advantages.trajectories:
            try:
                sequence = trajectory_to_sequence(groups[item.group].trajectories[item.member], self.tokenizer)
                examples.append((sequence, item.turn_advantages))
            except NotTrainable:  # an API policy's trajectory: no sampled ids
                stats["untrainable_trajectories"] += 1
        if not examples:
            return {**stats, "loss": math.nan, "skipped_update": 1.0, "optimizer_steps": 0, "skipped_nonfinite": 0}

        # 5a. Training mode: under Unsloth this also turns gradient checkpointing back on (`models.for_training`).
        for_training(self.model)
        rng = random.Random(config.seed * 31 + self.step)
        kept: list[dict[str, float]] = []  # one row per micro-batch of every optimizer step that was taken
        optimizer_steps = skipped = 0
        for _ in range(config.num_iterations):
            # 5b. Shuffle and cut into micro-batches; `gradient_accumulation_steps` of them make one optimizer step.
            rng.shuffle(examples)
            size, accumulate = config.per_device_train_batch_size, config.gradient_accumulation_steps
            micro_batches = [
                collate([s for s, _ in examples[i : i + size]], [a for _, a in examples[i : i + size]], self.pad_id)
                for i in range(0, len(examples), size)
            ]
            for first in range(0, len(micro_batches), accumulate):
                chunk = micro_batches[first : first + accumulate]
                # 5c. Weigh each micro-batch by its share of what the loss averages over (`items_in_batch`), so the
                #     summed gradient is the one of the whole chunk as a single batch.
                items = [items_in_batch(config.loss_type, batch.assistant_mask[:, 1:]) for batch in chunk]
                self.optimizer.zero_grad(set_to_none=True)
                rows, finite = [], True
                for batch, n in zip(chunk, items):
                    # 5d. Forward (log-probs of the sampled tokens, then the loss) and backward. In float16 the loss
                    #     is multiplied by the scaler's factor first, so small gradients do not round to zero.
                    with autocast(self.model):
                        loss, loss_stats = self.loss(batch)
                    if not torch.isfinite(loss):
                        finite = False
                        break
                    self.scaler.scale(loss * n / max(sum(items), 1)).backward()
                    rows.append({"loss": float(loss.detach()), **_present(loss_stats)})
                if finite:
                    # 5e. Divide the gradients back, clip them, and step, unless one overflowed: then the step is
                    #     skipped and the scaler lowers its factor (`update`).
                    self.scaler.unscale_(self.optimizer)
                    grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable, config.max_grad_norm)
                    finite = bool(torch.isfinite(grad_norm))
                    if finite:
                        self.scaler.step(self.optimizer)
                        kept += [{**row, "grad_norm": float(grad_norm)} for row in rows]
                    self.scaler.update()
                optimizer_steps += finite
                skipped += not finite
        self.optimizer.zero_grad(set_to_none=True)  # frees the gradients' memory until the next update
        # 5f. The update's diagnostics: means over the micro-batches of the optimizer steps that were taken.
        stats.update({name: sum(r[name] for r in kept) / len(kept) for name in (kept[0] if kept else {})})
        stats.update({"optimizer_steps": optimizer_steps, "skipped_nonfinite": skipped})
        if self.scaler.is_enabled():
            stats["loss_scale"] = self.scaler.get_scale()
        return stats

    def loss(self, batch: TrainingBatch) -> tuple[torch.Tensor, LossStats]:
        """The GRPO loss of one micro-batch: log-probs of its sampled tokens under the current policy (and the
        reference's, for the KL term), then `grpo_loss`."""
        config = self.config
        device = self.model.device
        input_ids, attention_mask = batch.input_ids.to(device), batch.attention_mask.to(device)
        mask = batch.assistant_mask[:, 1:].to(device)  # (B, T-1): token t+1 is one the policy sampled
        logprobs = assistant_token_logprobs(self.model, input_ids, attention_mask, mask, config.temperature)
        ref_logprobs = None
        if config.beta > 0:
            with torch.no_grad(), self._reference() as reference:
                ref_logprobs = assistant_token_logprobs(reference, input_ids, attention_mask, mask, config.temperature)
        return grpo_loss(
            logprobs,
            batch.old_logprobs[:, 1:].to(device),
            batch.advantages[:, 1:].to(device),
            mask,
            loss_type=config.loss_type,
            epsilon=config.epsilon,
            epsilon_high=config.epsilon_high,
            beta=config.beta,
            ref_logprobs=ref_logprobs,
            importance_sampling_level=config.importance_sampling_level,
            max_completion_length=self.env.max_turns * config.max_new_tokens,  # dr_grpo's constant, fixed for a run
        )

    @property
    def trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    @contextlib.contextmanager
    def _reference(self) -> Iterator[Any]:
        """The reference policy: the frozen copy, or (LoRA) the same model with its adapters switched off."""
        if self.reference_model is not None:
            yield self.reference_model
        else:
            with self.model.disable_adapter():
                yield self.model

    # ----- evaluation: ground truth, never the judge ------------------------------------------------------------------
    def evaluate(self, episodes: int | None = None, temperature: float | None = None) -> dict[str, float]:
        """Success, mean turns, score and valid-turn rate on held-out seeds, one trajectory each."""
        return evaluation_metrics(self.evaluation_groups(episodes, temperature))

    def evaluation_groups(self, episodes: int | None = None, temperature: float | None = None) -> list[TrajectoryGroup]:
        """The held-out episodes `evaluate` measures (the same seeds and sampling every time), for a closer look.
        `temperature`: sample them at another temperature than the training's (a model trained at a higher one, to
        explore, is often used at a lower one); None means the training's."""
        for_inference(self.model)
        seeds = held_out_seeds(episodes or self.config.eval_episodes)
        policy, batch_size = self._policy(seed=12345, temperature=temperature), self.config.per_device_eval_batch_size
        return collect_groups(self.eval_env, policy, seeds, 1, progress=False, batch_size=batch_size)

    def _policy(self, seed: int, temperature: float | None = None) -> HFPolicy:
        config = self.config
        temperature = config.temperature if temperature is None else temperature
        return HFPolicy(self.model, self.tokenizer, temperature, config.top_p, config.max_new_tokens, seed=seed)

    # ----- logs and checkpoints ---------------------------------------------------------------------------------------
    def metrics(self) -> pd.DataFrame:
        """Every logged row (training steps and evaluations) as a DataFrame."""
        return pd.DataFrame(self.history)

    def _log(self, row: dict[str, float], eval_only: bool = False) -> None:
        row = {**row, "eval_only": eval_only}
        _write(self.run_dir / "metrics.jsonl", lambda path: _append_line(path, json.dumps(row)))
        self.history.append(row)

    def _has_eval(self, step: int) -> bool:
        return any(r.get("eval_only") and r["step"] == step for r in self.history)

    def _check_saved_config(self) -> None:
        """A run folder resumes only the run it holds: every setting but `steps` (which may grow) must match."""
        path = self.run_dir / "config.json"
        if path.exists():
            saved = json.loads(path.read_text())
            current = dataclasses.asdict(self.config)
            changed = {k: (saved.get(k), v) for k, v in current.items() if saved.get(k) != v and k != "steps"}
            if changed:
                raise ValueError(f"{self.run_dir} holds a run with another config {changed}; use a new run_dir")

    def _write_config(self) -> None:
        self._check_saved_config()  # again: another process may have started a run in this folder since
        work = self.run_dir / "config.json.tmp"  # then a rename: a crash never leaves half a config
        _write(work, lambda path: path.write_text(json.dumps(dataclasses.asdict(self.config), indent=2) + "\n"))
        os.replace(work, self.run_dir / "config.json")

    def save_checkpoint(self) -> Path:
        """Weights, optimizer, RNG states, step and config, written to a temporary folder then renamed, with the
        SHA-256 of every file (`CHECKSUMS`) written last. A write that fails removes the temporary folder and names
        its file; the checkpoints before it are untouched."""
        folder = self.run_dir / "checkpoints"
        final = folder / f"step-{self.step:06d}"
        work = folder / f".tmp-step-{self.step:06d}"
        shutil.rmtree(work, ignore_errors=True)
        config = json.dumps(dataclasses.asdict(self.config), indent=2) + "\n"
        state = {
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            "step": self.step,
        }
        try:
            work.mkdir(parents=True)
            _write(work / "model", self.model.save_pretrained)
            _write(work / "model", self.tokenizer.save_pretrained)
            _write(work / "trainer_state.pt", lambda path: torch.save(state, path))
            _write(work / "config.json", lambda path: path.write_text(config))
            _write(work / CHECKSUMS, lambda path: path.write_text(json.dumps(_checksums(work), indent=1)))
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)  # half a checkpoint only takes up the space a rerun needs
            raise
        shutil.rmtree(final, ignore_errors=True)
        os.rename(work, final)
        for old in sorted(folder.glob("step-*"))[: -self.config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def _resume(self) -> None:
        """Load the last complete checkpoint, if any, and cut the logs back to the steps it covers."""
        checkpoints = sorted((self.run_dir / "checkpoints").glob("step-*"))
        if checkpoints:
            latest = checkpoints[-1]
            verify_checkpoint(latest, previous=checkpoints[-2] if len(checkpoints) > 1 else None)
            state = torch.load(latest / "trainer_state.pt", weights_only=False)
            load_weights(self.model, latest / "model")
            self.optimizer.load_state_dict(state["optimizer"])
            if state.get("scaler"):  # an empty dict when loss scaling is off
                self.scaler.load_state_dict(state["scaler"])
            torch.set_rng_state(state["torch_rng"])
            random.setstate(state["python_rng"])
            self.step = state["step"]
        path = self.run_dir / "trajectories.jsonl"  # read first: a bad line raises before either log is rewritten
        kept = [g for g in iter_groups(path) if g.metadata.get("step", 0) < self.step] if path.exists() else None
        _truncate_jsonl(self.run_dir / "metrics.jsonl", lambda row: row["step"] < self.step or row["eval_only"])
        if kept is not None:
            _replace(path, lambda work: append_groups(work, kept))
        metrics_path = self.run_dir / "metrics.jsonl"
        self.history = (
            [json.loads(line) for line in metrics_path.read_text().splitlines()] if metrics_path.exists() else []
        )
        # An evaluation row logged with a step after the checkpoint belongs to the lost work: drop it too.
        self.history = [r for r in self.history if r["step"] <= self.step]


def verify_checkpoint(folder: Path, previous: Path | None = None) -> None:
    """Raise `CorruptCheckpoint`, naming the file, if a file of checkpoint `folder` is missing or differs from the
    SHA-256 written with it: a truncated or garbled checkpoint would otherwise load (a flipped byte in the weights
    loads without complaint) and the run would train on from it. `previous`: the checkpoint to fall back on."""
    manifest = folder / CHECKSUMS
    if not manifest.exists():
        warnings.warn(f"{folder} has no {CHECKSUMS} (an older checkpoint): its files cannot be checked", stacklevel=2)
        return
    fallback = f"delete {folder} to resume from {previous}" if previous else f"delete {folder} to start the run over"
    try:
        expected = json.loads(manifest.read_text())
    except ValueError as exc:
        raise CorruptCheckpoint(f"{manifest} is not valid JSON ({exc}); {fallback}") from exc
    for name, checksum in expected.items():
        path = folder / name
        problem = "is missing" if not path.is_file() else None
        if problem is None and _sha256(path) != checksum:
            problem = "does not match the SHA-256 written with it (truncated or garbled)"
        if problem:
            raise CorruptCheckpoint(f"checkpoint file {path} {problem}: refusing to resume from it; {fallback}")


def load_weights(model: Any, folder: Path) -> None:
    """Load saved weights into `model` in place: the LoRA adapter of a peft model, else the full state dict."""
    from peft import PeftModel, set_peft_model_state_dict
    from safetensors.torch import load_file

    if isinstance(model, PeftModel):
        set_peft_model_state_dict(model, load_file(folder / "adapter_model.safetensors"))
        return

    files = sorted(folder.glob("*.safetensors"))
    state = {}
    for file in files:
        state.update(load_file(file))
    missing, unexpected = model.load_state_dict(state, strict=False)
    real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embeddings
    if real_missing or unexpected:
        raise RuntimeError(f"checkpoint {folder} does not match the model: missing {real_missing}, extra {unexpected}")


def evaluation_metrics(groups: list[TrajectoryGroup]) -> dict[str, float]:
    """Ground-truth metrics of evaluation groups (one trajectory each): success, turns, score, valid turns."""
    trajectories = [t for g in groups for t in g.trajectories]
    turns = sum(t.num_turns for t in trajectories)
    n = max(1, len(trajectories))
    return {
        "eval_success": sum(t.outcome.success for t in trajectories) / n,
        "eval_mean_turns": sum(t.num_turns for t in trajectories) / n,
        "eval_score": sum(t.outcome.score for t in trajectories) / n,
        "eval_valid_turn_rate": 1 - sum(len(t.errors) for t in trajectories) / max(1, turns),
    }


def _truncate_jsonl(path: Path, keep: Callable[[dict], bool]) -> None:
    """Rewrite `path` (atomically) with the rows `keep` accepts. A torn last line, what a crash mid-write leaves, is
    dropped with a warning; a bad line anywhere else raises, naming the file and line, and the file stays as it was."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number == len(lines) and not line.endswith("\n"):
                warnings.warn(f"{path}: line {number} is incomplete (an interrupted write); dropped it", stacklevel=3)
                continue
            raise ValueError(
                f"{path}: line {number} is not valid JSON ({exc.msg}); repair or delete that line, then run again"
            ) from exc
    text = "".join(json.dumps(r) + "\n" for r in rows if keep(r))
    _replace(path, lambda work: work.write_text(text))


def _write(path: Path, write: Callable[[Path], Any]) -> None:
    """`write(path)`, with a failure re-raised as an OSError that names `path`: a full disk or a read-only folder
    otherwise often says only `[Errno 28] No space left on device`, or a library's own words, and not where."""
    try:
        write(path)
    except Exception as exc:
        raise OSError(
            f"could not write {path} ({type(exc).__name__}: {exc}). The last complete checkpoint and the logs up to it "
            "are intact: fix the cause (a full disk? a read-only folder?) and run again to resume from there"
        ) from exc


def _append_line(path: Path, line: str) -> None:
    """Append one line and fsync it, so a crash loses at most the line being written."""
    with path.open("a") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


def _replace(path: Path, write: Callable[[Path], Any]) -> None:
    """Rewrite `path` by writing a temporary file beside it and renaming it over `path`: a crash in between leaves
    the old file whole, never half of the new one."""
    work = path.with_name(f".{path.name}.tmp")
    work.unlink(missing_ok=True)
    _write(work, write)
    os.replace(work, path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checksums(folder: Path) -> dict[str, str]:
    """The SHA-256 of every file under `folder`, by path relative to it."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CHECKSUMS)
    return {p.relative_to(folder).as_posix(): _sha256(p) for p in files}


def _present(stats: LossStats) -> dict[str, float]:
    """The loss diagnostics that were computed (KL only with a reference), as floats."""
    return {name: float(value) for name, value in dataclasses.asdict(stats).items() if value is not None}


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
