"""A scripted stand-in for the Anthropic and OpenAI HTTP APIs, on 127.0.0.1.

    with FakeLLMServer() as server:
        server.script(status(429), ok("```metal\\n...\\n```", reasoning="why"))
        client = anthropic.Anthropic(api_key="k", base_url=server.url)
        client = openai.OpenAI(api_key="k", base_url=server.openai_url)

Routes: POST /v1/messages (Anthropic Messages; JSON, or SSE when the request
says "stream": true), POST /v1/responses (OpenAI Responses), POST
/v1/chat/completions (Chat Completions). Each request takes the next scripted
behaviour (a behaviour with times=N serves N requests, times=None all the
rest); when the script is empty, `server.default` answers (a 500 unless set).
Every request is recorded in `server.requests` (path, headers, JSON body).
Error answers carry `retry-after-ms` so that SDK retries are quick.

Faults beyond HTTP errors and delays: `raw(body)` answers any bytes (malformed
JSON, garbage, an empty object), `truncated()` sends the first half of a good
answer under its full content-length and closes the connection, `dropped()`
closes the connection without answering.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = [
    "FakeLLMServer",
    "Behaviour",
    "ok",
    "status",
    "slow",
    "no_code_block",
    "broken_candidate",
    "raw",
    "truncated",
    "dropped",
    "SAXPY_ANSWER",
    "free_port",
]

SAXPY_ANSWER = """Unrolled by VEC so each thread moves several elements.

