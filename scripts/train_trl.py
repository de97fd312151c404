"""Train a lab environment with TRL's `GRPOTrainer`, rewarded by a lab judge: the road past one GPU.

    python scripts/train_trl.py --env guess_number --model Qwen/Qwen2.5-3B-Instruct --judge reference
    accelerate launch --num_processes 4 scripts/train_trl.py --env inbox_search --model Qwen/Qwen2.5-7B-Instruct \\
        --judge relative --judge-model gpt-4.1-mini

The environment is played by `agentic_rl_lab.integrations.trl.make_rollout_func` (the lab's episodes, token in /
token out, tool results masked out of the loss) and judged by `judge_reward` (one call per group). Under
`accelerate launch`, each process plays its share of the scenarios with its own copy of the model and TRL
averages the gradients. `--judge relative` asks an OpenAI-compatible endpoint (the key from the environment or
Colab Secrets, `OPENAI_API_KEY` unless `--judge-key-env`); `--judge reference` is the ground truth, the controlled
experiment.

Tested: two steps on a CPU with cpu-tiny (`tests/integrations/test_trl.py`, TRL 1.16). Not yet run on GPUs: the
multi-GPU command above is untested.
"""

from __future__ import annotations

import argparse

from agentic_rl_lab.envs import ENVIRONMENTS, make
from agentic_rl_lab.integrations.trl import judge_reward, make_rollout_func, scenario_dataset
from agentic_rl_lab.judge import OpenAIJudgeBackend, ReferenceJudge, RelativeJudge


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=sorted(ENVIRONMENTS), default="guess_number")
    parser.add_argument("--model", required=True, help="a Hub id or a local folder (a chat model with tool calls)")
    parser.add_argument("--judge", choices=["reference", "relative"], default="reference")
    parser.add_argument("--judge-model", default=None, help="the relative judge's model at the endpoint")
    parser.add_argument("--judge-base-url", default=None, help="an OpenAI-compatible endpoint (default: OpenAI)")
    parser.add_argument("--judge-key-env", default="OPENAI_API_KEY")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--scenarios-per-step", type=int, default=2, help="per process")
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--max-new-tokens", type=int, default=256, help="per turn")
    parser.add_argument("--output-dir", default="runs/trl")
    args = parser.parse_args()

    env = make(args.env)
    if args.judge == "relative":
        if not args.judge_model:
            parser.error("--judge relative needs --judge-model")
        backend = OpenAIJudgeBackend(args.judge_model, base_url=args.judge_base_url, api_key_env=args.judge_key_env)
        judge = RelativeJudge(backend, on_failure="skip")
    else:
        judge = ReferenceJudge()
    cuda = torch.cuda.is_available()  # on a CPU (a smoke test with cpu-tiny): float32
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16 if cuda else torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=judge_reward(judge),
        train_dataset=scenario_dataset(env, range(100_000)),
        rollout_func=make_rollout_func(env, max_new_tokens=args.max_new_tokens),
        args=GRPOConfig(
            output_dir=args.output_dir,
            max_steps=args.steps,
            per_device_train_batch_size=args.scenarios_per_step * args.num_generations,
            num_generations=args.num_generations,
            learning_rate=args.learning_rate,
            loss_type="dapo",
            beta=0.0,
            logging_steps=1,
            save_steps=25,
            report_to="none",
            bf16=cuda,
            use_cpu=not cuda,
        ),
    )
    trainer.train()


if __name__ == "__main__":
    main()
