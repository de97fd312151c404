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
  At `temperature=0` (greedy), they are `log_softmax(logits)`.

Training uses `token_ids`, never a re-tokenization of the message: the two can differ (see `tests/policies/
test_hf.py` for when), and the model must be trained on what it actually did.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from agentic_rl_lab.chat import END_OF_TURN, parse_assistant_text
from agentic_rl_lab.envs.base import Message
from agentic_rl_lab.grpo.tensors import splice_sampled_tokens
from agentic_rl_lab.rollout import Action


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
    ) -> None:
        """`seed` makes sampling reproducible: call k of `act` samples with its own seed, derived from `seed` and k.
        `end_of_turn`: the token that ends an assistant turn (ChatML's `<|im_end|>`)."""
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
        self.counts: Counter[str] = Counter()
        self.sampled: dict[str, list[int]] = {}
        """Token ids this policy sampled, by a digest of the history up to and including the message: the next
        prompt splices them in instead of re-tokenizing the parsed message (token in, token out)."""
        """Running totals: `generate_calls`, `turns`, `sampled_tokens`, `truncated_turns` (cut by `max_new_tokens`)
        and `parse_errors/<kind>` (see `agentic_rl_lab.chat.PARSE_ERROR_KINDS`)."""

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
        if not histories:
            return []
        prompts = [self.prompt_ids(history, tools) for history in histories]
        input_ids, attention_mask = self._left_pad(prompts)
        with torch.no_grad(), self._seeded():
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                do_sample=self.temperature > 0,
                temperature=self.temperature if self.temperature > 0 else None,
                top_p=self.top_p if self.temperature > 0 else None,
                top_k=0,  # transformers samples from the top 50 tokens unless told otherwise
                repetition_penalty=1.0,
                max_new_tokens=self.max_new_tokens,
                eos_token_id=self.end_of_turn_id,
                pad_token_id=self.tokenizer.pad_token_id,
                return_dict_in_generate=True,
                output_logits=True,  # the raw logits of every step, before temperature and top-p
            )
        self.counts["generate_calls"] += 1
        new_tokens = output.sequences[:, input_ids.shape[1] :]  # (batch, steps)
        logits = torch.stack(output.logits, dim=1).float()  # (batch, steps, vocab)
        temperature = self.temperature if self.temperature > 0 else 1.0
        logprobs = torch.log_softmax(logits / temperature, dim=-1).gather(-1, new_tokens[..., None])[..., 0]
        return [
            self._action(row, new_tokens[row].tolist(), logprobs[row].tolist(), h) for row, h in enumerate(histories)
        ]

    # ----- the pieces -------------------------------------------------------------------------------------------------
    def prompt_ids(self, history: list[Message], tools: list[dict[str, Any]] | None) -> list[int]:
        """The tokens the model reads: the history rendered by the chat template, ending `<|im_start|>assistant\\n`.

        Raises ValueError if the prompt plus `max_new_tokens` would not fit in the model's context.
        """
        sampled = {k: (self.sampled[key], None) for k, key in _digests(history) if key in self.sampled}
        if sampled:  # splice in the ids this policy sampled, so the prompt is exactly what the trainer will see
            ids = splice_sampled_tokens(self.tokenizer, history, tools, sampled, add_generation_prompt=True).input_ids
        else:
            ids = self.tokenizer.apply_chat_template(
                history, tools=tools or None, add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
        if self.context_length is not None and len(ids) + self.max_new_tokens > self.context_length:
            raise ValueError(
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
