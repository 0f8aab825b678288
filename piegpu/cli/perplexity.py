"""`piegpu perplexity FILE`: the perplexity of a text file, computed as llama.cpp's llama-perplexity does.

The file's tokens are cut into chunks of --ctx tokens, each one prefill from an empty state
(model.logits), and the second half of every chunk is scored (model/perplexity.py says exactly how).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..errors import ValidationError
from .common import MODEL_HELP, int_at_least


def _cmd_perplexity(args) -> int:
    from ..textgen.model import load_model
    from ..model.perplexity import chunk_count, perplexity
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValidationError(f"{path}: cannot read the text file ({e}). Fix: pass a readable UTF-8 text file") \
            from None
    model = load_model(args.model, verbose=args.verbose)
    with model:
        tokens = model.tokenizer.encode(text).ids
        bos = model.config.bos_token_id
        adds_bos = bos is not None and model.tokenizer.encode("x").ids[:1] == [bos]
        n = chunk_count(len(tokens), args.ctx, args.chunks)
        print(f"perplexity: {path.name}: {len(tokens)} tokens, {n} chunks of {args.ctx} (scoring the second half "
              f"of each chunk, as llama-perplexity{'; BOS first' if adds_bos else ''})", file=sys.stderr)
        t0 = time.perf_counter()

        def show(i: int, r) -> None:
            print(f"[{i + 1}]{r.running[-1]:.4f},", end="", flush=True)
        result = perplexity(tokens, args.ctx, model.logits, bos if adds_bos else None, args.chunks, show)
        took = time.perf_counter() - t0
    print()
    print(f"Final estimate: PPL = {result.ppl:.4f} +/- {result.error:.5f}")
    print(f"perplexity: {result.count} tokens scored, {n * args.ctx / took:.1f} tokens/s", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    """Register `piegpu perplexity` on the subparsers `sub`."""
    p = sub.add_parser("perplexity", help="perplexity of a text file (llama.cpp's llama-perplexity method)")
    p.add_argument("file", help="a UTF-8 text file")
    p.add_argument("-m", "--model", default=None, help=MODEL_HELP)
    p.add_argument("--ctx", type=int_at_least(4), default=256,
                   help="tokens per chunk (default 256; the text needs at least 2 * ctx tokens)")
    p.add_argument("--chunks", type=int_at_least(1), default=None, help="score at most this many chunks")
    p.set_defaults(func=_cmd_perplexity)
