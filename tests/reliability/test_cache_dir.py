"""The cache dir when it is unusable, full, or shared by several processes compiling at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from piegpu.eta import cache
from tests.reliability.cases import ROOT

# Compiles and runs random programs (tests/progen.py seeds) on wgsl, checks each against the
# interpreter, and prints the cache counters.
WORKER = textwrap.dedent("""
    import json, sys
    import numpy as np
    from piegpu.eta import cache
    from tests.progen import compare, random_program
    seeds = [int(s) for s in sys.argv[1:]]
    for seed in seeds:
        prog, inputs, exact = random_program(seed)
        ref, got = prog.run(*inputs), prog.run(*inputs, backend="wgsl")
        ref, got = (ref, got) if isinstance(ref, tuple) else ((ref,), (got,))
        for a, b, e in zip(ref, got, exact):
            compare(a, b, e, f"seed {seed}")
    s = cache.cache_stats()
    print(json.dumps({k: s[k] for k in ("misses", "disk_hits", "discarded", "write_errors")}))
""")


def start(cache_dir: Path, seeds, preexec=None) -> subprocess.Popen:
    """A worker process compiling `seeds` with PIEGPU_CACHE_DIR=cache_dir."""
    env = {**os.environ, "PIEGPU_CACHE_DIR": str(cache_dir)}
    return subprocess.Popen([sys.executable, "-c", WORKER, *map(str, seeds)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec)


def finish(p: subprocess.Popen) -> tuple:
    """(counters, stderr) of a worker; fails the test if it failed."""
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, f"worker failed (rc {p.returncode}):\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1]), err


def entries_are_intact(kernels: Path) -> int:
    """Every artifact file unpacks under the key in its own header and is named by that key."""
    files = sorted(kernels.glob("*.bin"))
    for f in files:
        data = f.read_bytes()
        n = int.from_bytes(data[len(cache.MAGIC): len(cache.MAGIC) + 4], "little")
        head = json.loads(data[len(cache.MAGIC) + 4: len(cache.MAGIC) + 4 + n])
        key = cache.CacheKey(**head)
        assert f.name == f"{key.digest()}.bin", f"{f.name} holds the entry of another key"
        assert cache.unpack(key, data) is not None, f"{f.name} is corrupt"
    leftovers = [p.name for p in kernels.iterdir() if not p.name.endswith(".bin")]
    assert not leftovers, f"temporary files left behind: {leftovers}"
    return len(files)


def test_processes_sharing_the_cache_dir_compile_at_once(gpu, tmp_path):
    """Four processes compile 6 shared and 4 own programs each at the same time: every result is right,
    every entry intact, and a fifth process then finds all 22 on disk."""
    shared = list(range(900, 906))
    procs = [start(tmp_path, shared + list(range(2000 + 10 * k, 2004 + 10 * k))) for k in range(4)]
    stats = [finish(p)[0] for p in procs]
    assert all(s["discarded"] == 0 and s["write_errors"] == 0 for s in stats), stats
    assert entries_are_intact(tmp_path / "kernels") == 6 + 4 * 4
    everything = shared + [2000 + 10 * k + i for k in range(4) for i in range(4)]
    again, _ = finish(start(tmp_path, everything))
    assert again["misses"] == 0 and again["disk_hits"] == len(everything), again


def test_cache_root_that_is_a_regular_file(gpu, tmp_path):
    not_a_dir = tmp_path / "cache-file"
    not_a_dir.write_text("PIEGPU_CACHE_DIR points here by mistake")
    s, err = finish(start(not_a_dir, [901, 902]))
    assert s["write_errors"] == 2 and s["misses"] == 2 and "caching in memory only" in err
    assert "Fix: set PIEGPU_CACHE_DIR" in err and err.count("caching in memory only") == 1  # warned once


@pytest.fixture
def full_dir(tmp_path):
    """A directory with almost no free space: a 64 KiB tmpfs filled up (root), else None.

    Without the rights to mount, the caller limits the worker's file size instead
    (RLIMIT_FSIZE), which fails writes the same way (EFBIG instead of ENOSPC).
    """
    mnt = tmp_path / "full"
    mnt.mkdir()
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode == 0
    if not ok:
        yield None, mnt
        return
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 512):
                pass
        except OSError:  # ENOSPC: full
            pass
        finally:
            os.close(fd)
        yield mnt, mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _limit_file_size():
    import resource
    import signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))


def test_full_cache_dir_degrades_to_memory_and_recovers(gpu, full_dir):
    mounted, d = full_dir
    preexec = None if mounted else _limit_file_size
    s, err = finish(start(d, [903, 904], preexec))
    assert s["write_errors"] == 2 and s["misses"] == 2, s  # results were checked by the worker
    assert "caching in memory only" in err
    kernels = d / "kernels"
    assert not kernels.exists() or entries_are_intact(kernels) == 0  # no partial entry left behind
    if mounted:
        (d / "filler").unlink()  # space again: the next process writes, the one after reads
        assert finish(start(d, [903, 904]))[0]["write_errors"] == 0
        assert finish(start(d, [903, 904]))[0]["disk_hits"] == 2
        assert entries_are_intact(kernels) == 2


def test_a_gguf_loads_in_place_with_a_full_or_unwritable_cache(gpu, full_dir, monkeypatch):
    """A GGUF is read where it lies: a full (or unwritable) cache dir costs nothing and gets nothing written."""
    mounted, d = full_dir
    if not mounted:
        (d / "models").write_text("a file where the models dir should be")  # unwritable instead of full
    before = sorted(str(p.relative_to(d)) for p in d.rglob("*"))
    from piegpu.textgen.model import load_model
    from tests.reliability.cases import Ctx
    ctx = Ctx()
    try:
        gguf = ctx.gguf
        monkeypatch.setenv("PIEGPU_CACHE_DIR", str(d))
        with load_model(gguf, verbose=False) as model:
            g = model.generate("1 2 3", max_tokens=3)
            g.run()
            assert len(g.tokens) >= 1
    finally:
        ctx.close()
    assert sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.name != "kernels" and "kernels" not in p.parts
                  ) == [b for b in before if "kernels" not in b]