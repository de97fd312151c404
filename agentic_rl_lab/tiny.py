"""The `cpu-tiny` tier: a ~5M-parameter chat model that the lab builds itself, on a CPU, in minutes.

No machine in the lab can download weights, so the smallest tier grows its own model from nothing:

1. **Demonstrations.** Scripted policies play every registered environment through the rollout engine. For
   `guess_number` the demonstrator is deliberately mediocre, `repeating`: binary search that guesses its last
   number again about a quarter of the time (about 7.4 guesses against binary search's 5.8), so the model learns
   the format but leaves GRPO headroom.
2. **Tokenizer.** A byte-level BPE tokenizer trained on those episodes rendered with the lab's chat template
   (`agentic_rl_lab.chat`), so `" 50"` or `"moved north."` are single tokens and an episode stays short.
3. **Model.** A Llama-architecture decoder built from a config (not Qwen2: see the note below), tied embeddings.
4. **SFT.** Next-token cross-entropy on the demonstrations, counted on the assistant's tokens only. Where the
   demonstrator is random (which number to guess), the target is its whole distribution, not the one sample.
   Steps 1 and 4 are `agentic_rl_lab.sft`, which warm starts (`agentic_rl_lab.warm_start`) use too.

The result is saved in the standard Hugging Face layout, so `AutoModelForCausalLM.from_pretrained(path)` and
`AutoTokenizer.from_pretrained(path)` load it like any Hub model. It is cached under a directory keyed by a hash
of its config, built in a temporary directory and renamed into place, so a crash never leaves half a model.

Why `repeating`: a 5M model learns a demonstrator whose next action follows from the last message or two (binary
search names its node by the answers so far), not one that must reason over the whole history (`mediocre`'s uniform
guess inside the interval). Few episodes of the other environments keep their format without costing guess_number;
2,000 SFT steps leave the repeats for GRPO to remove. The measurements behind each choice are in
`docs/tiny-model.md`; the build takes 45 minutes on 2 cores of an AMD EPYC without native bfloat16.

Why Llama and not Qwen2: in transformers 5.x, `AutoTokenizer.from_pretrained(dir)` on a directory whose
`config.json` says Qwen2 returns `Qwen2Tokenizer`, which silently swaps in Qwen's digit-splitting pre-tokenizer
(`" 50"` becomes `" "`, `"5"`, `"0"`), so the model would read different tokens from those it was trained on.

    python -c "from agentic_rl_lab.tiny import main; main()"     # builds the default model, prints its path
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_rl_lab.chat import (
    CHAT_TEMPLATE,
    END_OF_TURN,
    SPECIAL_TOKENS,
    TOOL_CALL_END,
    TOOL_CALL_START,
    render,
)
from agentic_rl_lab.envs import ENVIRONMENTS
from agentic_rl_lab.sft import SFTConfig, demonstration_examples, native_bf16, play_demonstrations, train_sft

BUILD_VERSION = 6
"""Part of the cache key. Bump it when a change to this module or to a demonstrator should invalidate old builds."""
CACHE_ENV = "AGENTIC_RL_LAB_CACHE"
"""Environment variable that overrides the cache root (default: `$XDG_CACHE_HOME/agentic_rl_lab` or `~/.cache/...`)."""
PAD_TOKEN = "<|pad|>"
NOT_IN_TOKENIZER = {("inbox_search", "mediocre")}
"""Strategies written after the committed model was built (for `agentic_rl_lab.warm_start`): its tokenizer never
read them, and a rebuild must give the same tokenizer."""
DEMONSTRATOR_PREFERENCE = ("mediocre", "expert", "random")
"""For an environment the config does not name, demonstrate with the first of these strategies it has."""


@dataclass(frozen=True)
class TinyConfig:
    """Everything that determines a tiny model. Two equal configs (and the same `BUILD_VERSION` and environments)
    build the same weights on the same machine, and share one cache entry."""

    name: str = "default"
    """Only a label, part of the cache directory's name."""
    seed: int = 0
    """Seeds the demonstrations, the initial weights and the order of SFT batches."""

    # --- tokenizer ---
    vocab_size: int = 4096
    """BPE vocabulary, special tokens included; the embedding matrix is padded to a multiple of 64."""
    tokenizer_episodes: int = 200
    """Episodes per environment and scripted strategy rendered to train the tokenizer (all strategies, so that
    text the model meets when it plays badly, like error messages, is covered too)."""

    # --- model (Llama architecture) ---
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 1024
    max_context: int = 3072
    """The longest conversation, in tokens, the model is trained for and that `HFPolicy` accepts."""
    number_embedding_dims: int = 0
    """Leading embedding dimensions of every integer token that start as a sinusoidal code of its value (see
    `encode_numbers`); 0 leaves them random."""

    # --- demonstrations ---
    demonstrators: tuple[tuple[str, str, int], ...] = (
        ("guess_number", "repeating", 6000),
        ("fog_maze", "mediocre", 40),
        ("inbox_search", "expert", 40),
    )
    """(environment, scripted strategy, episodes). Environments that are not registered are skipped."""
    other_env_episodes: int = 300
    """Episodes for a registered environment not named in `demonstrators` (strategy: `DEMONSTRATOR_PREFERENCE`)."""
    demonstrator_samples: int = 16
    """Extra draws from the demonstrator at every turn, to estimate the distribution it samples from (see
    `demonstrator_distribution`); 0 trains on the one action it took."""

    # --- supervised fine-tuning ---
    sft_steps: int = 2000
    batch_tokens: int = 5120
    """Tokens per SFT batch, padding included: about 16 guess_number episodes, or 4 of fog_maze."""
    learning_rate: float = 1e-3
    warmup_steps: int = 30
    min_learning_rate_ratio: float = 0.02
    """Cosine decay from `learning_rate` down to this fraction of it."""
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    bf16_autocast: bool | None = None
    """Compute matmuls in bfloat16, weights staying float32: about 2x faster SFT on a CPU with native bfloat16
    (AMX or AVX512-BF16), much slower on one without. `None` decides from the CPU (see `native_bf16`)."""

    def sft(self) -> SFTConfig:
        """The supervised fine-tuning settings above, for `agentic_rl_lab.sft.train_sft`. They stay fields of this
        flat config, not an `SFTConfig` inside it, because `cache_key` hashes these fields: the committed model's key
        would change with its nesting."""
        return SFTConfig(**{name: getattr(self, name) for name in SFTConfig.__dataclass_fields__})

    def cache_key(self) -> str:
        """`tiny-<name>-<hash>`: the hash covers every field, `BUILD_VERSION` and the registered environments."""
        payload = {"config": dataclasses.asdict(self), "build": BUILD_VERSION, "envs": sorted(ENVIRONMENTS)}
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
        return f"tiny-{self.name}-{digest}"


