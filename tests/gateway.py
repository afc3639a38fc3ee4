"""A fake OpenAI-compatible chat-completions gateway, served over real HTTP on 127.0.0.1.

    with FakeGateway() as gateway:
        settings.INSIGHTS_GATEWAY_URL = gateway.url         # http://127.0.0.1:PORT/v1
        gateway.queue(Reply(status=429, headers={"Retry-After": "120"}))  # next replies, in order
        gateway.default = Reply(delay_s=0.5)                # then this, for every request
        ...
        gateway.requests      # every request seen: when it arrived and ended, its JSON body
        gateway.max_in_flight # the most requests it was answering at once

It runs in a thread of the test process, so worker subprocesses reach it over
loopback like a real gateway, and it counts across all of them.
"""

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    """One answer: a completion by default; an error body with `message` for other statuses."""

    status: int = 200
    delay_s: float = 0.0  # slow: wait this long before answering
    text: str | None = None  # None: "Generated text #n."
    message: str = "upstream failure"  # the error's message for a status other than 200
    headers: dict = field(default_factory=dict)


@dataclass
class Seen:
    path: str
    headers: dict
    body: dict | None
    started_at: float  # time.monotonic() when the request arrived
    ended_at: float | None = None  # and when its answer was ready to send
    wall_started_at: float = 0.0  # time.time() when it arrived

    @property
    def facts(self):
        """The JSON facts the client sent as its user message."""
        try:
            return json.loads(self.body["messages"][-1]["content"])
        except (TypeError, KeyError, IndexError, ValueError):
            return None


class FakeGateway:
    def __init__(self):
        self.default = Reply()
        self.requests = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._replies = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-gateway",
                                        daemon=True)

    @property
    def url(self):
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def queue(self, *replies):
        """Answer the next requests with `replies`, in order, then with `default`."""
        with self._lock:
            self._replies.extend(replies)

    def completed(self):
        with self._lock:
            return [seen for seen in self.requests if seen.ended_at is not None]

    def start(self):
        self._thread.start()
        return self

    def close(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # --- serving ---------------------------------------------------------------------

    def _arrive(self, seen):
        with self._lock:
            self.requests.append(seen)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            reply = self._replies.popleft() if self._replies else self.default
            number = len(self.requests)
        return reply, number

    def _leave(self, seen):
        with self._lock:
            self.in_flight -= 1
            seen.ended_at = time.monotonic()

    def _handler_class(self):
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):
                pass  # keep test output quiet

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                seen = Seen(path=self.path, headers=dict(self.headers), body=body,
                            started_at=time.monotonic(), wall_started_at=time.time())
                reply, number = gateway._arrive(seen)
                try:
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                    status, document = self._answer(reply, number, body)
                finally:
                    # Out of flight before the first byte of the answer leaves: the
                    # client cannot send its next request before it has read this one.
                    gateway._leave(seen)
                self._send(status, document, reply.headers)

            def _answer(self, reply, number, body):
                if not self.path.endswith("/chat/completions"):
                    return 404, {"error": {"message": f"no route {self.path}"}}
                if reply.status != 200:
                    return reply.status, {"error": {"message": reply.message, "type": "fake"}}
                text = reply.text if reply.text is not None else f"Generated text #{number}."
                return 200, {
                    "id": f"chatcmpl-{number}", "object": "chat.completion",
                    "model": (body or {}).get("model", ""),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                }

            def _send(self, status, document, headers):
                payload = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

        return Handler
