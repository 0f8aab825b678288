"""LoRA costs on the device: a B=8 decode pass whose rows use 4 different rank-16 adapters against the same pass of
the base model, one-sequence decode under an adapter against the base and against the adapter merged, and the
time to load an adapter (read + checked + uploaded into a slot).

Adapters are random PEFT folders (all seven projections, rank 16, lora_alpha 32) written here with numpy. Two model
objects run side by side, taking turns run by run: one never sees an adapter (its plans have no LoRA steps), the
other carries the adapters (and is merged last). A pass's time is the steady-state difference of a run of 2N
tokens and a run of N, as `piegpu bench` measures decode.

    python benchmarks/lora.py [--model PATH_OR_NAME] [--tokens 16] [--runs 3] [--rank 16]
"""

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def write_adapter(d: Path, config, rank: int, seed: int) -> Path:
    """A random PEFT adapter folder for `config` (every projection of every layer)."""
    from safetensors.numpy import save_file
    from piegpu.model.lora_files import target_shapes
    rng = np.random.default_rng(seed)
    shapes = target_shapes(config)
    tensors = {}
    for i in range(config.num_hidden_layers):
        for t in TARGETS:
            out, inp = shapes[t]
            mod = "self_attn" if t in TARGETS[:4] else "mlp"
            key = f"base_model.model.model.layers.{i}.{mod}.{t}"
            tensors[f"{key}.lora_A.weight"] = (rng.standard_normal((rank, inp)) / inp ** 0.5).astype(np.float32)
            tensors[f"{key}.lora_B.weight"] = (rng.standard_normal((out, rank)) * 0.01).astype(np.float32)
    d.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(d / "adapter_model.safetensors"))
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank,
                                                       "target_modules": list(TARGETS), "bias": "none"}))
    return d


def decode_run(model, ids: list, adapters: list, n: int) -> float:
    """Wall seconds of a greedy Batch of len(adapters) rows (row i under adapters[i]), n tokens each."""
    from piegpu.runtime.batch import Batch
    from piegpu.runtime.session import run_sync
    from piegpu.samplers.rows import RowParams, RowSampling
    gc.collect()
    batch = Batch(model, RowSampling(model.config.vocab_size), max_batch=len(adapters))
    for a in adapters:
        batch.add(ids, RowParams(temperature=0.0), n, adapter=a)  # no stop token: every row decodes n tokens
    t0 = time.perf_counter()
    run_sync(batch.run())
    return time.perf_counter() - t0


def per_pass(model, ids, adapters, n) -> float:
    """ms of one decode pass in steady state (2n tokens minus n)."""
    return (decode_run(model, ids, adapters, 2 * n) - decode_run(model, ids, adapters, n)) / n * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a GGUF, a folder or a name (default: the default model)")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rank", type=int, default=16)
    args = ap.parse_args()
    import piegpu
    base = piegpu.load_model(args.model, verbose=False)
    lora = piegpu.load_model(args.model, verbose=False)
    ids = base.tokenizer.encode("Once upon a time").ids
    tmp = Path(tempfile.mkdtemp(prefix="piegpu-lora-bench-"))
    paths = [write_adapter(tmp / f"a{k}", base.config, args.rank, seed=k) for k in range(4)]
    load_s = []
    uses = []
    for p in paths:
        t0 = time.perf_counter()
        a = lora.load_adapter(p)
        use = lora._adapters.use(a)
        ws = lora.working_set(16)
        ws.set_adapter(*use)  # the upload into a slot
        from piegpu.runtime.waits import drain
        drain(lora.gpu.device)
        load_s.append(time.perf_counter() - t0)
        ws.release()
        uses.append(use)
    mixed = [uses[k % 4] for k in range(8)]
    configs = {"B8 base": (base, [None] * 8), "B8 4 adapters": (lora, mixed), "B8 bank, no adapter": (lora, [None] * 8),
               "B1 base": (base, [None]), "B1 adapter": (lora, [uses[0]])}
    times = {k: [] for k in configs}
    for r in range(args.runs + 1):
        for k, (m, ads) in configs.items():
            t = per_pass(m, ids, ads, args.tokens)
            if r:
                times[k].append(t)
    t0 = time.perf_counter()
    lora.merge_adapter(uses[0].key)
    merge_s = time.perf_counter() - t0
    merged, b1 = [], []
    for r in range(args.runs + 1):
        t, u = per_pass(lora, ids, [None], args.tokens), per_pass(base, ids, [None], args.tokens)
        if r:
            merged.append(t)
            b1.append(u)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"model": base.info.get("name", base.source), "device": base.gpu.dev.name, "rank": args.rank,
           "ms_per_pass": med, "B8_ratio_4_adapters_vs_base": med["B8 4 adapters"] / med["B8 base"],
           "B1_ratio_adapter_vs_base": med["B1 adapter"] / med["B1 base"],
           "B1_merged_ms": statistics.median(merged), "B1_base_ms_beside_merged": statistics.median(b1),
           "B1_ratio_merged_vs_base": statistics.median(merged) / statistics.median(b1),
           "adapter_load_s": statistics.median(load_s), "merge_s": merge_s,
           "adapter_host_mb": lora.adapters[0].nbytes / 1e6 if lora.adapters else None,
           "bank_device_mb": lora.gpu.lora.bytes / 1e6, "runs": times}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
