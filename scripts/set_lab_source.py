#!/usr/bin/env python3
"""Point the notebooks at where this lab is published: a fork runs it once, then commits the result.

    python scripts/set_lab_source.py https://github.com/OWNER/REPO   # set the source and rewrite the notebooks
    python scripts/set_lab_source.py                                 # rewrite the notebooks from the setting
    python scripts/set_lab_source.py --check                         # exit 1 if a notebook is out of step

The setting is `Repository` under `[project.urls]` in pyproject.toml: the one place in the repository that names
the source. From it, this script writes every notebook's first code cell (the install cell, `INSTALL_CELL` below
with the source filled in) and the owner/repo of every Open-in-Colab link (the badges open the `main` branch).
tests/test_colab.py checks that the notebooks agree with the setting. Only python3 is needed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTING = re.compile(r'^Repository = "([^"]*)"$', re.MULTILINE)
"""The line in pyproject.toml's `[project.urls]` that holds the source."""
GITHUB = re.compile(r"^(?:https://github\.com/)?([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")
COLAB_LINK = re.compile(r"(https://colab\.research\.google\.com/github/)[^/\s)]+/[^/\s)]+/")
"""The start of every Open-in-Colab link, up to the owner/repo that this script sets."""
INSTALL_CELL_START = "# Install the lab"
"""How the install cell starts: the script refuses to overwrite a first code cell that starts otherwise."""

# The install cell, identical in every notebook but for the source. A learner reads it: keep it short.
INSTALL_CELL = '''\
# Install the lab, unless it is importable already (a local clone set up with `python3 scripts/lab.py`). Source: a
# wheel or zip uploaded to the working folder (Colab: the Files panel), else $LAB_SOURCE, else LAB_DEFAULT_SOURCE.
# With CUDA it adds `[gpu]` (Unsloth; versions pinned in pyproject.toml), and it keeps the installed torch.
# Written by scripts/set_lab_source.py from one template: change it there.
import glob, importlib.metadata, importlib.util, os, pathlib, subprocess, sys, tempfile

LAB_DEFAULT_SOURCE = "{SOURCE}"


def installed_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def lab_install_command():
    """pip's command line: the lab from its source, [gpu] with CUDA, and a constraints file that pins torch."""
    uploads = sorted(glob.glob("agentic_rl_lab-*.whl") + glob.glob("agentic-rl-lab*.zip"))
    source = uploads[-1] if uploads else os.environ.get("LAB_SOURCE") or LAB_DEFAULT_SOURCE
    if os.path.exists(source):  # a local file: pip wants it as a file:// URL
        source = pathlib.Path(source).resolve().as_uri()
    cuda = importlib.util.find_spec("torch") and importlib.import_module("torch").cuda.is_available()
    pins = [f"{n}=={installed_version(n)}" for n in ("torch", "torchvision", "torchaudio") if installed_version(n)]
    constraints = pathlib.Path(tempfile.gettempdir(), "lab-constraints.txt")
    constraints.write_text("\\n".join(pins) + "\\n")
    requirement = f"agentic-rl-lab{'[gpu]' if cuda else ''} @ {source}"
    return [sys.executable, "-m", "pip", "install", "-q", "-c", str(constraints), requirement]


if importlib.util.find_spec("agentic_rl_lab") is None:
    command = lab_install_command()
    if subprocess.run(command).returncode != 0:
        raise RuntimeError(
            f"pip could not install {command[-1]!r} (its message is above). To install the lab from elsewhere, "
            "upload a wheel (built in a clone with `pip wheel --no-deps . -w dist`) or a zip of the repository "
            "into the working folder (on Colab: the Files panel), or set the source before this cell with "
            "os.environ['LAB_SOURCE'] = 'git+https://github.com/OWNER/REPO' (or a wheel's URL), then run it again."
        )
    names = ["agentic-rl-lab", "torch", "transformers", "peft", "trl", "unsloth", "unsloth_zoo", "bitsandbytes"]
    print("installed:", ", ".join(f"{n} {installed_version(n)}" for n in names if installed_version(n)))'''


