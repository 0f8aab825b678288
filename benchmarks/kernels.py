"""Where a decode pass of the default model spends its device time, by kernel role.

    python benchmarks/kernels.py [--context 100] [--batch B | --prefill T] [--json]

Each role's dispatches (e.g. the 30 QKV matvecs) are replayed on their own, three times
in one command buffer, and timed; the sum is close to the whole pass. Roles: embed,
qkv (RMSNorm folded in, RoPE + KV write as epilogue), attention, o (o-proj + residual),
gu (gate/up with RMSNorm and SwiGLU), down (down-proj + residual), lm (final norm +
logits). The weight format of each matrix is printed with it. With --batch B: a batched
decode pass of B sequences (one token each): token-parallel matvecs over B tokens, RoPE +
KV write and attention binding each sequence's cache (with KV buffers and 8-lane subgroups one
dispatch a layer for both, counted as attention; else RoPE + KV write in qkv's epilogue, then
attention). With --prefill T: one pass of a T-token prompt
after the context (token-tile matmuls, attention over the prompt's tokens).
"""

import argparse
import json
import statistics
import time
from collections import defaultdict

from piegpu.model.kv_pool import DEFAULT_KV_DTYPE
from piegpu.runtime.dispatch import replay
from piegpu.textgen.model import load_model


def timed(device, entries, probe, reps: int = 3) -> float:
    """Median ms of one replay of `entries` (3 rounds after a warm-up)."""
    out = []
    for r in range(4):
        enc = device.create_command_encoder()
        cp = enc.begin_compute_pass()
        for _ in range(reps):
            replay(cp, entries)
        cp.end()
        t0 = time.perf_counter()
        device.queue.submit([enc.finish()])
        device.queue.read_buffer(probe, 0, 4)
        if r:
            out.append((time.perf_counter() - t0) / reps * 1e3)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=100, help="tokens already in the KV cache")
    ap.add_argument("--batch", type=int, default=1, help="sequences in the decode pass")
    ap.add_argument("--prefill", type=int, default=0, help="tokens of one prompt pass (instead of decode)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--lora", type=int, default=0, metavar="N",
                    help="N random rank-16 LoRA adapters (benchmarks/lora.py), the sequences on them in turn")
    ap.add_argument("--kv-dtype", choices=["f32", "f16"], default=DEFAULT_KV_DTYPE,
                    help=f"how K and V are stored (default: {DEFAULT_KV_DTYPE}, load_model's)")
    args = ap.parse_args()
    model = load_model(verbose=False, kv_dtype=args.kv_dtype)
    g = model.gpu
    context = [(7 * i) % 1000 + 100 for i in range(args.context)]
    n = 1 if args.prefill else args.batch
    wss = [model.working_set(args.context + args.prefill + 8) for _ in range(n)]
    if args.lora:
        import importlib.util
        import tempfile
        from pathlib import Path
        spec = importlib.util.spec_from_file_location("lora_bench", Path(__file__).with_name("lora.py"))
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        tmp = Path(tempfile.mkdtemp(prefix="piegpu-lora-"))
        uses = [model._adapters.use(model.load_adapter(bench.write_adapter(tmp / f"a{k}", model.config, 16, k)))
                for k in range(args.lora)]
        for i, ws in enumerate(wss):
            ws.set_adapter(*uses[i % len(uses)])
    for ws in wss:
        if context:
            g.forward(ws, context)
    tokens = g.token_buffer([42] * (args.prefill or args.batch))
    if args.prefill:
        logits, plan = g.dispatch_plan(wss[0], args.prefill, tokens)
        plan = [e for e in plan if e[3] != "advance"]
    elif args.batch == 1:
        logits, plan = g.dispatch_plan(wss[0], 1, tokens, (0, 1))
    else:
        logits, plan, *_ = g.batch_plan([(ws, i, 1) for i, ws in enumerate(wss)], tokens, [(i, 1) for i in range(args.batch)])
        plan = [e for e in plan if e[3] != "advance"]  # replaying the length advance would move the context
    roles = defaultdict(list)
    for entry in plan:
        roles[entry[3]].append(entry)
    layer = g.layers[0]
    def chunk_formats(m) -> str:  # the formats the shaders read (lavapipe: the texture layouts, q4_1_tex ...)
        return "+".join(dict.fromkeys(c[3] for c in m.chunks))
    fmt = {"qkv": chunk_formats(layer.qkv), "o": chunk_formats(layer.o), "gu": chunk_formats(layer.gate_up),
           "down": chunk_formats(layer.down), "lm": chunk_formats(g.lm_head), "embed": chunk_formats(g.embed)}
    rows = {"total": {"dispatches": len(plan), "ms": timed(g.device, plan, logits)}}
    for role, entries in roles.items():
        rows[role] = {"dispatches": len(entries), "ms": timed(g.device, entries, logits), "format": fmt.get(role, "")}
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    total = rows["total"]["ms"]
    what = f"prefill pass of {args.prefill} tokens" if args.prefill else f"decode pass of {args.batch} sequence(s)"
    print(f"{what} at context {args.context}: {total:.1f} ms, {len(plan)} dispatches")
    for role, r in rows.items():
        if role != "total":
            print(f"  {role:10s} {r['dispatches']:4d} dispatches  {r['ms']:6.2f} ms  {100 * r['ms'] / total:5.1f}%  "
                  f"{r['format']}")


if __name__ == "__main__":
    main()
