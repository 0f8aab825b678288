"""KvPool: a model's KV cache as one pool of fixed-size pages, with a page table per sequence.

Per layer one K and one V store (buffers, or textures on CPU adapters: model/kv_pages.py) of
`pages_total` pages, each holding `page_tokens` positions of every KV head. A sequence (a WorkingSet) owns a row of the `tables` buffer:
[length, capacity, -, -, page id of positions 0..P-1, of P..2P-1, ...]; kernels map a
position p to the pool row tables[row + 4 + p / P] * P + p % P. Rows start on 256-byte
boundaries, so a single-sequence kernel binds its row as `state` (a buffer slice) and a
kernel over several sequences binds the whole table and gets each row's offset in a uniform.

Pages are reference-counted: a fork, a beam reorder and the prefix cache share the full
pages of a prefix; only a page a sequence writes into must be its own (WorkingSet keeps
that true). Page 0 is never handed out: table entries not yet allocated point to it, so a
write past a sequence's pages (a clamped position) lands there and is never read.
"""

from __future__ import annotations

import gc
import os

import numpy as np

from ..errors import ValidationError
from .kv_pages import MAX_TEXTURE, StoragePages, TexturePages, texture_rows

PAGE_TOKENS = 16  # positions per page (see README, paged KV: 16 vs 32 measured)
ROW_ALIGN = 256  # bytes: minStorageBufferOffsetAlignment, the most an adapter may ask
MAX_TABLE_BYTES = 8 << 20
DEFAULT_CONTEXTS = 2  # the default pool holds this many sequences of the model's whole context ...
DEFAULT_MAX_MB = 1024  # ... up to this many MiB (or an eighth of RAM on CPU adapters)


KV_DTYPES = {"f32": 4, "f16": 2}  # how K and V are stored: bytes a value
# f16 by default, as llama.cpp's cache: half the bytes a position, and the long-context decode attention reads
# eight values a load (context 2000 on lavapipe: 13.6 ms vs 20.3 f32); the numpy oracle rounds its cache the same
# way (ReferenceModel.new_cache("f16")). f32 keeps K and V exact.
DEFAULT_KV_DTYPE = "f16"


def check_kv_dtype(kv_dtype) -> str:
    """kv_dtype as one of KV_DTYPES (ValidationError otherwise)."""
    if not isinstance(kv_dtype, str) or kv_dtype not in KV_DTYPES:
        raise ValidationError(f"kv_dtype={kv_dtype!r}: K and V are stored as 'f32' or 'f16'. Fix: kv_dtype='f16' "
                              "(the default) halves the pool's bytes a position (values rounded to half precision), "
                              "'f32' keeps them exact")
    return kv_dtype


def kv_bytes_per_position(config, kv_dtype: str) -> int:
    """Bytes of K and V of one position over every layer."""
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * KV_DTYPES[kv_dtype]


def check_page_tokens(page_tokens) -> int:
    """page_tokens as an int power of two in 1..256 (ValidationError otherwise)."""
    if isinstance(page_tokens, bool) or not isinstance(page_tokens, int) or not 1 <= page_tokens <= 256 \
            or page_tokens & (page_tokens - 1):
        raise ValidationError(f"page_tokens={page_tokens!r}: a KV page holds a power of two of positions in "
                              "1..256. Fix: page_tokens=16 (the default)")
    return page_tokens


def _ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


DEFAULT_MIN_CONTEXT = 4096  # a default context below the model's is at least this (llama-server's and Ollama's)


