"""Typed channels: bounded FIFO rings of cells in a GPU storage buffer.

The buffer layout is piegpu/kernel/channel_layout.py's. The ring is `capacity + HISTORY` cells: the extra cells keep
the values of passes still in flight, so when decoding stops early the pipeline can rewind every channel to the
state the host accepted by rewriting two header words (a constant channel, read-only for passes, has no history).
The host keeps an exact mirror of head/tail as they will be once every submitted pass has run (passes put and take
fixed cell counts), so it checks capacity without reading anything back, and knows for every cell who produced it:
a host put (value known) or a pass (value copied to a mappable staging buffer when the host may take it). The
pipeline changes that mirror only through the methods of the "pipeline interface" section (commit, why_blocked,
snapshot/rewind); nothing outside this module touches a channel's underscored fields.
"""

from __future__ import annotations

from math import prod

import numpy as np

from ..kernel import channel_layout as layout
from ..dtypes import DType, dtype as _dtypes
from ..errors import ChannelError, ChannelFull, ValidationError
from ..eta import tracer
from ..eta.ops import TType, check_shape
from .channel_trace import trace_put, trace_take
from .cells import Cell, coerce, from_words, reusable, staged_words, to_words, wait_newest
from . import waits
from .device import lost_device_error
from .window import HISTORY



