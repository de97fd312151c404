"""The training loop end to end on the small tiny model: tensors, a step, checkpoints, resume. (Faults injected into
training, such as NaNs, a full disk and SIGKILL, are in tests/reliability/.)"""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.grpo.loss import token_logprobs
from agentic_rl_lab.grpo.tensors import NotTrainable, collate, trajectory_to_sequence
from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer
from agentic_rl_lab.judge import ReferenceJudge
from agentic_rl_lab.policies.hf import HFPolicy
from agentic_rl_lab.rollout import collect_group
from agentic_rl_lab.trajectory import Trajectory, load_groups


@pytest.fixture
def model_and_tokenizer(small_model_dir):
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(small_model_dir)
    model = AutoModelForCausalLM.from_pretrained(small_model_dir)
    return model, tokenizer


def sampled_group(model, tokenizer, seed=3, n=4):
    policy = HFPolicy(model.eval(), tokenizer, temperature=1.0, max_new_tokens=32, seed=0)
    return collect_group(GuessNumber(), policy, seed=seed, num_generations=n, progress=False)


def test_the_training_sequence_holds_the_sampled_ids_and_the_mask_covers_only_them(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    group = sampled_group(model, tokenizer)
    for trajectory in group.trajectories:
        sequence = trajectory_to_sequence(trajectory, tokenizer)
        assistant = [t for t, m in zip(sequence.input_ids, sequence.assistant_mask) if m]
        assert assistant == [i for c in trajectory.completions for i in c.token_ids]
        # The context of the first turn is exactly the prompt the policy read.
        first = trajectory.completions[0]
        prompt = HFPolicy(model, tokenizer).prompt_ids(trajectory.messages[: first.message_index], trajectory.tools)
        assert sequence.input_ids[: len(prompt)] == prompt
        assert sum(sequence.assistant_mask[: len(prompt)]) == 0
        decoded = tokenizer.decode([t for t, m in zip(sequence.input_ids, sequence.assistant_mask) if not m])
        assert decoded.startswith("<|im_start|>system")
        # Everything else up to the last turn is outside the mask: the goal and every observation (a tool result,
        # or the error the environment sends back as a user message when a turn has no valid tool call).
        last_turn = trajectory.completions[-1].message_index
        for message in trajectory.messages[:last_turn]:
            if message["role"] != "assistant":
                assert message["content"] in decoded


def test_recomputed_logprobs_match_the_sampling_logprobs_so_the_first_ratio_is_one(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    group = sampled_group(model, tokenizer)
    sequences = [trajectory_to_sequence(t, tokenizer) for t in group.trajectories]
    batch = collate(sequences, [[0.0]] * len(sequences), tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    new = token_logprobs(logits, batch.input_ids)
    mask = batch.assistant_mask[:, 1:].bool()
    difference = (new - batch.old_logprobs[:, 1:]).abs()[mask]
    assert difference.numel() > 0
    assert float(difference.max()) < 1e-3


@pytest.mark.parametrize("temperature", [None, 0.5])
def test_the_held_out_evaluation_samples_at_the_temperature_it_is_given(model_and_tokenizer, tmp_path, temperature):
    """A model trained at a higher temperature, to explore, is evaluated at a lower one (benchmarks/inbox_learning.py):
    the log-probs each evaluation recorded are those of its own sampling distribution."""
    model, tokenizer = model_and_tokenizer
    trainer = GRPOTrainer(small_config(), model, tokenizer, GuessNumber(), Spread(), tmp_path, progress=False)
    groups = trainer.evaluation_groups(3, temperature=temperature)
    sequences = [trajectory_to_sequence(t, tokenizer) for g in groups for t in g.trajectories]
    batch = collate(sequences, [[0.0]] * len(sequences), tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    mask = batch.assistant_mask[:, 1:].bool()
    for sampled_at, matches in ((temperature or 1.0, True), (0.25, False)):
        recomputed = token_logprobs(logits, batch.input_ids, temperature=sampled_at)
        assert (float((recomputed - batch.old_logprobs[:, 1:]).abs()[mask].max()) < 1e-3) is matches


def test_a_trajectory_without_token_ids_is_not_trainable():
    trajectory = Trajectory(env="guess_number", seed=0, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(NotTrainable, match="judged and viewed"):
        trajectory_to_sequence(trajectory, None)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"num_generations": 1}, "num_generations must be an integer >= 2"),
        ({"loss_type": "ppo"}, "unknown loss_type"),
        ({"scale_rewards": "batchwise"}, "unknown scale_rewards"),
        ({"credit_assignment": "token"}, "unknown credit_assignment"),
        ({"per_device_train_batch_size": 0}, "per_device_train_batch_size must be an integer >= 1"),
        ({"gradient_accumulation_steps": 2.5}, "gradient_accumulation_steps must be an integer"),
        ({"learning_rate": float("nan")}, "learning_rate must be positive"),
        ({"temperature": 0.0}, "temperature must be positive"),
        ({"beta": -0.1}, "beta must be >= 0"),
        ({"epsilon": -0.2}, "epsilon and epsilon_high must be >= 0"),
        ({"importance_sampling_level": "sequence", "loss_type": "cispo"}, "does not combine"),
        ({"top_p": 0.0}, "top_p must be in"),
    ],
)
def test_a_config_that_cannot_train_is_refused_before_any_rollout(setting, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**setting)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--num-generations", "1"], "^train: num_generations must be an integer >= 2"),
        (["--judge-noise", "-1"], "^train: noise is a standard deviation"),
        (["--model-dir", "./no-such-model"], "^train: no model directory at ./no-such-model"),
        (["--judge", "relative"], "^train: no judge model given"),
    ],
)
def test_the_train_command_reports_a_bad_setting_in_one_line(tmp_path, monkeypatch, flags, message):
    """Before the model loads (minutes for a Hub model), and without leaving a run folder behind."""
    from agentic_rl_lab.__main__ import main

    monkeypatch.delenv("AGENTIC_RL_LAB_JUDGE_MODEL", raising=False)
    monkeypatch.setattr("agentic_rl_lab.tiny_judge.EMBEDDED_JUDGE_DIR", tmp_path / "no-tiny-judge")
    for loader in ("_load_with_transformers", "_load_with_unsloth"):
        monkeypatch.setattr(f"agentic_rl_lab.models.{loader}", lambda *a, **k: pytest.fail("the model was loaded"))
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit, match=message):
        main(["train", *flags, "--run-dir", str(run_dir)])
    assert not run_dir.exists()


