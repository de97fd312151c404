"""Where a judge's answer comes from: a chat model behind an OpenAI-compatible API, or one in this process.

A backend turns chat messages into answer text, once: `complete(messages, schema) -> BackendReply`. Retries,
validation and caching belong to the judge (`judge/llm.py`), so every backend gets them for free.

- `OpenAIJudgeBackend`: OpenAI, a vLLM server, Ollama, a LiteLLM proxy. Structured output (`response_format`
  with a JSON schema) where the server supports it; where it does not, the server's 400 switches it off and the
  judge reads the JSON out of plain text.
- `HFJudgeBackend`: a Hugging Face model and tokenizer already in memory, such as the policy being trained. With a
  peft LoRA model, the adapters are switched off while it judges, so the judge is the *base* model: self-judging
  on one GPU, with no API key.
- `ScriptedBackend`: answers you write yourself, for tests and for showing the machinery with no model at all.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import openai
from pydantic import BaseModel, Field

from agentic_rl_lab.envs.base import Message
from agentic_rl_lab.openai_client import openai_client
from agentic_rl_lab.retry import (
    describe_failure,
    is_retryable,
    retry_after_seconds,
    scrub,
    status_of,
    without_credentials,
)

JUDGE_MODEL_ENV = "AGENTIC_RL_LAB_JUDGE_MODEL"
JUDGE_BASE_URL_ENV = "AGENTIC_RL_LAB_JUDGE_BASE_URL"


class TokenUsage(BaseModel):
    """Tokens of one call as the backend reported them; None where it did not report them."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class BackendReply(BaseModel):
    """One answer from a backend, with everything needed to see exactly what happened."""

    text: str
    """The answer text, to be parsed by `judgment.read_judgment`."""
    request: dict[str, Any]
    """The request as sent: model, messages and settings. Never the API key (that goes in an HTTP header)."""
    response: dict[str, Any] = Field(default_factory=dict)
    """The raw response (the whole chat-completion body, or the generated token ids)."""
    usage: TokenUsage = Field(default_factory=TokenUsage)


