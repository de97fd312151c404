"""The lab's environments and judges under TRL's own GRPOTrainer (`agentic_rl_lab.integrations.trl`).

TRL trains on a CPU from 1.16; the test environment holds 1.15 (Unsloth's pin), so the two steps run in the second
environment `scripts/lab.py test` keeps (`.venv-trl`, passed as `LAB_TRL_PYTHON`).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agentic_rl_lab.envs import make
from agentic_rl_lab.integrations.trl import _runs, read_scenario_key, scenario_key, token_fields
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.rollout import collect_group

ROOT = Path(__file__).resolve().parents[2]


def trl_python() -> str:
    python = os.environ.get("LAB_TRL_PYTHON") or str(ROOT / ".venv-trl" / "bin" / "python")
    if not Path(python).exists():
        message = f"no environment with TRL >= 1.16 at {python}: `python3 scripts/lab.py test` makes one"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return python


def test_two_trl_steps_play_a_lab_environment_and_take_the_lab_judges_rewards(tmp_path: Path) -> None:
    script = Path(__file__).with_name("trl_two_steps.py")
    result = subprocess.run([trl_python(), str(script), str(tmp_path)], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["global_step"] == 2
    for rollout in report["rollouts"]:
        assert rollout["prompts"] == rollout["completions"] == 8, "one trajectory per prompt TRL passed"
        assert rollout["aligned"] and rollout["sampled"] > 0 and rollout["masked"] > 0, "tool tokens are masked"
    assert report["judge_calls"] == 2 * len(report["rollouts"]), "one judge call per group of 4"
    assert report["changed_parameters"] > 0, "TRL's update moved the weights"
    assert all(r is not None and 0 <= r <= 1 for r in report["rewards"]), "logged as training steps, judged"


def test_a_trajectory_becomes_trls_token_lists_with_the_tool_results_masked() -> None:
    from agentic_rl_lab.models import load_model
    from agentic_rl_lab.policies.hf import HFPolicy

    env = make("guess_number")
    loaded = load_model("cpu-tiny", add_lora=False)
    policy = HFPolicy(loaded.model, loaded.tokenizer, max_new_tokens=24, seed=0)
    trajectory = collect_group(env, policy, seed=3, num_generations=1, progress=False).trajectories[0]
    prompt_ids, completion_ids, logprobs, env_mask = token_fields(trajectory, loaded.tokenizer)
    sampled = [ids for c in trajectory.completions for ids in c.token_ids]
    assert [t for t, m in zip(completion_ids, env_mask) if m] == sampled, "exactly the sampled ids, in order"
    assert [lp for lp, m in zip(logprobs, env_mask) if m] == [lp for c in trajectory.completions for lp in c.logprobs]
    assert env_mask[0] == 1 and (0 in env_mask) == (trajectory.num_turns > 1), "tool replies between the turns"
    prompt = loaded.tokenizer.decode(prompt_ids)
    assert prompt.endswith("<|im_start|>assistant\n") and "guess" in prompt


def test_scenario_keys_round_trip_and_equal_keys_form_one_group() -> None:
    env = make("guess_number")
    keys = [read_scenario_key(scenario_key(env, seed)) for seed in (5, 5, 5, 9, 9, 5)]
    assert _runs(keys) == [(("guess_number", 5), 3), (("guess_number", 9), 2), (("guess_number", 5), 1)]
    with pytest.raises(ValueError, match="scenario_dataset"):
        read_scenario_key([{"role": "user", "content": "What is 2 + 2?"}])


def test_a_scripted_group_has_the_fields_trl_needs() -> None:
    env = make("guess_number")
    group = collect_group(env, ScriptedPolicy(env, "expert"), seed=1, num_generations=2, progress=False)
    assert not group.trajectories[0].completions, "a scripted policy samples no tokens"
    with pytest.raises(ValueError, match="no sampled token ids"):
        token_fields(group.trajectories[0], None)


def test_the_train_trl_script_takes_a_step_on_cpu_tiny(tmp_path: Path) -> None:
    from agentic_rl_lab.tiny import default_model_path

    command = [trl_python(), str(ROOT / "scripts" / "train_trl.py"), "--model", str(default_model_path()),
               "--steps", "1", "--num-generations", "2", "--scenarios-per-step", "1", "--max-new-tokens", "16",
               "--output-dir", str(tmp_path)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'train_loss'" in result.stdout + result.stderr and (tmp_path / "checkpoint-1").is_dir()
