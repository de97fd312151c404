"""`warm_start`: SFT on a scripted demonstrator makes the model more likely to act as the demonstrator does, the
result loads like any model, the same call is served from the cache, and a killed run resumes."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from agentic_rl_lab.envs import GuessNumber, InboxSearch
from agentic_rl_lab.sft import Example, play_demonstrations, sft_loss, tokenize_episode
from agentic_rl_lab.warm_start import WarmStartConfig, copy_drill, load_info, warm_start

CONFIG = WarmStartConfig(strategy="expert", episodes=24, sft_steps=30, learning_rate=3e-3, warmup_steps=3)


def demonstration_loss(path, env) -> float:
    """The model's SFT loss on fresh demonstrations (other seeds than the training ones)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    demos = play_demonstrations(env, "expert", 8, seed=5)
    batch = [Example(env.name, *tokenize_episode(tokenizer, t.messages, t.tools)) for t in demos]
    with torch.no_grad():
        return sft_loss(model, batch, tokenizer.pad_token_id).item()


def test_warm_start_imitates_the_demonstrator_and_is_cached(small_model_dir, tmp_path) -> None:
    env = GuessNumber()
    path = warm_start(env, CONFIG, base=small_model_dir, root=tmp_path, progress=False)
    info = load_info(path)
    assert info["env"] == "guess_number" and len(info["losses"]) == 30
    assert info["demonstrations"]["episodes"] == 24 and info["demonstrations"]["success_rate"] == 1.0
    assert demonstration_loss(path, env) < 0.8 * demonstration_loss(small_model_dir, env)
    assert not list(tmp_path.glob(".partial-*")) and not (path / "checkpoint.pt").exists()

    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert warm_start(env, CONFIG, base=small_model_dir, root=tmp_path, progress=False) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp  # served from the cache, not retrained
    other = warm_start(env, WarmStartConfig(**{**CONFIG.__dict__, "episodes": 20}), small_model_dir, tmp_path, False)
    assert other != path  # other demonstrations, another model
    observations = warm_start(env, dataclasses.replace(CONFIG, loss_on="episode"), small_model_dir, tmp_path, False)
    counted = [load_info(p)["demonstrations"]["loss_tokens"] for p in (path, observations)]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(small_model_dir)
    masks = [tokenize_episode(tokenizer, t.messages, t.tools)[1] for t in play_demonstrations(env, "expert", 24, 0)]
    # The assistant's tokens; then every token from the first action on, the replies' too.
    assert counted == [sum(sum(m) for m in masks), sum(len(m) - m.index(True) for m in masks)]


def test_a_killed_warm_start_resumes_from_its_checkpoint(small_model_dir, tmp_path, monkeypatch) -> None:
    import agentic_rl_lab.sft as sft

    env, real_loss, calls = GuessNumber(), sft.sft_loss, []

    def killed_at_step_28(*args):
        calls.append(1)
        if len(calls) == 28:  # after the checkpoint of step 25, before the end
            raise KeyboardInterrupt
        return real_loss(*args)

    monkeypatch.setattr(sft, "sft_loss", killed_at_step_28)
    with pytest.raises(KeyboardInterrupt):
        warm_start(env, CONFIG, base=small_model_dir, root=tmp_path, progress=False)
    (partial,) = tmp_path.glob(".partial-*")
    assert (partial / "checkpoint.pt").exists()
    calls.clear()
    path = warm_start(env, CONFIG, base=small_model_dir, root=tmp_path, progress=False)
    assert len(calls) == 5 and len(load_info(path)["losses"]) == 30  # steps 26-30 only
    monkeypatch.setattr(sft, "sft_loss", real_loss)
    fresh = warm_start(env, CONFIG, base=small_model_dir, root=tmp_path / "fresh", progress=False)
    for name in ("model.safetensors",):  # as if it had never stopped
        assert (path / name).read_bytes() == (fresh / name).read_bytes()


