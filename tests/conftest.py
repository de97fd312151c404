"""Shared pytest fixtures."""

from collections.abc import Iterator

import pytest
from chat_server import ChatServer  # tests/ is on sys.path: pytest puts a rootless conftest's folder there


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A scripted OpenAI-compatible server on 127.0.0.1 (see tests/chat_server.py), stopped after the test."""
    with ChatServer() as server:
        yield server


@pytest.fixture(scope="session")
def small_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """The tiny model built with `SMALL_CONFIG` (seconds): a real Llama + tokenizer + chat template on disk."""
    from agentic_rl_lab.tiny import SMALL_CONFIG, build_tiny_model

    return build_tiny_model(SMALL_CONFIG, root=tmp_path_factory.mktemp("tiny-cache"), progress=False)
