"""Every notebook runs end to end on the cpu-tiny tier, through its `parameters` cell, and is committed clean.

The notebooks assert on their own results (exercise checks, sanity checks), so a notebook that runs here is a
notebook whose story still holds. Each one gets the small sizes below, injected by papermill.
"""

import json
import re
from pathlib import Path

import papermill
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CPU_TINY = {"TIER": "cpu-tiny", "EXERCISES": "ci"}
"""Every notebook runs on cpu-tiny, with its exercises in "ci" mode: each check must fail the untouched TODO, and
each (hidden) solution must pass its check (agentic_rl_lab/exercises.py)."""
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
        "HACK_STEPS": 2,
    },
    "06_your_own_environment.ipynb": {
        **CPU_TINY,
        "WARM_START_STEPS": 200,  # the default: fewer leave the model without the tool's name
        "WARM_START_EPISODES": 600,
        "STEPS": 2,
        "GROUPS_PER_STEP": 2,
        "NUM_GENERATIONS": 4,
        "EVAL_EPISODES": 24,
        "INBOX_EPISODES": 8,
        "INBOX_STEPS": 1,
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


def exercise_cells(notebook: dict) -> tuple[list[dict], dict[str, list[dict]]]:
    """The code cells after "## Exercises", and, by exercise name, its cells: the one before its check, the check
    (`exercises.check("1", ...)`) and the one after."""
    cells = notebook["cells"]
    start = next(i for i, cell in enumerate(cells) if "## Exercises" in "".join(cell["source"]))
    code = [cell for cell in cells[start:] if cell["cell_type"] == "code"]
    exercises = {}
    for k, cell in enumerate(code):
        found = re.search(r'^exercises\.check\("(\w+)"', "".join(cell["source"]), re.MULTILINE)
        if found:
            exercises[found[1]] = code[k - 1 : k + 2]
    return code, exercises


@pytest.mark.parametrize("path", all_notebooks(), ids=lambda p: p.name)
def test_every_exercise_is_a_todo_a_check_and_a_hidden_solution(path):
    notebook = json.loads(path.read_text())
    (parameters,) = [c for c in notebook["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert 'EXERCISES = "learner"' in "".join(parameters["source"]), "a learner's checks fail until the TODO is done"
    code, exercises = exercise_cells(notebook)
    assert len(exercises) >= 2, f"{path.name}: at least two exercises"
    for name, (todo, check, solution) in exercises.items():
        todo_text, solution_text = "".join(todo["source"]), "".join(solution["source"])
        assert 'raise NotImplementedError("TODO' in todo_text, f"exercise {name}: the cell before the check is a TODO"
        for visible in (todo, check):
            assert not visible["metadata"].get("jupyter", {}).get("source_hidden"), (
                f"exercise {name}: shown, not hidden"
            )
        assert f'exercises.solution("{name}",' in solution_text, f"exercise {name}: the cell after the check solves it"
        assert "NotImplementedError" not in solution_text
        assert solution["metadata"].get("cellView") == "form", f"exercise {name}: solution collapsed in Colab"
        assert solution["metadata"].get("jupyter", {}).get("source_hidden") is True, f"{name}: collapsed in JupyterLab"
    assert "Exercises(EXERCISES)" in "".join(code[0]["source"])
    assert "exercises.summary()" in "".join(code[-1]["source"]), "the last cell asserts that every exercise ran"
