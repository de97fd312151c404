"""The viewers in a real browser: JupyterLab on loopback, a notebook that builds each viewer, and Debian's Chromium
driven by Playwright. Unit tests check what a viewer *holds*; this checks that JupyterLab's widget manager renders
it, and that a click travels to the kernel and back.

Needs `/usr/bin/chromium` (`apt-get install chromium`; `.ci/run` installs it) and the `playwright` package (the
`dev` extra); no browser is ever downloaded. Without them the test skips, except in CI (`CI=true`), where it fails.
`UPDATE_SCREENSHOTS=1` also copies each viewer's screenshot to `notebooks/images/` for the README.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentic_rl_lab.envs import GuessNumber, make
from agentic_rl_lab.grpo.tensors import trajectory_to_sequence
from agentic_rl_lab.judge import ReferenceJudge
from agentic_rl_lab.policies import ScriptedPolicy
from agentic_rl_lab.policies.hf import HFPolicy
from agentic_rl_lab.rollout import collect_group, collect_groups
from agentic_rl_lab.trajectory import append_groups
from agentic_rl_lab.widgets import MASK_COLOURS

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
IMAGES = Path(__file__).resolve().parents[1] / "notebooks" / "images"
DEMO_METRICS = Path(__file__).resolve().parent / "data" / "demo_metrics.jsonl"
"""The `metrics.jsonl` that `python3 scripts/lab.py demo` wrote (runs/demo/grpo/, 10 GRPO steps of cpu-tiny on
guess_number, 2 cores of an AMD EPYC): the dashboard in the README shows a real run, not made-up curves."""
WIDGET_ERRORS = ("Error displaying widget", "Failed to load model class", "Traceback")
SCREENSHOTS = {  # the README's names -> the viewer's CSS class (each viewer adds one to its outer widget)
    "trajectory_viewer.png": ".arl-trajectory-viewer",
    "group_scoreboard.png": ".arl-scoreboard",
    "token_view.png": ".arl-token-view",
    "training_dashboard.png": ".arl-dashboard",
}
NOTEBOOK_CELLS = [
    """
from transformers import AutoTokenizer

from agentic_rl_lab.envs import GuessNumber
from agentic_rl_lab.trajectory import load_groups
from agentic_rl_lab.widgets import EnvironmentPlayer, GroupScoreboard, TokenView, TrainingDashboard, TrajectoryViewer

groups = load_groups("groups.jsonl")
sampled = load_groups("sampled.jsonl")
tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
""",
    "EnvironmentPlayer(GuessNumber(), seed=0)",
    "TrajectoryViewer(groups)",
    "GroupScoreboard(groups[0])",
    "TokenView(sampled[0].trajectories[0], tokenizer)",
    """
import json

rows = [json.loads(line) for line in open("metrics.jsonl")]  # a real run's metrics (see DEMO_METRICS)
dashboard = TrainingDashboard(rows[:1])
display(dashboard)
for row in rows[1:]:  # live updates after display, as the trainer's callback makes them
    dashboard(None, row)
