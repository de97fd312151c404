"""`scripts/judge_pilot.py`: a tiny-judge recipe as a set of flags, built, measured, and not mixed up with another."""

import json
import subprocess
import sys
from pathlib import Path

from agentic_rl_lab.tiny_judge import weights_name

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "judge_pilot.py"
TINY = ["--groups", "12", "--sizes", "2", "4", "--layers", "1", "--hidden", "64", "--steps", "3"]
TINY += ["--batch-tokens", "4096", "--eval-groups", "1", "--device", "cpu"]


def pilot(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, timeout=600)


def test_a_pilot_builds_a_judge_measures_it_per_group_size_and_keeps_its_recipe(tmp_path):
    out = tmp_path / "pilot"
    first = pilot(*TINY, "--out", str(out))
    assert first.returncode == 0, first.stderr[-2000:]
    report = json.loads((out / "pilot.json").read_text())
    assert report["build"]["config"]["model"]["num_layers"] == 1
    assert len(report["build"]["losses"]) == 3
    assert (out / "judge" / "model.safetensors").exists()
    held_out = report["held_out"]
    assert [held_out[f"groups_of_{size}"]["groups"] for size in (2, 4, 8)] == [2, 1, 1]
    for figures in held_out.values():  # a 3-step judge answers badly; what matters is that it was asked and counted
        assert 0 <= figures["valid_first_attempt"] <= 1 and 0 <= figures["valid_after_retries"] <= 1

    built = (out / "judge" / "model.safetensors").stat().st_mtime_ns
    again = pilot(*TINY, "--out", str(out))  # the same recipe: judged again, not built again
    assert again.returncode == 0, again.stderr[-2000:]
    assert (out / "judge" / "model.safetensors").stat().st_mtime_ns == built, "the judge was built a second time"

    def answers(figures: dict) -> dict:
        return {size: {k: v for k, v in f.items() if k != "seconds_per_group"} for size, f in figures.items()}

    rerun = json.loads((out / "pilot.json").read_text())["held_out"]
    assert answers(rerun) == answers(held_out), "the same judge, the same groups"

    other = pilot(*[f if f != "3" else "4" for f in TINY], "--out", str(out))  # 4 steps: another recipe
    assert other.returncode != 0 and "other settings" in other.stderr
    language_modelling = pilot(*TINY, "--loss-on", "all", "--out", str(out))  # the loss is part of the recipe too
    assert language_modelling.returncode != 0 and "other settings" in language_modelling.stderr

    # A curriculum: the next recipe starts from this judge (its tokenizer, weights and shape), not from nothing.
    then = tmp_path / "then"
    flags = ["--groups", "12", "--sizes", "4", "--steps", "2", "--batch-tokens", "4096", "--eval-groups", "1"]
    curriculum = pilot(*flags, "--device", "cpu", "--init-from", str(out / "judge"), "--out", str(then))
    assert curriculum.returncode == 0, curriculum.stderr[-2000:]
    build = json.loads((then / "pilot.json").read_text())["build"]
    assert build["init_weights"] == weights_name(out / "judge") and build["config"]["model"]["num_layers"] == 1
    assert len(build["losses"]) == 2
    assert (then / "judge" / "tokenizer.json").read_bytes() == (out / "judge" / "tokenizer.json").read_bytes()
    # Its checkpoint names the weights it started from: a judge rebuilt at the same path is another start.
    (checkpoint,) = (then / "work").glob("sft-*.pt")
    assert checkpoint.name.endswith(f"-{weights_name(out / 'judge')}.pt")
    mismatch = pilot("--layers", "2", "--init-from", str(out / "judge"), "--out", str(tmp_path / "mismatch"))
    assert mismatch.returncode != 0 and "--layers 2: --init-from's judge has 1" in mismatch.stderr

    other_prompts = pilot(*TINY, "--block-header", "turns", "--out", str(out))  # the same judge, other prompts
    assert other_prompts.returncode != 0 and "other prompts" in other_prompts.stderr


def test_the_turns_header_gives_each_block_the_number_of_its_last_turn():
    import random
    import re

    sys.path.insert(0, str(SCRIPT.parent))
    from judge_pilot import block_with_turns

    from agentic_rl_lab.judge import prompt
    from agentic_rl_lab.tiny_judge import mixed_group

    group = mixed_group("guess_number", 12, 8, random.Random(0))
    shown = [(f"t{i + 1}", t.messages) for i, t in enumerate(group.trajectories)]
    plain = prompt.relative_prompt(shown, group.trajectories[0].tools)[1]["content"]
    original, prompt._trajectory_block = prompt._trajectory_block, block_with_turns
    try:
        with_turns = prompt.relative_prompt(shown, group.trajectories[0].tools)[1]["content"]
    finally:
        prompt._trajectory_block = original
    headers = re.findall(r'<trajectory id="(t\d)" turns="(\d+)">', with_turns)
    assert headers == [(f"t{i + 1}", str(t.num_turns)) for i, t in enumerate(group.trajectories)]
    assert re.sub(r' turns="\d+"', "", with_turns) == plain  # nothing else differs


def test_the_budget_drill_spreads_the_counts_and_scores_them_as_the_real_game():
    import random

    sys.path.insert(0, str(SCRIPT.parent))
    from judge_pilot import budget_group, with_budgets

    from agentic_rl_lab.tiny_judge import mixed_group, rubric_verdict

    rng = random.Random(0)
    drills = [t for seed in range(30) for t in budget_group("guess_number", seed, 8, rng).trajectories]
    real = [t for seed in range(30) for t in mixed_group("guess_number", seed, 8, rng).trajectories]
    failed_at = {t.num_turns for t in drills if not t.outcome.success}
    assert {t.num_turns for t in real if not t.outcome.success} == {12}  # why the drill exists
    assert len(failed_at) >= 8 and min(failed_at) <= 3  # a failure can end at any turn
    assert 0.2 < sum(t.outcome.success for t in drills) / len(drills) < 0.6
    # A success in k turns scores the same in the drill and in the real game: only the counts' spread differs.
    by_turns = {t.num_turns: rubric_verdict(t)[0] for t in real if t.outcome.success and not t.errors}
    drilled = {t.num_turns: rubric_verdict(t)[0] for t in drills if t.outcome.success and not t.errors}
    shared = set(by_turns) & set(drilled)
    assert len(shared) >= 5 and all(by_turns[k] == drilled[k] for k in shared)

    never = with_budgets(0.0)("guess_number", 3, 4, random.Random(1))
    assert [t.messages for t in never.trajectories] == [
        t.messages for t in mixed_group("guess_number", 3, 4, random.Random(1)).trajectories
    ]


def test_a_pilot_refuses_to_mix_drill_shares(tmp_path):
    out = tmp_path / "pilot"
    out.mkdir()
    (out / "prompt.json").write_text(json.dumps({"block_header": "plain"}))  # a pilot of before the drill: share 0
    mixed = pilot("--budget-share", "0.5", "--out", str(out))
    assert mixed.returncode != 0 and "other prompts" in mixed.stderr
    assert pilot("--budget-share", "1.5", "--out", str(out)).returncode != 0