def test_the_train_command_refuses_to_resume_a_run_with_other_settings(tmp_path):
    from agentic_rl_lab.__main__ import main

    common = ["train", "--run-dir", str(tmp_path), "--steps", "0", "--eval-episodes", "2"]
    main(common)
    with pytest.raises(SystemExit, match=r"^train: .* holds a run with another config .*'loss_type'"):
        main([*common, "--loss-type", "grpo"])


@pytest.mark.parametrize("flags", [["--env", "nope"], ["--tier", "nope"]])
def test_the_train_command_names_the_choices_for_an_unknown_name(flags, capsys):
    from agentic_rl_lab.__main__ import main

    with pytest.raises(SystemExit):
        main(["train", *flags])
    assert "invalid choice: 'nope' (choose from" in capsys.readouterr().err


def small_config(**overrides):
    base = dict(
        steps=2,
        groups_per_step=2,
        num_generations=4,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        max_new_tokens=32,
        eval_every=2,
        eval_episodes=8,
        save_every=1,
        learning_rate=1e-3,
    )
    return GRPOConfig(**{**base, **overrides})


def test_a_training_step_changes_the_weights_and_logs_the_diagnostics(model_and_tokenizer, tmp_path):
    model, tokenizer = model_and_tokenizer
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = GRPOTrainer(small_config(), model, tokenizer, GuessNumber(), Spread(), tmp_path, progress=False)
    metrics = trainer.train()
    trained = metrics[~metrics["eval_only"]]
    assert list(trained["step"]) == [0, 1]
    for column in [
        "reward_mean",
        "reward_std",
        "zero_advantage_groups",
        "clip_fraction",
        "approx_kl",
        "loss",
        "seconds_rollout",
        "seconds_judge",
        "seconds_update",
        "judge_calls",
        "eval_success",
    ]:
        assert column in metrics.columns, column
    assert (trained["optimizer_steps"] > 0).any()
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3  # the evaluation before training, then two steps
    assert [g.metadata["step"] for g in load_groups(tmp_path / "trajectories.jsonl")] == [0, 0, 1, 1]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000001", "step-000002"]