def kv_budget_mb(is_cpu: bool) -> int:
    """The MiB a default pool may take: DEFAULT_MAX_MB, and on CPU adapters (memory = the host's) an eighth of RAM."""
    cap = DEFAULT_MAX_MB
    ram = _ram_bytes() if is_cpu else None
    if ram:
        cap = min(cap, ram // 8 >> 20)
    return cap


def binding_positions(config, kv_dtype: str, binding_limit: int) -> int:
    """The most positions one layer's K (or V) store holds within one storage binding of `binding_limit` bytes."""
    return binding_limit // (config.num_key_value_heads * config.head_dim * KV_DTYPES[kv_dtype])


def check_context(context, model_context: int) -> int:
    """A requested context as an int in 1..model_context (0: the model's own); ValidationError otherwise."""
    if isinstance(context, bool) or not isinstance(context, int):
        raise ValidationError(f"context={context!r}: the context is a whole number of positions. Fix: context=8192, "
                              f"0 for the model's own ({model_context}), or leave it out for the default")
    if context == 0:
        return model_context
    if not 1 <= context <= model_context:
        raise ValidationError(f"context={context}: the model was trained for {model_context} positions, and a "
                              f"context is 1..{model_context}. Fix: context <= {model_context} (0 = the model's "
                              "own), or leave it out for the default")
    return context


def resolve_context(config, context, is_cpu: bool, kv_dtype: str, binding_limit: int) -> int:
    """The context a model loads with: `context` checked (check_context), or by default the model's own where its KV
    fits the default budget (kv_budget_mb) and one binding a layer, else the largest power of two that does (at least
    DEFAULT_MIN_CONTEXT, never more than the model's), as llama-server -c and Ollama's num_ctx choose."""
    model_context = config.max_position_embeddings
    kv_dtype = check_kv_dtype(kv_dtype)
    most = binding_positions(config, kv_dtype, binding_limit) - 2 * PAGE_TOKENS  # page 0 and a partly used page
    if context is not None:
        n = check_context(context, model_context)
        if n > most:
            raise ValidationError(f"context={n}: one layer's K positions of {kv_dtype} K and V would exceed this "
                                  f"adapter's {binding_limit}-byte storage binding limit, which holds {most}. Fix: "
                                  f"context <= {most}")
        return n
    budget = kv_budget_mb(is_cpu) << 20
    fit = kv_bytes_per_position(config, kv_dtype)
    if model_context * fit <= budget and model_context <= most:
        return model_context
    n = DEFAULT_MIN_CONTEXT
    while 2 * n * fit <= budget and 2 * n <= most:
        n *= 2
    return max(1, min(n, model_context, most))


def default_kv_mb(config, is_cpu: bool, kv_dtype: str, context: int | None = None) -> int:
    """The pool size when none is given: DEFAULT_CONTEXTS sequences of `context` positions (None: the model's), at
    most kv_budget_mb, never below one sequence of the context."""
    context = config.max_position_embeddings if context is None else context
    one = -(-kv_bytes_per_position(config, kv_dtype) * (context + 2 * PAGE_TOKENS) // (1 << 20))
    return max(one, min(DEFAULT_CONTEXTS * one, kv_budget_mb(is_cpu)))


def pool_pages(config, kv_mb, page_tokens: int, is_cpu: bool, kv_dtype: str, context: int | None = None,
               binding_limit: int | None = None) -> tuple:
    """(page_tokens, pages) of a pool of kv_mb MiB (None: default_kv_mb, within one binding a layer of
    `binding_limit` bytes); ValidationError for a bad size, page or dtype, or a pool that cannot hold one sequence
    of `context` positions (None: the model's)."""
    P = check_page_tokens(page_tokens)
    kv_dtype = check_kv_dtype(kv_dtype)
    context = config.max_position_embeddings if context is None else context
    default = kv_mb is None
    if default:
        kv_mb = default_kv_mb(config, is_cpu, kv_dtype, context)
    if isinstance(kv_mb, bool) or not isinstance(kv_mb, (int, float)) or not kv_mb > 0:
        raise ValidationError(f"kv_mb={kv_mb!r}: the KV pool size must be a number of MiB > 0. Fix: kv_mb=512, "
                              "or leave it out for the default")
    per_page = kv_bytes_per_position(config, kv_dtype) * P
    pages = int(kv_mb * (1 << 20)) // per_page
    if default and binding_limit:
        pages = min(pages, binding_positions(config, kv_dtype, binding_limit) // P)
    need = -(-context // P) + 1  # one whole context, and page 0
    if pages < need:
        raise ValidationError(f"kv_mb={kv_mb}: a pool of {pages} pages of {P} positions cannot hold one sequence "
                              f"of the context ({context} positions = {need - 1} pages, plus one). "
                              f"Fix: kv_mb >= {-(-need * per_page // (1 << 20))}, a shorter context (context=N, "
                              "--ctx-size N), or leave kv_mb out for the default")
    return P, pages


class KvPool:
    """The KV pages of one model: per-layer K/V buffers, the page tables, free lists and reference counts."""

    def __init__(self, model, kv_mb: float | None = None, page_tokens: int = PAGE_TOKENS, textures: bool = False,
                 kv_dtype: str = DEFAULT_KV_DTYPE, context: int | None = None):
        import wgpu
        c = model.config
        self.device = model.device
        self.context = c.max_position_embeddings if context is None else context  # the longest sequence
        limit = model.dev.limits.get("max-storage-buffer-binding-size", 128 << 20)
        self.page, self.pages_total = P, _ = pool_pages(c, kv_mb, page_tokens, model.dev.is_cpu, kv_dtype,
                                                        self.context, limit)
        self.dtype = kv_dtype
        half = kv_dtype == "f16"
        kr = c.num_key_value_heads * c.head_dim
        self.layer_page_bytes = P * kr * KV_DTYPES[kv_dtype]  # one layer's K (or V) of one page
        self.bytes_per_page = kv_bytes_per_position(c, kv_dtype) * P
        self.max_pages = -(-self.context // P)  # a table row's page entries
        rows = self.pages_total * P
        tex_limit = model.dev.limits.get("max-texture-dimension-2d", MAX_TEXTURE)
        # halves stay in storage buffers: the decode attention reads eight a 16-byte load there (k_oct), and
        # lavapipe's texel fetches of them were slower (context 2000: 13.6 vs 17.9 ms, kv_pages.py)
        per_row = texture_rows(kr, P, tex_limit) if textures and not half else 0
        if per_row and -(-rows // per_row) <= tex_limit:
            self.store = TexturePages(self.device, c.num_hidden_layers, rows, kr, P, per_row)
        else:
            if self.pages_total * self.layer_page_bytes > limit:
                most = limit // self.layer_page_bytes * self.bytes_per_page >> 20
                raise ValidationError(f"kv_mb={kv_mb}: one layer's K pages would exceed this adapter's "
                                      f"{limit}-byte binding limit. Fix: kv_mb <= {most}")
            self.store = StoragePages(self.device, c.num_hidden_layers, rows, kr, P, half, model.dev.wide_loads)
        self.keys, self.values = self.store.keys, self.store.values  # per layer: what kernels bind
        self.textures = isinstance(self.store, TexturePages)
        use = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self.row_words = -(-(4 + self.max_pages) * 4 // ROW_ALIGN) * ROW_ALIGN // 4
        self.slots = max(64, min(4096, MAX_TABLE_BYTES // (self.row_words * 4)))
        self.tables = self.device.create_buffer(size=self.slots * self.row_words * 4, usage=use, label="kv-pool.tables")
        self.refs = np.zeros(self.pages_total, np.int32)
        self.refs[0] = 1  # page 0: the target of unallocated entries, never handed out
        self._free = list(range(self.pages_total - 1, 0, -1))  # a stack: low page ids first
        self._free_slots = list(range(self.slots - 1, -1, -1))
        self.evict = None  # callable(pages needed) -> pages freed: the prefix cache's LRU, set by its owner
        self.copied_positions = 0  # positions copied on the device by forks, reorders and prefix reuse
        self.page_copies = 0  # (partly filled) pages copied
        self.peak_used = 0

    # ---- accounting ---------------------------------------------------------------------------
    @property
    def pages_used(self) -> int:
        """Pages held by sequences or the prefix cache (page 0 not counted)."""
        return self.pages_total - 1 - len(self._free)

    def stats(self) -> dict:
        """What model.kv_stats() returns."""
        return {"pages_total": self.pages_total - 1, "pages_used": self.pages_used, "pages_free": len(self._free),
                "page_tokens": self.page, "bytes_per_page": self.bytes_per_page, "kv_dtype": self.dtype,
                "bytes_used": self.pages_used * self.bytes_per_page,
                "bytes_total": (self.pages_total - 1) * self.bytes_per_page, "peak_pages_used": self.peak_used,
                "shared_pages": int((self.refs[1:] > 1).sum()), "copied_positions": self.copied_positions,
                "page_copies": self.page_copies}

    # ---- slots and pages ------------------------------------------------------------------------
    def open_slot(self, capacity: int) -> int:
        """A table row for a new sequence of up to `capacity` positions (length 0, no pages)."""
        if not self._free_slots:
            gc.collect()  # working sets in reference cycles (with their sessions) give theirs back
        if not self._free_slots:
            raise ValidationError(f"{self.slots} working sets are alive, the most this model's KV pool has page "
                                  "tables for. Fix: drop working sets you no longer use (del ws)")
        slot = self._free_slots.pop()
        row = np.zeros(self.row_words, np.uint32)
        row[1] = capacity
        self.device.queue.write_buffer(self.tables, slot * self.row_words * 4, row.tobytes())
        return slot

    def close_slot(self, slot: int, pages: list) -> None:
        """Give back a retired sequence's row and its references to `pages`."""
        self.unref(pages)
        pages.clear()
        self._free_slots.append(slot)

    def alloc(self, n: int, who: str) -> list:
        """n fresh pages (reference count 1); evicts cached prefixes when short, else ValidationError naming `who`."""
        if n > len(self._free):
            gc.collect()
        if n > len(self._free) and self.evict is not None:
            self.evict(n - len(self._free))
        if n > len(self._free):
            raise ValidationError(
                f"the KV pool is full: {who} needs {n} more page(s) of {self.page} positions, {len(self._free)} "
                f"of {self.pages_total - 1} are free. Fix: a bigger pool (load_model(kv_mb=...), piegpu serve "
                "--kv-mb), fewer or shorter sequences at once, or drop working sets you no longer use")
        got = [self._free.pop() for _ in range(n)]
        self.refs[got] = 1
        self.peak_used = max(self.peak_used, self.pages_used)
        return got

    def ref(self, pages: list) -> None:
        """One more holder of each page."""
        if pages:
            np.add.at(self.refs, pages, 1)

    def unref(self, pages: list) -> None:
        """One holder fewer of each page; pages nobody holds go back to the free list."""
        for p in pages:
            self.refs[p] -= 1
            if self.refs[p] == 0:
                self._free.append(p)

    def write_entries(self, slot: int, first: int, pages: list) -> None:
        """Table entries first, first + 1, ... of `slot` := pages."""
        if pages:
            self.device.queue.write_buffer(self.tables, (slot * self.row_words + 4 + first) * 4,
                                           np.asarray(pages, np.uint32).tobytes())

    def write_header(self, slot: int, length: int) -> None:
        """The device's length word of `slot`."""
        self.device.queue.write_buffer(self.tables, slot * self.row_words * 4, np.array([length], np.uint32).tobytes())

    def copy_positions(self, enc, src: int, dst: int, n: int) -> None:
        """Record copies of positions 0..n-1 of page `src` into page `dst`, every layer's K and V."""
        if n <= 0:
            return
        self.store.copy(enc, src, dst, n)
        self.copied_positions += n
        self.page_copies += 1
