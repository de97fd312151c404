"""The cpu-tiny model: built deterministically, cached atomically, and loadable exactly as a user loads it.

These tests use `SMALL_CONFIG` (built once, seconds, into the user cache: `$AGENTIC_RL_LAB_CACHE` or
~/.cache/agentic_rl_lab) and an even smaller `MICRO` config built into temporary directories. The default model's
quality is measured by `benchmarks/tiny_policy.py` and checked by the notebooks.
"""

import dataclasses
import time

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

from agentic_rl_lab import tiny
from agentic_rl_lab.chat import CHAT_TEMPLATE, render
from agentic_rl_lab.envs import ENVIRONMENTS, GuessNumber
from agentic_rl_lab.sft import play_demonstrations
from agentic_rl_lab.tiny import SMALL_CONFIG, TinyConfig, build_tiny_model, load_build_info

MICRO = dataclasses.replace(
    SMALL_CONFIG,
    name="micro",
    vocab_size=600,
    tokenizer_episodes=3,
    hidden_size=32,
    num_layers=1,
    intermediate_size=64,
    demonstrators=(("guess_number", "mediocre", 20),),
    other_env_episodes=2,
    sft_steps=4,
    batch_tokens=2048,
    demonstrator_samples=0,
)
"""Seconds to build, learns nothing: for the properties of building, not of the model."""


@pytest.fixture(scope="module")
def small_model():
    torch.set_num_threads(2)
    return build_tiny_model(SMALL_CONFIG, progress=False)


def episode(strategy: str, seed: int) -> tuple[list, list]:
    (demo,) = play_demonstrations(GuessNumber(), strategy, 1, seed)
    return demo.messages, demo.tools


def rendered_episodes():
    return [
        render(t.messages, t.tools)
        for env in ENVIRONMENTS.values()
        for t in play_demonstrations(env(), "random", 3, 11)
    ]


def test_reloading_as_a_user_would_gives_the_trained_tokenisation(small_model):
    """The Qwen2 trap: a Qwen2 config.json would make AutoTokenizer split " 50" into " ", "5", "0"."""
    loaded = AutoTokenizer.from_pretrained(small_model)
    assert "Qwen2" not in type(loaded).__name__
    trained = Tokenizer.from_file(str(small_model / "tokenizer.json"))  # the raw trained tokenizer, no wrapper
    for text in rendered_episodes():
        assert loaded.encode(text, add_special_tokens=False) == trained.encode(text, add_special_tokens=False).ids
    assert loaded.tokenize(" 50") == ["Ġ50"]
    assert loaded.tokenize("<tool_call></tool_call><|im_end|>") == ["<tool_call>", "</tool_call>", "<|im_end|>"]


def test_tokenizer_carries_chat_template_end_of_turn_padding_and_left_padding(small_model):
    loaded = AutoTokenizer.from_pretrained(small_model)
    assert loaded.chat_template == CHAT_TEMPLATE
    assert (loaded.eos_token, loaded.pad_token, loaded.padding_side) == ("<|im_end|>", "<|pad|>", "left")
    assert loaded.pad_token_id != loaded.eos_token_id
    batch = loaded(["a", "a b c"], padding=True)
    assert batch["attention_mask"][0][0] == 0, "padding goes on the left, as batched generation needs"
    assert "<tool_call>" in loaded.decode(loaded.encode("<tool_call>"), skip_special_tokens=True)


def test_model_loads_with_auto_classes_as_llama_and_samples_without_top_k(small_model):
    model = AutoModelForCausalLM.from_pretrained(small_model)
    assert isinstance(model, LlamaForCausalLM)
    tokenizer = AutoTokenizer.from_pretrained(small_model)
    assert model.config.vocab_size >= len(tokenizer) and model.config.vocab_size % 64 == 0
    assert model.config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert model.config.tie_word_embeddings and model.config.max_position_embeddings == SMALL_CONFIG.max_context
    assert (model.generation_config.top_k, model.generation_config.do_sample) == (0, True)
    info = load_build_info(small_model)
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert info["cache_key"] == small_model.name == SMALL_CONFIG.cache_key()


def test_sft_lowers_the_loss_and_every_registered_env_is_demonstrated(small_model):
    info = load_build_info(small_model)
    losses = info["losses"]
    assert len(losses) == SMALL_CONFIG.sft_steps
    assert sum(losses[-10:]) / 10 < 0.3 * sum(losses[:5]) / 5
    assert set(info["demonstrations"]) == set(ENVIRONMENTS)
    for stats in info["demonstrations"].values():
        assert 0 < stats["assistant_tokens"] < stats["tokens"] and stats["max_tokens"] <= SMALL_CONFIG.max_context


def test_a_cached_model_is_returned_instantly(small_model):
    started = time.perf_counter()
    assert build_tiny_model(SMALL_CONFIG, progress=False) == small_model
    assert time.perf_counter() - started < 1.0


def test_the_command_line_prints_the_cached_path(small_model, capsys):
    assert tiny.main(["--small", "--cache-dir", str(small_model.parent)]) == small_model
    assert "cached tiny model (small, built in" in capsys.readouterr().out


