"""Asking a judge model until it gives a valid answer: retries, feedback, backoff and the disk cache.

Both LLM judges (`RelativeJudge`, `AbsoluteJudge`) ask through `LLMJudge.ask`. One call is a loop of at most
`max_retries + 1` attempts, and two kinds of failure are retried differently:

- **No answer** (HTTP 429 or 5xx, a timeout, a dropped connection): wait, then send the same request again. The
  wait grows exponentially with jitter, or is what the server's `Retry-After` asked for (`agentic_rl_lab.retry`).
  A 4xx other than 408/409/429 will not change, so it is not retried.
- **An answer that is not valid** (broken JSON, a missing id, a score of 7): ask again at once, with the bad
  answer and a message that says exactly what was wrong appended to the conversation. There is nothing to wait
  for: the server is fine, the answer was not.

Every attempt is recorded on the `JudgeCall`. When the attempts run out, `ask` raises `JudgeError` and the
judge's `on_failure` decides what happens to the group.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from agentic_rl_lab.envs.base import Message
from agentic_rl_lab.judge.backends import BackendError, BackendReply, JudgeBackend
from agentic_rl_lab.judge.base import GroupJudge, JudgeAttempt, JudgeCall, JudgeError, OnFailure
from agentic_rl_lab.judge.cache import JudgeCache
from agentic_rl_lab.judge.judgment import InvalidJudgment, read_judgment
from agentic_rl_lab.judge.prompt import DEFAULT_RUBRIC, feedback_message, scores_schema
from agentic_rl_lab.retry import backoff_seconds


class LLMJudge(GroupJudge):
    """A judge that asks a chat model (through a `JudgeBackend`) for scores, with the rubric in its prompt.

    - `rubric`: the grading standards (default: RULER's four, see `prompt.DEFAULT_RUBRIC`).
    - `cache`: a `JudgeCache`, None for no cache, or `"default"`: the lab's cache folder for backends whose answers
      cost something (API, local model), none for a scripted backend.
    - `max_retries`: attempts after the first, per call, for either kind of failure.
    - `backoff_base`, `max_backoff`: the wait before retry k after a failed request is about
      `backoff_base * 2**(k-1)` seconds (or the server's Retry-After), never more than `max_backoff`.
    """

    def __init__(
        self,
        backend: JudgeBackend,
        *,
        rubric: str = DEFAULT_RUBRIC,
        cache: JudgeCache | Literal["default"] | None = "default",
        max_retries: int = 3,
        backoff_base: float = 1.0,
        max_backoff: float = 60.0,
        permutations: int = 1,
        on_failure: OnFailure = "raise",
        seed: int = 0,
    ) -> None:
        super().__init__(permutations=permutations, on_failure=on_failure, seed=seed)
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.backend = backend
        self.rubric = rubric
        if cache == "default":
            cache = JudgeCache.default() if backend.worth_caching else None
        self.cache = cache
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.max_concurrency = backend.max_concurrency

    @property
    def model_name(self) -> str:
        return self.backend.model

    def ask(self, call: JudgeCall, messages: list[Message]) -> None:
        """Get valid scores for the ids in `call.order`, filling `call.scores` and `call.explanations`.

        Raises `JudgeError` when no valid answer came within `max_retries + 1` attempts.
        """
        ids = call.order
        schema = scores_schema(ids)
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            started = time.perf_counter()
            try:
                reply, cached = self._complete(messages, schema)
            except BackendError as exc:
                call.attempts.append(
                    JudgeAttempt(request=exc.request, error=str(exc), seconds=time.perf_counter() - started)
                )
                if not exc.retryable or attempt == attempts:
                    raise JudgeError(f"no answer after {attempt} attempt{'s' * (attempt > 1)}: {exc}") from None
                time.sleep(backoff_seconds(attempt, exc.retry_after, self.backoff_base, self.max_backoff))
                continue
            record = JudgeAttempt(
                request=reply.request,
                response=reply.text,
                raw_response=reply.response,
                usage=reply.usage,
                cached=cached,
                seconds=time.perf_counter() - started,
            )
            call.attempts.append(record)
            try:
                verdicts = read_judgment(reply.text, ids)
            except InvalidJudgment as exc:
                record.error = f"invalid answer: {exc}"
                if attempt == attempts:
                    raise JudgeError(f"no valid answer after {attempt} attempt{'s' * (attempt > 1)}: {exc}") from None
                messages = [*messages, {"role": "assistant", "content": reply.text}, feedback_message(str(exc), ids)]
                continue
            call.scores = {id_: verdict.score for id_, verdict in verdicts.items()}
            call.explanations = {id_: verdict.explanation for id_, verdict in verdicts.items()}
            return

    def _complete(self, messages: list[Message], schema: dict[str, Any]) -> tuple[BackendReply, bool]:
        """The backend's answer, from the cache if this exact request was answered before; and whether it was."""
        if self.cache is None:
            return self.backend.complete(messages, schema), False
        key = JudgeCache.key({"backend": self.backend.settings(), "messages": messages, "schema": schema})
        stored = self.cache.get(key)
        if stored is not None:
            return BackendReply.model_validate(stored), True
        reply = self.backend.complete(messages, schema)
        self.cache.put(key, reply.model_dump(mode="json"))
        return reply, False
