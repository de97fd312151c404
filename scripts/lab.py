#!/usr/bin/env python3
"""Set up the lab in a local virtual environment and run it: the README's two commands.

    python3 scripts/lab.py demo     # the CPU end-to-end demo
    python3 scripts/lab.py test     # the whole test suite, notebooks included

Only python3 (with venv and pip) is needed. The script creates `.venv/` beside the repository, installs a
**CPU** build of torch first (a bare torch requirement would pull a multi-GB CUDA build), then the package.
It reinstalls only when `pyproject.toml` changes, so the second run starts at once. Extra arguments go to
the command: `python3 scripts/lab.py test -k rollout`, `python3 scripts/lab.py demo --groups 50`.

`test` also keeps a second environment, `.venv-trl/`, with a TRL that trains on a CPU, for the tests that run TRL's
trainer beside the lab's (`LAB_TRL_PYTHON` points the tests at it).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("LAB_VENV", ROOT / ".venv"))
TRL_VENV = Path(os.environ.get("LAB_TRL_VENV", ROOT / ".venv-trl"))
TRL_CPU = "trl==1.16.0"
"""TRL for the tests and benchmark that run TRL's own GRPOTrainer beside the lab's: 1.15, the newest Unsloth accepts
(and so the one in `.venv`), cannot train on a CPU, so it gets a second environment without Unsloth."""
TORCH = "torch==2.13.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def run(*command: str | Path) -> None:
    print("+", " ".join(map(str, command)), flush=True)
    subprocess.run([str(part) for part in command], check=True)


def venv_python(where: Path = VENV) -> Path:
    return where / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_environment(extras: str, where: Path = VENV, also: tuple[str, ...] = ()) -> Path:
    """Create the venv `where` and install the package with `extras` (and the requirements `also`), unless this
    exact setup is already there."""
    python = venv_python(where)
    if not python.exists():
        print(f"creating a virtual environment in {where}", flush=True)
        try:
            venv.EnvBuilder(with_pip=True).create(where)
        except Exception as exc:
            sys.exit(f"could not create {where} ({exc}); on Debian/Ubuntu install python3-venv first")
    stamp = where / f".lab-installed-{extras or 'base'}"
    setup_files = [ROOT / "pyproject.toml", ROOT / "scripts" / "unsloth-cpu.txt"]
    wanted = hashlib.sha256(b"".join(path.read_bytes() for path in setup_files) + repr(also).encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted:
        return python
    pip = (python, "-m", "pip", "install", "--quiet")
    run(*pip, "--upgrade", "pip")
    has_torch = subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode == 0
    if not has_torch:
        # A CPU wheel from a local wheel folder or mirror if pip is configured with one, else PyTorch's CPU index.
        # The wheel alone (--no-deps): its small dependencies come from the normal index with the package below.
        if subprocess.run([*map(str, pip), "--no-index", "--no-deps", TORCH]).returncode != 0:
            run(*pip, TORCH, "--index-url", TORCH_CPU_INDEX)
    run(*pip, "--editable", f"{ROOT}[{extras}]" if extras else str(ROOT), *also)
    if extras == "dev":  # the tests run Unsloth's real loading path on its CPU fallback
        run(*pip, "--no-deps", "--requirement", ROOT / "scripts" / "unsloth-cpu.txt")
    stamp.write_text(wanted)
    return python


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in {"demo", "test"}:
        sys.exit(__doc__)
    command, rest = sys.argv[1], sys.argv[2:]
    os.chdir(ROOT)
    if command == "demo":
        python = ensure_environment("")
        run(python, "-m", "agentic_rl_lab", "demo", *rest)
    else:
        python = ensure_environment("dev")
        trl_python = ensure_environment("", TRL_VENV, (TRL_CPU,))
        os.environ["LAB_TRL_PYTHON"] = str(trl_python)  # tests/integrations/test_trl.py runs TRL there
        run(python, "-m", "ruff", "check", ".")
        run(python, "-m", "pytest", *rest)


if __name__ == "__main__":
    try:
        main()
    except subprocess.CalledProcessError as exc:
        sys.exit(exc.returncode)
