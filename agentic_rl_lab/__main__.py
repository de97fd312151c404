"""The command line: `python -m agentic_rl_lab --help` lists the subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def demo(args: argparse.Namespace) -> None:
    """The CPU end-to-end demo: every environment, every scripted policy, a summary table.

    Until the training loop lands, this is the lab's main job: collect groups of trajectories with the
    scripted baselines, store them as JSONL and compare them with the ground truth.
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


def make_inbox(args: argparse.Namespace) -> None:
    """Regenerate the inbox_search data (deterministic: the committed files come out byte for byte)."""
    from agentic_rl_lab.envs import inbox_data

    inbox_data.main(["--out", args.out])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m agentic_rl_lab", description="agentic-rl-lab: agentic RL end to end, on a CPU or a GPU."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = commands.add_parser("demo", help="CPU end-to-end demo: every environment with the scripted policies")
    p.add_argument("--groups", type=int, default=20, help="scenarios (seeds) per environment and policy")
    p.add_argument("--num-generations", type=int, default=4, help="trajectories per scenario (the group size)")
    p.add_argument("--seed", type=int, default=0, help="first scenario seed; the policies are seeded with it too")
    p.add_argument("--out", default="runs/demo", help="folder for the JSONL trajectory files")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(run=demo)

    p = commands.add_parser("envs", help="list the environments, their tools and scripted strategies")
    p.set_defaults(run=envs)

    p = commands.add_parser("play", help="play an environment by hand in the terminal")
    p.add_argument("env", help="environment name, e.g. guess_number")
    p.add_argument("--seed", type=int, default=0, help="scenario seed")
    p.set_defaults(run=play)

    p = commands.add_parser("make-inbox", help="regenerate the inbox_search emails and questions in data/inbox/")
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "data" / "inbox"), help="output folder")
    p.set_defaults(run=make_inbox)

    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    sys.exit(main())
