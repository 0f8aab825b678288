"""What the ingress sends a replica: one HTTP request as data, with the key the router matches prefixes on.

The replica runs the request through the same FastAPI app `piegpu serve` runs (build_app), so the
routes exist once. The ingress parses the JSON body only to find the routing key and, for the
generating routes, to pin the seed: a request without one gets a random seed here, once, so a retry
on another replica samples exactly what the first attempt would have.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field

SEEDED_PATHS = ("/v1/chat/completions", "/v1/completions", "/completion", "/completions")
# hop-by-hop and length headers: the replica's app computes its own
DROP_HEADERS = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te",
                          "upgrade", "proxy-connection"})


@dataclass
class Routed:
    """One HTTP request for a replica (method, path, raw query, headers, body) and its routing key."""

    method: str
    path: str
    query: bytes = b""
    headers: list = field(default_factory=list)  # [(name, value)] as str, lower-case names
    body: bytes = b""
    key: str = ""  # the prompt as text: requests sharing a start of it share KV prefixes
    stream: bool = False  # the response is an event stream (the ingress relays it as it comes)
    avoid: tuple = ()  # replica ids not to send it to while another is left (their device was lost)


def _text(content) -> str:
    """A message's content as text (a string, or OpenAI's list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else json.dumps(content, sort_keys=True)


def routing_key(path: str, data) -> str:
    """The text the prefix router matches: a chat's messages in order, or a completion's prompt."""
    if not isinstance(data, dict):
        return ""
    if path == "/v1/chat/completions" or (path == "/apply-template" and "messages" in data):
        msgs = data.get("messages")
        if not isinstance(msgs, list):
            return ""
        return "".join(f"\x1e{m.get('role', '')}\x1f{_text(m.get('content'))}" for m in msgs if isinstance(m, dict))
    prompt = data.get("prompt", data.get("content"))
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        first = prompt[0]  # several prompts: the first one's prefix decides
        return first if isinstance(first, str) else json.dumps(first if isinstance(first, list) else prompt)
    return ""


def pin_seed(path: str, data) -> bool:
    """Give a generating request without a seed a random one (True if the body changed)."""
    if path not in SEEDED_PATHS or not isinstance(data, dict):
        return False
    seed = data.get("seed")
    if seed is None or (path in ("/completion", "/completions") and seed in (-1, 0xFFFFFFFF)):
        data["seed"] = secrets.randbits(31)
        return True
    return False


def routed_request(method: str, path: str, query: bytes, headers: list, body: bytes) -> Routed:
    """The Routed form of an incoming request: its key found, its seed pinned, its stream flag read."""
    hdrs = [(k.lower(), v) for k, v in headers if k.lower() not in DROP_HEADERS]
    data = None
    if body and method == "POST":
        try:
            data = json.loads(body)
        except ValueError:
            data = None  # the replica's app answers the 400 (one code path for errors too)
    if isinstance(data, dict) and pin_seed(path, data):
        body = json.dumps(data, separators=(",", ":")).encode()
    stream = isinstance(data, dict) and data.get("stream") is True
    return Routed(method, path, query, hdrs, body, routing_key(path, data), stream)
