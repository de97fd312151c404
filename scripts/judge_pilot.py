"""One tiny-judge recipe, built and measured: the pilots of docs/tiny-judge.md as one command.

    python scripts/judge_pilot.py --out runs/judge-pilot                        # pilot 9's recipe (25-30 min, 2 cores)
    python scripts/judge_pilot.py --layers 8 --steps 1500 --out runs/p-deep     # a deeper model (about an hour)
    python scripts/judge_pilot.py --device cuda --layers 8 --out runs/p-deep    # the same on a lent GPU: minutes
    python scripts/judge_pilot.py --sizes 2 --out runs/p-pairs                  # a curriculum: pairs first,
    python scripts/judge_pilot.py --init-from runs/p-pairs/judge --out runs/p-then-8   # then groups of 2, 4 and 8
    python scripts/judge_pilot.py --budget-share 0.5 --out runs/p-budgets       # a drill for the lookup, mixed in
    python scripts/judge_pilot.py --loss-on all --out runs/p-all                # a language-modelling loss, every token

Pilots 6 to 12 each wrote a script like this one and lost it with the session; this one stays, so that a recipe is
a set of flags and its figures can be rerun. It builds the judge with `tiny_judge.build` (guess_number groups of
`--sizes`, each group seen about once, one absolute example each, ids in display order), then judges held-out groups
of each size with `make_tiny_judge` as the lab serves it (no retries, 2 permutations from groups of 4 up), and writes
`pilot.json` in `--out`: pairwise accuracy, Spearman, valid answers and position consistency per group size, beside
the build's report. A rerun with the same flags resumes the SFT where it stopped (checkpointed in `--out/work`).
The held-out groups are the same for every recipe (`EVAL_SEED`), so two pilots compare on the same trajectories.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
from pathlib import Path

import torch

from agentic_rl_lab import tiny_judge
from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.judge import prompt
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.rollout import collect_group
from agentic_rl_lab.tiny_judge import JudgeData, TinyJudgeConfig, default_model_config, make_tiny_judge, mixed_group
from agentic_rl_lab.trajectory import TrajectoryGroup

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from judge_quality import judge_all, summary  # noqa: E402  (a sibling script, not a package)

EVAL_SEED = "judge-pilot-eval"
"""Draws the held-out groups' strategies; their scenarios are seeds the training data never uses (800,000 up)."""


def held_out(size: int, count: int) -> list[TrajectoryGroup]:
    rng = random.Random(f"{EVAL_SEED}-{size}")
    return [mixed_group("guess_number", 800_000 + 1000 * size + index, size, rng) for index in range(count)]


def block_with_turns(id_: str, messages: list, first_turn: int = 1) -> str:
    """A trajectory block whose header also gives the number of its last turn (`<trajectory id="t3" turns="8">`):
    the count the verdict needs, next to the id the answer names, instead of at the block's end (`--block-header`)."""
    last = first_turn - 1 + sum(message.get("role") == "assistant" for message in messages)
    return f'<trajectory id="{id_}" turns="{last}">\n{prompt.render_messages(messages, first_turn)}\n</trajectory>'


FULL_GAME = GuessNumber().max_turns
"""The real game's turns (12): what a drill's budgets are drawn up to, and what its scores are counted against."""


class Budgeted(GuessNumber):
    """guess_number under a turn budget of its own, scored as the 12-turn game is: a 5-turn success scores what it
    scores in the real game, and a failure can end at any turn, not only the 12th."""

    def outcome(self):
        score = (FULL_GAME - self.turn + 1) / FULL_GAME if self.found else 0.0
        return super().outcome().model_copy(update={"score": score})


def budget_group(env_name: str, seed: int, size: int, rng: random.Random) -> TrajectoryGroup:
    """A drill for the lookup (`--budget-share`): a guess_number group whose trajectories each play under a turn
    budget drawn from 1..12. In the real groups every failure takes 12 turns and most successes 5 to 8, so a judge
    that writes "reached the goal in 7 turns" for every block is mostly right; here the counts and verdicts spread
    out, and each one in the answer can only come from reading its own block."""
    trajectories = []
    for _ in range(size):
        env = Budgeted(max_turns=rng.randint(1, FULL_GAME))
        policy = ScriptedPolicy(env, rng.choice(list(GuessNumber.strategies)), seed=rng.randrange(2**31))
        trajectories += collect_group(env, policy, seed=seed, num_generations=1, progress=False).trajectories
    return TrajectoryGroup(env=env_name, seed=seed, trajectories=trajectories)


