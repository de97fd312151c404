"""What the fault-injection tests share: the report's rows, the loopback judge model's answer, and measures of
what a run left behind. (A module of its own: test modules cannot import a conftest by name.)"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from chat_server import RecordedRequest, completion

from agentic_rl_lab.trajectory import load_groups

SENTINEL = "sk-reliability-sentinel-7c1e9f0b2d4a-not-a-real-key"
"""The API key every test of this folder runs with: the secrets tests look for it in every file written."""


# ----- the report -----------------------------------------------------------------------------------------------------
@dataclass
class FaultRow:
    fault: str
    injected: int
    outcome: str
    lost: int


class FaultReport:
    """The rows recorded in this session, one per fault."""

    def __init__(self) -> None:
        self.rows: dict[str, FaultRow] = {}

    def record(self, fault: str, injected: int, outcome: str, lost: int) -> None:
        if fault in self.rows:
            raise ValueError(f"the fault {fault!r} was recorded twice")
        self.rows[fault] = FaultRow(fault, int(injected), outcome, int(lost))

    def table(self) -> list[str]:
        rows = sorted(self.rows.values(), key=lambda r: r.fault)
        width = max(len(r.fault) for r in rows)
        lines = [f"{'fault':<{width}}  injected  lost  outcome"]
        lines += [f"{r.fault:<{width}}  {r.injected:>8}  {r.lost:>4}  {r.outcome}" for r in rows]
        return lines

    def json(self) -> str:
        return json.dumps([asdict(r) for r in sorted(self.rows.values(), key=lambda r: r.fault)], indent=2) + "\n"


# ----- the loopback judge model --------------------------------------------------------------------------------------
BLOCK = re.compile(r'<trajectory id="([^"]+)">\n(.*?)\n</trajectory(?: id="\1")?>', re.DOTALL)


def fingerprint(text: str) -> float:
    """A score in [0, 1] that only this text produces."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:6], 16) / 0xFFFFFF


def judge_answer(request: RecordedRequest) -> dict:
    """The judge model: each trajectory's score is the fingerprint of its id and transcript, so a group gets the same
    answer run after run, and its members get different rewards even when they played alike: every step has
    something to update."""
    first_user = next(m for m in request.messages if m["role"] == "user")
    shown = BLOCK.findall(first_user["content"])
    scores = [{"trajectory_id": i, "explanation": "fingerprint", "score": fingerprint(i + text)} for i, text in shown]
    return completion(json.dumps({"scores": scores}))


# ----- what a run left behind -----------------------------------------------------------------------------------------
def steps_lost(run_dir: Path, steps: int, groups_per_step: int = 2) -> int:
    """Steps not logged exactly once: a metrics row missing or repeated, or not exactly `groups_per_step` whole groups
    in trajectories.jsonl (a torn line fails to load), plus any step logged that should not be there."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = [r["step"] for r in rows if not r["eval_only"]]
    grouped = [g.metadata["step"] for g in load_groups(run_dir / "trajectories.jsonl")]
    wrong = sum(logged.count(s) != 1 or grouped.count(s) != groups_per_step for s in range(steps))
    return wrong + len(set(logged + grouped) - set(range(steps)))


def weights(model: Any) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def changed(before: dict[str, torch.Tensor], model: Any) -> int:
    """How many tensors of `model` differ from `before`."""
    return sum(not torch.equal(before[name], value) for name, value in model.state_dict().items())


def file_digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under `folder`: to show a failed resume changed nothing."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
