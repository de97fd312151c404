"""`benchmarks/inbox_learning.py` runs for over an hour: a run stopped halfway must go on from what it measured, and
only with the settings it measured them under."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from inbox_learning import Progress  # noqa: E402  (a script, not a package)


def test_a_stopped_run_goes_on_from_what_it_measured_and_only_under_the_same_settings(tmp_path: Path) -> None:
    path = tmp_path / "inbox_learning.partial.json"
    calls: list[str] = []

    def measured(name: str, value: float):
        def measurement() -> dict:
            calls.append(name)
            return {"eval_success": value}

        return measurement

    def stopped() -> dict:
        raise KeyboardInterrupt  # killed during the second measurement

    first = Progress(path, {"episodes": 2000})
    assert first.measure("before", measured("before", 0.34)) == {"eval_success": 0.34}
    with pytest.raises(KeyboardInterrupt):
        first.measure("seed 0", stopped)

    again = Progress(path, {"episodes": 2000})
    assert again.measure("before", measured("before", 0.99)) == {"eval_success": 0.34}  # read, not measured again
    assert again.measure("seed 0", measured("seed 0", 0.5)) == {"eval_success": 0.5}
    assert calls == ["before", "seed 0"]

    other = Progress(path, {"episodes": 400})  # other settings: nothing carried over
    assert other.measure("before", measured("before", 0.3)) == {"eval_success": 0.3}
    assert calls == ["before", "seed 0", "before"]
    assert not list(tmp_path.glob("*.tmp"))