DEFAULT_CONFIG = TinyConfig()
"""The `cpu-tiny` model: about 5M parameters, built in 15-45 minutes on 2 CPU cores. The build is committed to
`agentic_rl_lab/data/tiny-model` (see `EMBEDDED_MODEL_DIR`), so nobody has to wait for it."""

SMALL_CONFIG = TinyConfig(
    name="small",
    vocab_size=1024,
    tokenizer_episodes=20,
    hidden_size=64,
    num_layers=2,
    num_heads=2,
    intermediate_size=256,
    demonstrators=(("guess_number", "repeating", 200), ("fog_maze", "mediocre", 10), ("inbox_search", "expert", 10)),
    other_env_episodes=10,
    sft_steps=60,
    batch_tokens=4096,
    learning_rate=1e-2,
    warmup_steps=5,
)
"""A ~0.2M-parameter model with a short SFT, built in seconds: for tests, and to try the pipeline. Its turns are
mostly well-formed tool calls, but it plays badly."""


@dataclass
class BuildReport:
    """What a build did, saved as `build_info.json` next to the weights."""

    config: dict[str, Any]
    cache_key: str
    parameters: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    demonstrations: dict[str, dict[str, Any]] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    bf16_autocast: bool = False
    threads: int = 0
    versions: dict[str, str] = field(default_factory=dict)