class Channel:
    """A typed bounded FIFO of cells (one shape and dtype) resident in a GPU buffer."""

    def __init__(self, shape, dtype: DType, constant: bool = False):
        """`constant`: read-only data for passes (tables an epilogue looks up): no rewind history; passes only read()
        it; the host replaces it with clear() + put() (a queue write: passes in flight still read the old cell)."""
        if not hasattr(dtype, "code") or dtype == _dtypes.f16:
            raise ValidationError(f"Channel: dtype {dtype!r} is not supported for channels. Fix: use dtype.f32, "
                                  "dtype.i32, dtype.u32 or dtype.bool (cast f16 values to f32)")
        shape = tuple(shape) if not isinstance(shape, int) else (shape,)
        self.shape = check_shape("Channel", shape) if shape else ()
        self.dtype = dtype
        self.name = ""
        self._capacity = 1
        self._buffer = None
        self._device = None
        self._head = 0
        self._tail = 0
        self._cells: dict = {}
        self._poison: BaseException | None = None
        self._device_consumer = False
        self._staging_pool: list = []
        self._used = False
        self._last_pass = 0  # id of the last pass that used the channel (see Pipeline._settle_one)
        self.is_constant = bool(constant)  # passes may only read it

    # ---- configuration --------------------------------------------------------------------
    @classmethod
    def from_(cls, values, dtype: DType) -> "Channel":
        """A channel seeded with one full cell holding `values` (its shape is the cell shape)."""
        arr = np.asarray(values)
        ch = cls(arr.shape, dtype)
        ch.put(arr)
        return ch

    def capacity(self, n: int) -> "Channel":
        """Set how many cells the channel holds (before first use); returns the channel."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValidationError(f"Channel{self._label()}.capacity({n!r}): capacity must be an int >= 1. "
                                  "Fix: pass the number of cells, e.g. .capacity(channel_capacity())")
        if self._buffer is not None or self._used:
            raise ChannelError(f"Channel{self._label()}.capacity({n}): the channel is already in use. "
                               "Fix: set the capacity right after creating it")
        if n < self._tail - self._head:
            raise ChannelError(f"Channel{self._label()}.capacity({n}): it already holds {self._tail - self._head} cells. "
                               "Fix: take cells first, or choose a capacity of at least that many")
        self._capacity = n
        return self

    def named(self, name: str) -> "Channel":
        """Give the channel a name used in error messages; returns the channel."""
        self.name = str(name)
        return self

    @property
    def cell(self) -> TType:
        """The type of one cell."""
        return TType(self.dtype, self.shape)

    @property
    def cell_words(self) -> int:
        """32-bit words per cell."""
        return max(1, prod(self.shape))

    @property
    def ring(self) -> int:
        """Cells in the device ring (capacity plus the rewind history)."""
        return self._capacity + (0 if self.is_constant else HISTORY)

    @property
    def count(self) -> int:
        """Cells queued once every submitted pass has run."""
        return self._tail - self._head

    def __repr__(self) -> str:
        return f"Channel{self._label()}({list(self.shape)}, {self.dtype!r}, capacity={self._capacity}, count={self.count})"

    def _label(self) -> str:
        return f" {self.name!r}" if self.name else ""

    # ---- device buffer ----------------------------------------------------------------------
    def ensure(self, device) -> object:
        """The channel's device buffer (created on first use, with queued host cells written)."""
        import wgpu
        if self._buffer is None:
            self._device = device
            words = layout.HEADER_WORDS + self.ring * self.cell_words
            self._buffer = device.create_buffer(size=words * 4, label=f"channel{self._label()}",
                                                usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
                                                | wgpu.BufferUsage.COPY_SRC)
            self._write_header()
            for idx, c in self._cells.items():
                if c.kind == "host":
                    self._write_cell(idx, c.value)
        elif self._device is not device:
            raise ChannelError(f"Channel{self._label()} lives on another device. Fix: create separate channels "
                               "for each device's pipeline")
        return self._buffer

    def _write_header(self) -> None:
        self._write(0, layout.header(self._head, self._tail, self.ring, self.cell_words).tobytes())

    def _write_cell(self, idx: int, arr: np.ndarray) -> None:
        words = to_words(arr, self.dtype)
        self._write(self.cell_offset(idx), words.tobytes())

    def _write(self, offset: int, data: bytes) -> None:
        try:
            self._device.queue.write_buffer(self._buffer, offset, data)
        except Exception as e:
            lost = lost_device_error(e, f"writing Channel{self._label()}")
            if lost is not None:
                raise lost from e
            raise

    def cell_offset(self, idx: int) -> int:
        """Byte offset of absolute cell `idx` in the device buffer."""
        return layout.cell_word(idx, self.ring, self.cell_words) * 4

    # ---- inside traced epilogues and on the host ------------------------------------------------
    def take(self):
        """Traced: the oldest cell, consumed when the pass commits. Host: awaitable numpy array."""
        b = getattr(tracer._active, "builder", None)
        if b is not None:
            return trace_take(self, b, consume=True)
        return self._host_take(consume=True)

    def read(self):
        """Traced: the oldest cell, not consumed. Host: awaitable numpy array of the oldest cell."""
        b = getattr(tracer._active, "builder", None)
        if b is not None:
            return trace_take(self, b, consume=False)
        return self._host_take(consume=False)

    async def take_many(self, n: int) -> list:
        """Host: take the n oldest cells as a list of numpy arrays, with one wait for all of them.

        It waits for the newest of their passes only: passes finish in submission order, so the
        older cells are then mapped without waiting.
        """
        if self._poison is not None:
            raise self.poisoned_error() from self._poison
        await wait_newest([self._cells.get(self._head + i) for i in range(min(n, self.count))], self._device)
        return [await self._host_take(consume=True) for _ in range(n)]

    async def take_scalar(self):
        """Host: take one cell holding a single value and return it as a Python scalar."""
        if self.cell_words != 1 or self.shape not in ((), (1,)):
            raise ChannelError(f"Channel{self._label()}.take_scalar: cells have shape {list(self.shape)}. "
                               "Fix: use await ch.take() for cells with more than one value")
        return (await self._host_take(consume=True)).reshape(-1)[0].item()

    def put(self, values):
        """Traced: append the tensor as a cell when the pass commits. Host: enqueue now (ChannelFull if no room)."""
        b = getattr(tracer._active, "builder", None)
        if b is not None:
            return trace_put(self, b, values)
        if self._poison is not None:
            raise self.poisoned_error() from self._poison
        arr = coerce(values, self.shape, self.dtype, self._label())
        if self.count >= self._capacity:
            raise ChannelFull(f"Channel{self._label()} is full ({self.count}/{self._capacity} cells). Fix: take cells "
                              "first, or create it with a larger .capacity(n)")
        idx = self._tail
        self._tail += 1
        self._cells[idx] = Cell("host", arr)
        if self._buffer is not None:
            self._write_cell(idx, arr)
            self._write_header()
        return None

    def put_row(self, row: int, values) -> None:
        """Host: overwrite row `row` (first axis) of the oldest cell as it will be once the passes submitted so far
        have run -- the cell the next pass takes or reads -- with a queue write ordered after them (a batch row
        that changes hands while passes are in flight; runtime/batch.py)."""
        if self._poison is not None:
            raise self.poisoned_error() from self._poison
        if not self.shape or not 0 <= row < self.shape[0]:
            raise ValidationError(f"Channel{self._label()}.put_row({row}): no such row in cells of shape "
                                  f"{list(self.shape)}. Fix: a row index in [0, {self.shape[0] if self.shape else 0})")
        if self.count < 1:
            raise ChannelError(f"Channel{self._label()}.put_row: no cell queued to overwrite a row of. Fix: put the "
                               "whole cell first")
        arr = coerce(values, self.shape[1:], self.dtype, self._label())
        c = self._cells.get(self._head)
        if c is not None and c.kind == "host":
            c.value = np.array(c.value)
            c.value[row] = arr
        if self._buffer is not None:
            per_row = prod(self.shape[1:])
            self._write(self.cell_offset(self._head) + row * per_row * 4, to_words(arr, self.dtype).tobytes())

    async def _host_take(self, consume: bool) -> np.ndarray:
        if self._poison is not None:
            raise self.poisoned_error() from self._poison
        if self.count == 0:
            raise ChannelError(f"Channel{self._label()} is empty and no submitted pass puts into it, so this "
                               f"{'take' if consume else 'read'} could never complete. Fix: submit a pass that "
                               "puts into it first (or put from the host)")
        idx = self._head
        cell = self._cells[idx]
        if consume and self._device_consumer:
            raise ChannelError(f"Channel{self._label()} is consumed on the device (a ForwardPass takes from it); a "
                               "host take would steal the cell that pass needs. Fix: put values for the host into a "
                               "separate channel, or clear() the channel when no pass is in flight")
        if cell.kind == "device":
            raise ChannelError(f"Channel{self._label()} is consumed on the device; the host cannot take its cells. "
                               "Fix: put values for the host into a separate channel")
        if consume:
            del self._cells[idx]
            self._head += 1
            if self._buffer is not None:
                self._write_header()
        if cell.kind == "host":
            return cell.value.copy()
        try:
            value = await self._read_staged(cell)
        except BaseException as e:
            # Cancelled or interrupted (Ctrl-C) while waiting for the pass: the value was never
            # delivered, so the cell goes back to the head of the queue instead of being lost.
            if consume and not isinstance(e, Exception) and self._head == idx + 1 and idx not in self._cells:
                self._head = idx
                self._cells[idx] = cell
                if self._buffer is not None:
                    self._write_header()
            raise
        if not consume:  # a read keeps the cell: remember its value, the staging buffer is released
            self._cells[idx] = Cell("host", value, pass_id=cell.pass_id)
        return value

    async def _read_staged(self, cell: Cell) -> np.ndarray:
        buf = cell.staging
        try:
            words = await staged_words(cell, self._device, self.cell_words * 4)
        except Exception as e:  # the pass that fills it failed or the device was lost
            self.poison(e)
            cell.staging = None  # its map state is unknown: never reuse it
            raise ChannelError(f"Channel{self._label()}: reading a cell failed: {e}. Fix: see the cause; "
                               "if the device was lost, restart the process") from e
        cell.mapping = None
        self._staging_pool.append(buf)
        if self._poison is not None:
            raise self.poisoned_error() from self._poison
        return from_words(words[: self.cell_words], self.dtype, self.shape)

    def clear(self) -> None:
        """Drop every queued cell (host side; only while no pass that uses the channel is in flight)."""
        for c in self._cells.values():
            self._recycle(c)
        self._cells.clear()
        self._head = self._tail
        self._poison = None
        if self._buffer is not None:
            self._write_header()

    # ---- pipeline interface ---------------------------------------------------------------------
    def _recycle(self, c: Cell) -> None:
        """Return a dropped cell's staging buffer to the pool (not one with a map request in flight)."""
        if c.kind == "staged" and c.staging is not None and c.mapping is None:
            self._staging_pool.append(c.staging)

    def staging_buffer(self):
        """A mappable buffer for one cell (pooled: no buffer is created per take)."""
        import wgpu
        while self._staging_pool:
            buf = self._staging_pool.pop()
            if reusable(buf):
                return buf
        return self._device.create_buffer(size=self.cell_words * 4, label=f"staging{self._label()}",
                                          usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)

    @property
    def buffer(self):
        """The device buffer (None until the channel is first used by a pass)."""
        return self._buffer

    @property
    def used(self) -> bool:
        """True once a prepared pass uses the channel (its capacity is then fixed)."""
        return self._used

    @property
    def poisoned(self) -> BaseException | None:
        """The failure that poisoned the channel, or None."""
        return self._poison

    @property
    def consumed_on_device(self) -> bool:
        """True when a pass takes this channel's cells (the host then never takes them)."""
        return self._device_consumer

    @property
    def last_pass(self) -> int:
        """The id of the last submitted pass that used the channel (0: none)."""
        return self._last_pass

    @property
    def pooled_staging(self) -> int:
        """Mappable staging buffers kept for reuse."""
        return len(self._staging_pool)

    def attach(self, device, device_takes: bool) -> None:
        """A prepared pass uses the channel on `device`; `device_takes`: that pass takes its cells."""
        if device_takes:
            self._device_consumer = True
        self._used = True
        self.ensure(device)

    def host_value(self):
        """The oldest cell's value when the host put it (a numpy array), else None."""
        cell = self._cells.get(self._head)
        return cell.value if cell is not None and cell.kind == "host" else None

    def why_blocked(self, takes: int, puts: int, own: int = 0) -> str | None:
        """Why a pass taking `takes` and putting `puts` cells cannot be submitted now (None: it can).

        `own` cells are put and taken by the same pass (they need no queued cell).
        Raises the poisoned error if a failed pass poisoned the channel.
        """
        if self._poison is not None:
            raise self.poisoned_error() from self._poison
        if self.count + own < takes:
            return f"Channel{self._label()} holds {self.count} cells but the pass takes {takes}"
        if self.count - takes + puts > self._capacity:
            return f"Channel{self._label()} would overflow its capacity {self._capacity}"
        return None

    def commit(self, pass_id: int, takes: int, puts: int, encoder) -> int:
        """Enter a submitted pass in the host mirror: its puts queue, its takes are consumed.

        Cells the host may take are copied into pooled mappable buffers by `encoder`
        (recorded into the same submit); returns the bytes staged that way.
        """
        staged = 0
        for seq in range(puts):
            idx = self._tail + seq
            if self._device_consumer:
                self._cells[idx] = Cell("device", pass_id=pass_id)
            else:
                st = self.staging_buffer()
                encoder.copy_buffer_to_buffer(self._buffer, self.cell_offset(idx), st, 0, self.cell_words * 4)
                staged += self.cell_words * 4
                self._cells[idx] = Cell("staged", staging=st, pass_id=pass_id)
        self._tail += puts
        for _ in range(takes):
            self._cells.pop(self._head, None)
            self._head += 1
        return staged

    def submitted(self, pass_id: int, index: int | None = None) -> None:
        """Note that pass `pass_id`, which uses this channel, is now on the device (as submission `index`)."""
        self._last_pass = pass_id
        if index is not None:
            for c in self._cells.values():
                if c.pass_id == pass_id and c.kind == "staged":
                    c.submission = index

    def holds_output_of(self, pass_id: int) -> bool:
        """True while a cell put by pass `pass_id` is still queued."""
        return any(c.pass_id == pass_id for c in self._cells.values())

    def poisoned_error(self) -> ChannelError:
        """The error a use of this poisoned channel raises (it carries the cause and the fix)."""
        return ChannelError(f"Channel{self._label()} is poisoned by a failed pass: {self._poison}. Fix: see the "
                            "cause; once it is dealt with, ch.clear() empties the channel and makes it usable again")

    def poison(self, cause: BaseException) -> None:
        """Mark the channel unusable: the next host take or put raises ChannelError with the cause."""
        if self._poison is None:
            self._poison = cause

    def snapshot(self) -> tuple:
        """The host mirror (head, tail, queued cells) to rewind to."""
        return self._head, self._tail, dict(self._cells)

    def ready(self) -> bool:
        """Host: whether the oldest cell can be taken without waiting on the device (a host cell, or a staged one
        whose submission is known to have finished: a wait for it or a later one, e.g. its group's, returned)."""
        c = self._cells.get(self._head)
        if c is None or c.kind != "staged":
            return c is not None
        return c.done or (c.submission is not None and self._device is not None
                          and waits.finished(self._device, c.submission))

    def unmirror(self, snap: tuple, never: set) -> None:
        """Forget passes committed to the host mirror but never submitted (ids `never`): back to `snap`."""
        for c in self._cells.values():
            if c.pass_id in never:
                self._recycle(c)
        self._head, self._tail, self._cells = snap[0], snap[1], dict(snap[2])

    def rewind(self, snap: tuple, discarded: set) -> None:
        """Undo the passes in `discarded` (pass ids, all submitted after `snap` and now finished).

        Their puts are dropped and their takes restored; host takes and host puts made
        meanwhile stay (host puts move down to close the gap).
        """
        snap_head, snap_tail, snap_cells = snap
        if self._device_consumer:  # only passes take from it: restore what they took
            head, base = snap_head, dict(snap_cells)
        else:  # only the host takes from it: its takes stand
            head, base = self._head, {i: c for i, c in self._cells.items() if i < snap_tail}
        later = []
        for i, c in sorted(self._cells.items()):
            if c.pass_id in discarded:
                self._recycle(c)
            elif i >= snap_tail:
                later.append(c)
        idx = max(snap_tail, head)
        for c in later:
            base[idx] = c
            if c.kind == "host" and self._buffer is not None:
                self._write_cell(idx, c.value)
            idx += 1
        self._head, self._tail, self._cells = head, idx, base
        if self._buffer is not None:
            self._write_header()