def read_repository(root: Path = ROOT) -> str:
    """The source setting: `https://github.com/OWNER/REPO` from pyproject.toml."""
    found = SETTING.findall((root / "pyproject.toml").read_text())
    if len(found) != 1:
        sys.exit(f'{root / "pyproject.toml"}: expected one `Repository = "..."` line under [project.urls]')
    return found[0]


def write_repository(url: str, root: Path = ROOT) -> None:
    path = root / "pyproject.toml"
    path.write_text(SETTING.sub(f'Repository = "{url}"', path.read_text(), count=1))


def owner_repo(url: str) -> tuple[str, str]:
    """('OWNER', 'REPO') of a GitHub repository given as `https://github.com/OWNER/REPO` or `OWNER/REPO`."""
    match = GITHUB.match(url.strip())
    if not match:
        sys.exit(f"not a GitHub repository: {url!r} (give https://github.com/OWNER/REPO)")
    return match.group(1), match.group(2)


def pip_source(url: str) -> str:
    """What pip installs the repository at `url` from: `git+https://github.com/OWNER/REPO` (its default branch)."""
    owner, repo = owner_repo(url)
    return f"git+https://github.com/{owner}/{repo}"


def install_cell(url: str) -> str:
    """The install cell for the repository at `url`: `INSTALL_CELL` with its default source filled in."""
    return INSTALL_CELL.replace("{SOURCE}", pip_source(url))


def badge_url(url: str, notebook: str) -> str:
    """Where the Open-in-Colab badge of `notebook` (a file name in notebooks/) points."""
    owner, repo = owner_repo(url)
    return f"https://colab.research.google.com/github/{owner}/{repo}/blob/main/notebooks/{notebook}"


def first_code_cell(notebook: dict) -> dict:
    return next(cell for cell in notebook["cells"] if cell["cell_type"] == "code")


def updated(path: Path, url: str) -> str:
    """The notebook's text with its install cell and the owner/repo of its Colab links set for `url`, formatted as
    Jupyter saves it. Refuses a notebook whose first code cell is not an install cell, rather than overwrite it."""
    notebook = json.loads(path.read_text())
    first = first_code_cell(notebook)
    if not "".join(first["source"]).startswith(INSTALL_CELL_START):
        sys.exit(
            f"{path.name}: the first code cell is not the install cell; insert a code cell above it holding the "
            f"line '{INSTALL_CELL_START}', then run this again"
        )
    first["source"] = install_cell(url).splitlines(keepends=True)
    owner, repo = owner_repo(url)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            text = COLAB_LINK.sub(rf"\g<1>{owner}/{repo}/", "".join(cell["source"]))
            cell["source"] = text.splitlines(keepends=True)
    return json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Set where the notebooks install the lab from (see the docstring).")
    parser.add_argument("repository", nargs="?", help="https://github.com/OWNER/REPO (default: keep the setting)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook is out of step")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this script's)")
    args = parser.parse_args(argv)
    if args.repository and args.check:
        parser.error("--check takes no repository: it checks the notebooks against the setting")
    if args.repository:
        owner, repo = owner_repo(args.repository)
        write_repository(f"https://github.com/{owner}/{repo}", args.root)
    url = read_repository(args.root)
    stale = []
    for path in sorted((args.root / "notebooks").glob("*.ipynb")):
        text = updated(path, url)
        if text != path.read_text():
            stale.append(path.name)
            if not args.check:
                path.write_text(text)
    if args.check:
        print(f"out of step with {url}: {', '.join(stale)}" if stale else f"every notebook installs from {url}")
        return 1 if stale else 0
    print(f"source: {url}; rewrote {', '.join(stale) or 'nothing (already in step)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
