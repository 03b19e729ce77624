#!/usr/bin/python3
"""The answers llama.cpp's HTTP server gives to what `troupe bench serve` asks, as its
tools/server/README.md documents them: GET /v1/models; POST /tokenize {"content", "add_special"}
-> {"tokens": [...]} (a body without "content" gets no tokens); POST /detokenize {"tokens"} ->
{"content"}; POST /v1/completions streamed as OpenAI chunks, then [DONE]. The text is bytes and
the tokens are byte values + 3, so the tokenizer round-trips exactly. Nothing is computed.

usage: llama_server_peer.py   (prints "listening on PORT", serves on 127.0.0.1 until killed)"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def tokens_of(text):
    return [b + 3 for b in text.encode()]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            return self.answer({"object": "list", "data": [{"id": "peer.gguf", "object": "model", "owned_by": "llamacpp"}]})
        self.send_error(404)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path == "/tokenize":
            return self.answer({"tokens": tokens_of(body["content"]) if "content" in body else []})
        if self.path == "/detokenize":
            return self.answer({"content": bytes(t - 3 for t in body.get("tokens", []) if 3 <= t < 259).decode(errors="replace")})
        if self.path != "/v1/completions":
            return self.send_error(404)
        prompt = body["prompt"]
        n_prompt = len(prompt) if isinstance(prompt, list) else len(tokens_of(prompt))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(obj):
            data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        n = int(body.get("max_tokens", 16))
        for i in range(n):
            event({"object": "text_completion", "choices": [{"index": 0, "text": "a", "finish_reason": "length" if i == n - 1 else None}]})
        event({"object": "text_completion", "choices": [],
               "usage": {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n}})
        event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening on", server.server_address[1], flush=True)
server.serve_forever()
