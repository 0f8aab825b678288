"""`piegpu serve --ray` in a subprocess, for the tests (tests/server/test_ray.py) and benchmarks/serve.py --ray."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from tests.server.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
# one lavapipe thread per replica (two replicas share this machine's two cores); Ray's default token auth, named
# so that a second driver (the kill test's) joins with the token Ray saved in ~/.ray. Ray waits 30 s for its GCS
# server's port by default: a clean clone's suite on the 2-core VM once saw the two-node test's head miss it
# while the machine was loaded; 120 s is what Ray itself takes for a slower (rocksdb) GCS start.
ENV = {**os.environ, "LP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "RAY_AUTH_MODE": "token",
       "RAY_gcs_server_port_wait_time_s": "120"}


class RayServer:
    """`piegpu serve --ray --replicas N` in a subprocess on a free loopback port; `gcs` is its Ray address."""

    def __init__(self, replicas: int = 2, *flags: str, timeout: float = 300.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = []
        self.proc = subprocess.Popen([sys.executable, "-m", "piegpu", "serve", "--ray", "--replicas", str(replicas),
                                      "--port", str(self.port), *flags], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        t0 = time.time()
        while not any("piegpu: serving on" in line for line in self.log):
            if self.proc.poll() is not None or time.time() - t0 > timeout:
                self.stop()
                raise RuntimeError("piegpu serve --ray did not start:\n" + "".join(self.log[-60:]))
            time.sleep(0.5)
        self.gcs = next(m.group(1) for line in self.log if (m := re.search(r"Ray cluster at (\S+)", line)))

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.log.append(line)

    def client(self):
        """An official openai client for this endpoint (no retries of its own)."""
        import openai
        return openai.OpenAI(base_url=self.url, api_key="none", max_retries=0, timeout=300)

    def stats(self) -> dict:
        """The ingress's counters (/ray/stats)."""
        with urllib.request.urlopen(self.url[:-3] + "/ray/stats", timeout=30) as r:
            return json.loads(r.read())

    def stop(self) -> int:
        """SIGINT (the CLI tears its Ray instance down) and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(2)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
