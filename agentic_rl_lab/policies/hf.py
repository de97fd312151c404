"""A language model as a policy: Hugging Face `generate`, batched, keeping the exact tokens it sampled.

Each turn, `act` renders every history with the tokenizer's chat template, pads them on the left into one batch,
and samples all the next assistant turns in **one** `generate` call (lockstep batching: one forward pass per
token for the whole batch). Each turn ends at `<|im_end|>`. The text is parsed into an OpenAI message with
`tool_calls` (`agentic_rl_lab.chat.parse_assistant_text`) for the environment, and the action also carries:

- `token_ids`: exactly the tokens sampled, the final `<|im_end|>` included, the padding excluded;
- `logprobs`: the log-probability of each under the *sampling distribution at the temperature*, that is
  `log_softmax(logits / temperature)` over the full vocabulary (no top-p truncation). This is what the GRPO
  trainer recomputes from the same tokens, so with `top_p=1` the first importance ratio is exactly 1.
  With `top_p < 1`, tokens are sampled from the truncated distribution, but the recorded numbers stay untruncated.
  At `temperature=0` (greedy), they are `log_softmax(logits)`. Only these numbers are kept, one per sampled
  token (`SampledLogprobs`): keeping every step's logits instead would cost batch × vocabulary × 4 bytes a step,
  9 GB over a 30-token turn for 128 trajectories of a Qwen model (151,936 words).

Training uses `token_ids`, never a re-tokenization of the message: the two can differ (see `tests/policies/
test_hf.py` for when), and the model must be trained on what it actually did.

**The KV cache is kept between turns** (`reuse_cache=True`). A turn's prompt is the previous prompt, the tokens
just sampled, and the new observation. Without the cache, every turn would recompute the keys and values of the
whole history (the *prefill*), and on a small model that costs more than sampling the turn itself: a guess_number
turn reads ~300 tokens and writes ~20. So after each `generate` the policy keeps every row's keys and values, and
the next call computes only the new tokens; it also grows the next prompt from the last one (`extend_prompt`)
instead of rendering the whole conversation again. The cache lives one call: rows that do not come back (finished
trajectories) are dropped, so memory stays one batch's worth. It assumes the weights do not change between the
turns of a trajectory (the trainer samples whole groups, then updates). Whether the cache is kept by default is
decided per model by `agentic_rl_lab.models.reuse_kv_cache` (not yet under Unsloth).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentic_rl_lab.chat import END_OF_TURN, extend_prompt, parse_assistant_text, splice_sampled_tokens
from agentic_rl_lab.envs.base import Message
from agentic_rl_lab.models import for_inference, reuse_kv_cache
from agentic_rl_lab.rollout import Action, ContextFull


@dataclass
class CachedPrefix:
    """What a row's last `generate` call read and computed: its `prompt`, the `token_ids` it sampled, and the keys
    and values of `ids`, all those tokens but the last sampled one (generation stops before feeding that one
    back). `layers[i]` is layer i's (keys, values), each (kv_heads, len(ids), head_dim)."""

    prompt: list[int]
    token_ids: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def ids(self) -> list[int]:
        return self.prompt + self.token_ids[:-1]


