"""Convert a llama.cpp GGUF file into an HF-layout checkpoint directory, or read its raw blocks.

The output directory holds config.json, model.safetensors (float32), tokenizer.json,
tokenizer_config.json and manifest.json (sha256 of each file plus a format version).
It is written into a temporary sibling directory and renamed into place, so an
interrupted conversion never leaves a directory that looks complete.

GGUF -> HF differences handled here:
- names: blk.{i}.attn_q.weight -> model.layers.{i}.self_attn.q_proj.weight, etc.
- shapes: GGUF lists dimensions fastest-first (ne0 = input features); HF is [out, in].
- Q/K rows: llama.cpp's converter permutes the rows of q_proj and k_proj so that
  its RoPE can rotate adjacent pairs (x0,x1),(x2,x3)...; HF rotates halves
  (x_i, x_{i+d/2}). `unpermute_qk_rows` restores the HF order.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import ModelError
from ..paths import atomic_write
from .checkpoint import expected_shapes, save_checkpoint
from .config import LlamaConfig
from . import gguf_arch
from .manifest import verify_manifest, write_manifest
from .tokenizer import TOKENIZER_CONFIG_NAME, TOKENIZER_NAME, tokenizer_from_gguf

def hf_tensor_name(gguf_name: str, source: str = "GGUF file", arch: str = "llama") -> str:
    """The HF checkpoint name of a llama.cpp tensor name (model/gguf_arch.py)."""
    return gguf_arch.hf_tensor_name(gguf_name, source, arch)


# -- the Q/K row permutation --------------------------------------------------


def _qk_row_order(rows: int, n_head: int) -> np.ndarray:
    """Row indices of llama.cpp's permutation: permuted[j] = original[order[j]]."""
    if rows % (2 * n_head) != 0:
        raise ModelError(f"cannot permute {rows} rows into {n_head} heads of even size")
    half = rows // n_head // 2
    return np.arange(rows).reshape(n_head, 2, half).swapaxes(1, 2).reshape(rows)


def permute_qk_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert permutation of q_proj/k_proj rows (HF order -> GGUF order)."""
    # Same as w.reshape(n_head, 2, rows//n_head//2, *rest).swapaxes(1, 2).reshape(w.shape),
    # expressed on row indices so it also applies to rows of quantized blocks.
    return w[_qk_row_order(w.shape[0], n_head)]


def unpermute_qk_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of `permute_qk_rows` (GGUF order -> HF rotate-half order)."""
    return w[np.argsort(_qk_row_order(w.shape[0], n_head))]


def _qk_heads(hf_name: str, config: LlamaConfig) -> int | None:
    if hf_name.endswith("self_attn.q_proj.weight"):
        return config.num_attention_heads
    if hf_name.endswith("self_attn.k_proj.weight"):
        return config.num_key_value_heads
    return None


# -- metadata ------------------------------------------------------------------


def open_gguf(path: str | Path) -> Any:
    """Open a GGUF file with gguf.GGUFReader; ModelError if it is missing or unreadable."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ModelError("reading GGUF files needs the gguf package: pip install gguf") from None
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: GGUF file not found; check the path")
    try:
        return GGUFReader(path)
    except Exception as e:  # the reader raises ValueError/struct errors/IndexError on damage
        raise ModelError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e}); re-download it") from e


_field = gguf_arch.field


def config_from_gguf(reader: Any, source: str = "GGUF file") -> LlamaConfig:
    """The LlamaConfig of an open GGUF's metadata (general.*, {arch}.*, tokenizer.ggml.*; model/gguf_arch.py)."""
    d, _, factors = gguf_arch.config_dict(reader, source)
    config = LlamaConfig.from_dict(d, source=source)
    if factors is not None:
        config = dataclasses.replace(config, rope=gguf_arch.rope_with_factors(config.rope_theta, factors))
    return config


def gguf_architecture(reader: Any, source: str = "GGUF file") -> str:
    """general.architecture of an open GGUF."""
    return gguf_arch.field(reader, "general.architecture", source)


# -- raw blocks ------------------------------------------------------------------


