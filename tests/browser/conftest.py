"""The browser tests' one Chromium per session (tests/browser/harness.py)."""

from __future__ import annotations

import os

import pytest

from tests.browser.harness import Browser, missing


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium with the WGSL harness page.

    Without Chromium or Playwright: a failure in CI (PIEGPU_STRICT_SKIPS=1), else a skip
    that prints the reason and the install command.
    """
    why = missing()
    if why is not None:
        if os.environ.get("PIEGPU_STRICT_SKIPS") == "1":
            pytest.fail(f"the browser tests cannot run: {why}", pytrace=False)
        print(f"browser tests skipped: {why}")
        pytest.skip(why)
    b = Browser()
    yield b
    b.close()


@pytest.fixture(scope="session")
def model_capture(gpu):
    """The default model's shader specialisations and real logits (tests/browser/model_capture.py)."""
    from piegpu.errors import ModelError
    from piegpu.textgen.model import load_model
    from tests.browser.model_capture import capture
    try:
        return capture(lambda: load_model(verbose=False), lambda: load_model(verbose=False, kv_dtype="f32"))
    except ModelError as e:
        pytest.skip(f"default model unavailable: {e}")
