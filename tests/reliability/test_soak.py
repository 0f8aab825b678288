"""A short soak (benchmarks/soak.py in a subprocess): no GPU buffer outlives its pass, epilogue or working set."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.reliability.cases import ROOT


def test_short_soak_leaks_no_buffers(gpu, tmp_path):
    out = tmp_path / "soak.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--tokens", "400", "--restarts", "15",
                        "--epilogues", "8", "--generations", "4", "--json", str(out), "--check"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["decode"]["buffer_growth"] == 0 and r["restarts"]["buffer_growth"] == 0
    assert r["epilogues"]["buffer_growth"] == 0 and r["epilogues"]["compiled"] == 8
    assert r["generate"]["buffer_growth"] == 0
    assert r["decode"]["passes"] == 400 + 1  # the prefill pass and one per token: nothing resubmitted