def test_a_group_whose_rewards_are_equal_contributes_no_update(model_and_tokenizer, tmp_path):
    model, tokenizer = model_and_tokenizer
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = GRPOTrainer(
        small_config(steps=1, eval_every=0), model, tokenizer, GuessNumber(), Flat(), tmp_path, progress=False
    )
    row = trainer.train().iloc[0]
    assert row["zero_advantage_groups"] == 2 and row["skipped_update"] == 1
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_turn_credit_gives_each_turn_the_tasks_reward_and_needs_a_task_that_has_one(model_and_tokenizer, tmp_path):
    from agentic_rl_lab.envs import FogMaze
    from agentic_rl_lab.envs.guess_number import consistent_guesses

    model, tokenizer = model_and_tokenizer
    config = small_config(steps=1, eval_every=0, credit_assignment="turn")
    GRPOTrainer(config, model, tokenizer, GuessNumber(), Flat(), tmp_path / "guess", progress=False).train()
    groups = load_groups(tmp_path / "guess" / "trajectories.jsonl")
    for trajectory in (t for g in groups for t in g.trajectories):
        assert trajectory.metadata["turn_rewards"] == consistent_guesses(trajectory.messages)
        assert len(trajectory.metadata["turn_rewards"]) == trajectory.num_turns
    with pytest.raises(ValueError, match="credit_assignment='turn' needs a task that rewards single turns; fog_maze"):
        GRPOTrainer(config, model, tokenizer, FogMaze(), Flat(), tmp_path / "maze", progress=False)


class Flat(ReferenceJudge):
    """The same reward for every trajectory: the outcome carries no signal, only the turns can."""

    def score_groups(self, groups, progress=True):
        for group in groups:
            for trajectory in group.trajectories:
                trajectory.reward = 0.5
        return list(groups)


class Spread(ReferenceJudge):
    """Distinct rewards within every group, so each step has a gradient to apply (or to refuse)."""

    def score_groups(self, groups, progress=True):
        for group in groups:
            for member, trajectory in enumerate(group.trajectories):
                trajectory.reward = member / len(group.trajectories)
        return list(groups)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "cispo"])
def test_accumulated_micro_batches_give_the_gradient_of_one_big_batch(model_and_tokenizer, tmp_path, loss_type):
    """One optimizer step over 4 trajectories, as one micro-batch or as micro-batches of 3 and 1, which differ in
    both sequence and token counts, so weighting them by the wrong share (sequences for dapo, tokens for grpo) would
    show. The gradient is read where the optimizer would step."""
    model, tokenizer = model_and_tokenizer
    group = ReferenceJudge().score(sampled_group(model, tokenizer, n=4))
    for member, trajectory in enumerate(group.trajectories):
        trajectory.reward = [1.0, 0.1, 0.5, 0.0][member]

    def gradient(per_device_train_batch_size, gradient_accumulation_steps, run_dir):
        config = small_config(
            loss_type=loss_type, beta=0.04, max_grad_norm=1e9, per_device_train_batch_size=per_device_train_batch_size,
            gradient_accumulation_steps=gradient_accumulation_steps,
        )  # fmt: skip
        trainer = GRPOTrainer(config, model, tokenizer, GuessNumber(), Spread(), run_dir, progress=False)
        seen, taken = [], []
        original_loss = trainer.loss
        trainer.loss = lambda batch: seen.append(batch) or original_loss(batch)
        trainer.optimizer.step = lambda: taken.append(torch.cat([p.grad.flatten() for p in trainer.trainable]))
        assert trainer.update([group])["optimizer_steps"] == 1
        return taken[0], seen

    one_batch, _ = gradient(4, 1, tmp_path / "one")
    accumulated, micro_batches = gradient(3, 2, tmp_path / "two")
    sequences = [batch.input_ids.shape[0] for batch in micro_batches]
    tokens = [int(batch.assistant_mask.sum()) for batch in micro_batches]
    assert sequences == [3, 1] and tokens[1] * 3 != tokens[0], "the token share differs from the sequence share"
    assert one_batch.abs().max() > 1e-4
    assert torch.allclose(accumulated, one_batch, rtol=1e-4, atol=1e-7)


