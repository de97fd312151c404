"""The command line: `python -m agentic_rl_lab --help` lists the subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def demo(args: argparse.Namespace) -> None:
    """The CPU end-to-end demo, in two parts.

    1. Every environment played by its scripted policies: groups of trajectories stored as JSONL and compared with
       the ground truth (and `guess_number`'s expert with the binary-search optimum).
    2. GRPO on the cpu-tiny model: rollout -> reference judge -> update for `--train-steps` steps on
       `guess_number`, with held-out evaluation before and after, into a fresh run folder (`OUT/grpo`).
    """
    import pandas as pd

    from agentic_rl_lab.envs import ENVIRONMENTS
    from agentic_rl_lab.envs.guess_number import optimal_mean_guesses
    from agentic_rl_lab.policies import ScriptedPolicy
    from agentic_rl_lab.rollout import collect_groups
    from agentic_rl_lab.trajectory import append_groups, to_dataframe

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, env_class in ENVIRONMENTS.items():
        env = env_class()
        for strategy in env.strategies:
            policy = ScriptedPolicy(env, strategy, seed=args.seed)
            seeds = range(args.seed, args.seed + args.groups)
            groups = collect_groups(env, policy, seeds, args.num_generations, progress=not args.quiet)
            path = out / f"{name}-{strategy}.jsonl"
            path.unlink(missing_ok=True)
            append_groups(path, groups)
            frame = to_dataframe(groups)
            rows.append(
                {
                    "env": name,
                    "policy": strategy,
                    "trajectories": len(frame),
                    "success": frame["success"].mean(),
                    "mean_turns": frame["turns"].mean(),
                    "mean_score": frame["score"].mean(),
                    "invalid_actions/turn": frame["invalid_actions"].sum() / frame["turns"].sum(),
                    "saved_to": str(path),
                }
            )
    summary = pd.DataFrame(rows)
    print("\nScripted baselines on every environment (ground-truth outcomes):")
    print(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    expert = summary[(summary.env == "guess_number") & (summary.policy == "expert")]
    if not expert.empty:
        print(
            f"\nguess_number: the expert (binary search) needs {expert.mean_turns.iloc[0]:.2f} guesses on average; "
            f"the information-theoretic optimum on 1..100 is {optimal_mean_guesses(1, 100):.2f}."
        )
    if args.train_steps > 0:
        import shutil

        run_dir = out / "grpo"
        shutil.rmtree(run_dir, ignore_errors=True)  # the demo always shows a fresh run (`train` resumes instead)
        print(f"\nGRPO on the cpu-tiny model, {args.train_steps} steps (guess_number, reference judge):")
        train(
            argparse.Namespace(
                env="guess_number",
                tier="cpu-tiny",
                model_dir=None,
                judge="reference",
                judge_noise=0.0,
                run_dir=str(run_dir),
                steps=args.train_steps,
                loss_type="grpo",  # with the KL term: the settings benchmarks/grpo_learning.py measured to learn
                beta=0.04,  # without drifting (TRL's defaults, dapo and no KL, lost success on cpu-tiny)
                eval_every=args.train_steps,
                eval_episodes=args.eval_episodes,
                seed=args.seed,
            )
        )


def envs(args: argparse.Namespace) -> None:
    """List the environments, their tools and their scripted strategies."""
    from agentic_rl_lab.envs import ENVIRONMENTS

    for name, env_class in ENVIRONMENTS.items():
        env = env_class()
        tools = ", ".join(tool.name for tool in env.tools)
        print(f"{name}: tools [{tools}], max_turns {env.max_turns}, strategies {sorted(env.strategies)}")
        print(f"    {(env_class.__doc__ or '').strip().splitlines()[0]}")


def play(args: argparse.Namespace) -> None:
    """Play an environment by hand in the terminal: type `tool {json arguments}`, e.g. `guess {"n": 50}`."""
    import json

    from agentic_rl_lab.envs import make, tool_call_message

    env = make(args.env)
    for message in env.reset(args.seed):
        print(f"[{message['role']}] {message['content']}")
    print(f"tools: {json.dumps(env.tool_schemas)}\n(type: TOOL_NAME {{json arguments}}, or plain text; Ctrl-D quits)")
    while not env.done:
        try:
            line = input("> ").strip()
        except EOFError:
            break
        name, _, raw = line.partition(" ")
        is_call = raw.lstrip().startswith("{") or (not raw and name in {tool.name for tool in env.tools})
        action = tool_call_message(name, {}) if is_call else line  # anything else is plain text
        if is_call:
            action["tool_calls"][0]["function"]["arguments"] = raw or "{}"  # exactly what was typed
        result = env.step(action)
        for message in result.observation:
            print(f"[{message['role']}] {message['content']}")
    print(f"outcome (hidden until now): {env.outcome()}\nhidden state: {env.hidden_state()}")


def build_tiny_judge(args: argparse.Namespace) -> None:
    """Build (or find in the cache) the tiny judge model."""
    from agentic_rl_lab import tiny_judge

    tiny_judge.main(args.rest)


def warm_start(args: argparse.Namespace) -> None:
    """Warm-start cpu-tiny on an environment with its committed recipe (or find it in the cache), and optionally
    export it in bfloat16."""
    from agentic_rl_lab import warm_start
    from agentic_rl_lab.tiny import export_model

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    recipe = warm_start.RECIPES[args.env]
    path = warm_start.warm_start(recipe.envs(), recipe.config)
    info = warm_start.load_info(path)
    print(f"cpu-tiny warm-started on {args.env} ({info['seconds']}, copy accuracy {info['copy_accuracy']}): {path}")
    if args.export:
        print(f"exported in bfloat16 to {export_model(path, args.export, info_file=warm_start.INFO_FILE)}")


def make_inbox(args: argparse.Namespace) -> None:
    """Regenerate the inbox_search data (deterministic: the committed files come out byte for byte)."""
    from agentic_rl_lab.envs import inbox_data

    inbox_data.main(["--out", args.out])


def build_tiny(args: argparse.Namespace) -> None:
    """Build (or find in the cache) the cpu-tiny model."""
    from agentic_rl_lab import tiny

    tiny.main(args.rest)


def train(args: argparse.Namespace) -> None:
    """GRPO on an environment: rollout -> judge -> update, with checkpoints, a metrics log and plots in a run folder.

    Re-running the same command resumes from the last checkpoint."""
    import dataclasses

    import torch

    from agentic_rl_lab.envs import ENVIRONMENTS, make
    from agentic_rl_lab.envs.guess_number import optimal_mean_guesses
    from agentic_rl_lab.grpo.trainer import GRPOConfig, GRPOTrainer
    from agentic_rl_lab.judge.prompt import rubric_for
    from agentic_rl_lab.models import PROFILES, choose_tier, load_model
    from agentic_rl_lab.plots import plot_dashboard
    from agentic_rl_lab.rewards import judge_source, make_judge

    torch.manual_seed(args.seed)
    profile = PROFILES[choose_tier(args.tier)[0]]
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    given = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    tier_defaults = profile.training  # sampling, learning rate and the batch sizes that fit the tier
    try:  # a bad setting ends here in one line, before the model loads (minutes for a Hub model)
        config = GRPOConfig(**{**tier_defaults, **given})  # the tier's sampling and learning rate, unless a flag says
        source = judge_source(args.judge, profile.name)
        judge_settings = (source, args.judge, args.judge_noise, args.seed)
        rubric = rubric_for(ENVIRONMENTS[args.env])  # the general rubric and the task's own criteria
        if source != "self":  # the judge's settings are checked before the model loads
            judge, judge_said = make_judge(*judge_settings, None, config.groups_per_step, rubric)
        loaded = load_model(profile, model_name=args.model_dir)  # a missing --model-dir fails before any loading
        if source == "self":  # the policy's own base model judges: it exists once loaded
            judge, judge_said = make_judge(*judge_settings, loaded, config.groups_per_step, rubric)
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"train: {error}") from None
    run_dir = Path(args.run_dir or f"runs/{args.env}-{args.tier}-{args.judge}")
    env = make(args.env)
    try:
        trainer = GRPOTrainer(config, loaded.model, loaded.tokenizer, env, judge, run_dir)
    except ValueError as error:  # e.g. the run folder holds a run with other settings
        raise SystemExit(f"train: {error}") from None
    print(f"training {args.env} on tier {args.tier}; run folder: {run_dir}\njudge: {judge_said}")
    metrics = trainer.train()
    optimum = optimal_mean_guesses(env.low, env.high) if args.env == "guess_number" else None
    plot_dashboard(metrics, optimum, path=run_dir / "training.png")
    evals = metrics.dropna(subset=["eval_success"]) if "eval_success" in metrics else metrics.iloc[0:0]
    if len(evals) >= 2:
        first, last = evals.iloc[0], evals.iloc[-1]
        print(
            f"held-out success {first.eval_success:.0%} -> {last.eval_success:.0%}; "
            f"mean turns {first.eval_mean_turns:.2f} -> {last.eval_mean_turns:.2f}"
            + (f" (optimum {optimum:.2f})" if optimum else "")
        )
    print(
        f"metrics: {run_dir / 'metrics.jsonl'}; trajectories: {run_dir / 'trajectories.jsonl'}; "
        f"plot: {run_dir / 'training.png'}"
    )


def main(argv: list[str] | None = None) -> None:
    from agentic_rl_lab.envs import ENVIRONMENTS, inbox_data  # light: neither imports torch
    from agentic_rl_lab.models import TIERS

    parser = argparse.ArgumentParser(
        prog="python -m agentic_rl_lab", description="agentic-rl-lab: agentic RL end to end, on a CPU or a GPU."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = commands.add_parser("demo", help="CPU end-to-end demo: scripted baselines, then GRPO on the cpu-tiny model")
    p.add_argument("--groups", type=int, default=20, help="scenarios (seeds) per environment and policy")
    p.add_argument("--num-generations", type=int, default=4, help="trajectories per scenario (the group size)")
    p.add_argument("--seed", type=int, default=0, help="first scenario seed; the policies are seeded with it too")
    p.add_argument("--out", default="runs/demo", help="folder for the JSONL trajectory files")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--train-steps", type=int, default=10, help="GRPO steps on the cpu-tiny model (0: skip training)")
    p.add_argument("--eval-episodes", type=int, default=100, help="held-out episodes before and after training")
    p.set_defaults(run=demo)

    p = commands.add_parser("envs", help="list the environments, their tools and scripted strategies")
    p.set_defaults(run=envs)

    p = commands.add_parser("play", help="play an environment by hand in the terminal")
    p.add_argument("env", choices=sorted(ENVIRONMENTS), help="environment name")
    p.add_argument("--seed", type=int, default=0, help="scenario seed")
    p.set_defaults(run=play)

    p = commands.add_parser("train", help="GRPO training: rollout -> judge -> update, resumable")
    p.add_argument("--env", default="guess_number", choices=sorted(ENVIRONMENTS), help="environment name")
    p.add_argument("--tier", default="cpu-tiny", choices=[*TIERS, "auto"], help="model tier")
    p.add_argument("--model-dir", default=None, help="load this model directory instead of the tier's model")
    p.add_argument("--judge", default="reference", choices=["reference", "relative", "absolute"], help="reward source")
    p.add_argument("--judge-noise", type=float, default=0.0, help="std of noise on the reference judge's scores")
    p.add_argument("--run-dir", default=None, help="run folder (default: runs/ENV-TIER-JUDGE); reused to resume")
    p.add_argument("--steps", type=int, default=None, help="training steps (0: only the held-out evaluation)")
    p.add_argument("--groups-per-step", type=int, default=None, help="scenarios per step")
    p.add_argument("--num-generations", type=int, default=None, help="trajectories per scenario (group size)")
    p.add_argument("--learning-rate", type=float, default=None, help="AdamW learning rate (default: the tier's)")
    p.add_argument("--loss-type", default=None, choices=["grpo", "dr_grpo", "dapo", "cispo"], help="loss variant")
    p.add_argument("--beta", type=float, default=None, help="KL weight to the reference model")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the tier's)")
    p.add_argument("--eval-every", type=int, default=None, help="held-out evaluation every N steps (0: off)")
    p.add_argument("--eval-episodes", type=int, default=None, help="held-out episodes per evaluation")
    p.add_argument("--seed", type=int, default=0, help="seed for scenarios, sampling and the judge")
    p.set_defaults(run=train)

    p = commands.add_parser("build-tiny", help="build (or find in the cache) the cpu-tiny model", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for agentic_rl_lab.tiny (see --help)")
    p.set_defaults(run=build_tiny)

    p = commands.add_parser("build-tiny-judge", help="build (or find in the cache) the tiny judge", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for agentic_rl_lab.tiny_judge (see --help)")
    p.set_defaults(run=build_tiny_judge)

    p = commands.add_parser("warm-start", help="warm-start cpu-tiny on an environment (cached; 20-40 min on 2 cores)")
    p.add_argument("env", choices=["inbox_search", "fog_maze"], help="which committed recipe")
    p.add_argument("--export", default=None, metavar="DIR", help="then copy it to DIR in bfloat16")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.set_defaults(run=warm_start)

    p = commands.add_parser("make-inbox", help="regenerate the inbox_search emails and questions (package data)")
    p.add_argument("--out", default=str(inbox_data.DEFAULT_DATA_DIR), help="output folder")
    p.set_defaults(run=make_inbox)

    # `build-tiny` hands its options on to agentic_rl_lab.tiny; argparse's REMAINDER misses leading `--options`.
    args, unknown = parser.parse_known_args(argv)
    if args.command in ("build-tiny", "build-tiny-judge"):
        args.rest = unknown + args.rest
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.run(args)


if __name__ == "__main__":
    sys.exit(main())
