"""The wheel is the lab as pip (and Colab) install it: it must carry the committed cpu-tiny model and the inbox.

Without them, `tiny.default_model_path()` would rebuild the model (15-45 minutes) on every fresh install. The wheel
is built from this checkout and installed, not editable, into a fresh venv that sees this venv's other packages
(see `fresh_venv` in conftest.py), then run from another folder.
"""

import json
import zipfile
from pathlib import Path

from installs import isolated_env, run

from agentic_rl_lab import tiny
from agentic_rl_lab.envs import inbox_data
from agentic_rl_lab.warm_start import RECIPES

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_carries_the_committed_model_and_inbox(lab_wheel: Path) -> None:
    names = set(zipfile.ZipFile(lab_wheel).namelist())
    warm_starts = [recipe.directory for recipe in RECIPES.values() if recipe.directory.is_dir()]
    for folder in (tiny.EMBEDDED_MODEL_DIR, inbox_data.DEFAULT_DATA_DIR, *warm_starts):
        committed = {path.relative_to(ROOT).as_posix() for path in folder.iterdir()}
        assert committed and committed <= names, f"missing from the wheel: {sorted(committed - names)}"


def test_an_installed_wheel_runs_the_demo_and_finds_its_model_without_building(
    lab_wheel: Path, fresh_venv: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file: any attempt to create the model cache under it fails at once")
    cache = blocker / "cache"  # a model build starts by creating this folder (tiny.build_tiny_model)
    env = isolated_env(AGENTIC_RL_LAB_CACHE=str(cache))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run([fresh_venv, "-m", "pip", "install", lab_wheel], env=env, cwd=elsewhere)
    venv = fresh_venv.parents[1]

    code = (
        "import json, agentic_rl_lab\n"
        "from agentic_rl_lab import tiny\n"
        "from agentic_rl_lab.envs import inbox_data\n"
        "print(json.dumps({'package': agentic_rl_lab.__file__, 'embedded': str(tiny.EMBEDDED_MODEL_DIR),\n"
        "    'model': str(tiny.default_model_path(progress=False)), 'inbox': str(inbox_data.DEFAULT_DATA_DIR),\n"
        "    'inbox_files': sorted(p.name for p in inbox_data.DEFAULT_DATA_DIR.glob('*.jsonl'))}))\n"
    )
    found = json.loads(run([fresh_venv, "-c", code], env=env, cwd=elsewhere).stdout)
    assert Path(found["package"]).is_relative_to(venv), f"imported {found['package']}, not the installed wheel"
    assert found["model"] == found["embedded"], "default_model_path() did not return the packaged model"
    assert Path(found["model"]).is_relative_to(venv) and Path(found["inbox"]).is_relative_to(venv)
    assert found["inbox_files"] == ["emails.jsonl", "questions.jsonl"]

    out = elsewhere / "demo"
    demo = [venv / "bin" / "agentic-rl-lab", "demo", "--groups", "2", "--num-generations", "2", "--quiet"]
    result = run([*demo, "--train-steps", "0", "--out", out], env=env, cwd=elsewhere)
    assert "information-theoretic optimum" in result.stdout
    assert (out / "inbox_search-expert.jsonl").stat().st_size > 0

    # The packaged files are a whole model: it loads, with its tokenizer.
    code = (
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "from agentic_rl_lab.tiny import default_model_path\n"
        "model = AutoModelForCausalLM.from_pretrained(default_model_path(progress=False))\n"
        "tokenizer = AutoTokenizer.from_pretrained(default_model_path(progress=False))\n"
        "print(sum(p.numel() for p in model.parameters()), tokenizer.tokenize(' 50'))\n"
    )
    parameters, tokens = run([fresh_venv, "-c", code], env=env, cwd=elsewhere).stdout.split(maxsplit=1)
    assert 4e6 < int(parameters) < 6e6 and tokens.strip() == "['Ġ50']"
    assert not cache.exists() and not (elsewhere / "build").exists(), "a model build started"