def test_a_lora_run_resumes_with_its_trained_adapters_and_optimizer_state(small_model_dir, tmp_path):
    """Every tier trains LoRA adapters: a checkpoint holds the adapter alone, and resuming puts it back."""
    from agentic_rl_lab.models import LoraSettings, attach_lora

    def fresh_model():
        torch.manual_seed(0)
        return attach_lora(AutoModelForCausalLM.from_pretrained(small_model_dir), LoraSettings(r=4))

    tokenizer = AutoTokenizer.from_pretrained(small_model_dir)
    first = fresh_model()
    config = small_config(eval_every=0, beta=0.04)
    GRPOTrainer(config, first, tokenizer, GuessNumber(), Spread(), tmp_path, progress=False).train()
    trained = {k: v.clone() for k, v in first.state_dict().items() if "lora_" in k}
    assert any(v.abs().sum() > 0 for k, v in trained.items() if "lora_B" in k), "the adapters moved off zero"
    assert (tmp_path / "checkpoints" / "step-000002" / "model" / "adapter_model.safetensors").exists()

    second = fresh_model()
    resumed = GRPOTrainer(
        small_config(eval_every=0, beta=0.04, steps=3), second, tokenizer, GuessNumber(), Spread(), tmp_path,
        progress=False,
    )  # fmt: skip
    resumed._resume()
    assert resumed.step == 2 and resumed.optimizer.state_dict()["state"], "the step and Adam's moments came back"
    assert all(torch.equal(trained[k], v) for k, v in second.state_dict().items() if "lora_" in k)
    resumed.train()
    assert [r["step"] for r in resumed.history if not r["eval_only"]] == [0, 1, 2]


def test_an_aborted_optimizer_step_leaves_no_trace_in_the_logged_loss(model_and_tokenizer, tmp_path):
    """Two optimizer steps of two micro-batches each; the second micro-batch of the first step is NaN. The logged
    loss is the mean over the second step's micro-batches alone."""
    model, tokenizer = model_and_tokenizer
    group = Spread().score_groups([sampled_group(model, tokenizer, n=8)])[0]
    config = small_config(per_device_train_batch_size=2, gradient_accumulation_steps=2)
    trainer = GRPOTrainer(config, model, tokenizer, GuessNumber(), Spread(), tmp_path, progress=False)
    original, losses = trainer.loss, []

    def second_is_nan(batch):
        loss, stats = original(batch)
        losses.append(float(loss.detach()))
        return (loss * float("nan") if len(losses) == 2 else loss), stats

    trainer.loss = second_is_nan
    row = trainer.update([group])
    assert row["optimizer_steps"] == 1 and row["skipped_nonfinite"] == 1
    assert len(losses) == 4
    assert row["loss"] == pytest.approx((losses[2] + losses[3]) / 2, rel=1e-6)