# ----- the cache ------------------------------------------------------------------------------------------------------
def cache_root() -> Path:
    """Where built models live: `$AGENTIC_RL_LAB_CACHE`, else `$XDG_CACHE_HOME/agentic_rl_lab`, else ~/.cache/..."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "agentic_rl_lab"


def tiny_model_path(config: TinyConfig = DEFAULT_CONFIG, root: str | Path | None = None) -> Path:
    """The directory `build_tiny_model(config)` returns; it exists only once the build has finished."""
    return Path(root if root is not None else cache_root()) / config.cache_key()


def build_tiny_model(
    config: TinyConfig = DEFAULT_CONFIG, root: str | Path | None = None, progress: bool = True
) -> Path:
    """Build the tiny model for `config` (minutes) or return its cached directory (instantly).

    The build happens in a temporary directory next to the cache entry and is renamed into place at the end:
    a crash or Ctrl-C leaves no partial entry, and two processes building at once both end up with one complete
    copy. Returns a directory in the Hugging Face layout (config.json, model.safetensors, tokenizer.json, ...).
    """
    final = tiny_model_path(config, root)
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_builds(final)
    work = Path(tempfile.mkdtemp(prefix=f".building-{final.name}-{os.getpid()}-", dir=final.parent))
    try:
        report = _build(config, work, progress)
        (work / "build_info.json").write_text(json.dumps(dataclasses.asdict(report), indent=2) + "\n")
        try:
            os.rename(work, final)
        except OSError:
            if not final.is_dir():  # not "another process finished first": a real error
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _remove_abandoned_builds(final: Path) -> None:
    """Delete temporary build directories for `final` left by processes that were killed (their pid is gone)."""
    for leftover in final.parent.glob(f".building-{final.name}-*"):
        pid = leftover.name[len(f".building-{final.name}-") :].split("-")[0]
        try:
            os.kill(int(pid), 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            shutil.rmtree(leftover, ignore_errors=True)
        except (ValueError, PermissionError):  # not our naming, or another user's live process
            continue


EMBEDDED_MODEL_DIR = Path(__file__).resolve().parent / "data" / "tiny-model"
"""The default model as committed to the repository, weights in bfloat16 (about 10 MB). It is package data, so a
clone and a pip-installed wheel (Colab) both run the cpu-tiny tier at once, with no build.
`python -m agentic_rl_lab build-tiny --export agentic_rl_lab/data/tiny-model` rewrites it."""


def default_model_path(root: str | Path | None = None, progress: bool = True) -> Path:
    """The cpu-tiny model: the committed copy in `EMBEDDED_MODEL_DIR` if it was built from `DEFAULT_CONFIG` by this
    `BUILD_VERSION` with these environments (its `build_info.json` has the same cache key), else the cached build,
    building it first if needed (minutes)."""
    info = EMBEDDED_MODEL_DIR / "build_info.json"
    if info.is_file() and json.loads(info.read_text())["cache_key"] == DEFAULT_CONFIG.cache_key():
        return EMBEDDED_MODEL_DIR
    return build_tiny_model(DEFAULT_CONFIG, root, progress)


def export_model(source: str | Path, destination: str | Path, info_file: str = "build_info.json") -> Path:
    """Copy the built model in `source` to `destination` with its weights in bfloat16, which halves the size;
    loaders read them back into float32 (`from_pretrained(..., dtype=torch.float32)`). Written to a temporary
    directory and renamed into place, replacing what was there."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source, destination = Path(source), Path(destination)
    work = Path(tempfile.mkdtemp(prefix=f".export-{destination.name}-", dir=destination.parent))
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).to(torch.bfloat16)
        model.save_pretrained(work)
        AutoTokenizer.from_pretrained(source).save_pretrained(work)
        shutil.copy(source / info_file, work / info_file)
        shutil.rmtree(destination, ignore_errors=True)
        os.rename(work, destination)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return destination


def repository_path(path: str | Path) -> str:
    """`path` relative to the repository when it lies inside it (what a committed result may record), else its
    last two parts: never the layout of the machine it was measured on."""
    path = Path(path).resolve()
    root = Path(__file__).resolve().parents[1]
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(Path(*path.parts[-2:]))


def load_build_info(path: str | Path) -> dict[str, Any]:
    """The `BuildReport` of a built model directory, as a dict (config, seconds per phase, losses, ...)."""
    return json.loads((Path(path) / "build_info.json").read_text())