class BackendError(Exception):
    """A call that produced no answer. `retryable`: whether trying again may help (a 429, a 5xx, a timeout);
    `retry_after`: seconds the server asked us to wait, if it did; `request`: what was sent."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
        request: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.request = request or {}


class JudgeBackend(Protocol):
    """What a judge needs from a model."""

    model: str
    max_concurrency: int
    """How many calls may run at once (1 for a model in this process)."""
    worth_caching: bool
    """Whether answers are worth keeping on disk (a scripted backend's are not)."""

    def settings(self) -> dict[str, Any]:
        """Everything besides the messages that determines the answer: part of the cache key."""
        ...

    def complete(self, messages: list[Message], schema: dict[str, Any]) -> BackendReply:
        """One answer to `messages`; `schema` is the JSON schema the answer should follow. Raises `BackendError`."""
        ...


def estimate_tokens(text: str) -> int:
    """A rough token count: one token per 4 characters, OpenAI's rule of thumb for English text."""
    return math.ceil(len(text) / 4)


# ----- any OpenAI-compatible endpoint --------------------------------------------------------------------------------
class OpenAIJudgeBackend:
    """A judge model behind an OpenAI-compatible chat-completions endpoint, called with the real `openai` client.

    The API key named `api_key_env` is read from Colab Secrets on Colab, else from the environment variable of that
    name (`agentic_rl_lab.openai_client`); never an argument, so it never lands in a notebook, a trajectory, the cache
    or a log. `model` and `base_url` default to the environment variables
    `AGENTIC_RL_LAB_JUDGE_MODEL` and `AGENTIC_RL_LAB_JUDGE_BASE_URL` (then `OPENAI_BASE_URL`); no base URL means
    OpenAI's own API.

    - `temperature`: 0 by default, for repeatable judgments; None leaves it out (some reasoning models reject it).
    - `max_tokens`: the answer's cap (None: the server's default).
    - `structured`: ask for `response_format={"type": "json_schema", ...}`. A server that rejects it with a 400
      makes the backend warn once and ask without it from then on; the judge then reads JSON out of the text.
    - `timeout`: seconds per attempt. `max_concurrency`: the most calls in flight at once.
    - `extra_body`: server-specific request fields, such as vLLM's `{"top_k": 20}`.
    """

    worth_caching = True

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        structured: bool = True,
        timeout: float = 120.0,
        max_concurrency: int = 8,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        model = model or os.environ.get(JUDGE_MODEL_ENV)
        if not model:
            raise ValueError(
                f"no judge model given: pass OpenAIJudgeBackend(model=...) or set the environment variable "
                f"{JUDGE_MODEL_ENV}"
            )
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        self.model = model
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.structured = structured
        self.timeout = timeout
        self.max_concurrency = max_concurrency
        self.extra_body = extra_body or {}
        # The setup the policy and the judge share (`openai_client`): the key from Colab Secrets or the environment,
        # the client's own retries off (ours come with a clear final error). `_secret` only scrubs the key from errors.
        self._client, self._secret = openai_client(api_key_env, base_url, JUDGE_BASE_URL_ENV, timeout)
        self.endpoint = without_credentials(str(self._client.base_url))
        self._server_takes_schema = True
        self._lock = threading.Lock()

    def settings(self) -> dict[str, Any]:
        return {
            "kind": "openai",
            "endpoint": self.endpoint,
            "model": self.model,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "structured": self.structured,
            "extra_body": self.extra_body,
        }

    def complete(self, messages: list[Message], schema: dict[str, Any]) -> BackendReply:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.structured and self._server_takes_schema:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "judgment", "schema": schema, "strict": True},
            }
        try:
            response, raw_body = self._send(body)
        except openai.BadRequestError as exc:
            if "response_format" not in body or not _about_structured_output(exc):
                raise self._error(exc, body) from None
            with self._lock:
                if self._server_takes_schema:
                    warnings.warn(
                        f"{self.endpoint} rejected structured output ({_first_line(exc)}); asking for JSON in plain "
                        "text from now on",
                        stacklevel=2,
                    )
                self._server_takes_schema = False
            body = {key: value for key, value in body.items() if key != "response_format"}
            try:
                response, raw_body = self._send(body)
            except (openai.APIConnectionError, openai.APIStatusError, ValueError) as retry_exc:
                raise self._error(retry_exc, body) from None
        except (openai.APIConnectionError, openai.APIStatusError, ValueError) as exc:
            raise self._error(exc, body) from None
        request = {**body, **self.extra_body}
        if not response.choices:
            raise BackendError("the response has no choices", retryable=True, request=request)
        message = response.choices[0].message
        text = message.content if message.content is not None else (message.refusal or "")
        usage = TokenUsage()
        if response.usage is not None:
            usage = TokenUsage(
                prompt_tokens=response.usage.prompt_tokens, completion_tokens=response.usage.completion_tokens
            )
        return BackendReply(text=text, request=request, response=raw_body, usage=usage)

    def _send(self, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The parsed completion, and the response body exactly as the server sent it."""
        extra = {"extra_body": self.extra_body} if self.extra_body else {}
        raw = self._client.chat.completions.with_raw_response.create(**body, **extra)
        return raw.parse(), json.loads(raw.text)

    def _error(self, exc: Exception, body: dict[str, Any]) -> BackendError:
        """A `BackendError` that names the endpoint and the failure, never the key."""
        status = status_of(exc)
        message = f"judge model {self.model!r} at {self.endpoint}: {describe_failure(exc, self.timeout)}"
        return BackendError(
            scrub(message, self._secret),
            retryable=is_retryable(status),
            status=status,
            retry_after=retry_after_seconds(exc),
            request={**body, **self.extra_body},
        )

    def __repr__(self) -> str:
        return f"OpenAIJudgeBackend(model={self.model!r}, endpoint={self.endpoint!r})"


def _about_structured_output(exc: openai.BadRequestError) -> bool:
    text = str(exc).lower()
    return any(word in text for word in ("response_format", "json_schema", "structured", "guided"))


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


# ----- a model in this process --------------------------------------------------------------------------------------
class HFJudgeBackend:
    """Judge with a Hugging Face causal LM and its tokenizer, in this process: "self-judging" with the policy's
    own base weights on one GPU.

    - The prompt is built with the tokenizer's chat template (`apply_chat_template`), then generated greedily
      (`temperature=0`) or sampled.
    - With a peft model (LoRA, including Unsloth's), generation runs inside `model.disable_adapter()`: the judge is
      the base model, not the policy being trained, and the adapters are back on afterwards.
    - Nothing constrains decoding to the schema; the judge reads the JSON out of the text, and a small model that
      writes garbage gets the usual retries and then fails clearly.
    - The cache key names the model (`model_name`), not its weights. With adapters disabled the base weights do not
      change during LoRA training; if you fine-tune every weight of the model you judge with, pass `cache=None`.
    - `batch_size` > 1 judges that many groups in one `generate` call: the judge scores groups concurrently
      (`max_concurrency`), and the calls that arrive together are padded into one batch (`GenerateBatcher`). A
      training step's groups all arrive at once, so its judge time is that of one call, not of one per group.
    """

    worth_caching = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        model_name: str | None = None,
        max_new_tokens: int = 512,
        temperature: float = 0.0,
        disable_adapters: bool = True,
        batch_size: int = 1,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.hf_model = model
        self.tokenizer = tokenizer
        self.model = model_name or str(getattr(getattr(model, "config", None), "_name_or_path", "") or "hf-model")
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.disable_adapters = disable_adapters
        self.max_concurrency = batch_size
        self.batcher = GenerateBatcher(self._generate, batch_size)

    def settings(self) -> dict[str, Any]:
        return {
            "kind": "hf",
            "model": self.model,
            "adapters_disabled": self.disable_adapters and _is_peft(self.hf_model),
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
        }

    def complete(self, messages: list[Message], schema: dict[str, Any]) -> BackendReply:
        request: dict[str, Any] = {"model": self.model, "messages": messages, **self.settings()}
        try:
            prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # most often: the tokenizer has no chat template
            raise BackendError(f"could not build the judge prompt: {exc}", retryable=False, request=request) from None
        request["prompt"] = prompt
        try:
            prompt_tokens, new_tokens = self.batcher.submit(prompt)
        except Exception as exc:  # out of memory, a bad generation config...: retrying the same call will not help
            message = f"generation failed: {type(exc).__name__}: {exc}"
            raise BackendError(message, retryable=False, request=request) from None
        text = self.tokenizer.decode(new_tokens, skip_special_tokens=True)
        cut_off = len(new_tokens) >= self.max_new_tokens and new_tokens[-1] not in self._stop_ids()
        finish_reason = "length" if cut_off else "stop"
        return BackendReply(
            text=text,
            request=request,
            response={"token_ids": new_tokens, "finish_reason": finish_reason},
            usage=TokenUsage(prompt_tokens=prompt_tokens, completion_tokens=len(new_tokens)),
        )

    def _generate(self, prompts: list[str]) -> list[tuple[int, list[int]]]:
        """One `generate` call for `prompts`, padded on the left; (prompt tokens, new tokens up to the end) each."""
        import torch

        device = next(self.hf_model.parameters()).device
        encoded = self.tokenizer(
            prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        ).to(device)
        sampling = {"do_sample": self.temperature > 0}
        if self.temperature > 0:
            sampling["temperature"] = self.temperature
        pad_id = self.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.tokenizer.eos_token_id
        with torch.no_grad(), self.base_weights():
            output = self.hf_model.generate(
                **encoded, max_new_tokens=self.max_new_tokens, pad_token_id=pad_id, **sampling
            )
        width = encoded["input_ids"].shape[1]
        stops = self._stop_ids()
        results = []
        for row in range(len(prompts)):  # a row that stopped early was padded after its end: cut there
            new = output[row, width:].tolist()
            end = next((i + 1 for i, token in enumerate(new) if token in stops), len(new))
            results.append((int(encoded["attention_mask"][row].sum()), new[:end]))
        return results

    def _stop_ids(self) -> set[int]:
        """The tokens that end an answer: the tokenizer's eos and the model's generation eos (an id or a list)."""
        configured = getattr(getattr(self.hf_model, "generation_config", None), "eos_token_id", None)
        configured = configured if isinstance(configured, list) else [configured]
        return {token for token in [self.tokenizer.eos_token_id, *configured] if token is not None}

    @contextlib.contextmanager
    def base_weights(self) -> Iterator[None]:
        """The model with its LoRA adapters switched off (peft's `disable_adapter()`), if it has any."""
        if self.disable_adapters and _is_peft(self.hf_model):
            with self.hf_model.disable_adapter():
                yield
        else:
            yield

    def __repr__(self) -> str:
        return f"HFJudgeBackend(model={self.model!r}, adapters_disabled={self.settings()['adapters_disabled']})"


class GenerateBatcher:
    """Answers concurrent requests with one batched call: `submit(item)` blocks until `run([items...])` has
    answered it. Requests that arrive within `wait` seconds of each other share a call of up to `size` items.

    Why a batcher and not a list of prompts: the judge scores groups in threads, one `complete` per group (and
    retries one by one), which keeps every backend simple. A local model answers a batch of 8 prompts in about the
    time of one, so the calls that are in flight together are gathered here.
    """

    def __init__(self, run: Callable[[list[Any]], list[Any]], size: int, wait: float = 0.05) -> None:
        self.run, self.size, self.wait = run, size, wait
        self.condition = threading.Condition()
        self.running = threading.Lock()
        self.pending: list[_Request] = []
        self.calls = 0
        """How many times `run` was called: the batch sizes add up to the requests."""

    def submit(self, item: Any) -> Any:
        request = _Request(item)
        with self.condition:
            self.pending.append(request)
            self.condition.notify_all()
            deadline = time.monotonic() + self.wait
            while request in self.pending and len(self.pending) < self.size:  # wait for company, a little
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.condition.wait(remaining)
            batch = None
            if request in self.pending:  # nobody took it: this thread runs a batch that holds it
                batch = [request, *[r for r in self.pending if r is not request][: self.size - 1]]
                self.pending = [r for r in self.pending if r not in batch]
            else:  # another thread took it into its batch
                while not request.done:
                    self.condition.wait()
        if batch is not None:
            self._run(batch)
        if request.error is not None:
            raise request.error
        return request.result

    def _run(self, batch: list[_Request]) -> None:
        try:
            with self.running:  # one call at a time: a model is not used by two threads at once
                results, error = self.run([r.item for r in batch]), None
        except Exception as exc:  # every request of the batch fails with it
            results, error = [None] * len(batch), exc
        with self.condition:
            self.calls += 1
            for request, result in zip(batch, results):
                request.result, request.error, request.done = result, error, True
            self.condition.notify_all()


class _Request:
    def __init__(self, item: Any) -> None:
        self.item, self.result, self.error, self.done = item, None, None, False


def _is_peft(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


# ----- answers written by hand ---------------------------------------------------------------------------------------
Script = Sequence[str | BackendError] | Callable[[list[Message]], str | BackendError]


class ScriptedBackend:
    """A backend that answers with text you give it: a list of answers used in turn (a `BackendError` in the list
    is raised instead), or a function of the messages. Token counts are `estimate_tokens` of the text.

    It shows the judge's machinery (prompt, validation, retries, id matching) with no model at all.
    `prompt.trajectory_ids(messages)` gives a function the ids it was shown.
    """

    max_concurrency = 1
    worth_caching = False

    def __init__(self, script: Script, model: str = "scripted") -> None:
        self.script = script
        self.model = model
        self.requests: list[list[Message]] = []
        self._next = 0

    def settings(self) -> dict[str, Any]:
        return {"kind": "scripted", "model": self.model}

    def complete(self, messages: list[Message], schema: dict[str, Any]) -> BackendReply:
        self.requests.append(messages)
        if callable(self.script):
            answer = self.script(messages)
        else:
            if self._next >= len(self.script):
                raise BackendError(
                    f"the script has no answer left for call #{self._next + 1}", retryable=False, request={}
                )
            answer = self.script[self._next]
            self._next += 1
        request = {"model": self.model, "messages": messages}
        if isinstance(answer, BackendError):
            answer.request = request
            raise answer
        prompt_text = "".join(str(message.get("content") or "") for message in messages)
        usage = TokenUsage(prompt_tokens=estimate_tokens(prompt_text), completion_tokens=estimate_tokens(answer))
        return BackendReply(text=answer, request=request, usage=usage)
