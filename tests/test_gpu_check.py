"""`scripts/gpu_check.py --cpu`: the GPU check's every step, on cpu-tiny through Unsloth's CPU fallback, so the
script that a GPU machine runs once in a while never rots."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKS = [
    "load",
    "causality",
    "logprob_gap",
    "gradient_checkpointing",
    "kv_cache_reuse",
    "rollout_memory",
    "update_memory",
    "trainer_self_judge_resume",
]


def test_the_gpu_check_runs_every_check_on_the_cpu_and_writes_its_report(tmp_path):
    out = tmp_path / "gpu_check.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--cpu", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "cpu" and report["device"].startswith("cpu")
    assert report["versions"]["unsloth"] and report["versions"]["torch"]
    assert [check["name"] for check in report["checks"]] == CHECKS
    failed = {check["name"]: check.get("error") for check in report["checks"] if not check["passed"]}
    assert not failed and report["passed"], failed
    checks = {check["name"]: check for check in report["checks"]}
    assert checks["causality"]["earlier_max_change"] == 0 < checks["causality"]["later_max_change"]
    assert checks["logprob_gap"]["optimizer_steps"] == 1
    assert checks["gradient_checkpointing"]["with_checkpointing"] == checks["gradient_checkpointing"]["layer_forwards"]
    assert checks["kv_cache_reuse"]["cached_tokens"] > 0
    assert checks["trainer_self_judge_resume"]["steps_logged"] == [0, 1, 2]
