"""Connecting to an OpenAI-compatible endpoint: the API key, and the client that `OpenAIPolicy` and
`OpenAIJudgeBackend` both use (OpenAI itself, a vLLM server, Ollama, a LiteLLM proxy).

- The key comes from **Colab Secrets** when the notebook runs on Colab (the key icon in the left bar, with
  "Notebook access" on), else from the **environment variable** of the same name. There is deliberately no
  argument for the key itself: a key typed into a cell ends up in saved notebooks, in git, and in logs that print
  arguments.
- The key goes to the client, which sends it in an HTTP header; it is never printed, and no repr, error message
  or file written by the lab contains it (errors are scrubbed with `retry.scrub`).
- The client's own retries are off: the policy and the judge retry themselves, and say clearly when they give up.
"""

from __future__ import annotations

import os
import sys

import openai


class MissingAPIKeyError(ValueError):
    """No key under the name asked for, in Colab Secrets or the environment."""


def in_colab() -> bool:
    """Whether this runs in a Colab notebook (Colab imports `google.colab` before the first cell runs)."""
    return "google.colab" in sys.modules


def find_api_key(name: str) -> str | None:
    """The API key called `name`: from Colab Secrets on Colab, else (or if Colab has none) from the environment
    variable `name`. None where neither has it."""
    if in_colab():
        from google.colab import userdata

        try:
            key = userdata.get(name)
        except Exception:  # SecretNotFoundError, NotebookAccessError (access off), TimeoutException: try the env
            key = None
        if key:
            return key
    return os.environ.get(name) or None


def where_to_put(name: str) -> str:
    """How to provide the key `name`, for error messages: both places it is looked for."""
    return (
        f"on Colab, add a secret named {name} in Colab Secrets (the key icon in the left bar) and turn on its "
        f"notebook access; elsewhere, set the environment variable {name} in the shell that starts Python or Jupyter"
    )


def api_key(name: str) -> str:
    """The API key called `name` (see `find_api_key`); raises `MissingAPIKeyError`, naming both places, without one."""
    key = find_api_key(name)
    if not key:
        raise MissingAPIKeyError(f"no API key {name}: {where_to_put(name)}")
    return key


def openai_client(
    api_key_env: str, base_url: str | None, base_url_env: str, timeout: float
) -> tuple[openai.OpenAI, str | None]:
    """A client for `base_url` (else `$base_url_env`, else `$OPENAI_BASE_URL`, else OpenAI's API) holding the key
    called `api_key_env`, and that key, kept by the caller only to scrub it out of error text (None without one).

    A server of your own may need no key: the client then sends the placeholder "EMPTY". OpenAI's API does, so no
    key and no base URL is an error that says where to put each."""
    base_url = base_url or os.environ.get(base_url_env) or os.environ.get("OPENAI_BASE_URL")
    key = find_api_key(api_key_env)
    if not key and not base_url:
        raise MissingAPIKeyError(
            f"no API key and no endpoint: set the environment variable {api_key_env} (or, on Colab, a Colab Secret of "
            f"that name) to use OpenAI's API, or point base_url (or {base_url_env}) at an OpenAI-compatible server "
            "such as vLLM or Ollama"
        )
    return openai.OpenAI(api_key=key or "EMPTY", base_url=base_url, timeout=timeout, max_retries=0), key
