"""Embedding throughput: piegpu on the device vs sentence-transformers on CPU torch, side by side in one run.

A random BERT-base-shaped model (12 layers, 768 wide, 30522 WordPiece tokens, f32 safetensors, mean pooling +
Normalize) is built once with transformers and cached under ~/.cache/piegpu/bench-encoders (never committed).
Texts: N sentences of about 20 tokens. Reported: texts/s of each (best of --rounds after a warm-up), their ratio,
the latency of one short query embedding, piegpu's host CPU seconds per 1000 texts (Python threads), and the
cosine agreement of the two engines' vectors.

    python benchmarks/embeddings.py [--texts 1000] [--rounds 3] [--layers 12] [--hidden 768] [--batch 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# this folder's kernels.py would shadow the `kernels` package transformers imports: the repository root instead
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WORDS = ("the of and to in is was for on that with as by at from his her an were are which this be or had not but "
         "first one their its new after who they have two has been more also other into she time can only year city "
         "world people made most some over such these like when during used many well where three known state part "
         "school later years while between would because through under before music film team game series river").split()


def build(where: Path, layers: int, hidden: int) -> Path:
    """The cached random BERT-base-shaped sentence-transformers model (built on first use)."""
    out = where / f"bert-L{layers}-H{hidden}"
    if (out / "modules.json").exists():
        return out
    import torch
    from sentence_transformers import SentenceTransformer
    from tokenizers.implementations import BertWordPieceTokenizer
    from transformers import BertConfig, BertModel, BertTokenizerFast
    from tests.fixtures.encoders import st_modules
    print(f"building {out} (random weights, once)", file=sys.stderr, flush=True)
    hf = out / "_hf"
    hf.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = list(dict.fromkeys(specials + WORDS + [chr(c) for c in range(97, 123)]
                               + ["##" + chr(c) for c in range(97, 123)]))
    vocab += [f"[unused{i}]" for i in range(30522 - len(vocab))]  # BERT-base's vocabulary size
    (hf / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertWordPieceTokenizer(str(hf / "vocab.txt"), lowercase=True).save(str(hf / "tokenizer.json"))
    BertTokenizerFast(tokenizer_file=str(hf / "tokenizer.json"), model_max_length=512).save_pretrained(str(hf))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=hidden // 64, intermediate_size=4 * hidden)).save_pretrained(str(hf))
    m = st_modules()
    SentenceTransformer(modules=[m.Transformer(str(hf), max_seq_length=512), m.Pooling(hidden, pooling_mode="mean"),
                                 m.Normalize()], device="cpu").save(str(out))
    return out


def texts(n: int) -> list:
    """n sentences of 18 words (about 20 tokens with [CLS] and [SEP]), deterministic."""
    import random
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(18)) for _ in range(n)]


def python_cpu() -> float:
    """CPU seconds of this process's Python-created threads (lavapipe's native worker threads excluded)."""
    import threading
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    natives = {t.native_id for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        if int(tid) in natives:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def best(fn, rounds: int) -> float:
    """The fastest of `rounds` timed calls after one warm-up call."""
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--batch", type=int, default=64, help="sentence-transformers' batch_size")
    ap.add_argument("--dtype", default=None, help="piegpu's weights: f32 (the checkpoint's) or f16")
    args = ap.parse_args()
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    import piegpu
    from piegpu.textgen.encoder_model import load_encoder
    path = build(Path.home() / ".cache" / "piegpu" / "bench-encoders", args.layers, args.hidden)
    data = texts(args.texts)
    model = load_encoder(path, verbose=False, dtype=args.dtype)
    st = SentenceTransformer(str(path), device="cpu")
    tokens = sum(len(ids) for ids, _ in model.tokenize(data))
    print(f"piegpu {piegpu.__version__ if hasattr(piegpu, '__version__') else ''} on {model.gpu.dev.name}, weights "
          f"{model.gpu.dtype}; torch {torch.__version__} with {torch.get_num_threads()} threads; {args.texts} texts, "
          f"{tokens / args.texts:.1f} tokens each; best of {args.rounds}", flush=True)
    cpu0 = python_cpu()
    t_ours = best(lambda: model.embed(data), args.rounds)
    cpu_ours = (python_cpu() - cpu0) / (args.rounds + 1)
    t_st = best(lambda: st.encode(data, batch_size=args.batch), args.rounds)
    agree = float(np.min((model.embed(data[:50]) * st.encode(data[:50])).sum(1)))
    q = "what river runs through the city"
    lat_ours = best(lambda: model.embed(q), 5 * args.rounds)
    lat_st = best(lambda: st.encode([q]), 5 * args.rounds)
    print(f"{'engine':<28}{'texts/s':>10}{'query ms':>10}")
    print(f"{'piegpu (device)':<28}{args.texts / t_ours:>10.1f}{lat_ours * 1e3:>10.1f}")
    print(f"{'sentence-transformers (CPU)':<28}{args.texts / t_st:>10.1f}{lat_st * 1e3:>10.1f}")
    print(f"ratio piegpu / sentence-transformers: {t_st / t_ours:.2f}x texts/s, {lat_st / lat_ours:.2f}x query "
          f"latency; piegpu host Python CPU {cpu_ours / args.texts * 1e3:.2f} s per 1000 texts; min cosine "
          f"agreement {agree:.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