```metal
//! param VEC = 4 {1, 2, 4}
//! kernel saxpy
//! grid = (ceil_div(N, VEC), 1, 1)
//! threadgroup = (256, 1, 1)
uint base = thread_position_in_grid.x * VEC;
for (uint k = 0; k < VEC; ++k) {
    uint i = base + k;
    if (i < N) y_out[i] = a * x[i] + y[i];
}
```
"""


@dataclass
class Behaviour:
    kind: str  # "ok", "status", "raw", "truncated" or "dropped"
    text: str = ""
    reasoning: str | None = None
    input_tokens: int = 1000
    output_tokens: int = 500
    status: int = 200
    message: str = ""
    delay: float = 0.0  # seconds before answering
    times: int | None = 1  # requests served; None: every request from now on
    model: str | None = None  # model name in the answer (default: the requested one)
    reasoning_field: str = "reasoning_content"  # chat completions: where reasoning goes
    content_type: str = "application/json"  # raw: the answer's content type
    served: int = field(default=0, compare=False)


def ok(
    text: str = SAXPY_ANSWER,
    reasoning: str | None = None,
    input_tokens: int = 1000,
    output_tokens: int = 500,
    times: int | None = 1,
    model: str | None = None,
    reasoning_field: str = "reasoning_content",
) -> Behaviour:
    return Behaviour(
        "ok",
        text=text,
        reasoning=reasoning,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        times=times,
        model=model,
        reasoning_field=reasoning_field,
    )


def status(code: int, message: str = "", times: int | None = 1) -> Behaviour:
    return Behaviour("status", status=code, message=message or f"scripted HTTP {code}", times=times)


def slow(delay: float, then: Behaviour | None = None, times: int | None = 1) -> Behaviour:
    """Answer like `then` (default: ok()) but only after `delay` seconds."""
    base = then or ok()
    return Behaviour(
        base.kind,
        text=base.text,
        reasoning=base.reasoning,
        input_tokens=base.input_tokens,
        output_tokens=base.output_tokens,
        status=base.status,
        message=base.message,
        delay=delay,
        times=times,
        model=base.model,
        reasoning_field=base.reasoning_field,
    )


def raw(
    body: str, code: int = 200, content_type: str = "application/json", times: int | None = 1
) -> Behaviour:
    """Answer exactly `body` (malformed JSON, garbage) with this status and content type."""
    return Behaviour("raw", text=body, status=code, content_type=content_type, times=times)


def truncated(then: Behaviour | None = None, times: int | None = 1) -> Behaviour:
    """Send the first half of the answer `then` (default: ok()) would give, then
    close the connection: the client sees a body shorter than its content-length."""
    base = then or ok()
    return Behaviour(
        "truncated",
        text=base.text,
        reasoning=base.reasoning,
        input_tokens=base.input_tokens,
        output_tokens=base.output_tokens,
        times=times,
        model=base.model,
        reasoning_field=base.reasoning_field,
    )


def dropped(times: int | None = 1) -> Behaviour:
    """Close the connection without sending anything."""
    return Behaviour("dropped", times=times)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (for connection-refused tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def no_code_block(times: int | None = 1) -> Behaviour:
    return ok(
        "I would need more information about the hardware before writing a kernel.", times=times
    )


def broken_candidate(times: int | None = 1) -> Behaviour:
    return ok(
        "Here is a faster kernel.\n\n```metal\n//! kernel saxpy\n//! grid = (N /\n"
        "uint i = thread_position_in_grid.x\n```\n",
        times=times,
    )


_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format, *args):  # keep test output quiet
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        path = self.path.split("?", 1)[0]
        fake = self.server.fake
        fake._record(path, dict(self.headers.items()), body)
        route = {
            "/v1/messages": "anthropic",
            "/messages": "anthropic",
            "/v1/responses": "responses",
            "/responses": "responses",
            "/v1/chat/completions": "chat",
            "/chat/completions": "chat",
        }.get(path)
        if route is None:
            return self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
        b = fake._next()
        if b.delay and fake._stopping.wait(b.delay):
            return
        try:
            if b.kind == "status":
                return self._error(route, b)
            if b.kind == "dropped":
                self.close_connection = True
                return
            if b.kind == "raw":
                return self._send(b.status, b.content_type, b.text.encode())
            model = b.model or body.get("model") or "fake-model"
            cut = b.kind == "truncated"
            if route == "anthropic":
                if body.get("stream"):
                    return self._anthropic_sse(b, model, cut=cut)
                return self._json(200, _anthropic_message(b, model), cut=cut)
            if route == "responses":
                return self._json(200, _responses_answer(b, model, body), cut=cut)
            return self._json(200, _chat_answer(b, model), cut=cut)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            pass

    # -- writing --------------------------------------------------------------

    def _json(self, code: int, payload: dict, headers: dict | None = None, cut: bool = False):
        self._send(code, "application/json", json.dumps(payload).encode(), headers, cut=cut)

    def _send(
        self,
        code: int,
        content_type: str,
        data: bytes,
        headers: dict | None = None,
        cut: bool = False,
    ):
        """Send `data`; with cut, only its first half (under the full length), then hang up."""
        self.send_response(code)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if cut:
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(data)

    def _error(self, route: str, b: Behaviour):
        headers = {"retry-after-ms": "5", "x-request-id": "req_fake"}
        if route == "anthropic":
            payload = {
                "type": "error",
                "error": {
                    "type": _ANTHROPIC_ERRORS.get(b.status, "api_error"),
                    "message": b.message,
                },
            }
        else:
            payload = {
                "error": {
                    "message": b.message,
                    "type": "server_error"
                    if b.status >= 500
                    else "rate_limit_exceeded"
                    if b.status == 429
                    else "invalid_request",
                    "param": None,
                    "code": None,
                }
            }
        self._json(b.status, payload, headers)

    def _anthropic_sse(self, b: Behaviour, model: str, cut: bool = False):
        message = _anthropic_message(b, model)
        start = dict(
            message,
            content=[],
            stop_reason=None,
            usage={"input_tokens": b.input_tokens, "output_tokens": 1},
        )
        events = [("message_start", {"type": "message_start", "message": start})]
        for index, block in enumerate(message["content"]):
            if block["type"] == "thinking":
                events += [
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                        },
                    ),
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "thinking_delta", "thinking": block["thinking"]},
                        },
                    ),
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "signature_delta", "signature": block["signature"]},
                        },
                    ),
                ]
            else:
                text = block["text"]
                half = len(text) // 2
                events.append(
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "text", "text": ""},
                        },
                    )
                )
                for piece in (text[:half], text[half:]):
                    events.append(
                        (
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": index,
                                "delta": {"type": "text_delta", "text": piece},
                            },
                        )
                    )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events += [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": b.output_tokens},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        data = "".join(
            f"event: {name}\ndata: {json.dumps(payload)}\n\n" for name, payload in events
        ).encode()
        self._send(200, "text/event-stream", data, {"cache-control": "no-cache"}, cut=cut)


def _anthropic_message(b: Behaviour, model: str) -> dict:
    content = []
    if b.reasoning is not None:
        content.append({"type": "thinking", "thinking": b.reasoning, "signature": "sig_fake"})
    content.append({"type": "text", "text": b.text})
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": b.input_tokens,
            "output_tokens": b.output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _responses_answer(b: Behaviour, model: str, request: dict) -> dict:
    output = []
    if b.reasoning is not None:
        output.append(
            {
                "id": "rs_fake",
                "type": "reasoning",
                "status": "completed",
                "summary": [{"type": "summary_text", "text": b.reasoning}],
            }
        )
    output.append(
        {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": b.text, "annotations": [], "logprobs": []}],
        }
    )
    reasoning_tokens = b.output_tokens // 2 if b.reasoning is not None else 0
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": output,
        "instructions": request.get("instructions"),
        "error": None,
        "incomplete_details": None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "temperature": 1.0,
        "top_p": 1.0,
        "metadata": {},
        "max_output_tokens": request.get("max_output_tokens"),
        "reasoning": request.get("reasoning"),
        "usage": {
            "input_tokens": b.input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": b.output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": b.input_tokens + b.output_tokens,
        },
    }


def _chat_answer(b: Behaviour, model: str) -> dict:
    message = {"role": "assistant", "content": b.text}
    if b.reasoning is not None:
        message[b.reasoning_field] = b.reasoning
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
        "usage": {
            "prompt_tokens": b.input_tokens,
            "completion_tokens": b.output_tokens,
            "total_tokens": b.input_tokens + b.output_tokens,
        },
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeLLMServer


class FakeLLMServer:
    """The scripted server; start() / stop() or use it as a context manager."""

    def __init__(self):
        self.requests: list[dict] = []
        self.default: Behaviour = status(500, "fake server: script exhausted", times=None)
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- scripting ------------------------------------------------------------

    def script(self, *behaviours: Behaviour) -> FakeLLMServer:
        with self._lock:
            self._script.extend(behaviours)
        return self

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.requests.clear()

    def _next(self) -> Behaviour:
        with self._lock:
            if not self._script:
                return self.default
            b = self._script[0]
            b.served += 1
            if b.times is not None and b.served >= b.times:
                self._script.popleft()
            return b

    def _record(self, path: str, headers: dict, body: dict) -> None:
        with self._lock:
            self.requests.append(
                {"path": path, "headers": {k.lower(): v for k, v in headers.items()}, "body": body}
            )

    # -- lifecycle --------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL for the Anthropic SDK (it appends /v1/messages)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_url(self) -> str:
        """Base URL for the OpenAI SDK (it appends /responses, /chat/completions)."""
        return self.url + "/v1"

    def start(self) -> FakeLLMServer:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
