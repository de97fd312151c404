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

    evaluation = {"episodes": 2000}
    seed_0 = {**evaluation, "config": {"beta": 0.04}}
    first = Progress(path)
    assert first.measure("before", evaluation, measured("before", 0.34)) == {"eval_success": 0.34}
    with pytest.raises(KeyboardInterrupt):
        first.measure("seed 0", seed_0, stopped)

    again = Progress(path)
    assert again.measure("before", evaluation, measured("before", 0.99)) == {"eval_success": 0.34}  # read back
    assert again.measure("seed 0", seed_0, measured("seed 0", 0.5)) == {"eval_success": 0.5}
    assert calls == ["before", "seed 0"]

    # Other training settings: "before" (which does not depend on them) is read back, the run is measured again.
    other_training = Progress(path)
    assert other_training.measure("before", evaluation, measured("before", 0.99)) == {"eval_success": 0.34}
    other_seed_0 = {**evaluation, "config": {"beta": 0.0}}
    assert other_training.measure("seed 0", other_seed_0, measured("seed 0", 0.6)) == {"eval_success": 0.6}
    assert calls == ["before", "seed 0", "seed 0"]

    other = Progress(path)  # another evaluation: nothing carried over
    assert other.measure("before", {"episodes": 400}, measured("before", 0.3)) == {"eval_success": 0.3}
    assert calls == ["before", "seed 0", "seed 0", "before"]
    assert not list(tmp_path.glob("*.tmp"))


def test_the_code_digest_changes_with_the_code(tmp_path: Path) -> None:
    from inbox_learning import code_digest

    files = [tmp_path / "a.py", tmp_path / "b.py"]
    files[0].write_text("x = 1\n")
    files[1].write_text("y = 2\n")
    first = code_digest(files)
    files[1].write_text("y = 3\n")
    assert code_digest(files) != first
    assert len(code_digest()) == 12  # the package and the scripts, read without error
