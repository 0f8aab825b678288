"""A strict safetensors reader and a streaming, atomic writer (f32, f16, bf16).

Our own parser rather than `safetensors.numpy` because numpy has no bfloat16 and
because a damaged file must produce an error naming the file and the tensor.
Format: 8-byte little-endian header length N, N bytes of JSON
`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`,
then the data section; offsets are relative to the data section.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from ..errors import ModelError
from ..paths import atomic_stream_write

# Stored dtype name -> numpy dtype of the raw little-endian elements.
# bf16 has no numpy dtype: raw bf16 is returned as its uint16 bit pattern.
STORAGE_DTYPES: dict[str, np.dtype] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
}

_DTYPE_ALIASES = {
    "f32": "F32", "float32": "F32", "fp32": "F32",
    "f16": "F16", "float16": "F16", "fp16": "F16", "half": "F16",
    "bf16": "BF16", "bfloat16": "BF16",
}

# A header this large is a corrupt length field, not a real checkpoint.
_MAX_HEADER_BYTES = 100 * 1024 * 1024


def storage_dtype_name(dtype: str | np.dtype | type) -> str:
    """Normalise 'f32'/'float16'/np.float32/... to the safetensors name F32/F16/BF16."""
    if isinstance(dtype, str):
        key = dtype.lower()
    else:
        key = np.dtype(dtype).name
    if key.upper() in STORAGE_DTYPES:
        return key.upper()
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    raise ModelError(f"unsupported weight dtype {dtype!r}; use one of f32, f16, bf16")


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lives inside a safetensors file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int  # absolute file offset of the first byte
    nbytes: int


def read_header(path: Path) -> dict[str, TensorEntry]:
    """Parse and check a safetensors header; every entry is checked against the file size."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ModelError(
                    f"{path}: truncated safetensors file ({size} bytes, no header); "
                    "re-download or re-convert the checkpoint"
                )
            (hlen,) = struct.unpack("<Q", head)
            if hlen > _MAX_HEADER_BYTES or 8 + hlen > size:
                raise ModelError(
                    f"{path}: corrupt safetensors header (declares {hlen} header bytes, "
                    f"file has {size}); re-download or re-convert the checkpoint"
                )
            raw = f.read(hlen)
    except FileNotFoundError:
        raise ModelError(f"{path}: weights file not found; restore it or re-download the checkpoint") from None
    except OSError as e:
        raise ModelError(f"{path}: cannot read weights file ({e}); check permissions") from e
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(
            f"{path}: corrupt safetensors header ({e}); re-download or re-convert the checkpoint"
        ) from None
    if not isinstance(header, dict):
        raise ModelError(f"{path}: corrupt safetensors header (not a JSON object); re-download or re-convert "
                         "the checkpoint")

    data_start = 8 + hlen
    data_size = size - data_start
    entries: dict[str, TensorEntry] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        entries[name] = _check_entry(path, name, info, data_start, data_size)
    return entries


def _check_entry(path: Path, name: str, info: object, data_start: int, data_size: int) -> TensorEntry:
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise ModelError(f"{where}: corrupt header entry {info!r}; re-download or re-convert the checkpoint")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise ModelError(f"{where}: corrupt shape {shape!r} in header; re-download or re-convert the checkpoint")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
        raise ModelError(f"{where}: corrupt data_offsets {offsets!r} in header; re-download or re-convert "
                         "the checkpoint")
    begin, end = offsets
    if dtype not in STORAGE_DTYPES:
        # Only reported when the tensor is read: a checkpoint may carry unrelated
        # integer buffers we never touch.
        itemsize = None
    else:
        itemsize = STORAGE_DTYPES[dtype].itemsize
    if not 0 <= begin <= end:
        raise ModelError(f"{where}: corrupt data_offsets {offsets!r} in header; re-download or re-convert "
                         "the checkpoint")
    if end > data_size:
        raise ModelError(
            f"{where}: file is truncated (tensor data ends at byte {data_start + end}, file has "
            f"{data_start + data_size}); re-download or re-convert the checkpoint"
        )
    if itemsize is not None and end - begin != int(np.prod(shape, dtype=np.int64)) * itemsize:
        raise ModelError(
            f"{where}: header says {dtype}{shape} ({int(np.prod(shape)) * itemsize} bytes) but "
            f"data_offsets span {end - begin} bytes; the file is corrupt -- re-download or re-convert it"
        )
    return TensorEntry(name, dtype, tuple(shape), data_start + begin, end - begin)


def read_tensor(path: Path, entry: TensorEntry, raw: bool = False) -> np.ndarray:
    """Read one tensor: float32 by default, or the stored dtype (bf16 as uint16 bits) if `raw`."""
    if entry.dtype not in STORAGE_DTYPES:
        raise ModelError(
            f"{path}: tensor {entry.name!r} has dtype {entry.dtype}; weights must be F32, F16 or "
            "BF16 -- convert the checkpoint (quantized safetensors are not supported)"
        )
    stored = STORAGE_DTYPES[entry.dtype]
    out = np.empty(entry.shape, dtype=stored)
    with open(path, "rb") as f:
        f.seek(entry.offset)
        got = f.readinto(memoryview(out.reshape(-1).view(np.uint8)))
    if got != entry.nbytes:
        raise ModelError(f"{path}: tensor {entry.name!r}: short read ({got} of {entry.nbytes} bytes); file truncated -- "
                             "re-download or re-convert the checkpoint")
    if raw:
        return out
    return to_float32(out, entry.dtype)


def to_float32(stored: np.ndarray, dtype: str) -> np.ndarray:
    """Widen stored F32/F16/BF16 elements to native float32."""
    if dtype == "BF16":
        return (stored.astype(np.uint32) << 16).view(np.float32)
    return stored.astype(np.float32, copy=False)


def from_float32(values: np.ndarray, dtype: str) -> np.ndarray:
    """Narrow float values to the stored dtype (bf16: round to nearest even, NaN kept quiet)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if dtype == "F32":
        return values.astype("<f4", copy=False)
    if dtype == "F16":
        return values.astype("<f2")
    bits = values.view(np.uint32)
    rounded = ((bits.astype(np.uint64) + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded.astype("<u2", copy=False)


def write_file(
    path: Path, tensors: Iterable[tuple[str, np.ndarray, str]], metadata: dict[str, str] | None = None
) -> None:
    """Write (name, array already in the stored dtype, dtype name) triples to `path` atomically."""
    path = Path(path)
    items = list(tensors)
    header: dict[str, object] = {"__metadata__": {"format": "pt", **(metadata or {})}}
    offset = 0
    for name, arr, dtype in items:
        if arr.dtype != STORAGE_DTYPES[dtype]:
            raise ModelError(f"internal: tensor {name!r} is {arr.dtype}, expected {STORAGE_DTYPES[dtype]}")
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # The data section starts 8-byte aligned, as the reference implementation does.
    hbytes += b" " * (-len(hbytes) % 8)

    def chunks() -> Iterable[bytes | memoryview]:
        yield struct.pack("<Q", len(hbytes))
        yield hbytes
        for _, arr, _ in items:
            yield memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))

    atomic_stream_write(path, chunks())


