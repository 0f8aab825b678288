"""Where the KV pool's pages live on the device: storage buffers, or rgba32float textures (f32 K and V, CPU adapters).

load_model() stores K and V rounded to half precision (kv_dtype "f16", the default), half the bytes: words of
two f16 (pack2x16float, round to nearest even) in storage buffers, a vec4 in two words, so that the decode attention
reads eight values a 16-byte load (blocks/kv_read_storage_f16.wgsl k_oct) -- on lavapipe through 64-bit words,
sixteen a load (Device.wide_loads, blocks/kv_read_storage_f16_u64.wgsl: alternated, the context-2000 decode
attention 0.87x the time, context 1000 0.94x, a 128-token prefill's attention 0.86x, bit-equal logits).
Halves stay in buffers on CPU adapters too: the default model's decode attention at context 2000 took 13.6 ms
with them vs 17.9 with rgba32uint textures of eight halves a texel (lavapipe, medians of 6 alternated,
2026-12-05). Not rgba16float textures: lavapipe's stores into them round toward zero (half the values off by one
ulp), which doubled the logits' error against a half-precision reference cache.

Both hold, per layer, K and V as pool rows of KR floats (row = page * page_tokens + position in the
page). Kernels reach them through the WGSL of shaders/blocks/kv_{read,write}_{storage,texture}.wgsl
(k_at / v_at read vec4 i, k_put / v_put write vec4 j), so one attention source and one writer source
serve both; the binding resources, the snippets, their parameters and the page copies are what differ.

f32 textures on CPU adapters, because on lavapipe a texel fetch once read 2000 positions' K rows in 16 vs
28 ms (microbenchmark) and the decode attention at context 2000 took 25-29 vs 33 ms (benchmarks/kernels.py).
Measured again on 2026-12-05 the two are even (context 2000: 21.9 ms textures vs 20.3 buffers; a B=8 pass at
context 100: 10.9 vs 10.8). A texel is written whole, so the writers (rope_kv_seqs.wgsl, the QKV matvec's
epilogues/rope_kv.wgsl) write four rotated values at a time. A texture row holds KV_ROWS pool rows (a power
of two that page_tokens divides), so a page is one run of texels in one texture row.
"""

from __future__ import annotations

MAX_TEXTURE = 8192  # max-texture-dimension-2d every WebGPU adapter offers


def snippets(kind: str, half: bool, wide: bool = False) -> tuple:
    """The (read, write) snippet names of KV pages of `kind` ("storage" or "texture"), f32 or half (`half`);
    `wide`: halves read through 64-bit words (blocks/kv_read_storage_f16_u64.wgsl)."""
    tail = "_f16" if half else ""
    return f"blocks/kv_read_{kind}{tail}{'_u64' * (half and wide)}", f"blocks/kv_write_{kind}{tail}"


