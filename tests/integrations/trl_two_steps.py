"""Two steps of TRL's GRPOTrainer on cpu-tiny, playing a lab environment and rewarded by a lab judge.

Run by `test_trl.py` in an environment with TRL >= 1.16 (TRL 1.15 cannot train on a CPU), as
`python trl_two_steps.py OUT_DIR`; prints one JSON line with what the test checks.
"""

from __future__ import annotations

import json
import re
import sys
import warnings

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from agentic_rl_lab.envs import make
from agentic_rl_lab.integrations.trl import judge_reward, make_rollout_func, scenario_dataset
from agentic_rl_lab.judge import RelativeJudge, ScriptedBackend
from agentic_rl_lab.tiny import default_model_path

warnings.simplefilter("ignore")
torch.manual_seed(0)
BLOCK = re.compile(r'<trajectory id="([^"]+)">\n(.*?)\n</trajectory>', re.DOTALL)


def fewer_turns_win(messages: list[dict]) -> str:
    """A scripted relative judge: a found number scores 1 / (its last turn number), anything else 0."""
    user = messages[1]["content"]
    scores = []
    for id_, block in BLOCK.findall(user):
        turns = [int(n) for n in re.findall(r"turn (\d+)\]", block)] or [1]
        score = 1 / max(turns) if "correct" in block else 0.0
        scores.append({"trajectory_id": id_, "explanation": f"{max(turns)} turns", "score": round(score, 3)})
    return json.dumps({"scores": scores})


env = make("guess_number")
path = default_model_path()
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
tokenizer = AutoTokenizer.from_pretrained(path)
before = {name: p.detach().clone() for name, p in model.named_parameters()}
backend = ScriptedBackend(fewer_turns_win)
rollout = make_rollout_func(env, max_new_tokens=24)
seen: list[dict] = []


def recording_rollout(prompts, trainer):
    out = rollout(prompts, trainer)
    masks = out["env_mask"]
    aligned = all(len(c) == len(lp) == len(m) for c, lp, m in zip(out["completion_ids"], out["logprobs"], masks))
    seen.append({"prompts": len(prompts), "completions": len(out["completion_ids"]), "aligned": aligned,
                 "masked": sum(m.count(0) for m in masks), "sampled": sum(m.count(1) for m in masks)})  # fmt: skip
    return out


trainer = GRPOTrainer(
    model=model,
    processing_class=tokenizer,
    reward_funcs=judge_reward(RelativeJudge(backend, cache=None)),
    train_dataset=scenario_dataset(env, range(100)),
    rollout_func=recording_rollout,
    args=GRPOConfig(
        output_dir=sys.argv[1],
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=2,
        learning_rate=1e-4,
        max_completion_length=512,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        loss_type="dapo",
        beta=0.0,
        temperature=0.7,
    ),  # fmt: skip
)
trainer.train()
changed = sum(not torch.equal(before[name], p.detach()) for name, p in model.named_parameters())
logs = [entry for entry in trainer.state.log_history if "loss" in entry]
print(json.dumps({
    "global_step": trainer.state.global_step, "rollouts": seen, "judge_calls": len(backend.requests),
    "changed_parameters": changed, "parameters": len(before),
    "rewards": [entry.get("rewards/relative_judge/mean") for entry in logs],
    "losses": [entry["loss"] for entry in logs]
}))  # fmt: skip