""",
    'print("ALL-CELLS-DONE")',
]


@pytest.fixture
def browser_available() -> None:
    """Skip without Chromium or Playwright, but fail in CI, where `.ci/run` must have installed them."""
    problems = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append("the playwright package is missing (pip install -e '.[dev]')")
    if not os.access(CHROMIUM, os.X_OK):
        problems.append(f"{CHROMIUM} is missing (apt-get install chromium)")
    if problems:
        message = "; ".join(problems)
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"browser test cannot run in CI: {message}")
        pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_inputs(root: Path, model_dir: Path) -> dict:
    """The trajectories the notebook shows, written as JSONL like a real run: scripted groups of every environment,
    judged twice in shuffled orders, and a group sampled by the small tiny model (for the token view)."""
    groups = []
    for name, strategy in (("guess_number", "mediocre"), ("fog_maze", "mediocre"), ("inbox_search", "random")):
        env = make(name)
        collected = collect_groups(env, ScriptedPolicy(env, strategy, seed=1), [0], 4, progress=False)
        groups += ReferenceJudge(noise=0.1, permutations=2, seed=0).score_groups(collected, progress=False)
    append_groups(root / "groups.jsonl", groups)
    shutil.copy(DEMO_METRICS, root / "metrics.jsonl")
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    policy = HFPolicy(model, tokenizer, max_new_tokens=24, seed=0)
    sampled = collect_group(GuessNumber(max_turns=3), policy, seed=3, num_generations=1, progress=False)
    append_groups(root / "sampled.jsonl", [sampled])
    sequence = trajectory_to_sequence(sampled.trajectories[0], tokenizer)
    cells = [f"MODEL_DIR = {str(model_dir)!r}"] + [cell.strip() for cell in NOTEBOOK_CELLS]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, root / "viewers.ipynb")
    return {"groups": groups, "mask": sequence.assistant_mask}


def lab_settings(settings: Path) -> None:
    """JupyterLab user settings for a quiet, deterministic test: no news or update checks (no network), and every
    cell kept in the DOM (no windowing), so that every output can be found."""
    files = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    }
    for name, content in files.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(content))


@pytest.fixture
def jupyterlab(tmp_path):
    """A JupyterLab server on 127.0.0.1 with a known token, serving `tmp_path / "lab"`, shut down afterwards."""
    root, token, port = tmp_path / "lab", "arl-test-token", free_port()
    root.mkdir()
    lab_settings(tmp_path / "settings")
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
    }
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
        "--ServerApp.allow_root=True",  # CI containers run as root
        "--LabApp.extension_manager=readonly",  # never query PyPI for extensions
    ]
    log = (tmp_path / "jupyterlab.log").open("w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start; see {tmp_path / 'jupyterlab.log'}") from None
                time.sleep(0.5)
        yield {"url": url, "token": token, "root": root}
    finally:
        try:  # a clean shutdown also stops the kernel
            request = urllib.request.Request(f"{url}/api/shutdown?token={token}", method="POST")
            urllib.request.urlopen(request, timeout=5)
            server.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            server.terminate()
            server.wait(timeout=15)
        log.close()


def test_every_viewer_renders_in_jupyterlab_and_a_click_reaches_the_kernel(
    browser_available, jupyterlab, small_model_dir, tmp_path
):
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    expected = write_inputs(jupyterlab["root"], small_model_dir)
    first_group = expected["groups"][0]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(60_000)
        try:
            page.goto(f"{jupyterlab['url']}/lab/tree/viewers.ipynb?reset&token={jupyterlab['token']}")
            page.wait_for_selector(".jp-Notebook .jp-Cell")
            # The kernel must be up: cells sent while it is still "Initializing" are dropped.
            page.wait_for_selector(".jp-StatusBar-TextItem:has-text('ipykernel) | Idle')")
            page.click(".lm-MenuBar-item:has-text('Run')")
            page.click(".lm-Menu-item[data-command='runmenu:run-all']")
            page.wait_for_selector(".jp-OutputArea-output:has-text('ALL-CELLS-DONE')", timeout=120_000)
            for selector in SCREENSHOTS.values():
                page.wait_for_selector(f".jp-OutputArea {selector}")
            text = page.inner_text(".jp-Notebook")
            for error in WIDGET_ERRORS:
                assert error not in text, f"{error!r} in the notebook; see {tmp_path / 'jupyterlab.png'}"

            # What each viewer shows, in the DOM, matches what its Python state says.
            viewer = page.locator(".arl-trajectory-viewer")
            assert viewer.locator(".arl-bubble").count() == len(first_group.trajectories[0].messages)
            board_rows = page.locator(".arl-scoreboard tr.arl-member")
            assert board_rows.count() == len(first_group.trajectories)
            tokens = page.eval_on_selector_all(
                ".arl-token-view .arl-token",
                "spans => spans.map(s => [s.classList.contains('arl-assistant'), getComputedStyle(s).backgroundColor])",
            )
            assert [is_assistant for is_assistant, _ in tokens] == [bool(m) for m in expected["mask"]]
            colours = {is_assistant: colour for is_assistant, colour in tokens}
            assert colours == {True: rgb(MASK_COLOURS["assistant"]), False: rgb(MASK_COLOURS["context"])}
            assert page.eval_on_selector(".arl-dashboard img", "img => img.naturalWidth") > 500
            assert page.locator(".widget-button:has-text('guess')").count() == 1  # EnvironmentPlayer's form

            # The "next" button: the click goes to the kernel, which sends the new view back.
            position = viewer.locator(".arl-position")
            before = position.inner_text()
            viewer.locator("button[title='next trajectory']").click()
            page.wait_for_function(
                "before => document.querySelector('.arl-trajectory-viewer .arl-position').innerText !== before",
                arg=before,
            )
            assert "trajectory 2/" in position.inner_text()
            assert viewer.locator(".arl-bubble").count() == len(first_group.trajectories[1].messages)

            for name, selector in SCREENSHOTS.items():
                page.locator(selector).first.screenshot(path=tmp_path / name)
        finally:
            page.screenshot(path=tmp_path / "jupyterlab.png", full_page=True)  # the artefact to look at first
            browser.close()
    print(f"browser test: {time.monotonic() - started:.0f} s; screenshots in {tmp_path}")
    if os.environ.get("UPDATE_SCREENSHOTS"):
        save_for_readme(tmp_path)


def rgb(colour: str) -> str:
    """`#rrggbb` as the browser reports a computed colour: `rgb(r, g, b)`."""
    return "rgb({}, {}, {})".format(*(int(colour[i : i + 2], 16) for i in (1, 3, 5)))


def save_for_readme(folder: Path) -> None:
    """Copy the viewers' screenshots to notebooks/images/, as 256-colour PNGs (a fraction of the size)."""
    from PIL import Image

    IMAGES.mkdir(parents=True, exist_ok=True)
    for name in SCREENSHOTS:
        Image.open(folder / name).convert("RGB").quantize(colors=256).save(IMAGES / name, optimize=True)
        assert (IMAGES / name).stat().st_size < 300_000, f"{name} is over 300 KB"
