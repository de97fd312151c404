"""Shared pytest fixtures."""

from collections.abc import Iterator

import pytest
from chat_server import ChatServer  # tests/ is on sys.path: pytest puts a rootless conftest's folder there


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A scripted OpenAI-compatible server on 127.0.0.1 (see tests/chat_server.py), stopped after the test."""
    with ChatServer() as server:
        yield server