def with_budgets(share: float):
    """`mixed_group` for the build: a `share` of guess_number groups drawn by `budget_group` instead."""

    def group(env_name: str, seed: int, size: int, rng: random.Random, policy_group=None) -> TrajectoryGroup:
        if env_name == "guess_number" and share and rng.random() < share:
            return budget_group(env_name, seed, size, rng)
        return mixed_group(env_name, seed, size, rng, policy_group)

    return group


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the judge, its checkpoints and pilot.json")
    parser.add_argument("--groups", type=int, default=9000, help="training groups (each seen about once)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8], help="group sizes, drawn at random")
    parser.add_argument("--layers", type=int, default=None, help="transformer layers (4, or --init-from's)")
    parser.add_argument("--hidden", type=int, default=None, help="hidden size (256, or --init-from's)")
    parser.add_argument("--init-from", type=Path, default=None, help="a judge folder to fine-tune, not a new model")
    parser.add_argument("--steps", type=int, default=1500, help="SFT steps")
    parser.add_argument("--batch-tokens", type=int, default=8192, help="tokens per SFT step")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument(
        "--loss-on",
        choices=["answer", "all"],
        default="answer",
        help="which tokens train the judge: its answers, or every token of the conversation (language modelling)",
    )
    parser.add_argument("--eval-groups", type=int, default=60, help="held-out groups per size (pairs: twice)")
    parser.add_argument(
        "--block-header",
        choices=["plain", "turns"],
        default="plain",
        help='"turns": each block\'s header also gives its number of turns, in training and judging alike',
    )
    parser.add_argument(
        "--budget-share",
        type=float,
        default=0.0,
        help="share of the training groups whose trajectories each play under a turn budget of 1..12 (a drill)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if any(not 2 <= size <= 8 for size in args.sizes):
        parser.error("--sizes must be between 2 and 8: the judge knows the ids t1..t8")
    if not 0 <= args.budget_share <= 1:
        parser.error("--budget-share is a share of the groups, from 0 to 1")
    if args.device == "cpu":
        torch.set_num_threads(2)
    if args.init_from:
        if not (args.init_from / "config.json").exists():
            parser.error(f"--init-from {args.init_from}: no judge there (a pilot's judge is in its --out/judge)")
        source = json.loads((args.init_from / "config.json").read_text())
        shape = {"layers": source["num_hidden_layers"], "hidden": source["hidden_size"]}
        for flag, value in shape.items():
            if getattr(args, flag) not in (None, value):
                parser.error(f"--{flag} {getattr(args, flag)}: --init-from's judge has {value}")
            setattr(args, flag, value)
    args.layers, args.hidden = args.layers or 4, args.hidden or 256
    # The prompt and the drill are not part of the judge's config: the pilot keeps them beside the judge and refuses
    # to mix two.
    shown = {"block_header": args.block_header, "budget_share": args.budget_share}
    marker = args.out / "prompt.json"
    if marker.exists() and {"budget_share": 0.0, **json.loads(marker.read_text())} != shown:
        sys.exit(
            f"{args.out} holds a judge trained on other prompts ({marker.read_text().strip()}): pick another --out"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(shown) + "\n")
    if args.block_header == "turns":
        prompt._trajectory_block = block_with_turns  # both the training prompts and the judge's read it from there
    if args.budget_share:
        tiny_judge.mixed_group = with_budgets(args.budget_share)  # the training data only: held_out() keeps its own

    model = dataclasses.replace(
        default_model_config(),
        num_layers=args.layers,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        sft_steps=args.steps,
        batch_tokens=args.batch_tokens,
        learning_rate=args.learning_rate,
        max_context=4096,
    )
    data = JudgeData(groups=(("guess_number", args.groups, tuple(args.sizes)),), absolute_per_group=1)
    init_from = str(args.init_from) if args.init_from else None
    config = TinyJudgeConfig(data=data, model=model, loss_on=args.loss_on, init_from=init_from)
    judge_dir = args.out / "judge"
    if (judge_dir / "build_info.json").exists():
        build = json.loads((judge_dir / "build_info.json").read_text())
        if build["config"] != tiny_judge.recipe(config):
            sys.exit(f"{judge_dir} holds a judge of other settings: pick another --out")
    else:
        build = tiny_judge.build(config, judge_dir, args.out / "work", progress=True, device=args.device)

    results = {}
    for size in (2, 4, 8):
        groups = held_out(size, 2 * args.eval_groups if size == 2 else args.eval_groups)
        judge = make_tiny_judge(
            "relative", 8, path=judge_dir, device=args.device, permutations=1 if size == 2 else 2, cache=None,
            max_retries=0, on_failure="skip", backoff_base=0.0,
        )  # fmt: skip
        judged, seconds = judge_all(judge, groups)
        results[f"groups_of_{size}"] = summary(groups, judged, seconds)
        print(size, json.dumps(results[f"groups_of_{size}"]), flush=True)
    report = {"flags": {k: str(v) for k, v in vars(args).items()}, "held_out": results, "build": build}
    (args.out / "pilot.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"written: {args.out / 'pilot.json'}")
    return report


if __name__ == "__main__":
    main()
