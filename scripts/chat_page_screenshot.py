"""Take docs/chat-page.png: a real `piegpu serve`, the chat page in headless Chromium, one answer with its token view.

    python scripts/chat_page_screenshot.py [--out docs/chat-page.png] [--width 1280] [--height 800]

Needs the default model, Chromium at /usr/bin/chromium (or $PIEGPU_CHROMIUM) and Playwright for
Python (pip install -e '.[test]'); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("PIEGPU_CHROMIUM", "/usr/bin/chromium")


def start_server() -> tuple:
    """(process, base url) of `python -m piegpu serve` on a free port, once /health answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "piegpu", "serve", "--port", str(port)], cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"piegpu serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2):
                return proc, base
        except OSError:
            time.sleep(0.3)
    proc.kill()
    sys.exit("piegpu serve did not answer /health within 3 minutes")


def warm_up(base: str) -> None:
    """One small request with the screenshot's settings, so the page shows warm timings (no first compile)."""
    body = {"model": "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0.7,
            "min_p": 0.05, "logprobs": True, "top_logprobs": 5}
    with urllib.request.urlopen(base + "/v1/models", timeout=30) as r:
        body["model"] = json.loads(r.read())["data"][0]["id"]
    req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        r.read()


def shoot(base: str, out: Path, width: int, height: int) -> None:
    """Ask two questions (a greedy one, then a JSON-schema one), open a token's alternatives, save the page."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_default_timeout(120_000)
        page.goto(base + "/")
        page.wait_for_selector("body[data-ready=true]")
        page.fill("#system-prompt", "You are a helpful assistant.")
        page.fill("#f-temperature", "0.7")
        page.fill("#f-seed", "7")
        page.fill("#f-max_tokens", "48")
        page.fill("#f-min_p", "0.05")
        for text in ("What is the capital of France?", "Write one sentence about the sea."):
            page.fill("#prompt", text)
            page.press("#prompt", "Enter")
            page.wait_for_selector(".msg.assistant:last-child[data-state=done]")
        page.check("#colour-tokens")
        toks = page.locator(".msg.assistant:last-child .tok")
        toks.nth(min(3, toks.count() - 1)).click()
        page.wait_for_timeout(200)
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))
        browser.close()


def main() -> int:
    """Start a server, take the screenshot, stop the server."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "chat-page.png")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=800)
    args = ap.parse_args()
    proc, base = start_server()
    try:
        warm_up(base)
        shoot(base, args.out, args.width, args.height)
    finally:
        proc.terminate()
        proc.wait(60)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