# ----- 1. demonstrations ----------------------------------------------------------------------------------------------
def demonstrators(config: TinyConfig) -> list[tuple[str, str, int]]:
    """(environment, strategy, episodes) for every registered environment that gets any, in registration order."""
    named = {env: (strategy, episodes) for env, strategy, episodes in config.demonstrators}
    plan = []
    for env_name, env_class in ENVIRONMENTS.items():
        if env_name in named:
            strategy, episodes = named[env_name]
        else:
            strategy = next(s for s in (*DEMONSTRATOR_PREFERENCE, *env_class.strategies) if s in env_class.strategies)
            episodes = config.other_env_episodes
        if episodes > 0:
            plan.append((env_name, strategy, episodes))
    return plan


# ----- 2. tokenizer ---------------------------------------------------------------------------------------------------
_MARKUP = re.compile("|".join(re.escape(t) for t in (*SPECIAL_TOKENS, TOOL_CALL_START, TOOL_CALL_END)))


def train_tokenizer(texts: Sequence[str], config: TinyConfig, whole_words: Sequence[str] = ()) -> Any:
    """A byte-level BPE tokenizer trained on `texts`, wrapped as a `PreTrainedTokenizerFast` with the chat template.

    `<tool_call>` and `</tool_call>` are single, non-special tokens (so `decode(..., skip_special_tokens=True)`
    keeps them), and so is each of `whole_words` (the tiny judge's trajectory ids); the end of a turn,
    `<|im_end|>`, is the eos token; padding is on the left, as batched generation needs, and is saved in
    `tokenizer_config.json`.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size - 2,  # room for the two tool-call tokens added below (whole words come on top)
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Learn merges from the text between the markup, never across it: markup tokens are never split.
    tokenizer.train_from_iterator((piece for text in texts for piece in _MARKUP.split(text) if piece), trainer)
    added = (TOOL_CALL_START, TOOL_CALL_END, *whole_words)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=END_OF_TURN,
        pad_token=PAD_TOKEN,
        padding_side="left",
        model_max_length=config.max_context,
        chat_template=CHAT_TEMPLATE,
    )


# ----- 3. model -------------------------------------------------------------------------------------------------------
def make_model(config: TinyConfig, tokenizer: Any) -> Any:
    """A freshly initialised `LlamaForCausalLM` for `tokenizer`, seeded by `config.seed`."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    end_of_turn = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    model_config = LlamaConfig(
        vocab_size=math.ceil(len(tokenizer) / 64) * 64,  # a multiple of 64 is friendlier to matmul kernels
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.max_context,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=end_of_turn,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(config.seed)
    model = LlamaForCausalLM(model_config)
    if config.number_embedding_dims:
        encode_numbers(model, tokenizer, config.number_embedding_dims)
    # Plain sampling by default: transformers would otherwise apply top_k=50 when a user calls generate().
    model.generation_config = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        eos_token_id=end_of_turn,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model


