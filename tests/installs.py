"""Installing the lab as a learner's machine would, for tests/test_wheel.py and tests/test_colab.py: the wheel of
this checkout, and fresh venvs that hold everything but the lab (fixtures in conftest.py)."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def isolated_env(**extra: str) -> dict[str, str]:
    """The environment for a fresh venv's processes: pip offline and unconfigured, no user site, no bytecode
    written (the fresh venv reads this venv's packages), and nothing that points back at the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV", "LAB_"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return {**env, **extra}


def run(command: list, **kwargs) -> subprocess.CompletedProcess:
    """Run `command`, failing the test with its output if it fails."""
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{command} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result
