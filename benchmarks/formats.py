"""Decode matvec time per GGUF weight type, at the shapes of a real model, on the device piegpu picks.

    python benchmarks/formats.py [--shape 8192x2048] [--types Q8_0,Q4_K,...] [--rounds 5] [--json]

Each type's matrix holds random blocks with finite scales (tests/model/test_quant_formats.py's), is laid out
as load_model lays it out on this adapter (the texture formats on lavapipe, repacked at upload), and is
multiplied by one token's x through matvec_decode.wgsl with the rows per invocation load_model's kernels take.
Rounds alternate the types, so a slow spell of the shared machine lands on all of them; the medians, their ratio
to Q8_0's and the GGUF bytes read per second are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from math import ceil
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from piegpu.model.gpu_weights import GGML_FORMATS, pack_ggml, upload, weight_bindings  # noqa: E402
from piegpu.model.kernels import Kernels  # noqa: E402
from piegpu.model.shader_code import four_rows, matvec_rows, matvec_x  # noqa: E402
from piegpu.model.shaders import ShaderLibrary  # noqa: E402
from piegpu.runtime.device import get_device  # noqa: E402

F16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
              "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
DEFAULT_TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]


def random_rows(gtype: str, rows: int, cols: int, rng) -> np.ndarray:
    """uint8 [rows, row_bytes]: random GGUF blocks of `gtype` with small finite scales."""
    _, block_bytes, block_elems = GGML_FORMATS[gtype]
    nb = rows * cols // block_elems
    blocks = rng.integers(0, 256, (nb, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[gtype]:
        blocks[:, off: off + 2] = (rng.uniform(1e-3, 1e-2, nb).astype(np.float16)).view(np.uint8).reshape(nb, 2)
    return blocks.reshape(rows, -1)


class MatvecBench:
    """One matrix on the device and the dispatch of its decode matvec, as load_model's kernels record it."""

    def __init__(self, dev, gtype: str, rows: int, cols: int, rng, textures: bool | None = None):
        import wgpu
        self.dev, self.gtype = dev, gtype
        d = dev.device
        data = random_rows(gtype, rows, cols, rng)
        self.bytes = data.nbytes
        limit = dev.limits.get("max-storage-buffer-binding-size", 128 << 20)
        textures = dev.texture_weights if textures is None else textures
        m = upload(d, pack_ggml(gtype, data, cols, gtype), limit, gtype, textures)
        shell = Kernels.__new__(Kernels)
        shell.gpu = type("G", (), {"dev": dev})()
        lib = ShaderLibrary(d)
        x = d.create_buffer_with_data(data=rng.standard_normal(cols).astype(np.float32).tobytes(),
                                      usage=wgpu.BufferUsage.UNIFORM)
        self.out = d.create_buffer(size=rows * 4, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
        self.calls = []
        for buf, row0, nrows, fmt in m.chunks:
            R, wg = shell.rows_per_invocation(nrows, decode=True, texture=fmt.endswith("_tex"))
            params = {"R": R, "ROWS": nrows, "ROW0": row0, "NB": cols // 32, "WG": wg, "K4": cols // 4,
                      "NORM": True, "EPS": 1e-5, "OUT_STRIDE": rows,
                      **matvec_rows(R, four_rows(fmt, R, nrows)), **matvec_x(dev.subgroup_lanes)}
            k = lib.kernel("matvec_decode", params, {"FORMAT": f"formats/{fmt}", "EPILOGUE": "epilogues/store"})
            bg = k.bind(d, {**weight_bindings(buf), 1: x, 2: x, 3: self.out})
            self.calls.append((k.pipeline, bg, ceil(nrows / R / wg)))
        self.fmt = "+".join(sorted({c[3] for c in m.chunks}))

    def time(self, reps: int = 8) -> float:
        """ms of one matvec: `reps` dispatches in one command buffer, submitted and waited for."""
        d = self.dev.device
        enc = d.create_command_encoder()
        p = enc.begin_compute_pass()
        for _ in range(reps):
            for pipeline, bg, groups in self.calls:
                p.set_pipeline(pipeline)
                p.set_bind_group(0, bg)
                p.dispatch_workgroups(groups, 1, 1)
        p.end()
        t0 = time.perf_counter()
        d.queue.submit([enc.finish()])
        d.queue.read_buffer(self.out, 0, 4)
        return (time.perf_counter() - t0) / reps * 1e3


def main() -> None:
    """Print (or --json) the median decode matvec ms per type, its ratio to Q8_0 and GB/s of GGUF bytes."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="8192x2048", help="rows x cols (8192x2048: Llama-3.2-1B's gate/up halves)")
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--storage", action="store_true",
                    help="also time each type in its GGUF storage layout (read in place: what GPU adapters use)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows, cols = map(int, args.shape.lower().split("x"))
    dev = get_device()
    rng = np.random.default_rng(0)
    types = args.types.split(",")
    benches = [MatvecBench(dev, t, rows, cols, rng) for t in types]
    if args.storage and dev.texture_weights:
        benches += [MatvecBench(dev, t, rows, cols, rng, textures=False) for t in types]
    for b in benches:
        b.time(2)  # compile and warm
    times: list = [[] for _ in benches]
    for _ in range(args.rounds):
        for i, b in enumerate(benches):
            times[i].append(b.time())
    med = [statistics.median(v) for v in times]
    base = next((m for b, m in zip(benches, med) if b.gtype == "Q8_0"), None)
    rows_out = [{"type": b.gtype, "layout": b.fmt, "ms": round(m, 3), "vs_q8_0": round(m / base, 2) if base else None,
                 "gb_s": round(b.bytes / m / 1e6, 2)} for b, m in zip(benches, med)]
    if args.json:
        print(json.dumps({"shape": [rows, cols], "device": dev.name, "rows": rows_out}))
        return
    print(f"decode matvec {rows} x {cols} on {dev.name}, medians of {args.rounds} alternated rounds")
    print(f"{'type':6} {'layout':10} {'ms':>8} {'vs Q8_0':>8} {'GB/s':>6}")
    for r in rows_out:
        print(f"{r['type']:6} {r['layout']:10} {r['ms']:8.3f} {r['vs_q8_0'] or 0:8.2f} {r['gb_s']:6.2f}")


if __name__ == "__main__":
    main()
