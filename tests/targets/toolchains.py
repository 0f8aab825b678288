"""The real compilers behind the compile checks, and batching many programs into few invocations.

Each emitted program guards its helper prelude and takes a kernel-name prefix, so many
programs concatenate into one translation unit; a handful of such chunks compile in
parallel, and a diagnostic's line number names the program it came from.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
METAL_STUB = HERE / "metal_stub"
HIP_COMPAT = HERE / "hip_compat"
ARCH = "sm_80"
# Diagnostics about the program itself, not the emitter: a division by a literal zero
# (valid IEEE), and an empty loop (a bitonic sort of one element).
NVCC_FLAGS = ["-Werror", "all-warnings", "-diag-suppress", "39,186"]
CLANG_FLAGS = ["-x", "c++", "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", "-Wno-unknown-attributes",
               "-Wno-tautological-compare", "-nostdinc", "-nostdinc++", f"-I{METAL_STUB}"]


def find_nvcc() -> str | None:
    """nvcc on PATH or in /usr/local/cuda."""
    return shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)


def find_ptxas() -> str | None:
    """ptxas beside nvcc or on PATH."""
    nvcc = find_nvcc()
    if nvcc and os.path.exists(Path(nvcc).with_name("ptxas")):
        return str(Path(nvcc).with_name("ptxas"))
    return shutil.which("ptxas")


def find_clang() -> str | None:
    """clang-14 (Debian), else any clang."""
    return shutil.which("clang-14") or shutil.which("clang")


def version(tool: str) -> str:
    """The last line of `tool --version` that names a version."""
    out = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
    lines = [ln for ln in out.splitlines() if "version" in ln.lower() or "release" in ln.lower()]
    return (lines[-1] if lines else out.strip()).strip()


@dataclass
class Chunk:
    """One translation unit: several programs and the line where each starts."""

    path: Path
    names: list
    starts: list  # 1-based first line of each program

    def owner(self, line: int) -> str:
        """The program whose text holds `line`."""
        owner = self.names[0]
        for name, start in zip(self.names, self.starts):
            if start <= line:
                owner = name
        return owner


def write_chunks(sources: list, folder: Path, suffix: str, parts: int) -> list:
    """Split (name, text) sources into `parts` files."""
    chunks = []
    per = max(1, -(-len(sources) // parts))
    for c in range(0, len(sources), per):
        lines: list = []
        names, starts = [], []
        for name, text in sources[c:c + per]:
            names.append(name)
            starts.append(len(lines) + 1)
            lines.append(f"// ==== program {name}")
            lines.extend(text.splitlines())
        path = folder / f"chunk{c // per}{suffix}"
        path.write_text("\n".join(lines) + "\n")
        chunks.append(Chunk(path, names, starts))
    return chunks


def _run(cmd: list) -> tuple:
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


LINE = re.compile(r"chunk\d+(?:\.\w+)+(?:\((\d+)\)|:(\d+):)")


def blame(chunk: Chunk, output: str) -> list:
    """'program: diagnostic' for every diagnostic line that names a line of the chunk."""
    found = []
    for ln in output.splitlines():
        m = LINE.search(ln)
        if m and ("error" in ln or "warning" in ln):
            found.append(f"{chunk.owner(int(m.group(1) or m.group(2)))}: {ln.strip()}")
    return found or [f"{chunk.path.name}: {output.strip()[:2000]}"]


def check_all(sources: list, suffix: str, compile_chunk) -> list:
    """Compile every source in parallel chunks; returns the diagnostics of the chunks that failed."""
    workers = max(2, os.cpu_count() or 2)
    with tempfile.TemporaryDirectory(prefix="piegpu-backend-") as tmp:
        chunks = write_chunks(sources, Path(tmp), suffix, 2 * workers)
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(compile_chunk, chunks))
        problems = []
        for chunk, (rc, output) in zip(chunks, results):
            if rc != 0:
                problems.extend(blame(chunk, output))
        return problems


def nvcc_chunk(extra: list):
    """A chunk compiler: nvcc -ptx, then ptxas on the PTX (the kernels must assemble too)."""
    def compile_chunk(chunk: Chunk) -> tuple:
        ptx = chunk.path.with_suffix(".ptx")
        rc, out = _run([find_nvcc(), "-x", "cu", "-ptx", f"-arch={ARCH}", *NVCC_FLAGS, *extra, str(chunk.path),
                        "-o", str(ptx)])
        if rc != 0:
            return rc, out
        rc, out = _run([find_ptxas(), f"-arch={ARCH}", str(ptx), "-o", str(ptx.with_suffix(".cubin"))])
        return rc, out if rc == 0 else f"{chunk.path.name}: ptxas on the PTX of {chunk.names}:\n{out}"
    return compile_chunk


def clang_chunk(chunk: Chunk) -> tuple:
    """A chunk checker: MSL through clang's C++ front end against the stand-in metal_stdlib."""
    return _run([find_clang(), *CLANG_FLAGS, str(chunk.path)])
