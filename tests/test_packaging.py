"""The package's promises: light import, a CLI that lists its commands, one dependency list in two files."""

import json
import re
import subprocess
import sys
from importlib import metadata

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"pytorch-cpu": "torch"}  # conda-forge package name -> PyPI name


def requirement(line: str) -> tuple[str, str]:
    """Split `name>=1,<2` into a normalised name and its specifier."""
    name, specifier = re.match(r"([A-Za-z0-9_.\-]+)(.*)", line.strip()).groups()
    name = name.lower().replace("_", "-")
    return CONDA_NAMES.get(name, name), specifier.replace(" ", "")


def test_environment_yml_lists_the_same_packages_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = dict(map(requirement, project["dependencies"] + project["optional-dependencies"]["dev"]))
    conda = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    pip_section = next(item["pip"] for item in conda if isinstance(item, dict))
    listed = [item for item in conda if isinstance(item, str) and item.split(">")[0] not in {"python", "pip"}]
    assert dict(map(requirement, listed + pip_section)) == wanted


def test_gpu_extra_holds_unsloth_and_core_pins_stay_inside_what_it_accepts():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(r.startswith("unsloth") for r in project["optional-dependencies"]["gpu"])
    core = dict(map(requirement, project["dependencies"]))
    assert "<=5.17.0" in core["transformers"], "unsloth 2026.10.9 accepts transformers<=5.17.0"
    assert "<2.15" in core["torch"], "unsloth 2026.10.9 accepts torch<2.15"


def test_gpu_extra_pins_versions_that_unsloth_accepts_and_the_cpu_tests_use_the_same_unsloth():
    """The `gpu` extra is the tested version set, in one place; the Unsloth that the CPU tests import is that one."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    gpu = dict(map(requirement, project["optional-dependencies"]["gpu"]))
    assert {"unsloth", "unsloth-zoo", "transformers", "trl", "peft", "bitsandbytes"} <= set(gpu)
    assert all(specifier.startswith("==") for specifier in gpu.values()), f"pin exact versions: {gpu}"
    pinned = {name: Version(specifier[2:]) for name, specifier in gpu.items()}
    core = dict(map(requirement, project["dependencies"]))
    for name in set(pinned) & set(core):
        assert pinned[name] in SpecifierSet(core[name]), f"gpu pins {name} {pinned[name]} outside {core[name]}"
    for package in ("unsloth", "unsloth_zoo"):  # installed for the tests by scripts/lab.py (scripts/unsloth-cpu.txt)
        assert Version(metadata.version(package)) == pinned[package.replace("_", "-")]
        for line in metadata.requires(package) or []:
            wanted = Requirement(line)
            name = wanted.name.lower().replace("_", "-")
            if name in pinned and (wanted.marker is None or wanted.marker.evaluate({"extra": ""})):
                assert pinned[name] in wanted.specifier, f"{package} wants {wanted}; the gpu extra pins {pinned[name]}"


def test_importing_the_package_loads_no_heavy_or_gpu_library():
    code = (
        "import sys, agentic_rl_lab, agentic_rl_lab.envs, agentic_rl_lab.rollout, agentic_rl_lab.trajectory, "
        "agentic_rl_lab.policies; print(sorted(m for m in ('torch', 'unsloth', 'vllm', 'transformers') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_cli_help_lists_the_subcommands():
    out = subprocess.run(
        [sys.executable, "-m", "agentic_rl_lab", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ["demo", "envs", "play", "make-inbox"]:
        assert re.search(rf"^\s+{command}\s", out, re.MULTILINE), f"{command} missing from --help"


def test_demo_runs_and_saves_loadable_trajectories(tmp_path):
    from agentic_rl_lab.models import PROFILES
    from agentic_rl_lab.trajectory import load_groups

    result = subprocess.run(
        [sys.executable, "-m", "agentic_rl_lab", "demo", "--groups", "3", "--out", str(tmp_path), "--quiet"]
        + ["--train-steps", "2", "--eval-episodes", "8"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "information-theoretic optimum" in result.stdout
    assert "held-out success" in result.stdout  # the GRPO part ran, evaluated before and after
    metrics = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics if not r["eval_only"]] == [0, 1]
    assert (tmp_path / "grpo" / "training.png").stat().st_size > 0
    config = json.loads((tmp_path / "grpo" / "config.json").read_text())
    assert config["temperature"] == PROFILES["cpu-tiny"].temperature, "training samples at the tier's temperature"
    assert config["learning_rate"] == PROFILES["cpu-tiny"].learning_rate, "the tier's rate for its LoRA adapters"
    (checkpoint,) = (tmp_path / "grpo" / "checkpoints").glob("step-*")
    assert (checkpoint / "model" / "adapter_model.safetensors").exists(), "the demo trains LoRA adapters"
    files = sorted(tmp_path.glob("*.jsonl"))
    assert any(f.name == "guess_number-expert.jsonl" for f in files)
    for file in files:
        groups = load_groups(file)
        assert len(groups) == 3 and all(len(g.trajectories) == 4 for g in groups)


def test_play_reads_tool_calls_and_plain_text_from_stdin():
    moves = 'guess {"n": 50}\nhello\nguess {"n": 500}\n'
    out = subprocess.run(
        [sys.executable, "-m", "agentic_rl_lab", "play", "guess_number", "--seed", "1"],
        input=moves,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "[tool] lower than 50" in out or "[tool] higher than 50" in out
    assert "reply with a tool call" in out and "between 1 and 100" in out
    assert "hidden state" in out