def test_the_copy_drill_counts_only_tokens_a_copy_can_predict(small_model_dir) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(small_model_dir)
    drills = copy_drill(tokenizer, 50, seed=3)
    assert drills == copy_drill(tokenizer, 50, seed=3) and drills != copy_drill(tokenizer, 50, seed=4)
    for drill in drills:
        n = (len(drill.input_ids) - 1) // 2
        first, separator, repeat = drill.input_ids[:n], drill.input_ids[n], drill.input_ids[n + 1 :]
        assert first == repeat and 8 <= n <= 24 and separator not in first
        assert not set(first) & set(tokenizer.all_special_ids)
        # Counted: the repeat from its second token on, each one the token after an earlier copy of its predecessor.
        assert [i for i, counted in enumerate(drill.assistant_mask) if counted] == list(range(n + 2, 2 * n + 1))
    separator = drills[0].input_ids[(len(drills[0].input_ids) - 1) // 2]
    gaps = []
    for drill in copy_drill(tokenizer, 50, seed=3, gap=40):  # the repeat after up to 40 other tokens
        n = sum(drill.assistant_mask) + 1
        end = drill.input_ids.index(separator)
        assert drill.input_ids[:n] == drill.input_ids[end + 1 :] and end - n <= 40
        assert [i for i, counted in enumerate(drill.assistant_mask) if counted] == list(range(end + 2, end + n + 1))
        gaps.append(end - n)
    assert min(gaps) < 10 and max(gaps) > 30
    alphabets = []
    for drill in copy_drill(tokenizer, 50, seed=3, alphabet=4):  # a sequence of 4 tokens at most, each recurring
        n = (len(drill.input_ids) - 1) // 2
        assert drill.input_ids[:n] == drill.input_ids[n + 1 :]
        alphabets.append(len(set(drill.input_ids[:n])))
    assert max(alphabets) == 4 and min(alphabets) >= 2


def test_weigh_copies_weighs_the_tokens_that_continue_a_pair_from_the_question_or_a_tool_reply() -> None:
    from agentic_rl_lab.sft import Example
    from agentic_rl_lab.warm_start import weigh_copies

    # 0 opens a message. system 0 1 2 | user 0 5 6 | assistant 1 2 5 6 | tool 0 7 8 9 | assistant 7 8 9 5 2 4
    # Copies: 5 and 6 (the question's), 7, 8, 9 (the tool reply's). Not copies: 1 and 2 (the system prompt's tokens,
    # the call's format), 4 (seen nowhere).
    ids = [0, 1, 2, 0, 5, 6, 1, 2, 5, 6, 0, 7, 8, 9, 7, 8, 9, 5, 2, 4]
    mask = [False] * 6 + [True] * 4 + [False] * 4 + [True] * 6
    example = Example("e", ids, mask)
    weigh_copies(example, 10.0, turn_start=0)
    assert sorted(example.weights) == [8, 9, 14, 15, 16, 17] and set(example.weights.values()) == {10.0}

    # A token the system prompt uses counts as a copy only when it continues a pair seen in the question or a reply:
    # user 0 5 1 | assistant 5 1 (1 after 5: copied) 1 (after itself: not)
    example = Example("e", [0, 1, 2, 0, 5, 1, 5, 1, 1], [False] * 6 + [True] * 3)
    weigh_copies(example, 10.0, turn_start=0)
    assert sorted(example.weights) == [6, 7]


def test_a_warm_start_killed_after_its_drill_does_not_drill_again(small_model_dir, tmp_path, monkeypatch) -> None:
    import agentic_rl_lab.sft as sft

    config = dataclasses.replace(CONFIG, copy_drill_steps=12, copy_drill_every=3)
    env, real_loss, calls = GuessNumber(), sft.sft_loss, []

    def killed_in_the_demonstrations(*args):
        calls.append(1)
        if len(calls) == 12 + 28:
            raise KeyboardInterrupt
        return real_loss(*args)

    monkeypatch.setattr(sft, "sft_loss", killed_in_the_demonstrations)
    with pytest.raises(KeyboardInterrupt):
        warm_start(env, config, base=small_model_dir, root=tmp_path, progress=False)
    calls.clear()
    path = warm_start(env, config, base=small_model_dir, root=tmp_path, progress=False)
    info = load_info(path)
    assert len(calls) == 5 and len(info["copy_drill_losses"]) == 12 and len(info["losses"]) == 30
    assert 0 <= info["copy_accuracy"] <= 1 and 0 <= info["copy_accuracy_after"] <= 1
    assert not list(path.glob("*.pt"))
    monkeypatch.setattr(sft, "sft_loss", real_loss)
    fresh = warm_start(env, config, base=small_model_dir, root=tmp_path / "fresh", progress=False)
    assert (path / "model.safetensors").read_bytes() == (fresh / "model.safetensors").read_bytes()


def test_a_strategy_the_environment_lacks_and_a_too_long_demonstration_are_clear_errors(small_model_dir, tmp_path):
    with pytest.raises(ValueError, match="guess_number has no scripted strategy 'hasty'.*expert"):
        warm_start(GuessNumber(), WarmStartConfig(strategy="hasty"), base=small_model_dir, root=tmp_path)
    with pytest.raises(ValueError, match="loss_on must be 'assistant' or 'episode', got 'all'"):
        warm_start(GuessNumber(), WarmStartConfig(strategy="expert", loss_on="all"), small_model_dir, tmp_path)
    config = json.loads((small_model_dir / "tokenizer_config.json").read_text())
    config["model_max_length"] = 200
    short = tmp_path / "short"
    short.mkdir()
    for item in small_model_dir.iterdir():
        (short / item.name).write_bytes(item.read_bytes())
    (short / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="tokens, more than the model's context \\(200\\)"):
        warm_start(InboxSearch(), WarmStartConfig(strategy="expert", episodes=4), base=short, root=tmp_path)


def test_each_committed_warm_start_is_the_build_of_its_current_recipe() -> None:
    """A committed model under `agentic_rl_lab/data/` that records another recipe would be silently rebuilt, and
    one built from other demonstrations (a demonstrator's wording changed since) would be silently stale: its
    `cache_key` is what the recipe builds today."""
    from agentic_rl_lab.warm_start import RECIPES, recipe_cache_key, warm_started_model_path

    committed = {name for name, recipe in RECIPES.items() if recipe.directory.is_dir()}
    assert committed == {"fog_maze", "inbox_search"}
    for env_name in committed:
        recipe = RECIPES[env_name]
        info = load_info(recipe.directory)
        assert info["config"] == dataclasses.asdict(recipe.config), env_name
        assert warm_started_model_path(env_name) == recipe.directory
        if env_name == "inbox_search":  # fog_maze's was exported before builds recorded their name
            assert info["cache_key"] == recipe_cache_key(env_name), "the demonstrations changed since the export"
    with pytest.raises(ValueError, match="no warm-start recipe for 'guess_number'; there are: inbox_search, fog_maze"):
        warm_started_model_path("guess_number")
