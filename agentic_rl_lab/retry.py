"""Retrying calls to an OpenAI-compatible API: which failures deserve another try, and how long to wait first.

Shared by the API policy (`policies/openai_api.py`) and the API judge backend (`judge/backends.py`), so both
treat a rate limit, a server error or a timeout the same way, and neither ever prints the API key.
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import time
import urllib.parse

import openai

RETRYABLE_STATUS = {408, 409, 429}
"""Statuses worth retrying besides every 5xx: request timeout, conflict (a lock), rate limit."""


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a failed call, or None when there was no HTTP answer (a timeout, a dropped connection)."""
    return exc.status_code if isinstance(exc, openai.APIStatusError) else None


def is_retryable(status: int | None) -> bool:
    """Worth another try: no HTTP answer at all, a 5xx, or one of `RETRYABLE_STATUS`. Other 4xx will not change."""
    return status is None or status in RETRYABLE_STATUS or status >= 500


def backoff_seconds(attempt: int, retry_after: float | None, base: float, max_backoff: float) -> float:
    """Seconds to wait before retry `attempt` (1, 2, ...): the server's Retry-After if it gave one, else exponential.

    The exponential wait, about `base * 2**(attempt - 1)`, has "equal jitter": half fixed, half random, so that many
    clients rate-limited at the same moment do not all come back at the same moment, while each still backs off.
    Never more than `max_backoff`.
    """
    if retry_after is not None and math.isfinite(retry_after):
        return min(max(retry_after, 0.0), max_backoff)
    wait = min(base * 2 ** (attempt - 1), max_backoff)
    return wait / 2 + random.uniform(0, wait / 2)


def retry_after_seconds(exc: BaseException) -> float | None:
    """What the server asked for in `retry-after-ms` (OpenAI's) or `Retry-After` (seconds or an HTTP date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    if headers.get("retry-after-ms"):
        try:
            return float(headers["retry-after-ms"]) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        date = email.utils.parsedate_tz(value)
        return None if date is None else email.utils.mktime_tz(date) - time.time()


def describe_failure(exc: BaseException, timeout: float) -> str:
    """One line that says what went wrong with a call, e.g. "timed out after 60 s" or "HTTP 429: rate limited"."""
    if isinstance(exc, openai.APITimeoutError):
        return f"timed out after {timeout:g} s"
    if isinstance(exc, openai.APIConnectionError):
        return f"could not connect ({exc})"
    if isinstance(exc, json.JSONDecodeError):
        return f"the response body is not valid JSON ({exc.msg})"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {short(getattr(exc, 'message', str(exc)))}"
    return str(exc)


def scrub(text: str, secret: str | None) -> str:
    """`text` with every occurrence of `secret` (an API key a server may echo back in an error) replaced by ***."""
    return text.replace(secret, "***") if secret else text


def short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def without_credentials(url: str) -> str:
    """The URL without any `user:password@` part or trailing slash, safe to print."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])).rstrip("/")