def test_the_lab_command_passes_its_options_on_and_exports(small_model, tmp_path, capsys):
    """`python -m agentic_rl_lab build-tiny --small --export DIR`: the options reach `tiny.main`."""
    from agentic_rl_lab.__main__ import main

    main(["build-tiny", "--small", "--cache-dir", str(small_model.parent), "--export", str(tmp_path / "out")])
    assert "exported in bfloat16" in capsys.readouterr().out
    assert tiny.load_build_info(tmp_path / "out") == tiny.load_build_info(small_model)
    with pytest.raises(SystemExit):
        main(["envs", "--export", "x"])  # other commands still reject unknown options


def test_same_config_same_weights_and_a_different_seed_differs(tmp_path):
    first = build_tiny_model(MICRO, root=tmp_path / "a", progress=False)
    second = build_tiny_model(MICRO, root=tmp_path / "b", progress=False)
    for name in ["model.safetensors", "tokenizer.json", "config.json"]:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    other = build_tiny_model(dataclasses.replace(MICRO, seed=1), root=tmp_path / "c", progress=False)
    assert other.name != first.name
    assert (other / "model.safetensors").read_bytes() != (first / "model.safetensors").read_bytes()


def test_a_crash_mid_build_leaves_no_cache_entry_and_no_debris(tmp_path, monkeypatch):
    def crash(config, out, progress):
        (out / "model.safetensors").write_bytes(b"half a model")
        raise KeyboardInterrupt

    monkeypatch.setattr(tiny, "_build", crash)
    with pytest.raises(KeyboardInterrupt):
        build_tiny_model(MICRO, root=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_when_another_process_finishes_first_its_copy_is_kept(tmp_path, monkeypatch):
    real_build = tiny._build

    def racing_build(config, out, progress):
        report = real_build(config, out, progress)
        (tmp_path / config.cache_key()).mkdir()
        (tmp_path / config.cache_key() / "winner").write_text("the other process")
        return report

    monkeypatch.setattr(tiny, "_build", racing_build)
    path = build_tiny_model(MICRO, root=tmp_path, progress=False)
    assert (path / "winner").exists()
    assert [p.name for p in tmp_path.iterdir()] == [MICRO.cache_key()]


def test_cache_key_follows_the_config_and_the_registered_environments(monkeypatch):
    assert TinyConfig().cache_key() == TinyConfig().cache_key()
    assert TinyConfig(sft_steps=1).cache_key() != TinyConfig().cache_key()
    before = TinyConfig().cache_key()
    monkeypatch.setitem(ENVIRONMENTS, "another_guess", GuessNumber)
    assert TinyConfig().cache_key() != before


def test_an_environment_the_config_does_not_name_is_demonstrated_with_its_best_weak_strategy(monkeypatch):
    class Unnamed(GuessNumber):
        name = "unnamed"
        strategies = {"random": GuessNumber.strategies["random"], "expert": GuessNumber.strategies["expert"]}

    monkeypatch.setitem(ENVIRONMENTS, "unnamed", Unnamed)
    plan = {env: (strategy, episodes) for env, strategy, episodes in tiny.demonstrators(MICRO)}
    assert plan["unnamed"] == ("expert", MICRO.other_env_episodes)
    assert plan["guess_number"] == ("mediocre", 20)


def test_demonstrations_too_long_for_the_context_are_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="longer than max_context=64 tokens"):
        build_tiny_model(dataclasses.replace(MICRO, max_context=64), root=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_export_halves_the_weights_and_keeps_the_model(small_model, tmp_path):
    """bfloat16 weights, read back in float32: same tokenizer, same greedy choices up to bfloat16 rounding."""
    destination = tmp_path / "exported"
    destination.mkdir()
    (destination / "stale.txt").write_text("replaced")  # what was there is replaced, not merged
    tiny.export_model(small_model, destination)
    assert not (destination / "stale.txt").exists()
    size = (destination / "model.safetensors").stat().st_size
    assert size < 0.55 * (small_model / "model.safetensors").stat().st_size
    assert tiny.load_build_info(destination) == tiny.load_build_info(small_model)
    original = AutoModelForCausalLM.from_pretrained(small_model, dtype=torch.float32)
    exported = AutoModelForCausalLM.from_pretrained(destination, dtype=torch.float32)
    ids = AutoTokenizer.from_pretrained(destination)(render(*episode("mediocre", 5)))
    with torch.no_grad():
        a = original(input_ids=torch.tensor([ids["input_ids"]])).logits.softmax(-1)
        b = exported(input_ids=torch.tensor([ids["input_ids"]])).logits.softmax(-1)
    assert (a - b).abs().max() < 0.05


def test_the_committed_model_is_current_small_and_is_what_the_tier_loads():
    """The committed model must be the build of DEFAULT_CONFIG by this code; else every user would silently rebuild."""
    embedded = tiny.EMBEDDED_MODEL_DIR
    info = tiny.load_build_info(embedded)
    assert info["cache_key"] == tiny.DEFAULT_CONFIG.cache_key(), (
        "the committed model is stale: run "
        "`python -m agentic_rl_lab build-tiny --export agentic_rl_lab/data/tiny-model`"
    )
    assert sum(f.stat().st_size for f in embedded.iterdir()) < 20 * 2**20
    assert tiny.default_model_path() == embedded
    tokenizer = AutoTokenizer.from_pretrained(embedded)
    model = AutoModelForCausalLM.from_pretrained(embedded, dtype=torch.float32)
    assert isinstance(model, LlamaForCausalLM) and model.dtype == torch.float32
    assert 4e6 < sum(p.numel() for p in model.parameters()) < 6e6
    assert tokenizer.tokenize(" 50") == ["Ġ50"] and tokenizer.padding_side == "left"
