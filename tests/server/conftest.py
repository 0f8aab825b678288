"""A real `piegpu serve` process on 127.0.0.1 (a random free port), driven over HTTP by the tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

MODEL_ID = "SmolLM2-135M-Instruct"


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(server, path: str, body) -> tuple:
    """(HTTP status, JSON reply) of POSTing `body` as JSON to `server` (anything with .base), errors included."""
    req = urllib.request.Request(server.base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get(server, path: str):
    """The JSON reply of GET `path` on `server`."""
    with urllib.request.urlopen(server.base + path, timeout=30) as r:
        return json.loads(r.read())


class ServerProcess:
    """`python -m piegpu serve` started with extra flags; stop() sends SIGTERM and returns the exit code."""

    def __init__(self, *flags: str, timeout: float = 180.0):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "piegpu", "serve", "--port", str(self.port), *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"piegpu serve exited with {self.proc.returncode}:\n{self.proc.stdout.read()}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.proc.kill()
        raise RuntimeError(f"piegpu serve did not answer /health within {timeout} s")

    @property
    def url(self) -> str:
        """The OpenAI base_url."""
        return self.base + "/v1"

    def client(self, **kw):
        """An official openai client for this server."""
        import openai
        return openai.OpenAI(base_url=self.url, api_key=kw.pop("api_key", "none"), max_retries=0, **kw)

    def stop(self, sig=signal.SIGTERM, timeout: float = 60.0) -> int:
        """Signal the server and wait for it to exit; returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def output(self) -> str:
        """What the server printed (after stop())."""
        return self.proc.stdout.read() if self.proc.stdout else ""


@pytest.fixture(scope="session")
def server(default_model):
    """One server for the module tests that do not need special flags (default_model: the model is installed).

    It runs at --window 2 (two decode passes per host read; lavapipe's default is 1, which the
    servers of test_server_limits.py and the in-process engines of test_engine.py use), so the
    API tests check batched run-ahead too.
    """
    s = ServerProcess("--window", "2")
    yield s
    s.stop()
