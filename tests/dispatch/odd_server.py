"""A misbehaving SGLang stand-in for dispatcher tests, run as its own process:
`python odd_server.py PORT MODE`. MODE is how it answers chat completions:
  error500  - always HTTP 500
  garbage   - HTTP 200 with an HTML body
  abort     - HTTP 200, finish_reason "abort"
  flaky     - 503 for the first request of each prompt (by content), then a good answer
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SEEN: set[str] = set()


def good(content: str) -> bytes:
    return json.dumps({
        "id": "x", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok " + content[:20],
                                              "reasoning_content": "thought"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12,
                  "reasoning_tokens": 1}}).encode()


class Handler(BaseHTTPRequestHandler):
    mode = "error500"

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(200, b"{}")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        content = body["messages"][-1]["content"]
        if self.mode == "error500":
            self._send(500, b'{"object":"error","message":"internal","code":500}')
        elif self.mode == "garbage":
            self._send(200, b"<html>proxy error</html>", "text/html")
        elif self.mode == "abort":
            data = json.loads(good(content))
            data["choices"][0]["finish_reason"] = "abort"
            self._send(200, json.dumps(data).encode())
        elif self.mode == "flaky" and content not in SEEN:
            SEEN.add(content)
            self._send(503, b'{"object":"error","message":"overloaded","code":503}')
        else:
            self._send(200, good(content))


if __name__ == "__main__":
    Handler.mode = sys.argv[2]
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
