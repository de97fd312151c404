"""Every notebook runs end to end on the cpu-tiny tier, through its `parameters` cell, and is committed clean.

The notebooks assert on their own results (exercise checks, sanity checks), so a notebook that runs here is a
notebook whose story still holds. Each one gets the small sizes below, injected by papermill.
"""

import json
from pathlib import Path

import papermill
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CPU_TINY = {"TIER": "cpu-tiny"}
PARAMETERS = {
    "01_agents_as_pomdps.ipynb": {**CPU_TINY, "NUM_SEEDS": 200},
    "02_collecting_trajectories.ipynb": {**CPU_TINY, "NUM_GENERATIONS": 4, "NUM_SCENARIOS": 4, "API_POLICY": "off"},
    "03_relative_judging.ipynb": {
        **CPU_TINY,
        "NUM_GROUPS": 12,
        "API_JUDGE": "off",
        "SELF_JUDGE": "off",
        "TINY_JUDGE_GROUPS": 4,
    },
    "04_grpo_step_by_step.ipynb": {**CPU_TINY, "NUM_GENERATIONS": 4},
    "05_training_loop.ipynb": {
        **CPU_TINY,
        "STEPS": 2,
        "GROUPS_PER_STEP": 2,
        "NUM_GENERATIONS": 4,
        "EVAL_EVERY": 2,
        "EVAL_EPISODES": 8,
    },
}


def all_notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def test_every_notebook_has_ci_parameters():
    assert all_notebooks(), "no notebooks found"
    assert sorted(p.name for p in all_notebooks()) == sorted(PARAMETERS)


@pytest.mark.parametrize("path", all_notebooks(), ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    notebook = json.loads(path.read_text())
    dirty = [i for i, cell in enumerate(notebook["cells"]) if cell.get("outputs") or cell.get("execution_count")]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; clear them before committing"
    assert "widgets" not in notebook.get("metadata", {}), f"{path.name}: saved widget state; clear it"


@pytest.mark.parametrize("path", all_notebooks(), ids=lambda p: p.name)
def test_notebook_has_a_tagged_parameters_cell_and_the_conventions(path):
    notebook = json.loads(path.read_text())
    tagged = [c for c in notebook["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
    assert "TIER" in "".join(tagged[0]["source"])
    text = "".join("".join(c["source"]) for c in notebook["cells"])
    assert "colab.research.google.com" in text, "Open-in-Colab badge"
    assert "## Summary" in text and "## Exercises" in text
    assert text.count("assert ") >= 2, "exercises check themselves with assert"


@pytest.mark.parametrize("path", all_notebooks(), ids=lambda p: p.name)
def test_notebook_runs_on_cpu_tiny(path, tmp_path):
    """On the real cpu-tiny model (committed in agentic_rl_lab/data/tiny-model), as a learner runs it, but smaller."""
    parameters = dict(PARAMETERS[path.name])
    if "RUN_DIR" in "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]):
        parameters["RUN_DIR"] = str(tmp_path / "run")
    papermill.execute_notebook(
        str(path),
        str(tmp_path / path.name),
        parameters=parameters,
        kernel_name="python3",
        cwd=str(NOTEBOOKS),
        progress_bar=False,
        execution_timeout=600,
    )
