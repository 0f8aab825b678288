"""Channel cells: where a queued cell's value comes from, and host values <-> 32-bit words."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dtypes import DType, dtype as _dtypes
from ..errors import ValidationError
from . import waits


@dataclass
class Cell:
    """Where a queued cell's value comes from."""

    kind: str  # "host" (value known), "staged" (copied by its pass), "device" (stays on the device)
    value: object = None  # numpy array for host cells
    staging: object = None  # mappable buffer for staged cells
    pass_id: int = -1
    mapping: object = None  # the map request of an interrupted read, still in flight
    done: bool = False  # its pass is known to have finished (take_many): it is mapped without waiting
    submission: int | None = None  # its pass's submission index (runtime/waits.py), where wgpu-native gives one


async def staged_words(cell: Cell, device=None, nbytes: int = 0) -> np.ndarray:
    """The u32 words of a staged cell once its pass has finished (its buffer mapped, read and unmapped).

    With its pass's submission index (and the device, `nbytes` to read) the wait is for that
    submission and the read is native (runtime/waits.py); else through wgpu-py's map request.
    """
    buf = cell.staging
    if cell.submission is not None and device is not None and cell.mapping is None:
        if not cell.done:
            await waits.wait_submission(device, cell.submission)
            cell.done = True
        return waits.read_done(device, buf, nbytes)
    if cell.done:  # its pass has finished (wait_newest waited for a later one)
        if str(buf.map_state) != "mapped":
            buf.map_sync("READ_NOSYNC")
    elif cell.mapping is None:
        cell.mapping = buf.map_async("READ_NOSYNC")
        await cell.mapping  # a cancellation here leaves the request in flight, kept on the cell
    else:
        # An earlier read was interrupted; its request may belong to a closed event loop,
        # so wait for it synchronously (the pass is already submitted: this ends).
        cell.mapping.sync_wait()
    words = np.frombuffer(buf.read_mapped(), np.uint32).copy()
    buf.unmap()
    return words


async def wait_newest(cells: list, device=None) -> None:
    """Wait once, for the newest pass among these queued cells' staged ones; mark them all done.

    Passes finish in submission order, so the older cells are then mapped without waiting.
    """
    staged = [c for c in cells if c is not None and c.kind == "staged" and c.staging is not None
              and c.mapping is None and not c.done]
    if len(staged) < 2:
        return
    last = staged[-1]
    if last.submission is not None and device is not None:
        await waits.wait_submission(device, last.submission)
        for c in staged:
            c.done = True
        return
    last.mapping = last.staging.map_async("READ_NOSYNC")
    try:
        await last.mapping  # a cancellation leaves the request on the cell (a later read waits for it)
    except Exception:  # noqa: BLE001 -- the reads report it (and poison the channel)
        return
    last.mapping = None
    for c in staged:
        c.done = True


def coerce(values, shape: tuple, dt: DType, label: str) -> np.ndarray:
    """`values` as a numpy array of one cell, or ValidationError saying what does not fit."""
    arr = np.asarray(values)
    if arr.shape != shape:
        raise ValidationError(f"Channel{label}.put: value shape {list(arr.shape)} does not match the cell "
                              f"shape {list(shape)}. Fix: put arrays of shape {list(shape)}")
    if dt == _dtypes.bool:
        if arr.dtype != np.bool_:
            raise ValidationError(f"Channel{label}.put: bool channel got {arr.dtype} values. "
                                  "Fix: put numpy bool arrays (e.g. np.asarray(values) != 0)")
        return arr.copy()
    if arr.dtype == np.bool_ or (np.issubdtype(arr.dtype, np.floating) and not dt.is_float):
        raise ValidationError(f"Channel{label}.put: {arr.dtype} values for a {dt.name} channel. "
                              f"Fix: put {dt.name} values")
    if dt.is_int:
        a64 = arr.astype(np.int64)
        lo, hi = (-(1 << 31), (1 << 31) - 1) if dt == _dtypes.i32 else (0, (1 << 32) - 1)
        if a64.size and (a64.min() < lo or a64.max() > hi):
            raise ValidationError(f"Channel{label}.put: values {a64.min()}..{a64.max()} do not fit "
                                  f"{dt.name} (range {lo}..{hi}). Fix: put values in range, or use a "
                                  "channel of another dtype")
    return arr.astype(dt.np)


def to_words(arr: np.ndarray, dt: DType) -> np.ndarray:
    """A cell's values as the u32 words stored on the device (bool as 0/1)."""
    a = np.ascontiguousarray(arr, dtype=dt.np).reshape(-1)
    return a.astype(np.uint32) if dt == _dtypes.bool else a.view(np.uint32)


def from_words(words: np.ndarray, dt: DType, shape: tuple) -> np.ndarray:
    """A cell read back from the device as a numpy array of its dtype and shape."""
    if dt == _dtypes.bool:
        return (words != 0).reshape(shape)
    return words.view(dt.np).reshape(shape).copy()


def reusable(buf) -> bool:
    """Whether a pooled mappable buffer can be a copy target again (unmapped now; unmaps a mapped one).

    A map request interrupted by Ctrl-C or a cancellation can leave a buffer mapped or
    pending; submitting a copy into it would be a validation error that wgpu-native turns
    into an abort. Such a buffer is dropped (it is freed when collected).
    """
    state = str(getattr(buf, "map_state", "unmapped"))
    if state == "mapped":
        try:
            buf.unmap()
            return True
        except Exception:
            return False
    return state == "unmapped"