class SampledLogprobs:
    """A logits processor that records log p(sampled token) at every step of `generate`, and nothing more.

    `generate` calls it with each step's raw logits (custom processors run before temperature and top-p), before
    the token is drawn; the drawn token shows up as the last column of `input_ids` at the next call. So it keeps one
    step's log-softmax, (batch, vocabulary), until then: memory for one step, whatever the turn's length.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.pending: torch.Tensor | None = None  # the last step's log-softmax, waiting for its token
        self.steps: list[torch.Tensor] = []  # (batch,) per finished step

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._take(input_ids[:, -1])
        self.pending = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """The log-probability of each of `new_tokens` (batch, steps), once `generate` has returned."""
        self._take(new_tokens[:, -1])
        if len(self.steps) != new_tokens.shape[1]:
            raise RuntimeError(f"recorded {len(self.steps)} steps for {new_tokens.shape[1]} sampled tokens")
        return torch.stack(self.steps, dim=1).cpu()

    def _take(self, tokens: torch.Tensor) -> None:
        if self.pending is not None:
            self.steps.append(self.pending.gather(-1, tokens[:, None].to(self.pending.device))[:, 0])
            self.pending = None


class HFPolicy:
    """Sample each next action from a causal LM with `model.generate`, one batched call per turn."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 128,
        seed: int | None = None,
        end_of_turn: str = END_OF_TURN,
        reuse_cache: bool | None = None,
    ) -> None:
        """`seed` makes sampling reproducible: call k of `act` samples with its own seed, derived from `seed` and k.
        `end_of_turn`: the token that ends an assistant turn (ChatML's `<|im_end|>`).
        `reuse_cache`: keep each row's KV cache for its next turn (see the module docstring); None decides by the
        model (`models.reuse_kv_cache`). It switches itself off for a model whose cache is not a plain
        `DynamicCache` (and counts `cache_unsupported`)."""
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "the tokenizer has no chat template, so histories cannot be rendered; set one, e.g. "
                "`tokenizer.chat_template = agentic_rl_lab.chat.CHAT_TEMPLATE`"
            )
        stop = tokenizer.convert_tokens_to_ids(end_of_turn)
        if stop is None or stop == tokenizer.unk_token_id:
            raise ValueError(f"the end-of-turn token {end_of_turn!r} is not in the tokenizer's vocabulary")
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set `tokenizer.pad_token` (the eos token will do)")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.top_p, self.max_new_tokens, self.seed = temperature, top_p, max_new_tokens, seed
        self.end_of_turn_id: int = stop
        self.context_length: int | None = getattr(model.config, "max_position_embeddings", None)
        self.reuse_cache = reuse_kv_cache(model) if reuse_cache is None else reuse_cache
        self.counts: Counter[str] = Counter()
        """Running totals: `generate_calls`, `turns`, `sampled_tokens`, `truncated_turns` (cut by `max_new_tokens`),
        `prefill_tokens` (computed) and `cached_tokens` (read from the cache instead), and `parse_errors/<kind>`
        (see `agentic_rl_lab.chat.PARSE_ERROR_KINDS`)."""
        self.sampled: dict[str, list[int]] = {}
        """Token ids this policy sampled, by a digest of the history up to and including the message: the next
        prompt splices them in instead of re-tokenizing the parsed message (token in, token out)."""
        self.cache: dict[str, CachedPrefix] = {}
        """Each row of the last `generate` call, by the same digest as `sampled`."""

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, device: str | None = None, dtype: torch.dtype | None = None, **kwargs: Any
    ) -> HFPolicy:
        """Load a model directory (or Hub id) with `AutoModelForCausalLM` and `AutoTokenizer`; `kwargs` go to
        `HFPolicy`. E.g. `HFPolicy.from_pretrained(default_model_path(), seed=0)`."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
        model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        model.eval()
        return cls(model, tokenizer, **kwargs)

    # ----- the Policy protocol ----------------------------------------------------------------------------------------
    def act(self, histories: Sequence[list[Message]], tools: list[dict[str, Any]]) -> list[Action]:
        """One batched `generate` call for all histories; returns their actions in order."""
        from transformers import LogitsProcessorList

        if not histories:
            return []
        prompts = [self.prompt_ids(history, tools) for history in histories]
        input_ids, attention_mask = self._left_pad(prompts)
        past = self._past_key_values(histories, prompts) if self.reuse_cache else None
        cached = past.get_seq_length() if past is not None else 0  # columns generate need not compute
        recorder = SampledLogprobs(self.temperature if self.temperature > 0 else 1.0)
        for_inference(self.model)
        with torch.no_grad(), self._seeded():
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                past_key_values=past,  # None, or the first columns of every row, computed by the last call
                do_sample=self.temperature > 0,
                temperature=self.temperature if self.temperature > 0 else None,
                top_p=self.top_p if self.temperature > 0 else None,
                top_k=0,  # transformers samples from the top 50 tokens unless told otherwise
                repetition_penalty=1.0,
                max_new_tokens=self.max_new_tokens,
                eos_token_id=self.end_of_turn_id,
                pad_token_id=self.tokenizer.pad_token_id,
                return_dict_in_generate=True,
                logits_processor=LogitsProcessorList([recorder]),  # each step's raw logits, before temperature
            )
        self.counts["generate_calls"] += 1
        self.counts["cached_tokens"] += cached * len(prompts) - int((attention_mask[:, :cached] == 0).sum())
        self.counts["prefill_tokens"] += int(attention_mask[:, cached:].sum())
        new_tokens = output.sequences[:, input_ids.shape[1] :]  # (batch, steps)
        logprobs = recorder.finish(new_tokens)  # (batch, steps)
        actions = [
            self._action(row, new_tokens[row].tolist(), logprobs[row].tolist(), h) for row, h in enumerate(histories)
        ]
        if self.reuse_cache:
            self._keep_cache(output.past_key_values, histories, prompts, actions)
        return actions

    # ----- the pieces -------------------------------------------------------------------------------------------------
    def prompt_ids(self, history: list[Message], tools: list[dict[str, Any]] | None) -> list[int]:
        """The tokens the model reads: the history rendered by the chat template, ending `<|im_start|>assistant\\n`.

        Raises `ContextFull` (a ValueError) if the prompt plus `max_new_tokens` would not fit in the model's context:
        the rollout then ends that episode, truncated.
        """
        keys = _digests(history)
        last = self.cache.get(keys[-1][1]) if keys else None
        sampled = {k: (self.sampled[key], None) for k, key in keys if key in self.sampled}
        if last is not None:  # grow the last prompt of this trajectory by the turn it sampled and the reply
            ids = extend_prompt(self.tokenizer, history, tools, last.prompt, keys[-1][0], last.token_ids)
        elif sampled:  # splice in the ids this policy sampled, so the prompt is exactly what the trainer will see
            ids = splice_sampled_tokens(self.tokenizer, history, tools, sampled, add_generation_prompt=True).input_ids
        else:
            ids = self.tokenizer.apply_chat_template(
                history, tools=tools or None, add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
        if self.context_length is not None and len(ids) + self.max_new_tokens > self.context_length:
            raise ContextFull(
                f"a history of {len(history)} messages is {len(ids)} tokens; with max_new_tokens="
                f"{self.max_new_tokens} it exceeds the model's context of {self.context_length} tokens. Use fewer "
                "turns (the environment's max_turns), a smaller max_new_tokens, or a model with a longer context."
            )
        return list(ids)

    def _left_pad(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pad on the left, so every prompt ends at the last column and generation continues from there.
        Returns `input_ids` and `attention_mask`, both (batch, longest prompt); the mask is 0 on padding."""
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=self.model.device)
        attention_mask = torch.tensor(
            [[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.model.device
        )
        return input_ids, attention_mask

    def _action(self, row: int, tokens: list[int], logprobs: list[float], history: list[Message]) -> Action:
        """Cut one row of the batch at its end of turn, decode it and parse the text into a message."""
        if self.end_of_turn_id in tokens:
            length = tokens.index(self.end_of_turn_id) + 1  # rows that finished early were padded after this
            text_tokens = tokens[: length - 1]
        else:  # cut off by max_new_tokens: every column is a sampled token
            length = len(tokens)
            text_tokens = tokens
            self.counts["truncated_turns"] += 1
        text = self.tokenizer.decode(text_tokens, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        message, errors = parse_assistant_text(text, call_id_prefix=f"call_{len(history)}_")
        self.counts["turns"] += 1
        self.counts["sampled_tokens"] += length
        self.counts.update(f"parse_errors/{error['kind']}" for error in errors)
        self.sampled[_digests([*history, message])[-1][1]] = tokens[:length]
        return Action(message, token_ids=tokens[:length], logprobs=logprobs[:length])

    # ----- the KV cache between turns ---------------------------------------------------------------------------------
    def _past_key_values(self, histories: Sequence[list[Message]], prompts: list[list[int]]) -> Any:
        """A `DynamicCache` holding the first `C` columns of the left-padded batch, or None if no row has one.

        Every row is right-aligned in a batch of width `W`. A row whose cached prefix is `c` tokens long has
        `W - len(prompt) + c` columns it need not compute. The batch's cache covers the columns that *every* row
        has: `C = W - max(len(prompt) - c)`. A row with more cached tokens than that recomputes the rest, which
        is correct, only a little slower. Padding columns hold zeros and are masked out.
        """
        from transformers import DynamicCache

        width = max(len(p) for p in prompts)
        found = [self._cached_prefix(h, p) for h, p in zip(histories, prompts)]
        uncached = [len(p) - (len(e.ids) if e else 0) for p, e in zip(prompts, found)]
        columns = width - max(uncached)  # C
        if columns <= 0:
            return None
        layers = []
        for i, (keys, values) in enumerate(next(e for e in found if e).layers):
            shape = (len(prompts), keys.shape[0], columns, keys.shape[2])
            batch_keys, batch_values = keys.new_zeros(shape), values.new_zeros(shape)
            for row, (prompt, entry) in enumerate(zip(prompts, found)):
                take = columns - (width - len(prompt))  # this row's real tokens among the first C columns
                if entry is not None and take > 0:
                    batch_keys[row, :, columns - take :] = entry.layers[i][0][:, :take]
                    batch_values[row, :, columns - take :] = entry.layers[i][1][:, :take]
            layers.append((batch_keys, batch_values))
        return DynamicCache(layers)

    def _cached_prefix(self, history: list[Message], prompt: list[int]) -> CachedPrefix | None:
        """The cache entry of the history's last assistant turn, if this policy sampled it in its last call and
        the new prompt starts with exactly the tokens the entry covers."""
        keys = _digests(history)
        entry = self.cache.get(keys[-1][1]) if keys else None
        if entry is None or len(entry.ids) >= len(prompt) or prompt[: len(entry.ids)] != entry.ids:
            return None
        return entry

    def _keep_cache(
        self, past: Any, histories: Sequence[list[Message]], prompts: list[list[int]], actions: list[Action]
    ) -> None:
        """Keep each row's keys and values (its real columns only) for its next turn; drop everything older."""
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        self.cache = {}
        if type(past) is not DynamicCache or any(type(layer) is not DynamicLayer for layer in past.layers):
            self.reuse_cache = False  # e.g. a sliding-window or hybrid model: its cache cannot be cut this way
            self.counts["cache_unsupported"] += 1
            return
        width = max(len(p) for p in prompts)
        for row, (history, prompt, action) in enumerate(zip(histories, prompts, actions)):
            start, end = width - len(prompt), width + len(action.token_ids) - 1
            layers = [(k[row, :, start:end].clone(), v[row, :, start:end].clone()) for k, v, *_ in past]
            key = _digests([*history, action.message])[-1][1]
            self.cache[key] = CachedPrefix(prompt, action.token_ids, layers)

    @contextlib.contextmanager
    def _seeded(self) -> Iterator[None]:
        """With a seed, sample under a fresh RNG state for this call (the global state is restored afterwards)."""
        if self.seed is None:
            yield
            return
        device = self.model.device
        devices = [device.index or 0] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed((self.seed * 1_000_003 + self.counts["generate_calls"]) % 2**63)
            yield

    def __repr__(self) -> str:
        name = getattr(self.model.config, "_name_or_path", "") or type(self.model).__name__
        return f"HFPolicy({name!r}, temperature={self.temperature}, top_p={self.top_p})"


def _digests(history: list[Message]) -> list[tuple[int, str]]:
    """(index, digest of history[: index + 1]) for every assistant message: a key for "this message, after this
    conversation", so two trajectories that happen to write the same message keep their own sampled ids."""
    digest, keys = hashlib.sha256(), []
    for index, message in enumerate(history):
        digest.update(json.dumps(message, sort_keys=True, default=str).encode())
        if message.get("role") == "assistant":
            keys.append((index, digest.copy().hexdigest()))
    return keys
