"""Waiting for submitted passes and reading mapped buffers through wgpu-native directly.

wgpu-py resolves every map request through its poll thread, a Python callback, a promise
and the event loop's self-pipe: about 0.25 ms of host CPU per read, the largest share of
a B=1 token's host cost after encoding the pass. Here a pass is submitted for its
submission index (wgpuQueueSubmitForIndex), and a read waits for exactly that submission:

- in a coroutine on piegpu's own loop (runtime.session.PrivateLoop: the blocking entry
  points, where nothing else runs on the loop) with no other task ready, by blocking this
  thread in wgpuDevicePoll(wait, index) -- the thread sleeps on the device's fence;
- anywhere else (the server's loop, a user's), in one waiter thread per device that does
  that blocking poll and wakes the awaiting task through call_soon_threadsafe.

A buffer is then mapped, read and unmapped without waiting (its pass is done). Measured on
this machine (a 16-byte copy per submit, host CPU of the Python threads): 0.26 ms per
submit + read through wgpu-py's promise, 0.11-0.14 with the waiter thread, 0.06 blocking.
Where wgpu-native's functions are missing (another backend) everything goes through wgpu-py.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import queue
import threading
import time
import weakref

import numpy as np

_BLOCKING = contextvars.ContextVar("piegpu_blocking_waits", default=False)


def _native():
    """(lib, ffi) of wgpu-native with the functions used here, or None."""
    try:
        from wgpu.backends.wgpu_native import _api
        lib = _api.lib
        for name in ("wgpuQueueSubmitForIndex", "wgpuDevicePoll", "wgpuBufferMapAsync",
                     "wgpuBufferGetConstMappedRange", "wgpuBufferUnmap"):
            getattr(lib, name)
        return lib, _api.ffi
    except (ImportError, AttributeError):
        return None


_NATIVE = _native()
_STATUS: dict = {}  # map request key -> status once its callback ran (None while pending)
_MAPPED = threading.Condition()  # notified as each map callback runs
_KEYS = itertools.count(1)
MAP_WAIT_S = 60.0  # a finished buffer's map callback that no poll runs in this long: an error, not a hang

if _NATIVE is not None:
    @_NATIVE[1].callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)")
    def _mapped(status, _message, key, _userdata2):  # any thread that polls the device may run it
        with _MAPPED:
            _STATUS[int(_NATIVE[1].cast("uintptr_t", key))] = int(status)
            _MAPPED.notify_all()


def blocking_context() -> contextvars.Context:
    """A copy of the current context in which reads may block the thread (runtime.session.PrivateLoop's tasks)."""
    ctx = contextvars.copy_context()
    ctx.run(_BLOCKING.set, True)
    return ctx


def submit(device, command_buffers: list) -> int | None:
    """Submit the command buffers to the device's queue; their submission index (None through wgpu-py)."""
    if _NATIVE is None or not all(hasattr(cb, "_internal") for cb in command_buffers):
        device.queue.submit(command_buffers)
        return None
    lib, ffi = _NATIVE
    arr = ffi.new("WGPUCommandBuffer[]", [cb._internal for cb in command_buffers])
    return int(lib.wgpuQueueSubmitForIndex(device.queue._internal, len(command_buffers), arr))


_FINISHED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # device -> highest submission known finished


def _poll(device, index: int | None) -> None:
    lib, ffi = _NATIVE
    if index is None:
        lib.wgpuDevicePoll(device._internal, False, ffi.NULL)
        return
    idx = ffi.new("WGPUSubmissionIndex *", index)
    lib.wgpuDevicePoll(device._internal, True, idx)
    if index > _FINISHED.get(device, -1):  # (submissions finish in order)
        _FINISHED[device] = index


def drain(device) -> None:
    """Submit the queue's pending writes and wait until the device has done them, so that their staging memory is
    freed (a model's upload, matrix by matrix, holds one matrix's staging at a time, not the whole model's)."""
    index = submit(device, [])
    if index is not None:
        _poll(device, index)


def finished(device, index: int) -> bool:
    """Whether submission `index` is known to have finished (a wait for it or a later one returned):
    the passes of a group share one submission, and only the first of their reads needs to wait."""
    return index <= _FINISHED.get(device, -1)


class _Waiter(threading.Thread):
    """One device's waiter: blocks in wgpuDevicePoll for each requested submission, in order, then wakes its task."""

    def __init__(self, device):
        super().__init__(name="piegpu-waiter", daemon=True)
        self.device = weakref.ref(device)
        self.requests: queue.SimpleQueue = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            index, loop, fut = self.requests.get()
            device = self.device()
            err = None
            try:
                if device is not None:
                    _poll(device, index)
            except Exception as e:  # noqa: BLE001 -- handed to the waiting task
                err = e
            device = None
            try:
                loop.call_soon_threadsafe(_settle, fut, err)
            except RuntimeError:  # its loop closed meanwhile: nobody waits any more
                pass


def _settle(fut, err) -> None:
    if not fut.done():
        if err is None:
            fut.set_result(None)
        else:
            fut.set_exception(err)


_WAITERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_WAITERS_LOCK = threading.Lock()


YIELDS = 8  # times a task of piegpu's own loop lets the loop's ready tasks run before it blocks


async def _may_block() -> bool:
    """True in a task of piegpu's own loop once no other task is ready to run (blocking then delays none).

    It yields to the loop at least once: a generator's consumer task delivers the previous
    token meanwhile, and a loop asked to stop (iterate_sync, once an item is ready) stops here;
    a loop that stays busy after YIELDS turns is waited for through the waiter thread.
    """
    if not _BLOCKING.get():
        return False
    loop = asyncio.get_running_loop()
    for _ in range(YIELDS):
        await asyncio.sleep(0)
        # asyncio's own loop (CPython's BaseEventLoop): nothing ready, no stop pending (a loop asked to stop
        # delivers what is ready first); other loops (uvloop) lack these and take the waiter thread
        if not getattr(loop, "_ready", True) and not getattr(loop, "_stopping", True):
            return True
    return False


async def wait_submission(device, index: int) -> None:
    """Until submission `index` of `device` has finished (blocking where nothing else could run meanwhile)."""
    if finished(device, index):
        return
    if await _may_block():
        _poll(device, index)
        return
    with _WAITERS_LOCK:
        w = _WAITERS.get(device)
        if w is None:
            w = _WAITERS[device] = _Waiter(device)
            w.start()
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    w.requests.put((index, loop, fut))
    await fut


def wait_submission_sync(device, index: int) -> None:
    """wait_submission without an event loop."""
    if not finished(device, index):
        _poll(device, index)


def native() -> bool:
    """Whether submission indices and native reads are available (wgpu-native)."""
    return _NATIVE is not None


def read_done(device, buf, nbytes: int) -> np.ndarray:
    """The first `nbytes` of a mappable buffer whose last submission has finished, as u32 words (mapped, read, unmapped).

    Raises RuntimeError when the map fails (the device was lost).
    """
    lib, ffi = _NATIVE
    key = next(_KEYS)
    _STATUS[key] = None
    info = ffi.new("WGPUBufferMapCallbackInfo *")
    info.mode = lib.WGPUCallbackMode_AllowProcessEvents
    info.callback = _mapped
    info.userdata1 = ffi.cast("void *", key)
    lib.wgpuBufferMapAsync(buf._internal, lib.WGPUMapMode_Read, 0, nbytes, info[0])
    _poll(device, None)  # runs the callback: the buffer's work is done
    status = _STATUS.get(key)
    deadline = time.monotonic() + MAP_WAIT_S
    # Still None: another thread's poll took the callback from wgpu-core and has not run it yet (it runs it once
    # it has the GIL), or the map is pending. Poll again and wait for whichever thread runs it.
    while status is None and time.monotonic() < deadline:
        lib.wgpuDevicePoll(device._internal, True, ffi.NULL)
        with _MAPPED:
            _MAPPED.wait_for(lambda: _STATUS.get(key) is not None, timeout=0.01)
        status = _STATUS.get(key)
    _STATUS.pop(key, None)
    if status != lib.WGPUMapAsyncStatus_Success:
        raise RuntimeError(f"could not map a readback buffer (map status {status}); the device may be lost")
    ptr = lib.wgpuBufferGetConstMappedRange(buf._internal, 0, nbytes)
    words = np.frombuffer(ffi.buffer(ptr, nbytes), np.uint32).copy()
    lib.wgpuBufferUnmap(buf._internal)
    return words