@dataclass(frozen=True)
class RawTensor:
    """One GGUF tensor's stored bytes under its HF name, rows in HF order.

    `data` is uint8 [rows, row_bytes] where rows = prod(shape[:-1]) (1 for a vector)
    and each row is shape[-1] // block_elems blocks (F32/F16: one element per "block").

    Block layouts (ggml, little-endian, 32 weights per block):
    - Q4_1, 20 bytes: f16 d (scale), f16 m (min), 16 bytes qs. Weight j < 16 is the
      low nibble of qs[j], weight j >= 16 the high nibble of qs[j - 16];
      value = d * nibble + m.
    - Q8_0, 34 bytes: f16 d, then 32 int8 q; value = d * q.
    - F32 / F16: plain little-endian elements.
    """

    ggml_type: str
    shape: tuple[int, ...]
    data: np.ndarray
    gpu_order: bool = False  # q/k rows still in llama.cpp's order (adjacent RoPE pairs), as the GPU wants them


def read_gguf_raw(path: str | Path) -> dict[str, RawTensor]:
    """Every tensor's quant type, HF logical shape and raw block bytes, Q/K rows un-permuted."""
    path = Path(path)
    reader = open_gguf(path)
    config = config_from_gguf(reader, str(path))
    arch = gguf_architecture(reader, str(path))
    out: dict[str, RawTensor] = {}
    for t in reader.tensors:
        if t.name == gguf_arch.ROPE_FREQS:
            continue
        name = hf_tensor_name(t.name, str(path), arch)
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
        data = np.array(t.data, copy=True).view(np.uint8).reshape(rows, -1)
        heads = _qk_heads(name, config)
        if heads is not None and gguf_arch.permutes_qk(arch):
            # Rows are whole blocks (a GGUF row is always a multiple of the block size),
            # so permuting rows of blocks equals permuting rows of weights.
            data = unpermute_qk_rows(data, heads)
        out[name] = RawTensor(t.tensor_type.name, shape, np.ascontiguousarray(data))
    _check_complete(config, {n: r.shape for n, r in out.items()}, str(path))
    return out


def _check_complete(config: LlamaConfig, shapes: dict[str, tuple[int, ...]], source: str) -> None:
    for name, shape in expected_shapes(config).items():
        if name not in shapes:
            raise ModelError(f"{source}: tensor {name!r} is missing from the GGUF; the file is incomplete -- "
                             "re-download it")
        if shapes[name] != shape:
            raise ModelError(
                f"{source}: tensor {name!r} has shape {list(shapes[name])}, the metadata implies {list(shape)}; "
                "the file is corrupt -- re-download it"
            )


# -- conversion ------------------------------------------------------------------