def test_float16_training_scales_the_loss_and_skips_an_overflowing_step(small_model_dir, tmp_path):
    """A T4 has no bfloat16. In float16 the trainer multiplies the loss by the scaler's factor before backward;
    a step whose gradients overflow is skipped, counted, and the factor halves."""
    from agentic_rl_lab.models import LoraSettings, attach_lora

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(small_model_dir)
    model = attach_lora(AutoModelForCausalLM.from_pretrained(small_model_dir, dtype=torch.float16), LoraSettings(r=4))
    assert model.get_input_embeddings().weight.dtype == torch.float16
    config = small_config(per_device_train_batch_size=8)
    trainer = GRPOTrainer(config, model, tokenizer, GuessNumber(), Spread(), tmp_path, progress=False)
    assert trainer.scaler.is_enabled() and trainer.scaler.get_scale() == 2.0**16
    group = Spread().score_groups([sampled_group(model, tokenizer)])[0]

    def adapters():
        return [p.detach().clone() for p in trainer.trainable]

    before = adapters()
    row = trainer.update([group])
    assert row["optimizer_steps"] == 1 and row["skipped_nonfinite"] == 0 and row["loss_scale"] == 2.0**16
    after = adapters()
    assert any(not torch.equal(a, b) for a, b in zip(before, after)), "a normal step trains in float16"

    original = trainer.loss
    trainer.loss = lambda batch: (lambda loss, stats: (loss * 1e6, stats))(*original(batch))  # scaled: > 65,504
    row = trainer.update([group])
    assert row["optimizer_steps"] == 0 and row["skipped_nonfinite"] == 1 and row["loss_scale"] == 2.0**15
    assert all(torch.equal(a, b) for a, b in zip(after, adapters())), "the overflowing step changed nothing"


def test_float16_full_fine_tuning_is_refused_with_the_reason(small_model_dir, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(small_model_dir, dtype=torch.float16)
    tokenizer = AutoTokenizer.from_pretrained(small_model_dir)
    with pytest.raises(ValueError, match="keeps the weights it trains in float32"):
        GRPOTrainer(small_config(), model, tokenizer, GuessNumber(), Spread(), tmp_path, progress=False)


def test_the_train_command_picks_the_tiers_judge_and_says_which(monkeypatch, small_model_dir):
    """`--judge relative`: an endpoint when one is configured; else, on a GPU tier, the policy's own base model
    (adapters off), batched over the step's groups; on a CPU tier the tiny judge, and without it a refusal before
    any model loads."""
    from agentic_rl_lab.envs import InboxSearch
    from agentic_rl_lab.judge import HFJudgeBackend, RelativeJudge, rubric_for
    from agentic_rl_lab.models import load_model
    from agentic_rl_lab.rewards import judge_source, make_judge

    monkeypatch.delenv("AGENTIC_RL_LAB_JUDGE_MODEL", raising=False)
    monkeypatch.setattr("agentic_rl_lab.tiny_judge.EMBEDDED_JUDGE_DIR", small_model_dir / "no-tiny-judge")
    assert judge_source("reference", "cpu-tiny") == "reference"
    assert judge_source("relative", "t4") == judge_source("absolute", "a100") == "self"
    with pytest.raises(ValueError, match="no judge model given for --judge relative on tier cpu-tiny.*tiny-judge"):
        judge_source("relative", "cpu-tiny")
    monkeypatch.setattr("agentic_rl_lab.tiny_judge.EMBEDDED_JUDGE_DIR", small_model_dir)  # a model stands in for it
    assert judge_source("relative", "cpu-tiny") == judge_source("absolute", "cpu-small") == "tiny"
    tiny, said = make_judge("tiny", "relative", 0.0, 0, loaded=None, batch_size=4)
    assert isinstance(tiny, RelativeJudge) and tiny.backend.max_concurrency == 4 and "tiny judge" in said
    monkeypatch.setenv("AGENTIC_RL_LAB_JUDGE_MODEL", "judge-model")
    assert judge_source("relative", "cpu-tiny") == judge_source("relative", "t4") == "endpoint"

    loaded = load_model("cpu-tiny", model_name=small_model_dir)
    judge, said = make_judge("self", "relative", 0.0, 0, loaded=loaded, batch_size=8)
    assert isinstance(judge, RelativeJudge) and isinstance(judge.backend, HFJudgeBackend)
    assert judge.backend.max_concurrency == judge.max_concurrency == 8 and judge.backend.disable_adapters
    assert said.startswith("the relative judge: the policy's own base model")
    inbox = make_judge("self", "relative", 0.0, 0, loaded, 8, rubric_for(InboxSearch))[0]
    assert inbox.rubric.startswith(judge.rubric) and "I could not find it." in inbox.rubric
