"""WorkingSet: the KV state of one sequence on the device, a view over pages of the model's KV pool."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from ..errors import ValidationError


@dataclass(eq=False)
class WorkingSet:
    """The KV state of one sequence: a row of the pool's page tables, the pages it holds, its length.

    The row is [length, max_tokens, -, -, page ids...] on the device (model/kv_pool.py);
    kernels read the length and the pages from it, so no size is compiled into them.
    `length` is the host's view, advanced as passes are submitted; `last_pass` is the id
    of the last submitted pass that extended it (a later rewind must not undo what that
    pass built on). Pages are allocated as the sequence grows (reserve) and given back
    when it shrinks or is dropped; `max_tokens` caps the sequence and reserves nothing.
    Pages may be shared (forks, beam reorders, the prefix cache): before a pass writes,
    reserve() gives the working set its own copy of a shared page holding position
    `length` (copy on write: only the positions below `length` are copied, and the last
    holder writes in place), so writing never changes a page another holds.
    """

    model: object  # the GpuModel whose pool this is a view of
    max_tokens: int
    slot: int
    length: int = 0
    last_pass: int = 0
    pages: list = field(default_factory=list)
    binds: dict = field(default_factory=dict)  # bind groups of passes over this working set (die with it)
    plans: dict = field(default_factory=dict)  # dispatch plans of passes over this working set
    session: object = None  # the runtime Session decoding on it (made by Model.session)
    adapter: tuple = (None, 1.0)  # (LoRA adapter key or None, adapter_scale): set_adapter

    def __post_init__(self):
        pool = self.model.kv
        self.pool = pool
        row = pool.row_words * 4
        self.state = (pool.tables, self.slot * row, row)  # the binding of single-sequence kernels
        self._finalizer = weakref.finalize(self, pool.close_slot, self.slot, self.pages)

    def release(self) -> None:
        """Give the pages and the table row back to the pool now (the working set is unusable after)."""
        self._finalizer()
        self.length = 0
        self._drop_pin()

    # ---- LoRA --------------------------------------------------------------------------------
    def set_adapter(self, key=None, weights=None, scale: float = 1.0) -> None:
        """Run this sequence's passes under LoRA adapter `weights` (a LoraWeights; key: its name in the model's
        registry) times `scale`, or under none (key None): its slot and scale go to words 2 and 3 of the
        page-table row, read by the LoRA steps. KV already held was computed under the former adapter: callers
        reset a sequence whose adapter changes (textgen does)."""
        import numpy as np
        pin = None
        if key is not None:
            from .lora_bank import bank_of
            pin = bank_of(self.model).acquire(key, weights)
        self._drop_pin()
        self._pin, self._lora = pin, weights
        self.adapter = (key, float(scale)) if key is not None else (None, 1.0)
        words = np.array([0 if pin is None else pin.slot + 1, 0], np.uint32)
        words[1:] = np.array([scale], np.float32).view(np.uint32)
        self.pool.device.queue.write_buffer(self.pool.tables, (self.slot * self.pool.row_words + 2) * 4,
                                            words.tobytes())

    def runs_under(self, use) -> bool:
        """Whether this sequence runs under `use` ((key, LoraWeights, scale), or None for the base model)."""
        return self.adapter == ((use[0], float(use[2])) if use is not None else (None, 1.0))

    def run_under(self, use) -> None:
        """Run under `use` ((key, LoraWeights, scale) or None); refused where positions computed under another
        adapter are held (a request under `use` cannot continue them)."""
        if self.runs_under(use):
            return
        if self.length:
            raise ValidationError(f"this working set holds {self.length} positions computed under adapter "
                                  f"{self.adapter[0]!r}; a request under {None if use is None else use[0]!r} cannot "
                                  "continue them. Fix: reuse_prefix=True (recomputes what differs) or a fresh "
                                  "working set")
        self.set_adapter(*(use if use is not None else (None, None, 1.0)))

    def same_adapter(self, src: "WorkingSet") -> None:
        """Run under `src`'s adapter and scale (a fork, a shared prefix)."""
        if self.adapter != src.adapter:
            self.set_adapter(src.adapter[0], getattr(src, "_lora", None), src.adapter[1])

    def _drop_pin(self) -> None:
        pin = getattr(self, "_pin", None)
        if pin is not None:
            pin.release()
        self._pin = None

    # ---- pages --------------------------------------------------------------------------------
    def reserve(self, n: int) -> None:
        """Make positions length..n-1 writable: pages allocated for them (written into the table before the
        next submit), and the page holding position `length` this working set's own (copied if shared)."""
        if not self._finalizer.alive:
            raise ValidationError("this working set was released (its pages went back to the pool). "
                                  "Fix: model.working_set() for a new sequence")
        pool, P = self.pool, self.pool.page
        i = self.length // P
        if i < len(self.pages) and pool.refs[self.pages[i]] > 1:  # copy on write
            own = pool.alloc(1, f"a copy of a shared page of a sequence of {self.length} positions")[0]
            if self.length % P:
                enc = self.model.device.create_command_encoder()
                pool.copy_positions(enc, self.pages[i], own, self.length % P)
                self.model.device.queue.submit([enc.finish()])
            pool.unref([self.pages[i]])
            self.pages[i] = own
            pool.write_entries(self.slot, i, [own])
        have = len(self.pages)
        need = -(-min(n, self.max_tokens) // P)
        if need > have:
            got = pool.alloc(need - have, f"a sequence of {n} positions (holding {self.length})")
            self.pages.extend(got)
            pool.write_entries(self.slot, have, got)

    def share_pages(self, pages: list, n: int | None = None) -> None:
        """Hold `pages` (shared: the prefix cache's or another sequence's) as its first n positions (default: all
        of them full; a partly used last page is copied when this working set first writes into it); what this
        working set held before is given back."""
        pool = self.pool
        n = len(pages) * pool.page if n is None else n
        if n > self.max_tokens or n > len(pages) * pool.page:
            raise ValidationError(f"sharing {n} positions ({len(pages)} pages) into a working set of "
                                  f"{self.max_tokens}. Fix: a working set at least as large")
        pool.ref(pages)
        pool.unref(self.pages)
        self.pages[:] = list(pages)
        pool.write_entries(self.slot, 0, self.pages)
        pool.write_header(self.slot, n)
        self.length = n

    def share_from(self, src: "WorkingSet", n: int) -> None:
        """Hold src's first n positions by sharing the pages that hold them (a partly filled last one too:
        whichever of the two writes into it first copies it). What this working set held is given back."""
        if n > src.length or n > self.max_tokens:
            raise ValidationError(f"sharing {n} positions of a working set of {src.length} into one of "
                                  f"{self.max_tokens}. Fix: at most min(source length, max_tokens) positions")
        self.share_pages(src.pages[: -(-n // self.pool.page)], n)

    # ---- the sequence -------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget every position (its pages go back to the pool)."""
        self.set_length(0)

    def note_length(self, n: int) -> None:
        """Tell the host the device's length (after an accepting pass); nothing is written."""
        if not 0 <= n <= self.max_tokens:
            raise ValidationError(f"note_length({n}): outside 0..{self.max_tokens}")
        self.length = n

    def fork(self) -> "WorkingSet":
        """A new working set continuing exactly like this one: its pages shared (the first of the two to write
        into a partly filled last page copies it), and -- where a session decodes on this one -- the tokens
        and the drawn token not yet embedded (a session of its own)."""
        if self.session is not None:
            return self.session.fork().ws
        return self.model.fork(self)

    def set_length(self, n: int) -> None:
        """Truncate the sequence to its first n positions (device and host views); pages past them go back."""
        if not 0 <= n <= self.length:
            raise ValidationError(f"set_length({n}): the working set holds {self.length} positions")
        keep = -(-n // self.pool.page)
        if keep < len(self.pages):
            self.pool.unref(self.pages[keep:])
            del self.pages[keep:]
        self.pool.write_header(self.slot, n)
        self.length = n
