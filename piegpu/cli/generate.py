"""`piegpu generate`: stream a continuation of a prompt."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..errors import PieGpuError
from ..model.kv_pool import DEFAULT_KV_DTYPE
from ..samplers import NAMES as SAMPLER_NAMES
from .common import MODEL_HELP, add_context_arg, int_at_least as _int_at_least


def _sampler_options(args) -> tuple:
    """(value of the named sampler, the other truncation/penalty options) from the generate flags."""
    from ..samplers import OPTION_ORDER
    opts = {key: getattr(args, key) for key, _ in OPTION_ORDER}
    value = None
    for key, name in OPTION_ORDER:
        if name == args.sampler:
            value = opts.pop(key)
    opts.update(mirostat_eta=args.mirostat_eta, repetition_penalty=args.repetition_penalty,
                presence_penalty=args.presence_penalty, frequency_penalty=args.frequency_penalty,
                mirostat_m=args.mirostat_m, xtc_threshold=args.xtc_threshold,
                dynatemp_exponent=args.dynatemp_exponent, samplers=args.samplers,
                logit_bias=_bias_map(args.logit_bias), dry_multiplier=args.dry_multiplier, dry_base=args.dry_base,
                dry_allowed_length=args.dry_allowed_length, dry_penalty_last_n=args.dry_penalty_last_n,
                dry_sequence_breakers=_breakers(args.dry_sequence_breaker))
    return value, {k: v for k, v in opts.items() if v is not None}


def _bias_map(pairs):
    """{token_id: bias} of repeated --logit-bias flags (repeated ids add up, as in llama.cpp)."""
    if not pairs:
        return None
    out: dict = {}
    for tok, b in pairs:
        out[tok] = out.get(tok, 0.0) + b
    return out


def _breakers(values):
    """--dry-sequence-breaker values (repeatable) with llama.cpp's escapes (\\n, \\t, \\"); "none" clears them."""
    if not values:
        return None
    if values == ["none"]:
        return []
    return [v.encode("latin-1", "backslashreplace").decode("unicode_escape") for v in values]


def _logit_bias(text: str) -> tuple:
    """An argparse type: ID=BIAS, or llama.cpp's ID+BIAS / ID-BIAS (e.g. 15043-inf bans token 15043)."""
    import re
    m = re.fullmatch(r"\s*(\d+)\s*(?:=\s*([+-]?\S+)|([+-]\S+))\s*", text)
    try:
        if m is None:
            raise ValueError
        return int(m.group(1)), float(m.group(2) if m.group(2) is not None else m.group(3))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TOKEN_ID=BIAS (e.g. 15043=-1.5 or 15043=-inf), got {text!r}")


def _check_modes(args) -> None:
    constrained = args.json or args.schema or args.json_schema or args.grammar or args.regex is not None
    if args.speculative is not None and (constrained or args.watermark is not None):
        raise PieGpuError("generate: --speculative cannot be combined with --json/--schema/--json-schema/--grammar/"
                          "--regex/--watermark")
    if constrained and args.watermark is not None:
        raise PieGpuError("generate: --json/--schema/--grammar/--regex and --watermark cannot be combined yet. "
                          "Fix: use one of them")
    if sum(bool(x) for x in (args.json, args.schema or args.json_schema, args.grammar, args.regex is not None)) > 1 \
            or (args.schema and args.json_schema):
        raise PieGpuError("generate: pass one of --json, --json-schema (--schema), --grammar, --regex")


def _checked_options(args) -> tuple:
    """(sampler, watermark, constraint request) of the generate flags, each validated by the library that uses it.

    Runs before the model loads, so a bad flag costs nothing; the integer flags are
    range-checked by argparse (see _int_at_least).
    """
    from ..samplers.options import SamplingOptions
    _check_modes(args)
    schema = _constraint_request(args)
    value, options = _sampler_options(args)
    sampler = SamplingOptions.of(args.sampler, args.temperature, value=value, **options)
    if args.sampler_program is not None:
        sampler = SamplingOptions.of(_sampler_program(args, value, options, schema))
    watermark = None
    if args.watermark is not None:
        from ..inferlets.watermark import Watermark
        watermark = Watermark(args.watermark, args.watermark_gamma, args.watermark_delta)
    return sampler, watermark, schema


def _sampler_program(args, value, options, constraint):
    """The eta or PTIR container of --sampler-program FILE (any tracer, or Pie), checked to be the only sampler flag."""
    from ..ptir import as_sampler, is_ptir
    from ..runtime.forward import as_program
    if args.sampler != "greedy" or value is not None or options or args.temperature != 1.0:
        raise PieGpuError("generate: --sampler-program is the whole sampler; it takes no --sampler, --temperature or "
                          "sampler options. Fix: trace them into the program, or drop --sampler-program")
    if constraint is not None or args.watermark is not None or args.speculative is not None:
        raise PieGpuError("generate: --sampler-program cannot be combined with --json/--schema/--grammar/--regex/"
                          "--watermark/--speculative yet. Fix: use one of them")
    try:
        data = open(args.sampler_program, "rb").read()
    except OSError as e:
        raise PieGpuError(f"generate: cannot read --sampler-program {args.sampler_program}: {e.strerror}") from None
    if is_ptir(data):
        return as_sampler(data)
    return as_program(data, f"--sampler-program {args.sampler_program}")


