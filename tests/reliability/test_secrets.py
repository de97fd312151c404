"""Secrets: a judged training run and an executed notebook, each with a sentinel API key in its environment that it
really sends (to a loopback server, which also echoes it back once in an error). No file either writes (run folder,
judge cache, notebook and its outputs, logs) contains the key."""

import subprocess
import sys
from pathlib import Path

import papermill
from chat_server import ChatServer, completion, error, tool_call
from faults import SENTINEL, judge_answer

ROOT = Path(__file__).resolve().parents[2]
PARAMETERS = {"TIER": "cpu-tiny", "EXERCISES": "ci", "NUM_GENERATIONS": 4, "NUM_SCENARIOS": 4}
"""tests/test_notebooks.py's settings for notebook 02 (exercises in "ci" mode: the solutions run, the TODOs fail)."""


def holding_the_key(folder: Path) -> tuple[int, list[str]]:
    """(files written under `folder`, those that contain the key)."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), [str(p.relative_to(folder)) for p in files if SENTINEL.encode() in p.read_bytes()]


def test_a_judged_training_run_writes_the_key_nowhere(tmp_path, fault_report):
    """`run_training.py` with the judge cache on; its stdout and stderr are kept as log files."""
    with ChatServer([error(500, f"upstream rejected Bearer {SENTINEL}")], default=judge_answer) as server:
        script = Path(__file__).with_name("run_training.py")
        command = [sys.executable, str(script), str(tmp_path / "run"), server.url, "2", "--judge-cache"]
        process = subprocess.run(command, capture_output=True, text=True, timeout=300)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "stdout.log").write_text(process.stdout)
    (tmp_path / "logs" / "stderr.log").write_text(process.stderr)
    sent = sum(r.headers.get("authorization") == f"Bearer {SENTINEL}" for r in server.requests)
    written, leaks = holding_the_key(tmp_path)
    cached = len(list((tmp_path / "lab-cache" / "judge").glob("*/*.json")))
    fault_report.record(
        "secrets: judged training run",
        injected=1,
        outcome=(
            f"the judge sent the key in {sent} of {len(server.requests)} requests and the server echoed it in an "
            f"error; {written} files written (run folder, {cached} judge cache entries, stdout and stderr), "
            f"{len(leaks)} contain it"
        ),
        lost=len(leaks),
    )
    assert process.returncode == 0, process.stderr[-3000:]
    assert sent == len(server.requests) > 1 and SENTINEL in str(server.requests[0].response) and cached > 0
    assert "upstream rejected Bearer ***" in (tmp_path / "run" / "trajectories.jsonl").read_text(), "echo recorded"
    assert leaks == []


def test_an_executed_notebook_writes_the_key_nowhere(tmp_path, monkeypatch, fault_report):
    """Notebook 02 with its API policy on: the one notebook cell that reads OPENAI_API_KEY and sends it."""
    answer = completion(tool_calls=[tool_call("guess", {"n": 50})])
    with ChatServer([error(500, f"invalid api key {SENTINEL}")], default=answer) as server:
        for name, value in {
            "OPENAI_API_KEY": SENTINEL,
            "AGENTIC_RL_LAB_MODEL": "test-model",
            "AGENTIC_RL_LAB_BASE_URL": server.url,
            "IPYTHONDIR": str(tmp_path / "ipython"),  # the kernel's own files land in the folder searched too
            "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"),
            "MPLCONFIGDIR": str(tmp_path / "matplotlib"),
        }.items():
            monkeypatch.setenv(name, value)
        work = tmp_path / "notebook"
        work.mkdir()
        papermill.execute_notebook(
            str(ROOT / "notebooks" / "02_collecting_trajectories.ipynb"),
            str(work / "02_collecting_trajectories.ipynb"),
            parameters={**PARAMETERS, "API_POLICY": "on"},
            kernel_name="python3",
            cwd=str(work),
            progress_bar=False,
            execution_timeout=600,
        )
    sent = sum(r.headers.get("authorization") == f"Bearer {SENTINEL}" for r in server.requests)
    written, leaks = holding_the_key(tmp_path)
    fault_report.record(
        "secrets: executed notebook",
        injected=1,
        outcome=(
            f"notebook 02 with its API policy on sent the key in {sent} of {len(server.requests)} requests and the "
            f"server echoed it in an error; {written} files written (the executed notebook, its trajectories, the "
            f"kernel's IPython and matplotlib files), {len(leaks)} contain it"
        ),
        lost=len(leaks),
    )
    assert sent == len(server.requests) > 1 and SENTINEL in str(server.requests[0].response)
    assert leaks == []
