"""A real OpenAI-compatible chat-completions server on 127.0.0.1, scripted by a test.

Tests of API policies and judges drive the real `openai` client against it, so what is tested is the whole
path: HTTP, JSON, headers, timeouts and retries. A test scripts the server with a queue of responses:

    with ChatServer() as server:
        server.push(completion("hi"), error(429, retry_after=0.1), Reply(delay=5.0), malformed())
        ... point a client at server.url ...
        assert server.requests[0].body["model"] == "test-model"

A queued response is a `Reply`, a dict (a completion body, answered with status 200), or a callable that
receives the `RecordedRequest` and returns either. When the queue is empty the server answers with `default`
(if set), or else with a 400 that says so; a client does not retry a 400, so a missing script fails fast.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted HTTP answer. `body` is JSON-encoded when it is a dict; str or bytes are sent as they are."""

    body: dict[str, Any] | str | bytes | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering: longer than the client's timeout makes the client time out."""


@dataclass
class RecordedRequest:
    """One request the server received, as the client sent it."""

    index: int
    method: str
    path: str
    headers: dict[str, str]
    """Header names are lower-case."""
    body: Any
    """The parsed JSON body, or the raw text if it was not JSON."""
    received: float
    """`time.monotonic()` when the request arrived, to measure waits between retries."""
    status: int | None = None
    """The status the server answered with (None until it answers, and for a request dropped at shutdown)."""
    response: Any = None
    """The body the server answered with (a dict for JSON replies)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of a chat-completions request."""
        return self.body.get("messages", []) if isinstance(self.body, dict) else []


Response = Reply | dict[str, Any] | Callable[[RecordedRequest], "Reply | dict[str, Any]"]


# ----- building responses -------------------------------------------------------------------------------------
def tool_call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> dict[str, Any]:
    """One OpenAI tool call; `arguments` is JSON-encoded unless it is already a string (maybe a malformed one)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id or f"call_{name}", "type": "function", "function": {"name": name, "arguments": text}}


def completion(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    *,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A chat-completion body with one choice. The server fills in `id`, `object`, `created` and `model`."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    usage = usage or {"prompt_tokens": 10, "completion_tokens": 5}
    return {
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                "logprobs": None,
            }
        ],
        "usage": {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]},
    }


def error(status: int, message: str = "scripted error", *, retry_after: float | str | None = None) -> Reply:
    """An OpenAI-style error response, such as 429 or 503, optionally with a `Retry-After` header."""
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    body = {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error"}}
    return Reply(body, status=status, headers=headers)


def malformed() -> Reply:
    """A 200 response that claims to be JSON but is not."""
    return Reply('{"choices": [{"message": ', headers={"Content-Type": "application/json"})


# ----- the server -----------------------------------------------------------------------------------------------
class ChatServer:
    """An OpenAI-compatible `POST /v1/chat/completions` endpoint in a background thread, on an ephemeral port."""

    def __init__(self, responses: list[Response] | None = None, default: Response | None = None) -> None:
        self.queue: deque[Response] = deque(responses or [])
        self.default = default
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        """The most requests the server was handling at once: what a concurrency limit bounds."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL a client takes, e.g. `http://127.0.0.1:54321/v1`."""
        if self._httpd is None:
            raise RuntimeError("the server is not running; use it as `with ChatServer() as server:`")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def push(self, *responses: Response) -> ChatServer:
        """Queue responses; each answers one request, in order of arrival."""
        with self._lock:
            self.queue.extend(responses)
        return self

    def start(self) -> ChatServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True  # a handler still sleeping in a delay must not block shutdown
        # A short poll interval makes `stop()` quick: shutdown() waits for the serve loop's next poll.
        serve, poll = self._httpd.serve_forever, {"poll_interval": 0.02}
        self._thread = threading.Thread(target=serve, kwargs=poll, name="chat-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers that are waiting out a scripted delay
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ----- called by the handler threads ------------------------------------------------------------------------
    def _record(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> RecordedRequest:
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        with self._lock:
            request = RecordedRequest(len(self.requests), method, path, headers, body, time.monotonic())
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return request

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _answer(self, request: RecordedRequest) -> Reply:
        """Pick the scripted response for this request and turn it into a `Reply`."""
        if request.method != "POST" or request.path.rstrip("/") != "/v1/chat/completions":
            return error(404, f"chat_server only serves POST /v1/chat/completions, not {request.method} {request.path}")
        if not isinstance(request.body, dict) or not isinstance(request.body.get("messages"), list):
            return error(400, "the request body must be a JSON object with a list of messages")
        with self._lock:
            response = self.queue.popleft() if self.queue else self.default
        if response is None:
            return error(400, f"chat_server has no scripted response left for request #{request.index}")
        if callable(response):
            try:
                response = response(request)
            except Exception as exc:  # a bug in the test's script: answer 400, which clients do not retry
                return error(400, f"chat_server: the scripted callable raised {exc!r}")
        reply = response if isinstance(response, Reply) else Reply(response)
        if reply.status == 200 and isinstance(reply.body, dict) and "choices" in reply.body:
            filled = {
                "id": f"chatcmpl-{next(self._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request.body.get("model", "test-model"),
                **reply.body,
            }
            reply = replace(reply, body=filled)  # a copy: the same Reply may answer many requests
        return reply


def _make_handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers and the openai client use

        def do_POST(self) -> None:
            self._handle()

        def do_GET(self) -> None:
            self._handle()

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {name.lower(): value for name, value in self.headers.items()}
            request = server._record(self.command, self.path, headers, raw)
            try:
                reply = server._answer(request)
                if reply.delay and server._stopping.wait(reply.delay):
                    return  # shutting down: drop the request
                body = reply.body
                if isinstance(body, dict):
                    data = json.dumps(body).encode()
                elif isinstance(body, str):
                    data = body.encode()
                else:
                    data = body or b""
                request.status, request.response = reply.status, body  # before sending, so a test sees it
                self.send_response(reply.status)
                if not any(name.lower() == "content-type" for name in reply.headers):
                    self.send_header("Content-Type", "application/json")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timed out) before the answer came
            finally:
                server._done()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