def texture_rows(kr: int, page: int, limit: int = MAX_TEXTURE) -> int:
    """Pool rows per texture row (KR / 4 texels each): the largest power of two that fits, 0 if the page would not
    fit one texture row."""
    per = 1
    while per * 2 * (kr // 4) <= limit:
        per *= 2
    return per if per >= page else 0


class StoragePages:
    """K and V of every layer in storage buffers: f32, or f16 pairs packed in words (`half`)."""

    def __init__(self, device, layers: int, rows: int, kr: int, page: int, half: bool = False, wide: bool = False):
        import wgpu
        self.device, self.kr, self.page = device, kr, page
        self.value_bytes = 2 if half else 4
        self.read_octets = half  # k_oct / v_oct: eight halves a 16-byte load (blocks/kv_read_storage_f16.wgsl)
        self.read_hex = half and wide  # k_hex: sixteen halves a 32-byte load (blocks/kv_read_storage_f16_u64.wgsl)
        self.touch_step = 64 // (4 * self.value_bytes)  # vec4s a 64-byte cache line (shader_code.decode_lane_code)
        # the word the decode attention xors its touched V words into (so that the touches are not dropped)
        self.touch_sink = device.create_buffer(size=16, usage=wgpu.BufferUsage.STORAGE, label="kv-pool.touch-sink")
        self.read_snippet, self.write_snippet = snippets("storage", half, wide)
        self.rw_snippet = "blocks/kv_rw_storage" + ("_f16" + "_u64" * wide if half else "")  # read + written at once
        use = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        size = rows * kr * self.value_bytes
        self.keys = [device.create_buffer(size=size, usage=use, label=f"kv-pool.k{i}") for i in range(layers)]
        self.values = [device.create_buffer(size=size, usage=use, label=f"kv-pool.v{i}") for i in range(layers)]
        # a page of every layer on its way from one page to another (a buffer cannot copy into itself)
        self._staging = device.create_buffer(size=2 * layers * page * kr * self.value_bytes, usage=use,
                                             label="kv-pool.staging")
        self.params: dict = {}

    def copy(self, enc, src: int, dst: int, n: int) -> None:
        """Record copies of positions 0..n-1 of page `src` into page `dst`, every layer's K and V."""
        page_bytes, nbytes = self.page * self.kr * self.value_bytes, n * self.kr * self.value_bytes
        bufs = self.keys + self.values
        for i, buf in enumerate(bufs):
            enc.copy_buffer_to_buffer(buf, src * page_bytes, self._staging, i * page_bytes, nbytes)
        for i, buf in enumerate(bufs):
            enc.copy_buffer_to_buffer(self._staging, i * page_bytes, buf, dst * page_bytes, nbytes)


class TexturePages:
    """K and V of every layer in rgba32float textures (4 values a texel), `per_row` pool rows a texture row."""

    read_octets = read_hex = False  # a texel is one vec4
    touch_step = 0  # the decode attention touches no texels ahead (a texel fetch is a gather, not a loop)
    touch_sink = None

    def __init__(self, device, layers: int, rows: int, kr: int, page: int, per_row: int):
        import wgpu
        self.device, self.kr, self.page, self.per_row = device, kr, page, per_row
        self.texel = 4  # values a texel
        fmt = wgpu.TextureFormat.rgba32float
        self.read_snippet, self.write_snippet = snippets("texture", False)
        self.width = per_row * kr // self.texel  # texels a texture row
        height = -(-rows // per_row)  # within the adapter's limit: KvPool chose textures only then
        use = (wgpu.TextureUsage.TEXTURE_BINDING | wgpu.TextureUsage.STORAGE_BINDING | wgpu.TextureUsage.COPY_SRC
               | wgpu.TextureUsage.COPY_DST)

        def texture(label, w, h):
            return device.create_texture(size=(w, h, 1), format=fmt, usage=use, label=label)
        self.key_textures = [texture(f"kv-pool.k{i}", self.width, height) for i in range(layers)]
        self.value_textures = [texture(f"kv-pool.v{i}", self.width, height) for i in range(layers)]
        self.keys = [t.create_view() for t in self.key_textures]
        self.values = [t.create_view() for t in self.value_textures]
        self._staging = texture("kv-pool.staging", page * kr // self.texel, 2 * layers)
        self.params = {"KV_W": self.width}

    def _at(self, page: int) -> tuple:
        row = page * self.page
        return ((row % self.per_row) * self.kr // self.texel, row // self.per_row, 0)

    def copy(self, enc, src: int, dst: int, n: int) -> None:
        """Record copies of positions 0..n-1 of page `src` into page `dst`, every layer's K and V."""
        size = (n * self.kr // self.texel, 1, 1)
        textures = self.key_textures + self.value_textures
        for i, t in enumerate(textures):
            enc.copy_texture_to_texture({"texture": t, "origin": self._at(src)},
                                        {"texture": self._staging, "origin": (0, i, 0)}, size)
        for i, t in enumerate(textures):
            enc.copy_texture_to_texture({"texture": self._staging, "origin": (0, i, 0)},
                                        {"texture": t, "origin": self._at(dst)}, size)
