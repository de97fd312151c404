"""Fault injection: shared fixtures, and the report every test adds its row to.

Each test injects one fault, measures what happened, and records a row with `fault_report.record`: the fault, how
many times it was injected, the outcome in words, and how many items were lost (a completed step missing or logged
twice, a torn or changed group, a valid line or cache entry dropped, a trajectory gone, a weight changed by a step
that was skipped, a file holding the API key). The row is recorded before the test's final asserts, so a test that
measured a loss still shows it. When the whole folder ran, the rows go to `benchmarks/results/faults.json`, sorted,
and the table is printed at the end of the session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chat_server import ChatServer
from faults import SENTINEL, FaultReport, judge_answer
from run_training import KEY_ENV, llm_judge, load_cpu_tiny, make_env, tiny_config

from agentic_rl_lab.grpo.trainer import GRPOTrainer

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parents[1] / "benchmarks" / "results" / "faults.json"


# ----- the report -----------------------------------------------------------------------------------------------------
REPORT = FaultReport()
_TESTS: dict[str, set[str]] = {"collected": set(), "deselected": set(), "ran": set()}


@pytest.fixture
def fault_report() -> FaultReport:
    return REPORT


def _here(nodeid: str) -> bool:
    return nodeid.startswith("tests/reliability/")


def pytest_collection_finish(session: pytest.Session) -> None:
    _TESTS["collected"] = {item.nodeid for item in session.items if _here(item.nodeid)}


def pytest_deselected(items: list[pytest.Item]) -> None:
    _TESTS["deselected"] |= {item.nodeid for item in items if _here(item.nodeid)}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _here(report.nodeid) and (report.when == "call" or report.skipped):
        _TESTS["ran"].add(report.nodeid)


def _whole_folder_ran() -> bool:
    """Every test file of this folder was collected, nothing was deselected, and every collected test ran."""
    files = {nodeid.split("::")[0].rsplit("/", 1)[-1] for nodeid in _TESTS["collected"]}
    every_file = files == {path.name for path in HERE.glob("test_*.py")}
    return every_file and not _TESTS["deselected"] and _TESTS["ran"] >= _TESTS["collected"]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write faults.json only when the whole folder ran: a partial run would drop the other faults' rows."""
    if REPORT.rows and _whole_folder_ran():
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(REPORT.json())


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not REPORT.rows:
        return
    terminalreporter.write_sep("-", "faults injected (tests/reliability)")
    for line in REPORT.table():
        terminalreporter.write_line(line)
    where = f"written to {RESULTS}" if _whole_folder_ran() else "not written: only part of tests/reliability ran"
    terminalreporter.write_line(f"faults.json {where}")


# ----- a clean environment, a judge model, a model --------------------------------------------------------------------
@pytest.fixture(scope="session", autouse=True)
def clean_environment() -> Iterator[None]:
    """Traffic stays on this machine, the judge's key is the sentinel, and no endpoint setting leaks in from the
    machine (session-wide, so module fixtures that train see it too)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in (
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "AGENTIC_RL_LAB_JUDGE_MODEL",
            "AGENTIC_RL_LAB_JUDGE_BASE_URL",
        ):
            patch.delenv(name, raising=False)
        patch.setenv("NO_PROXY", "127.0.0.1")
        patch.setenv(KEY_ENV, SENTINEL)
        yield


@pytest.fixture(autouse=True)
def private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The lab's default cache folder (judge answers) lives in the test's own folder."""
    monkeypatch.setenv("AGENTIC_RL_LAB_CACHE", str(tmp_path / "lab-cache"))


@pytest.fixture(scope="session")
def judge_server() -> Iterator[ChatServer]:
    """One loopback judge model for the session (tests/chat_server.py), answering with `judge_answer`."""
    with ChatServer(default=judge_answer) as server:
        yield server


@pytest.fixture(scope="session")
def make_trainer(judge_server: ChatServer) -> Callable[..., GRPOTrainer]:
    """`make_trainer(run_dir, **config)`: a trainer of the fresh cpu-tiny model with `tiny_config(**config)` and the
    loopback relative judge, the same run `run_training.py` makes in its own process."""

    def make(run_dir: Path, **config: Any) -> GRPOTrainer:
        model, tokenizer = load_cpu_tiny()
        judge = llm_judge(judge_server.url)
        return GRPOTrainer(tiny_config(**config), model, tokenizer, make_env(), judge, run_dir, progress=False)

    return make
