"""The notebooks as Colab opens them: one install cell from one source setting, GPU runtimes, collapsed solutions.

The install cell runs for real here, on a CPU: in a fresh venv without the lab, it installs the wheel of this
checkout with pip offline (the lab's dependencies are already there, see `fresh_venv` in conftest.py).
"""

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from installs import isolated_env, run

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CPU_ONLY = {"01_agents_as_pomdps.ipynb"}
"""Notebooks that run no model, so they ask Colab for no GPU."""

spec = importlib.util.spec_from_file_location("set_lab_source", ROOT / "scripts" / "set_lab_source.py")
set_lab_source = importlib.util.module_from_spec(spec)
spec.loader.exec_module(set_lab_source)


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def source(cell: dict) -> str:
    return "".join(cell["source"])


def install_cell() -> str:
    """The install cell's code as the notebooks hold it (the first test checks they all hold the same)."""
    return source(set_lab_source.first_code_cell(load(NOTEBOOKS[0])))


# ----- one source setting, one template ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_installs_from_the_one_setting_and_its_badge_opens_itself(path: Path) -> None:
    url = set_lab_source.read_repository()
    notebook = load(path)
    assert source(set_lab_source.first_code_cell(notebook)) == set_lab_source.install_cell(url), (
        f"{path.name}: the install cell is not the template; run `python scripts/set_lab_source.py`"
    )
    assert source(notebook["cells"][0]).count(set_lab_source.badge_url(url, path.name)) == 1, "badge in the opening"
    owner, repo = set_lab_source.owner_repo(url)
    links = re.findall(r"https://colab\.research\.google\.com/github/[^)\s]+", path.read_text())
    prefix = f"https://colab.research.google.com/github/{owner}/{repo}/blob/main/notebooks/"
    assert links and all(link.startswith(prefix) for link in links), f"Colab links to another repository: {links}"


def test_a_fork_sets_its_source_once_and_every_notebook_follows(tmp_path: Path) -> None:
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("images"))
    old = set_lab_source.read_repository(tmp_path)
    assert set_lab_source.main(["https://github.com/someone/my-lab.git", "--root", str(tmp_path)]) == 0

    assert set_lab_source.read_repository(tmp_path) == "https://github.com/someone/my-lab"
    for path in sorted((tmp_path / "notebooks").glob("*.ipynb")):
        text = path.read_text()
        notebook = json.loads(text)
        assert 'LAB_DEFAULT_SOURCE = "git+https://github.com/someone/my-lab"' in source(notebook["cells"][1])
        assert f"colab.research.google.com/github/someone/my-lab/blob/main/notebooks/{path.name}" in text
        assert old.removeprefix("https://github.com/") not in text, f"{path.name} still names the old source"
        assert notebook["cells"][2:] == load(ROOT / "notebooks" / path.name)["cells"][2:], "nothing else changed"
    assert set_lab_source.main(["--check", "--root", str(tmp_path)]) == 0
    assert set_lab_source.main(["--check"]) == 0, "this repository's notebooks are in step with its setting"

    path = tmp_path / "notebooks" / NOTEBOOKS[0].name
    notebook = json.loads(path.read_text())
    notebook["cells"][1]["source"] = ["TIER = 'auto'\n"]  # a notebook that starts with its parameters
    path.write_text(json.dumps(notebook))
    with pytest.raises(SystemExit, match="the first code cell is not the install cell"):
        set_lab_source.main(["--root", str(tmp_path)])
    assert json.loads(path.read_text()) == notebook, "its first code cell was not overwritten"