def _cmd_generate(args) -> int:
    from ..textgen.model import load_model
    sampler, watermark, schema = _checked_options(args)  # fail before the model loads
    model = load_model(args.model, verbose=True, kv_dtype=args.kv_dtype, context=args.ctx)
    spec = None
    if args.speculative is not None:
        from ..textgen.speculation import Lookup
        spec = Lookup(k=args.speculative, ngram=args.ngram)
    t0 = time.perf_counter()
    g = model.generate(args.prompt, max_tokens=args.max_tokens, sampler=sampler, seed=args.seed, chat=args.chat,
                       watermark=watermark, speculative=spec, **(schema or {}))
    first = None
    for piece in g:
        if first is None:
            first = time.perf_counter() - t0
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    s = g.stats
    print(f"piegpu: {s.generated} tokens in {s.decode_s:.2f} s ({s.decode_tokens_per_s:.1f} tokens/s decode; "
          f"prompt {s.prompt_tokens} tokens in {s.prefill_s:.2f} s; stop: {s.stop_reason}; sampler: {g.sampler.name})",
          file=sys.stderr)
    if spec is not None:
        print(f"piegpu: lookup drafts: {s.accepted_tokens}/{s.draft_tokens} accepted in {s.verify_passes} verify "
              f"passes (+ {s.plain_passes} plain passes)", file=sys.stderr)
    kind = {"json_schema": "JSON schema", "json_object": "JSON object"}.get(g.constraint.kind, g.constraint.kind) \
        if g.constraint is not None else None
    if s.grammar == "device":
        print(f"piegpu: {kind}: on the device ({s.grammar_reason}); {s.host_waits} host waits", file=sys.stderr)
    if g.grammar_stats is not None:
        gs = g.grammar_stats
        print(f"piegpu: {kind}: {gs.masks} sampled tokens under masks ({gs.mask_ms_per_token:.2f} ms/token in "
              f"llguidance), {gs.forced} forced tokens in {gs.forced_runs} prefill runs", file=sys.stderr)
    if watermark is not None and g.tokens:
        from ..inferlets.watermark import score
        sc = score([g.prompt_ids[-1]] + list(g.tokens), watermark.key, watermark.gamma)
        print(f"piegpu: watermark z-score {sc.z:.2f} ({sc.green}/{sc.scored} tokens green, gamma {sc.gamma})",
              file=sys.stderr)
    return 0


