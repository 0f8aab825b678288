"""The kernel cache: memory and disk hits, corrupt or foreign entries rebuilt, read-only dirs tolerated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
from piegpu.eta import cache

SCRIPT = textwrap.dedent("""
    import json, numpy as np
    from piegpu import eta, dtype
    from piegpu.eta import cache
    from tests.eta.test_trace import top_a, SPECS
    prog = eta.trace(top_a, *SPECS)
    out = prog.run(np.linspace(-3, 3, 1000).astype(np.float32), np.array([1, 2], np.uint32), backend="wgsl")
    s = cache.cache_stats()
    print(json.dumps({"misses": s["misses"], "disk_hits": s["disk_hits"], "discarded": s["discarded"],
                      "token": int(out), "write_errors": s["write_errors"]}))
""")


def run_fresh(cache_dir) -> dict:
    env = {**os.environ, "PIEGPU_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"stderr": out.stderr}


def test_second_process_is_a_disk_hit(gpu, tmp_path):
    first = run_fresh(tmp_path)
    assert first["misses"] == 1 and first["disk_hits"] == 0
    second = run_fresh(tmp_path)
    assert second["misses"] == 0 and second["disk_hits"] == 1 and second["token"] == first["token"]


def test_corrupt_entry_is_discarded_and_rebuilt(gpu, tmp_path):
    first = run_fresh(tmp_path)
    (entry,) = list((tmp_path / "kernels").glob("*.bin"))
    data = bytearray(entry.read_bytes())
    data[-10] ^= 0xFF  # flip a byte of the shader payload
    entry.write_bytes(bytes(data))
    again = run_fresh(tmp_path)
    assert again["discarded"] == 1 and again["misses"] == 1 and again["token"] == first["token"]
    entry.write_bytes(b"PIEKC1\n")  # truncated
    assert run_fresh(tmp_path)["discarded"] == 1


def test_foreign_entry_is_rejected():
    key = cache.CacheKey("a" * 64, "wgsl", "v1", "dev")
    other = cache.CacheKey("b" * 64, "wgsl", "v1", "dev")
    blob = cache.pack(other, b"payload")
    assert cache.unpack(other, blob) == b"payload"
    assert cache.unpack(key, blob) is None


def test_memory_hit_skips_everything(gpu):
    from piegpu import dtype, eta
    prog = eta.trace(lambda x: eta.exp(x) * 3.0, eta.spec([8], dtype.f32))
    prog.run(np.ones(8, np.float32), backend="wgsl")
    before = cache.cache_stats()
    prog.run(np.ones(8, np.float32), backend="wgsl")
    after = cache.cache_stats()
    assert after["memory_hits"] == before["memory_hits"] + 1 and after["misses"] == before["misses"]


def test_unwritable_cache_path_degrades_to_memory(gpu, tmp_path):
    # a regular file where the kernel directory should be: writes fail even for root
    (tmp_path / "kernels").write_text("not a directory")
    r = run_fresh(tmp_path)
    assert r["write_errors"] == 1 and r["misses"] == 1 and "caching in memory only" in r["stderr"]
