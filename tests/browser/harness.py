"""Chromium's WebGPU (Dawn + Tint on SwiftShader) as a second WGSL implementation for the tests.

A session starts one headless Chromium (Debian's /usr/bin/chromium, driven by Playwright
for Python; no browser is ever downloaded) on a fresh profile, serves tests/browser/page/
from 127.0.0.1 (WebGPU needs a secure origin), and calls page/harness.js through
page.evaluate. Items are sent in batches: one evaluate compiles or runs many shaders.
"""

from __future__ import annotations

import base64
import functools
import http.server
import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

PAGE = Path(__file__).parent / "page"
CHROMIUM = os.environ.get("PIEGPU_CHROMIUM", "/usr/bin/chromium")
# --enable-unsafe-webgpu is what exposes navigator.gpu on Linux (without it: no adapter);
# --use-webgpu-adapter=swiftshader pins the CPU adapter so results do not depend on a GPU;
# --no-sandbox because CI runs as root. Vulkan needs no feature flag: SwiftShader is built in.
FLAGS = ("--headless", "--no-sandbox", "--enable-unsafe-webgpu", "--use-webgpu-adapter=swiftshader",
         "--disable-gpu-sandbox", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync")
# Limits the harness asks the device for (the adapter's maximum of each): the planner uses them.
LIMITS = ("maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX", "maxComputeWorkgroupsPerDimension",
          "maxStorageBufferBindingSize", "maxBufferSize", "maxComputeWorkgroupStorageSize",
          "maxStorageBuffersPerShaderStage", "maxUniformBufferBindingSize")
BATCH = 40  # items per page.evaluate: big enough to amortize the round trip, small enough to bound memory


def b64_words(arr: np.ndarray) -> str:
    """An array's raw little-endian bytes as base64 (what harness.js writes into a buffer)."""
    return base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii")


def words_b64(text: str) -> np.ndarray:
    """base64 from harness.js back to u32 words."""
    return np.frombuffer(base64.b64decode(text), dtype=np.uint32).copy()


class HarnessError(RuntimeError):
    """The browser or the page failed outside any one item (device lost, page crashed)."""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    data: Path | None = None  # served under /data/

    def translate_path(self, path: str) -> str:
        if self.data is not None and path.startswith("/data/"):
            rel = Path(path.split("?", 1)[0][len("/data/"):])
            if ".." not in rel.parts:
                return str(self.data / rel)
        return super().translate_path(path)

    def log_message(self, *args) -> None:
        pass


def serve(directory: Path, data: Path | None = None) -> http.server.ThreadingHTTPServer:
    """An HTTP server on a free port of 127.0.0.1 serving `directory` (and `data` under /data/) from a daemon thread."""
    handler = functools.partial(type("Handler", (_Quiet,), {"data": data}), directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, name="browser-page", daemon=True).start()
    return server


def missing() -> str | None:
    """Why the harness cannot start here (None when Chromium and Playwright are both installed)."""
    if not Path(CHROMIUM).exists():
        return (f"Chromium is not installed at {CHROMIUM}. Fix: apt-get install chromium "
                "(scripts/setup.sh does it), or point PIEGPU_CHROMIUM at a Chromium binary")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed. Fix: pip install -e '.[test]' (or pip install playwright)"
    return None


class Browser:
    """One headless Chromium with the harness page open; close() ends the browser and the server.

    Playwright's sync API keeps an asyncio loop running in the thread that started it, which
    would break every later asyncio.run() of the test session in that thread; so the browser
    lives on a thread of its own and every call is handed to it.
    """

    def __init__(self):
        self._profile = tempfile.mkdtemp(prefix="piegpu-chromium-")
        self.data = Path(tempfile.mkdtemp(prefix="piegpu-browser-data-"))  # files the page may fetch at /data/
        self._server = serve(PAGE, self.data)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="chromium")
        self.console: list = []
        try:
            self.info = self._thread.submit(self._start).result()
        except BaseException:
            self.close()
            raise

    def _start(self) -> dict:
        from playwright.sync_api import sync_playwright
        self._pw = sync_playwright().start()
        self._context = self._pw.chromium.launch_persistent_context(
            self._profile, executable_path=CHROMIUM, headless=True, args=list(FLAGS))
        self.page = self._context.new_page()
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        self.page.goto(f"http://127.0.0.1:{self._server.server_address[1]}/index.html")
        return self.page.evaluate("names => harness.init(names)", list(LIMITS))

    @property
    def limits(self) -> dict:
        """The WebGPU device's limits (camelCase names)."""
        return self.info["limits"]

    @property
    def subgroup_lanes(self) -> int:
        """Lanes of the WebGPU device's subgroups (SwiftShader: 4), 0 without the subgroups feature."""
        return (self.info.get("subgroupMinSize") or 0) if "subgroups" in self.info["features"] else 0

    def _call(self, fn: str, items: list) -> list:
        results = []
        for i in range(0, len(items), BATCH):
            reply = self._thread.submit(self.page.evaluate, f"items => harness.{fn}(items)",
                                        items[i: i + BATCH]).result()
            if reply["stray"]:
                raise HarnessError(f"harness.{fn}: errors outside any item: {reply['stray']}; console: {self.console}")
            results.extend(reply["results"])
        return results

    def compile(self, items: list) -> list:
        """Compile [{label, code, entry_points, bindings: [[index, kind]]}]: per item {label, errors, warnings}."""
        return self._call("compile", items)

    def run(self, items: list) -> list:
        """Run eta program items (eta_items.ProgramItem/EpilogueItem): per item {label, errors, warnings, output?}."""
        return self._call("run", items)

    def replay(self, spec: dict) -> dict:
        """Replay recorded passes (tests/browser/model_replay.py): {errors, output: the words of spec["reads"]}."""
        reply = self._thread.submit(self.page.evaluate, "spec => harness.replay(spec)", spec).result()
        if reply["stray"]:
            raise HarnessError(f"harness.replay: errors outside the pass: {reply['stray']}; console: {self.console}")
        return reply

    def _stop(self) -> None:
        for step in (lambda: self._context.close(), lambda: self._pw.stop()):
            try:
                step()
            except Exception:
                pass

    def close(self) -> None:
        """Close the browser, stop Playwright and the server, delete the profile."""
        try:
            self._thread.submit(self._stop).result()
        finally:
            self._thread.shutdown()
            self._server.shutdown()
            self._server.server_close()
            shutil.rmtree(self._profile, ignore_errors=True)
            shutil.rmtree(self.data, ignore_errors=True)