class _Progress:
    """Step and tensor-count messages on stderr (a live line on a terminal)."""

    def __init__(self, quiet: bool, steps: int) -> None:
        self.quiet, self.steps, self.step_no = quiet, steps, 0
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter()

    def step(self, msg: str) -> None:
        self.step_no += 1
        self._print(f"piegpu: [{self.step_no}/{self.steps}] {msg}")

    def item(self, i: int, n: int, name: str) -> None:
        if self.quiet:
            return
        if self.tty:
            end = "\n" if i == n else ""
            print(f"\r        tensor {i}/{n} {name:<48}", end=end, file=sys.stderr, flush=True)
        elif i == n or i % max(1, n // 10) == 0:
            self._print(f"        tensor {i}/{n}")

    def done(self, msg: str) -> None:
        self._print(f"piegpu: {msg} in {time.perf_counter() - self.t0:.1f} s")

    def _print(self, msg: str) -> None:
        if not self.quiet:
            print(msg, file=sys.stderr, flush=True)


def convert_gguf(
    gguf_path: str | Path,
    out_dir: str | Path,
    *,
    quiet: bool = False,
    overwrite: bool = False,
    source_info: dict[str, Any] | None = None,
) -> Path:
    """Convert a Llama GGUF into a float32 HF checkpoint directory at `out_dir`.

    If `out_dir` appears while converting (another process won the race) and it
    verifies, it is kept and returned; ours is discarded.
    """
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if out_dir.exists() and not overwrite:
        raise ModelError(f"{out_dir}: already exists; remove it or pass overwrite=True")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        _convert_into(gguf_path, tmp, quiet, source_info)
        return _publish(tmp, out_dir, overwrite)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _convert_into(gguf_path: Path, tmp: Path, quiet: bool, source_info: dict[str, Any] | None) -> None:
    progress = _Progress(quiet, 5)
    src = str(gguf_path)
    progress.step(f"reading GGUF metadata: {gguf_path}")
    reader = open_gguf(gguf_path)
    config = config_from_gguf(reader, src)
    tmp.mkdir(parents=True)

    progress.step("building tokenizer.json from tokenizer.ggml.*")
    tokenizer = tokenizer_from_gguf(reader)
    try:
        tokenizer.save(str(tmp / TOKENIZER_NAME))
    except Exception as e:  # tokenizers reports a full or read-only disk as a plain Exception
        raise OSError(f"cannot write {tmp / TOKENIZER_NAME}: {e}") from e
    atomic_write(tmp / TOKENIZER_CONFIG_NAME, _tokenizer_config_json(reader, config, src).encode("utf-8"))

    progress.step(f"dequantizing {len(reader.tensors)} tensors to float32")
    weights = dequantize_gguf(reader, config, src, progress.item)

    mb = sum(w.nbytes for w in weights.values()) / 1e6
    progress.step(f"writing model.safetensors (float32, {mb:.0f} MB) and config.json")
    save_checkpoint(tmp, config, weights, "f32")
    del weights

    progress.step("writing manifest.json (sha256 of each file)")
    files = sorted(p.name for p in tmp.iterdir() if p.is_file())
    source = {"gguf": gguf_path.name, "converter": "piegpu.model.gguf_convert", **(source_info or {})}
    write_manifest(tmp, files, source)
    _fsync_dir(tmp)
    progress.done(f"prepared {config.architecture} ({config.num_hidden_layers} layers)")


def dequantize_gguf(
    reader: Any, config: LlamaConfig, source: str = "GGUF file",
    on_tensor: Callable[[int, int, str], None] | None = None,
) -> dict[str, np.ndarray]:
    """All tensors of an open GGUF as float32 arrays under HF names, Q/K rows un-permuted."""
    from gguf.quants import dequantize

    arch = gguf_architecture(reader, source)
    out: dict[str, np.ndarray] = {}
    n = len(reader.tensors)
    for i, t in enumerate(reader.tensors, 1):
        if t.name == gguf_arch.ROPE_FREQS:
            continue
        name = hf_tensor_name(t.name, source, arch)
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        try:
            w = dequantize(t.data, t.tensor_type)
        except NotImplementedError as e:
            raise ModelError(
                f"{source}: tensor {t.name!r} uses {t.tensor_type.name}, which gguf cannot dequantize ({e})"
            ) from None
        w = np.asarray(w, dtype=np.float32).reshape(shape)
        heads = _qk_heads(name, config)
        if heads is not None and gguf_arch.permutes_qk(arch):
            w = unpermute_qk_rows(w, heads)
        if gguf_arch.norms_stored_plus_one(arch) and name.endswith("norm.weight"):
            w = w - np.float32(1)  # HF stores w, the GGUF 1 + w
        out[name] = np.ascontiguousarray(w)
        if on_tensor is not None:
            on_tensor(i, n, name)
    _check_complete(config, {k: v.shape for k, v in out.items()}, source)
    return out


def _tokenizer_config_json(reader: Any, config: LlamaConfig, source: str) -> str:
    tokens = _field(reader, "tokenizer.ggml.tokens", source)

    def token(key: str) -> str | None:
        tid = _field(reader, key, source, None)
        return tokens[tid] if tid is not None and 0 <= tid < len(tokens) else None

    doc = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("tokenizer.ggml.bos_token_id"),
        "eos_token": token("tokenizer.ggml.eos_token_id"),
        "unk_token": token("tokenizer.ggml.unknown_token_id"),
        "pad_token": token("tokenizer.ggml.padding_token_id"),
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", source, False)),
        "add_prefix_space": bool(_field(reader, "tokenizer.ggml.add_space_prefix", source, False)),
        "clean_up_tokenization_spaces": False,
        "model_max_length": config.max_position_embeddings,
        "chat_template": _field(reader, "tokenizer.chat_template", source, None),
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _publish(tmp: Path, out_dir: Path, overwrite: bool) -> Path:
    if overwrite and out_dir.exists():
        trash = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(out_dir, trash)
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.rename(tmp, out_dir)
    except OSError:
        if not out_dir.exists():
            raise
        # Another process published first; trust its directory only if it verifies.
        verify_manifest(out_dir)
        return out_dir
    _fsync_dir(out_dir.parent)
    return out_dir


def _fsync_dir(path: Path) -> None:
    # Makes the rename durable; not possible (nor needed) on Windows.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
