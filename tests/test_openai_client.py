"""API keys come from Colab Secrets on Colab, else from the environment, and are never shown.

Colab is faked the way Colab itself looks to Python: `google.colab` already imported, with a `userdata` module
whose `get(name)` returns the secret or raises (`SecretNotFoundError`, `NotebookAccessError`).
"""

import sys
import types

import pytest
from chat_server import ChatServer, completion

from agentic_rl_lab.judge import OpenAIJudgeBackend
from agentic_rl_lab.openai_client import MissingAPIKeyError, api_key, find_api_key, in_colab, openai_client
from agentic_rl_lab.policies.openai_api import OpenAIPolicy

NAME = "LAB_TEST_CLIENT_KEY"
ENV_KEY = "sk-from-the-environment-0123456789"
COLAB_KEY = "sk-from-colab-secrets-9876543210"


class SecretNotFoundError(Exception):
    pass


class NotebookAccessError(Exception):
    pass


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key, endpoint or Colab leaks in from the machine; traffic stays on this machine."""
    for name in (NAME, "OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTIC_RL_LAB_BASE_URL", "AGENTIC_RL_LAB_JUDGE_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert "google.colab" not in sys.modules


def fake_colab(monkeypatch: pytest.MonkeyPatch, secrets: dict[str, str], no_access: tuple[str, ...] = ()) -> list:
    """Install a fake `google.colab.userdata` holding `secrets`; returns the list of names it was asked for."""
    asked: list[str] = []

    def get(name: str) -> str:
        asked.append(name)
        if name in no_access:
            raise NotebookAccessError(f"Notebook does not have access to secret {name}")
        if name not in secrets:
            raise SecretNotFoundError(f"Secret {name} does not exist.")
        return secrets[name]

    userdata = types.ModuleType("google.colab.userdata")
    userdata.get = get
    colab = types.ModuleType("google.colab")
    colab.userdata = userdata
    google = types.ModuleType("google")
    google.colab = colab
    for name, module in (("google", google), ("google.colab", colab), ("google.colab.userdata", userdata)):
        monkeypatch.setitem(sys.modules, name, module)
    return asked


def test_off_colab_the_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not in_colab() and find_api_key(NAME) is None
    monkeypatch.setenv(NAME, ENV_KEY)
    assert find_api_key(NAME) == api_key(NAME) == ENV_KEY
    monkeypatch.setenv(NAME, "")
    assert find_api_key(NAME) is None, "an empty variable is no key"


def test_on_colab_the_key_comes_from_colab_secrets_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, ENV_KEY)
    asked = fake_colab(monkeypatch, {NAME: COLAB_KEY})
    assert in_colab() and api_key(NAME) == COLAB_KEY and asked == [NAME]


@pytest.mark.parametrize(
    "secrets, no_access", [({}, ()), ({NAME: COLAB_KEY}, (NAME,))], ids=["secret missing", "notebook access off"]
)
def test_on_colab_without_the_secret_the_environment_still_counts(monkeypatch, secrets, no_access) -> None:
    fake_colab(monkeypatch, secrets, no_access)
    assert find_api_key(NAME) is None
    monkeypatch.setenv(NAME, ENV_KEY)
    assert api_key(NAME) == ENV_KEY


def test_a_missing_key_names_both_places_to_put_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for on_colab in (False, True):
        if on_colab:
            fake_colab(monkeypatch, {})
        with pytest.raises(MissingAPIKeyError) as raised:
            api_key(NAME)
        message = str(raised.value)
        assert "Colab Secrets" in message and f"environment variable {NAME}" in message and "notebook access" in message
        assert isinstance(raised.value, ValueError)
    with pytest.raises(ValueError, match=f"no API key and no endpoint: set the environment variable {NAME} .*Colab"):
        openai_client(NAME, None, "AGENTIC_RL_LAB_BASE_URL", timeout=1.0)


def test_a_colab_secret_reaches_the_server_and_no_repr_or_str_shows_it(
    monkeypatch: pytest.MonkeyPatch, chat_server: ChatServer
) -> None:
    fake_colab(monkeypatch, {NAME: COLAB_KEY})
    policy = OpenAIPolicy("test-model", base_url=chat_server.url, api_key_env=NAME, max_retries=0)
    judge = OpenAIJudgeBackend("judge-model", base_url=chat_server.url, api_key_env=NAME)
    chat_server.push(completion("ok"), completion("{}"))
    (action,) = policy.act([[{"role": "user", "content": "hi"}]], [])
    judge.complete([{"role": "user", "content": "hi"}], {})
    assert [r.headers["authorization"] for r in chat_server.requests] == [f"Bearer {COLAB_KEY}"] * 2
    client, key = openai_client(NAME, chat_server.url, "AGENTIC_RL_LAB_BASE_URL", timeout=1.0)
    assert key == COLAB_KEY
    for holder in (policy, judge, client, action):
        assert COLAB_KEY not in repr(holder) and COLAB_KEY not in str(holder), type(holder).__name__


def test_without_a_key_a_local_server_gets_the_placeholder(chat_server: ChatServer) -> None:
    client, key = openai_client(NAME, chat_server.url, "AGENTIC_RL_LAB_BASE_URL", timeout=1.0)
    assert key is None and client.api_key == "EMPTY" and client.max_retries == 0
