"""A policy served over HTTP by any OpenAI-compatible chat-completions endpoint, with native tool calling.

One class covers OpenAI itself, a vLLM server, Ollama and a LiteLLM proxy: they all accept `POST
/chat/completions` with `messages` and `tools`, and answer with an assistant message whose `tool_calls` are
already in the format our environments read.

An API model returns text, not token ids, so `Action.token_ids` is None: its trajectories can be judged,
viewed and compared, but not trained on (GRPO needs the exact tokens and log-probabilities that were sampled).
A vLLM server can say what it sampled: with `return_token_ids=True` the policy asks for the ids
(vLLM's `return_token_ids`) and their log-probabilities (`logprobs`), and its trajectories train like
`HFPolicy`'s, token in / token out, so a fleet of vLLM servers can do the rollouts of a run. The lab's tokenizer
must be the served model's: the trainer splices the returned ids between context it tokenizes itself.

Each history in a batch is one request; at most `max_concurrency` are in flight at once. Requests run on a
thread pool with the synchronous client, so `act` works the same in a script and inside Jupyter's running
event loop. Rate limits (429), server errors (5xx), timeouts, connection errors and unreadable responses are
retried with exponential backoff and jitter, honouring `Retry-After`. When the retries run out, `act` raises
`OpenAIPolicyError`; the rollout engine then records the failure on that history's group and carries on.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import openai

from agentic_rl_lab.envs.base import Message
from agentic_rl_lab.openai_client import openai_client
from agentic_rl_lab.retry import (
    backoff_seconds,
    describe_failure,
    is_retryable,
    retry_after_seconds,
    scrub,
    status_of,
    without_credentials,
)
from agentic_rl_lab.rollout import Action

BASE_URL_ENV = "AGENTIC_RL_LAB_BASE_URL"
MODEL_ENV = "AGENTIC_RL_LAB_MODEL"


class OpenAIPolicyError(RuntimeError):
    """A chat completion failed for good: the endpoint, the last HTTP status (None if there was none), attempts."""

    def __init__(self, message: str, endpoint: str, status: int | None, attempts: int) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.status = status
        self.attempts = attempts


@dataclass
class Usage:
    """Running totals over every request this policy made, for cost and rate-limit accounting."""

    requests: int = 0
    """Successful completions."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    """Failed attempts that were retried."""
    failures: int = 0
    """Requests that failed for good (each raised `OpenAIPolicyError`)."""
    truncated: int = 0
    """Completions cut off at `max_tokens` (`finish_reason == "length"`)."""
    missing_usage: int = 0
    """Completions whose response reported no token usage, so the token totals undercount."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class OpenAIPolicy:
    """Sample each next action from a chat model behind an OpenAI-compatible endpoint.

    The API key named `api_key_env` is read from Colab Secrets on Colab, else from the environment variable of that
    name (`agentic_rl_lab.openai_client`). There is deliberately no argument for the key itself: a key typed into a
    notebook cell ends up in saved notebooks, in git, and in trajectories and logs that print the policy's
    arguments. The key is sent to whatever `base_url` is, so give a third-party server its own variable
    (`api_key_env="VLLM_API_KEY"`) rather than your OpenAI key. A local server that needs no key works without
    one; the client then sends the placeholder "EMPTY".

    - `model`, `base_url`: default to the environment variables `AGENTIC_RL_LAB_MODEL` and
      `AGENTIC_RL_LAB_BASE_URL` (then `OPENAI_BASE_URL`); no base URL means OpenAI's own API.
    - `temperature`, `max_tokens`: sampling settings for every request (`max_tokens=None` leaves the server's).
    - `max_concurrency`: the most requests in flight at once, across the whole batch of histories.
    - `max_retries`: retries after the first attempt; `timeout`: seconds per attempt.
    - `backoff_base`, `max_backoff`: the wait before retry k is about `backoff_base * 2**k` seconds, with
      jitter, or what the server's `Retry-After` asks for; never more than `max_backoff`.
    - `extra_body`: server-specific request fields, such as vLLM's `{"top_k": 20}`.
    - `return_token_ids`: ask a vLLM server for the sampled token ids and their log-probabilities (see the module
      doc); a server that does not return them is an error, not a silent untrainable trajectory.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 1.0,
        max_tokens: int | None = 1024,
        max_concurrency: int = 8,
        max_retries: int = 5,
        timeout: float = 60.0,
        backoff_base: float = 1.0,
        max_backoff: float = 60.0,
        extra_body: dict[str, Any] | None = None,
        return_token_ids: bool = False,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        model = model or os.environ.get(MODEL_ENV)
        if not model:
            raise ValueError(
                f"no model given: pass OpenAIPolicy(model=...) or set the environment variable {MODEL_ENV}"
            )
        # The setup the policy and the judge share (`openai_client`): the key from Colab Secrets or the environment,
        # the client's own retries off (ours come with a clear final error). `_secret` only scrubs the key from errors.
        self._client, self._secret = openai_client(api_key_env, base_url, BASE_URL_ENV, timeout)
        self.model = model
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.timeout = timeout
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.extra_body = extra_body or {}
        self.return_token_ids = return_token_ids
        self.usage = Usage()
        self._usage_lock = threading.Lock()
        self.endpoint = without_credentials(str(self._client.base_url))

    def act(self, histories: Sequence[list[Message]], tools: list[dict[str, Any]]) -> list[Action | Exception]:
        """One concurrent request per history. A request that fails for good puts its `OpenAIPolicyError` in
        place of the action, so only that trajectory fails and the requests that worked are not paid twice."""
        if not histories:
            return []
        with ThreadPoolExecutor(
            max_workers=min(self.max_concurrency, len(histories)), thread_name_prefix="openai"
        ) as pool:
            futures = [pool.submit(self._complete, history, tools) for history in histories]
            return [future.result() if future.exception() is None else future.exception() for future in futures]

    def _complete(self, history: list[Message], tools: list[dict[str, Any]]) -> Action:
        """One chat completion with retries; the assistant message as a plain OpenAI dict."""
        request: dict[str, Any] = {"model": self.model, "messages": history, "temperature": self.temperature}
        if tools:
            request["tools"] = tools  # OpenAI rejects an empty list
        if self.max_tokens is not None:
            request["max_tokens"] = self.max_tokens
        if self.extra_body or self.return_token_ids:
            request["extra_body"] = {**self.extra_body, **({"return_token_ids": True} if self.return_token_ids else {})}
        if self.return_token_ids:
            request["logprobs"] = True
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                response = self._client.chat.completions.create(**request)
                if not response.choices:
                    raise _Unreadable("the response has no choices")
                break
            except (openai.APIConnectionError, openai.APIStatusError, json.JSONDecodeError, _Unreadable) as exc:
                status = status_of(exc)
                if not is_retryable(status) or attempt == attempts:
                    with self._usage_lock:
                        self.usage.failures += 1
                    # Not chained: our message says what failed with the key scrubbed; the SDK's text may echo it.
                    raise self._error(exc, status, attempt) from None
                with self._usage_lock:
                    self.usage.retries += 1
                time.sleep(self._backoff(attempt, exc))
        self._count(response)
        choice = response.choices[0]
        if not self.return_token_ids:
            return Action(_to_message(choice.message))
        token_ids, logprobs = _sampled_tokens(choice)
        if token_ids is None:
            raise OpenAIPolicyError(
                f"{self.endpoint} returned no token ids and log-probs for the sampled text: return_token_ids=True "
                "needs a vLLM server that supports the `return_token_ids` request field",
                self.endpoint,
                200,
                1,
            )
        return Action(_to_message(choice.message), token_ids, logprobs)

    def _backoff(self, attempt: int, exc: Exception) -> float:
        """Seconds to wait before retry `attempt`: the server's Retry-After, else exponential with jitter."""
        return backoff_seconds(attempt, retry_after_seconds(exc), self.backoff_base, self.max_backoff)

    def _error(self, exc: Exception, status: int | None, attempts: int) -> OpenAIPolicyError:
        """A final error that names the endpoint, the status and the attempts, and never the key."""
        what = describe_failure(exc, self.timeout)
        hint = {
            401: f"; check the key {self.api_key_env} in Colab Secrets or the environment",
            404: "; check model and base_url",
        }
        message = (
            f"chat completion for model {self.model!r} at {self.endpoint} failed after {attempts} "
            f"attempt{'s' if attempts > 1 else ''}: {what}{hint.get(status or 0, '')}"
        )
        return OpenAIPolicyError(scrub(message, self._secret), self.endpoint, status, attempts)

    def _count(self, response: Any) -> None:
        with self._usage_lock:
            self.usage.requests += 1
            self.usage.truncated += response.choices[0].finish_reason == "length"
            if response.usage is None:
                self.usage.missing_usage += 1
            else:
                self.usage.prompt_tokens += response.usage.prompt_tokens or 0
                self.usage.completion_tokens += response.usage.completion_tokens or 0

    def __repr__(self) -> str:
        return f"OpenAIPolicy(model={self.model!r}, endpoint={self.endpoint!r}, max_concurrency={self.max_concurrency})"


class _Unreadable(Exception):
    """A 200 response that parsed but holds no completion (some proxies put upstream errors there)."""


def _to_message(message: Any) -> Message:
    """The SDK's assistant message as a plain OpenAI dict: content and function tool calls, arguments as text."""
    content = message.content if message.content is not None else message.refusal  # keep a refusal visible
    result: Message = {"role": "assistant", "content": content}
    if message.tool_calls:
        result["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            if getattr(call, "type", "function") == "function"
            else call.model_dump()  # another kind of tool call: kept, and the environment reports it as malformed
            for call in message.tool_calls
        ]
    return result


def _sampled_tokens(choice: Any) -> tuple[list[int] | None, list[float] | None]:
    """vLLM's answer to `return_token_ids` and `logprobs`: the choice's `token_ids` (an extra field to the SDK) and
    one log-prob per id; (None, None) when either is missing or their lengths differ."""
    token_ids = getattr(choice, "token_ids", None)
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not token_ids or not content or len(content) != len(token_ids):
        return None, None
    return [int(t) for t in token_ids], [float(entry.logprob) for entry in content]
