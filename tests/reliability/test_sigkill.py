"""SIGKILL at five points of a training step (mid-rollout, mid-judge, mid-update, mid-checkpoint write, mid-log
write), then a resume in a fresh process. Every completed step is logged exactly once, no group is torn or
repeated, and the run ends where an uninterrupted run ends: the same metrics, the same trajectories, the same final
weights, to the bit.

Each run is its own process (`run_training.py`, which kills itself at the chosen point on purpose), judged over HTTP
by the loopback judge model in this process.
"""

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from agentic_rl_lab.trajectory import load_groups

SCRIPT = Path(__file__).with_name("run_training.py")
STEPS = 3
KILL_STEP = 1  # 0-based: the second step, after the checkpoint of the first


def train(run_dir: Path, judge_url: str, kill: tuple[str, int] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), str(run_dir), judge_url, str(STEPS)]
    if kill:
        command += ["--kill", kill[0], str(kill[1])]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def finished(process: subprocess.CompletedProcess) -> bool:
    assert process.returncode == 0 and "DONE" in process.stdout, process.stderr[-3000:]
    return True


def killed(process: subprocess.CompletedProcess) -> bool:
    assert process.returncode == -9 and "DONE" not in process.stdout, process.stderr[-3000:]
    return True


def what_it_left(run_dir: Path) -> dict:
    """A finished run without its timings: the metrics rows of each step, the groups of each step (messages, sampled
    tokens and log-probs, rewards), and the SHA-256 of the final weights."""
    metrics, groups = defaultdict(list), defaultdict(list)
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        metrics[row["step"]].append({k: v for k, v in row.items() if not k.startswith("seconds_")})
    for group in load_groups(run_dir / "trajectories.jsonl"):
        played = [
            (t.messages, [(c.token_ids, c.logprobs) for c in t.completions], t.reward) for t in group.trajectories
        ]
        groups[group.metadata["step"]].append((group.seed, played))
    final = run_dir / "checkpoints" / f"step-{STEPS:06d}" / "checksums.json"
    return {"metrics": metrics, "groups": groups, "weights": json.loads(final.read_text())["model/model.safetensors"]}


def lost_against(reference: dict, run: dict) -> int:
    """Steps whose metrics or groups are missing, repeated, torn or different, plus 1 if the final weights differ."""
    lost = sum(run[part].get(step) != reference[part][step] for part in ("metrics", "groups") for step in range(STEPS))
    extra = (set(run["metrics"]) | set(run["groups"])) - set(range(STEPS))
    return lost + len(extra) + (run["weights"] != reference["weights"])


def latest_checkpoint(run_dir: Path) -> str:
    return sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))[-1]


@pytest.fixture(scope="module")
def reference(judge_server, tmp_path_factory) -> dict:
    """The same run, never interrupted."""
    run = tmp_path_factory.mktemp("uninterrupted") / "run"
    assert finished(train(run, judge_server.url))
    return what_it_left(run)


WHERE = {
    "rollout": "as its rollout began sampling the second turn",
    "judge": "once the judge model had answered its first group, before the scores were written",
    "update": "after its first optimizer step, before the second",
    "checkpoint": "halfway through writing trainer_state.pt of the checkpoint after it",
}


@pytest.mark.parametrize("point", list(WHERE))
def test_a_kill_mid_step_resumes_to_exactly_the_uninterrupted_run(
    point, reference, judge_server, tmp_path, fault_report
):
    run = tmp_path / "run"
    assert killed(train(run, judge_server.url, kill=(point, KILL_STEP)))
    resumed_from = latest_checkpoint(run)
    left = sorted(p.name for p in (run / "checkpoints").iterdir())
    if point == "checkpoint":
        torn = run / "checkpoints" / ".tmp-step-000002" / "trainer_state.pt"
        assert torn.exists() and b"PK\x05\x06" not in torn.read_bytes(), "half a zip: no end-of-archive record"
    assert finished(train(run, judge_server.url))
    lost = lost_against(reference, what_it_left(run))
    fault_report.record(
        f"sigkill: mid-{point}" if point != "checkpoint" else "sigkill: mid-checkpoint write",
        injected=1,
        outcome=(
            f"killed in step {KILL_STEP} {WHERE[point]}, leaving {left}; a fresh process resumed from {resumed_from}: "
            f"steps 0-{STEPS - 1} logged once each, metrics, trajectories and final weights equal to the "
            "uninterrupted run's"
        ),
        lost=lost,
    )
    assert resumed_from == "step-000001" and lost == 0


def test_kills_mid_log_write_resume_to_exactly_the_uninterrupted_run(reference, judge_server, tmp_path, fault_report):
    """Three kills in a row: halfway through a group's line in trajectories.jsonl, halfway through a line of
    metrics.jsonl, and halfway through rewriting trajectories.jsonl while resuming; then a run to the end."""
    run = tmp_path / "run"
    trajectories, metrics = run / "trajectories.jsonl", run / "metrics.jsonl"
    torn, noticed = [], []

    assert killed(train(run, judge_server.url, kill=("trajectories", KILL_STEP)))
    torn.append(not trajectories.read_bytes().endswith(b"\n"))
    second = train(run, judge_server.url, kill=("metrics", KILL_STEP))
    assert killed(second)
    noticed.append(f"{trajectories}: line" in second.stderr and "is incomplete" in second.stderr)
    torn.append(not metrics.read_bytes().endswith(b"\n"))
    groups_before = trajectories.read_bytes()
    third = train(run, judge_server.url, kill=("resume", 0))
    assert killed(third)
    noticed.append(f"{metrics}: line" in third.stderr and "is incomplete" in third.stderr)
    torn.append(trajectories.read_bytes() == groups_before and (run / ".trajectories.jsonl.tmp").exists())
    assert finished(train(run, judge_server.url))
    lost = lost_against(reference, what_it_left(run))
    fault_report.record(
        "sigkill: mid-log write",
        injected=len(torn),
        outcome=(
            f"killed mid-line in trajectories.jsonl, mid-line in metrics.jsonl (step {KILL_STEP}), and while a "
            f"resume rewrote trajectories.jsonl: {sum(torn)} of {len(torn)} left a torn line, or a half-written copy "
            f"beside the whole old file; {sum(noticed)} torn lines dropped by the next resume with a warning; steps 0-"
            f"{STEPS - 1} logged once each, metrics, trajectories and final weights equal to the uninterrupted run's"
        ),
        lost=lost,
    )
    assert torn == [True, True, True] and noticed == [True, True] and lost == 0
