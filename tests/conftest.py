"""Shared test setup: a private kernel cache, GPU availability, strict skips in CI."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_real_cache = Path(os.environ.get("PIEGPU_CACHE_DIR") or Path.home() / ".cache" / "piegpu")
_tmp = Path(tempfile.mkdtemp(prefix="piegpu-test-cache-"))
# Kernels go to a fresh cache per session (no stale artifacts); prepared models are
# shared with the real cache so the default model is converted once per machine.
(_real_cache / "models").mkdir(parents=True, exist_ok=True)
os.symlink(_real_cache / "models", _tmp / "models")
os.environ["PIEGPU_CACHE_DIR"] = str(_tmp)
# Other tools' model stores stay out of the tests' sight (`piegpu models` and an unknown name's error list them):
# tests that need one fabricate it (tests/model/test_sources.py)
for _var, _sub in (("HF_HUB_CACHE", "hf-hub"), ("OLLAMA_MODELS", "ollama"), ("LMSTUDIO_MODELS", "lmstudio")):
    os.environ[_var] = str(_tmp / _sub)


def pytest_collection_modifyitems(config, items):
    """Tests are collected; nothing to reorder."""


@pytest.fixture(scope="session")
def gpu():
    """The wgpu device; skips (with the reason) when no adapter exists."""
    from piegpu.errors import DeviceError
    from piegpu.runtime.device import get_device
    try:
        return get_device()
    except DeviceError as e:
        pytest.skip(f"no GPU adapter: {e}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """CI sets PIEGPU_STRICT_SKIPS=1: a skipped test there means a missing checker, so it fails with the reason."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("PIEGPU_STRICT_SKIPS") == "1" and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in strict mode (CI must install every checker): {reason}"


@pytest.fixture(scope="session")
def default_model(gpu):
    """The default model loaded once per test session (skips with the install command if absent)."""
    from piegpu.errors import ModelError
    from piegpu.textgen.model import load_model
    try:
        return load_model(verbose=False)
    except ModelError as e:
        pytest.skip(f"default model unavailable: {e}")


@pytest.fixture(scope="session")
def default_model_f32(default_model):
    """The default model with exact (f32) K and V, loaded once per session: what the tight parity checks of the
    weights and kernels against the float32 reference use (the default stores K and V in f16)."""
    from piegpu.textgen.model import load_model
    return load_model(verbose=False, kv_dtype="f32")


@pytest.fixture(scope="session")
def default_reference(default_model):
    """The numpy reference of the default model (float32)."""
    from piegpu.model.default import default_model_dir
    from piegpu.model.reference import ReferenceModel
    return ReferenceModel.from_dir(default_model_dir(verbose=False))