# ----- what the install cell does ------------------------------------------------------------------------------------
@pytest.fixture
def cell_namespace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict:
    """The install cell run in this process, where the lab is importable: it defines its functions, installs
    nothing (pip must not run), and works in a folder of its own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAB_SOURCE", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def no_pip(*args, **kwargs):
        raise AssertionError(f"the install cell ran {args} where the lab is importable")

    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", no_pip)
    namespace: dict = {}
    exec(compile(install_cell(), "install-cell", "exec"), namespace)
    monkeypatch.setattr(subprocess, "run", real_run)
    return namespace


@pytest.mark.parametrize("cuda", [True, False], ids=["cuda", "cpu"])
def test_the_command_adds_the_gpu_extra_with_cuda_and_pins_the_installed_torch(
    cell_namespace: dict, monkeypatch: pytest.MonkeyPatch, cuda: bool
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    command = cell_namespace["lab_install_command"]()
    default = set_lab_source.pip_source(set_lab_source.read_repository())
    assert command[-1] == f"agentic-rl-lab{'[gpu]' if cuda else ''} @ {default}"
    assert command[:4] == [sys.executable, "-m", "pip", "install"]
    constraints = Path(command[command.index("-c") + 1])
    assert f"torch=={torch.__version__}" in constraints.read_text().splitlines()


def test_an_uploaded_wheel_wins_over_lab_source_which_wins_over_the_default(
    cell_namespace: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("LAB_SOURCE", "git+https://example.org/fork/agentic-rl-lab@v2")
    assert (
        cell_namespace["lab_install_command"]()[-1] == "agentic-rl-lab @ git+https://example.org/fork/agentic-rl-lab@v2"
    )
    (tmp_path / "agentic-rl-lab-main.zip").write_bytes(b"")
    (tmp_path / "agentic_rl_lab-0.1.0-py3-none-any.whl").write_bytes(b"")
    expected = (tmp_path / "agentic_rl_lab-0.1.0-py3-none-any.whl").resolve().as_uri()
    assert cell_namespace["lab_install_command"]()[-1] == f"agentic-rl-lab @ {expected}"


@pytest.mark.parametrize("how", ["LAB_SOURCE", "uploaded"])
def test_in_a_fresh_venv_the_cell_installs_the_lab_and_says_what_it_installed(
    how: str, lab_wheel: Path, fresh_venv: Path, tmp_path: Path
) -> None:
    work = tmp_path / "content"  # Colab's working folder
    work.mkdir()
    if how == "uploaded":
        shutil.copy2(lab_wheel, work)
        env = isolated_env(LAB_SOURCE=str(tmp_path / "nothing-here.whl"))  # the upload wins
    else:
        env = isolated_env(LAB_SOURCE=str(lab_wheel))
    (tmp_path / "cell.py").write_text(install_cell())
    result = run([fresh_venv, tmp_path / "cell.py"], env=env, cwd=work)

    printed = result.stdout.strip()
    assert printed.startswith("installed: "), result.stdout
    versions = dict(item.split() for item in printed.removeprefix("installed: ").split(", "))
    assert versions["agentic-rl-lab"] == "0.1.0" and versions["torch"] == torch.__version__
    assert {"transformers", "peft"} <= set(versions)
    where = run([fresh_venv, "-c", "import agentic_rl_lab; print(agentic_rl_lab.__file__)"], env=env, cwd=work)
    assert Path(where.stdout.strip()).is_relative_to(fresh_venv.parents[1]), "the lab came from the wheel"
    again = run([fresh_venv, tmp_path / "cell.py"], env=env, cwd=work)
    assert again.stdout == "", "with the lab installed, the cell does nothing"


def test_when_pip_fails_the_cell_says_how_to_point_it_elsewhere(fresh_venv: Path, tmp_path: Path) -> None:
    (tmp_path / "cell.py").write_text(install_cell())
    missing = (tmp_path / "gone" / "agentic_rl_lab-0.1.0-py3-none-any.whl").as_uri()
    env = isolated_env(LAB_SOURCE=missing)
    result = subprocess.run([fresh_venv, tmp_path / "cell.py"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith(
        f"RuntimeError: pip could not install 'agentic-rl-lab @ {missing}' (its message is above)"
    )
    for advice in ("upload a wheel", "pip wheel --no-deps . -w dist", "LAB_SOURCE", "git+https://github.com/"):
        assert advice in message


# ----- Colab's conventions -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_that_run_a_model_ask_colab_for_a_gpu_runtime(path: Path) -> None:
    metadata = load(path)["metadata"]
    if path.name in CPU_ONLY:
        assert "accelerator" not in metadata and "gpuType" not in metadata.get("colab", {})
    else:
        assert metadata["accelerator"] == "GPU"
        assert metadata["colab"]["gpuType"] == "T4" and "provenance" in metadata["colab"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_solution_cell_is_collapsed_in_jupyterlab_and_in_colab(path: Path) -> None:
    cells = load(path)["cells"]
    solutions = [
        cell
        for cell in cells
        if "solution" in cell["metadata"].get("tags", [])
        or cell["metadata"].get("jupyter", {}).get("source_hidden")
        or re.match(r"# Solution", source(cell))
    ]
    assert len(solutions) >= 2, "each notebook ends with at least two exercises, each with its solution"
    for cell in solutions:
        first_line = source(cell).splitlines()[0]
        assert cell["metadata"].get("jupyter", {}).get("source_hidden") is True, first_line
        assert cell["metadata"].get("cellView") == "form", first_line
        assert "solution" in cell["metadata"].get("tags", []), first_line
