"""Shared pytest fixtures."""

import shutil
import sys
import sysconfig
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
from chat_server import ChatServer  # tests/ is on sys.path: pytest puts a rootless conftest's folder there
from installs import ROOT, isolated_env, run


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A scripted OpenAI-compatible server on 127.0.0.1 (see tests/chat_server.py), stopped after the test."""
    with ChatServer() as server:
        yield server


@pytest.fixture(scope="session")
def small_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """The tiny model built with `SMALL_CONFIG` (seconds): a real Llama + tokenizer + chat template on disk."""
    from agentic_rl_lab.tiny import SMALL_CONFIG, build_tiny_model

    return build_tiny_model(SMALL_CONFIG, root=tmp_path_factory.mktemp("tiny-cache"), progress=False)


# ----- a clean install of the wheel (tests/test_wheel.py, tests/test_colab.py) ----------------------------------------
THIS_SITE_PACKAGES = Path(sysconfig.get_path("purelib"))


@pytest.fixture(scope="session")
def lab_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built offline the way the README says (`pip wheel --no-deps`): seconds.

    It is built from a copy of what goes into it (pyproject.toml, README.md, agentic_rl_lab/), so the build's
    `build/` and `*.egg-info` folders never land in the working tree."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(ROOT / "agentic_rl_lab", source / "agentic_rl_lab", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", source, "-w", work / "dist"],
        env=isolated_env(),
    )
    (wheel,) = (work / "dist").glob("agentic_rl_lab-*.whl")
    return wheel


@pytest.fixture(scope="session")
def lab_dependencies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of links to everything installed in this venv except the lab itself (and .pth files, which would
    bring back its editable install): the lab's dependencies, torch included, without reinstalling them."""
    folder = tmp_path_factory.mktemp("lab-dependencies")
    for entry in THIS_SITE_PACKAGES.iterdir():
        if not entry.name.startswith(("agentic_rl_lab", "__editable__", "__pycache__")) and entry.suffix != ".pth":
            (folder / entry.name).symlink_to(entry)
    return folder


@pytest.fixture
def fresh_venv(tmp_path: Path, lab_dependencies: Path) -> Path:
    """A new venv without the lab, whose python (returned) also sees this venv's other packages, pip included,
    through a .pth file: they come after its own site-packages, so what is installed into it wins."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site_packages = Path(run([python, "-c", code], env=isolated_env()).stdout.strip())
    (site_packages / "lab-dependencies.pth").write_text(f"{lab_dependencies}\n")
    return python