def encode_numbers(model: Any, tokenizer: Any, dims: int) -> int:
    """Start the embedding of every integer token (`"7"`, `"Ġ42"`) with a sinusoidal code of its value, like the
    position code of Vaswani et al. (2017): sin and cos of value * 2pi / period, periods from 4 to 400.

    Why: a pretrained model arrives knowing that 51 comes after 50. Ours starts from nothing, and measured here a
    5M model did not discover the order of 100 number tokens in 600 SFT steps: it learned the tool-call format
    and guessed from the overall distribution of numbers, ignoring every "higher" and "lower". With this code,
    the numbers inside an interval are a band that the (tied) output layer can express as a linear function of
    the embeddings of its two ends. Returns how many tokens were coded.
    """
    import torch

    weight = model.get_input_embeddings().weight  # (vocab, hidden), tied to the output layer
    dims = min(dims, weight.shape[1]) // 2 * 2  # a small model codes numbers in all its dimensions, at most
    if dims < 2:
        return 0
    periods = torch.logspace(math.log10(4), math.log10(400), dims // 2)
    coded = 0
    with torch.no_grad():
        scale = weight.std()
        for token, index in tokenizer.get_vocab().items():
            digits = token.removeprefix("Ġ")
            if digits.isascii() and digits.isdigit() and len(digits) <= 4 and index < weight.shape[0]:
                angles = int(digits) * 2 * math.pi / periods
                weight[index, : dims // 2] = scale * math.sqrt(2) * torch.sin(angles)
                weight[index, dims // 2 : dims // 2 * 2] = scale * math.sqrt(2) * torch.cos(angles)
                coded += 1
    return coded


# ----- the whole build ------------------------------------------------------------------------------------------------
def _build(config: TinyConfig, out: Path, progress: bool) -> BuildReport:
    """Demonstrations -> tokenizer -> model -> SFT -> save into `out`. Returns what happened, with timings."""
    import tokenizers
    import torch
    import transformers

    report = BuildReport(config=dataclasses.asdict(config), cache_key=config.cache_key())
    report.versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    report.versions["tokenizers"] = tokenizers.__version__
    started = clock = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        report.seconds[phase] = round(now - clock, 3)
        clock = now

    plan = demonstrators(config)
    demos = {env: play_demonstrations(ENVIRONMENTS[env](), strategy, n, config.seed) for env, strategy, n in plan}
    corpus = [render(t.messages, t.tools) for episodes in demos.values() for t in episodes]
    for env_name, env_class in ENVIRONMENTS.items():  # every strategy, for the tokenizer only
        for strategy in (s for s in env_class.strategies if (env_name, s) not in NOT_IN_TOKENIZER):
            episodes = play_demonstrations(env_class(), strategy, config.tokenizer_episodes, config.seed + 1)
            corpus.extend(render(t.messages, t.tools) for t in episodes)
    lap("demonstrations")

    tokenizer = train_tokenizer(corpus, config)
    lap("tokenizer")

    examples = []
    for env_name, strategy, _ in plan:
        tokenized = demonstration_examples(
            tokenizer,
            demos[env_name],
            ENVIRONMENTS[env_name].strategies[strategy],
            config.demonstrator_samples,
            seed=f"{config.seed}/{env_name}",
        )
        lengths = sorted(len(e.input_ids) for e in tokenized)
        too_long = [n for n in lengths if n > config.max_context]
        if too_long:
            raise ValueError(
                f"{len(too_long)} {env_name} demonstrations are longer than max_context={config.max_context} tokens "
                f"(the longest has {lengths[-1]}); raise max_context"
            )
        examples.extend(tokenized)
        report.demonstrations[env_name] = {
            "strategy": strategy,
            "episodes": len(tokenized),
            "tokens": sum(lengths),
            "assistant_tokens": sum(sum(e.assistant_mask) for e in tokenized),
            "soft_targets": sum(len(e.soft_targets) for e in tokenized),
            "max_tokens": lengths[-1],
            "median_tokens": lengths[len(lengths) // 2],
        }
    lap("tokenize")

    model = make_model(config, tokenizer)
    report.parameters = sum(p.numel() for p in model.parameters())
    report.bf16_autocast = native_bf16() if config.bf16_autocast is None else config.bf16_autocast
    report.threads = torch.get_num_threads()
    report.losses = [round(x, 4) for x in train_sft(model, examples, config.sft(), tokenizer.pad_token_id, progress)]
    lap("sft")

    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    lap("save")
    report.seconds["total"] = round(time.perf_counter() - started, 3)
    return report


def main(argv: list[str] | None = None) -> Path:
    """Command line: build (or find) the tiny model and print its directory. `--small` builds the test-sized one."""
    import torch

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--small", action="store_true", help="the seconds-sized SMALL_CONFIG instead of the default")
    parser.add_argument(
        "--cache-dir", default=None, help=f"cache root (default: ${CACHE_ENV} or ~/.cache/agentic_rl_lab)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument(
        "--export",
        default=None,
        metavar="DIR",
        help="then copy it to DIR in bfloat16 (e.g. agentic_rl_lab/data/tiny-model)",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    config = SMALL_CONFIG if args.small else DEFAULT_CONFIG
    path = tiny_model_path(config, args.cache_dir)
    cached = path.is_dir()
    path = build_tiny_model(config, args.cache_dir)
    seconds = load_build_info(path)["seconds"]["total"]
    print(f"{'cached' if cached else 'built'} tiny model ({config.name}, built in {seconds:.0f} s): {path}")
    if args.export:
        path = export_model(path, args.export)
        print(f"exported in bfloat16 to {path}")
    return path


if __name__ == "__main__":
    main()