def _read_text(path: str, flag: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise PieGpuError(f"generate {flag}: cannot read {path}: {e}") from None


def _read_schema(path: str, flag: str = "--json-schema"):
    import json
    try:
        return json.loads(_read_text(path, flag))
    except json.JSONDecodeError as e:
        raise PieGpuError(f"generate {flag}: {path} is not JSON ({e}). Fix: pass a JSON schema file") from None


def _constraint_request(args) -> dict | None:
    """generate()'s grammar keyword of --json / --json-schema (--schema) / --grammar / --regex, checked by
    llguidance before the model loads (None without one)."""
    from ..inferlets.grammar import check_request
    if args.json:
        req = {"json_object": True}
    elif args.schema or args.json_schema:
        flag = "--schema" if args.schema else "--json-schema"
        req = {"json_schema": _read_schema(args.schema or args.json_schema, flag)}
    elif args.grammar:
        req = {"grammar": _read_text(args.grammar, "--grammar")}
    elif args.regex is not None:
        req = {"regex": args.regex}
    else:
        return None
    check_request(**req)
    req["grammar_mode"] = args.grammar_mode
    return req


def add_parser(sub) -> None:
    """Register `piegpu generate` on the subparsers `sub`."""
    g = sub.add_parser("generate", help="stream a continuation of PROMPT to stdout")
    g.add_argument("prompt")
    g.add_argument("--max-tokens", type=_int_at_least(1), default=128)
    g.add_argument("--sampler", default="greedy", choices=list(SAMPLER_NAMES),
                   help="the sampler; its parameter comes from the flag of the same name (e.g. --typical 0.9)")
    g.add_argument("--temperature", type=float, default=1.0)
    g.add_argument("--sampler-program", default=None, metavar="FILE.eta",
                   help="an eta container (logits f32[vocab], state u32[2]) -> token as the sampler, from any "
                        "tracer (piegpu compile, node sdk/js/examples/top_a.js, cargo run --example top_a)")
    g.add_argument("--seed", type=_int_at_least(0, 1 << 32), default=0)
    g.add_argument("-m", "--model", default=None, help=MODEL_HELP)
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    add_context_arg(g)
    g.add_argument("--kv-dtype", choices=["f32", "f16"], default=DEFAULT_KV_DTYPE,
                   help="how K and V are stored: f16 (default: half the bytes, rounded to half precision) or f32 "
                        "(exact)")
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--min-p", type=float, default=None)
    g.add_argument("--top-a", type=float, default=None)
    g.add_argument("--p-less", action="store_const", const=True, default=None,
                   help="p-less: keep tokens with prob >= sum of squared probs (llama.cpp's p_less)")
    g.add_argument("--typical", type=float, default=None, metavar="MASS", help="locally typical sampling mass")
    g.add_argument("--epsilon-cutoff", type=float, default=None, metavar="EPS")
    g.add_argument("--eta-cutoff", type=float, default=None, metavar="ETA")
    g.add_argument("--mirostat", type=float, default=None, metavar="TAU", help="Mirostat v2 target surprise (bits)")
    g.add_argument("--mirostat-eta", type=float, default=None, metavar="LR", help="Mirostat learning rate (0.1)")
    g.add_argument("--mirostat-v1", type=float, default=None, metavar="TAU",
                   help="Mirostat v1 target surprise (bits); llama.cpp's --mirostat 1 --mirostat-ent TAU")
    g.add_argument("--mirostat-m", type=int, default=None, metavar="M", help="Mirostat v1 tokens for s_hat (100)")
    g.add_argument("--top-n-sigma", type=float, default=None, metavar="N",
                   help="keep logits >= max - N*std (<= 0 off)")
    g.add_argument("--tfs", dest="tfs_z", type=float, default=None, metavar="Z", help="tail-free sampling z (1 = off)")
    g.add_argument("--xtc-probability", type=float, default=None, metavar="P",
                   help="XTC: chance to drop the top choices (0 = off)")
    g.add_argument("--xtc-threshold", type=float, default=None, metavar="T",
                   help="XTC: prob threshold of a top choice (0.1; > 0.5 = off)")
    g.add_argument("--dynatemp-range", type=float, default=None, metavar="D",
                   help="dynamic temperature: --temperature +/- D by entropy (0 = off)")
    g.add_argument("--dynatemp-exponent", type=float, default=None, metavar="E",
                   help="dynamic temperature exponent (1)")
    g.add_argument("--logit-bias", type=_logit_bias, action="append", default=None, metavar="ID=BIAS",
                   help="add BIAS to token ID's logit (repeatable; -inf bans the token)")
    g.add_argument("--samplers", default=None, metavar="NAMES",
                   help="truncation order as llama.cpp names, e.g. 'top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature'")
    g.add_argument("--dry-multiplier", type=float, default=None, metavar="M", help="DRY penalty multiplier (0 = off)")
    g.add_argument("--dry-base", type=float, default=None, metavar="B", help="DRY base (1.75)")
    g.add_argument("--dry-allowed-length", type=int, default=None, metavar="N",
                   help="DRY: repeats up to N are free (2)")
    g.add_argument("--dry-penalty-last-n", type=int, default=None, metavar="N",
                   help="DRY: tokens searched for repeats (-1 = context, 0 = off)")
    g.add_argument("--dry-sequence-breaker", action="append", default=None, metavar="S",
                   help="DRY sequence breaker (repeatable; replaces the default \\n : \" *; 'none' for none)")
    g.add_argument("--repetition-penalty", type=float, default=None, metavar="R", help="CTRL-style, 1 = off")
    g.add_argument("--presence-penalty", type=float, default=None, metavar="P")
    g.add_argument("--frequency-penalty", type=float, default=None, metavar="F")
    g.add_argument("--watermark", type=int, default=None, metavar="KEY", help="greenlist watermark with this key")
    g.add_argument("--watermark-gamma", type=float, default=0.25, metavar="G", help="green fraction (0.25)")
    g.add_argument("--watermark-delta", type=float, default=2.0, metavar="D", help="green logit bias (2.0)")
    g.add_argument("--json", action="store_true", help="constrain the output to a JSON object")
    g.add_argument("--json-schema", default=None, metavar="FILE", help="constrain the output to this JSON schema")
    g.add_argument("--schema", default=None, metavar="FILE", help="alias of --json-schema")
    g.add_argument("--grammar", default=None, metavar="FILE", help="constrain the output to a GBNF or Lark grammar")
    g.add_argument("--regex", default=None, metavar="PATTERN", help="constrain the output to match PATTERN")
    g.add_argument("--grammar-mode", default="auto", choices=["auto", "device", "host"],
                   help="where a constraint runs: the device automaton (regular grammars, run ahead) or llguidance's "
                        "host masks (auto: llguidance for now, docs/grammar.md)")
    g.add_argument("--speculative", type=_int_at_least(1), default=None, metavar="K",
                   help="speculative decoding: up to K prompt-lookup drafts verified per pass (adaptive; greedy "
                        "output is plain greedy's, sampled output plain sampling's in distribution)")
    g.add_argument("--ngram", type=_int_at_least(1), default=3,
                   help="prompt-lookup n-gram length for --speculative (3)")
    g.set_defaults(func=_cmd_generate)
