"""An encoder on the device: weights uploaded, scratch for passes of up to max_pass_tokens, one pass per batch.

A batch is texts laid end to end (no padding): per token (position id, token type id, its
text's first token, its text's length), per text (first token, length). Only the pooled
vectors -- or a reranker's scores -- are read back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ..errors import ModelError, ValidationError
from ..kernel import channel_layout
from ..runtime.device import MODEL_CLOSED, device_lock
from ..runtime.dispatch import Recorder, UniformParams, replay
from .encoder_kernels import EncoderKernels, encoder_pass
from .encoder_weights import EncoderWeights
from .gpu_weights import DeviceVectors, GpuMatrix, pack_dense, pack_ggml, upload
from .shaders import ShaderLibrary

DEFAULT_PASS_TOKENS = 2048  # tokens of one pass (the texts of a batch beyond it take more passes)
WEIGHT_DTYPES = ("f32", "f16", "q8_0")  # q8_0: quantized at load (llama.cpp's blocks), textures on lavapipe


@dataclass
class EncoderLayerGpu:
    """One block's matrices and vectors on the device."""

    qkv: GpuMatrix
    qkv_b: object
    o: GpuMatrix
    o_b: object
    ln1: tuple
    up: GpuMatrix
    up_b: object
    down: GpuMatrix
    down_b: object
    ln2: tuple


def _pack(m: np.ndarray, dtype: str, label: str):
    """A float matrix as f32 / f16 rows, or quantized to Q8_0 blocks (gguf's quantizer: llama.cpp's values)."""
    if dtype != "q8_0":
        return pack_dense(m, dtype, label)
    import gguf
    from gguf.quants import quantize
    blocks = quantize(np.ascontiguousarray(m, np.float32), gguf.GGMLQuantizationType.Q8_0)
    return pack_ggml("Q8_0", blocks.reshape(m.shape[0], -1), m.shape[1], label)


class EncoderScratch:
    """Activation and input buffers of passes of up to `tokens` tokens."""

    def __init__(self, g: "GpuEncoder", tokens: int):
        import wgpu
        c = g.config
        use = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        pad = g.max_uniform // 4  # matmuls read x through windows of a whole token group (model/gpu_model.py Scratch)

        def buf(n, label):
            return g.device.create_buffer(size=max(16, (n + pad) * 4), usage=use, label=label)
        H = c.hidden_size
        self.tokens = g.device.create_buffer(size=(channel_layout.header(0, 1, 1, tokens).size + tokens) * 4,
                                             usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST,
                                             label="encoder-tokens")
        self.info = buf(4 * tokens, "encoder-info")
        self.texts = buf(2 * tokens, "encoder-texts")
        self.h, self.o = buf(tokens * H, "encoder-hidden"), buf(tokens * H, "encoder-attn")
        self.qkv = buf(tokens * 3 * H, "encoder-qkv")
        self.act = buf(tokens * c.intermediate_size, "encoder-act")
        self.pooled, self.dense = buf(tokens * H, "encoder-pooled"), buf(tokens * H, "encoder-dense")
        self.scores = buf(tokens * 2 * max(1, -(-c.num_labels // 2)), "encoder-scores")


class GpuEncoder(DeviceVectors):
    """An encoder's weights on the device and its passes (pooled vectors or reranker scores of a batch)."""

    def __init__(self, weights: EncoderWeights, device=None, dtype: str | None = None,
                 max_pass_tokens: int = DEFAULT_PASS_TOKENS):
        from ..runtime.device import get_device
        dtype = dtype or weights.stored  # the checkpoint's precision (as the decoder's HF path keeps it)
        if dtype not in WEIGHT_DTYPES:
            raise ValidationError(f"encoder weights dtype {dtype!r}: one of {', '.join(WEIGHT_DTYPES)}")
        self.dev = device or get_device()
        self.device = self.dev.device
        self.config = c = weights.config
        self.lib = ShaderLibrary(self.device)
        self.params = UniformParams(self.device)
        self.max_binding = self.dev.limits.get("max-storage-buffer-binding-size", 128 << 20)
        self.max_uniform = self.dev.limits.get("max-uniform-buffer-binding-size", 65536)
        if max(c.hidden_size, c.intermediate_size) * 4 > self.max_uniform:
            raise ModelError(f"hidden/intermediate size {max(c.hidden_size, c.intermediate_size)} is wider than this "
                             f"adapter's {self.max_uniform}-byte uniform bindings")
        self.max_pass_tokens = max(int(max_pass_tokens), c.max_tokens)
        self.dtype = dtype
        self._zero_vecs: dict = {}
        textures = self.dev.texture_weights

        def up(m, label):
            return upload(self.device, _pack(m, dtype, label), self.max_binding, label, textures)
        self.word = up(weights.word, "word_embeddings")
        self.positions, self.types = self._vec(weights.positions, "positions"), self._vec(weights.types, "types")
        self.emb_ln = tuple(self._vec(v, "emb_ln") for v in weights.emb_ln)
        self.layers = []
        for i, L in enumerate(weights.layers):
            vec = lambda v, n: self._vec(v, f"layer{i}.{n}")  # noqa: E731
            self.layers.append(EncoderLayerGpu(
                up(L.qkv, f"layer{i}.qkv"), vec(L.qkv_b, "qkv_b"), up(L.o, f"layer{i}.o"), vec(L.o_b, "o_b"),
                tuple(vec(v, "ln1") for v in L.ln1), up(L.up, f"layer{i}.up"), vec(L.up_b, "up_b"),
                up(L.down, f"layer{i}.down"), vec(L.down_b, "down_b"), tuple(vec(v, "ln2") for v in L.ln2)))
        self.head = None
        if weights.head is not None:
            dense, dense_b, out, out_b = weights.head
            rows = -(-out.shape[0] // 2) * 2  # the matmul writes row pairs: one label padded with a zero row
            out_p = np.zeros((rows, out.shape[1]), np.float32)
            out_p[:out.shape[0]] = out
            out_bp = np.zeros(rows, np.float32)
            out_bp[:out.shape[0]] = out_b
            self.head = (up(dense, "head.dense"), self._vec(dense_b, "head.dense_b"), up(out_p, "head.out"),
                         self._vec(out_bp, "head.out_b"))
        self.binds: dict = {}
        self._scratch: EncoderScratch | None = None
        self._plans: dict = {}
        self._lock = threading.Lock()
        self.closed = False
        self.weight_bytes = sum(m.nbytes for L in self.layers for m in (L.qkv, L.o, L.up, L.down)) + self.word.nbytes

    def run(self, texts: list, mode: str, scores: bool = False) -> np.ndarray:
        """[len(texts), hidden] pooled vectors (or [len(texts), num_labels] head scores) of texts given as (token
        ids, token type ids) pairs, in passes of up to max_pass_tokens tokens."""
        if self.closed:
            raise ValidationError(MODEL_CLOSED)
        if scores and self.head is None:
            raise ValidationError("this encoder has no scoring head (it is not a *ForSequenceClassification "
                                  "checkpoint): rerank needs a cross-encoder such as bge-reranker")
        out, batch, tokens = [], [], 0
        for ids, types in texts:
            if not 0 < len(ids) <= self.config.max_tokens:  # (max_pass_tokens >= max_tokens: one pass holds any text)
                raise ValidationError(f"a text of {len(ids)} tokens: this encoder takes 1 to {self.config.max_tokens}")
            if tokens + len(ids) > self.max_pass_tokens and batch:
                out.append(self._pass(batch, mode, scores))
                batch, tokens = [], 0
            batch.append((ids, types))
            tokens += len(ids)
        if batch:
            out.append(self._pass(batch, mode, scores))
        return np.concatenate(out) if out else np.zeros((0, self.config.hidden_size), np.float32)

    def _pass(self, batch: list, mode: str, scores: bool) -> np.ndarray:
        import wgpu
        c = self.config
        lengths = np.array([len(ids) for ids, _ in batch], np.uint32)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.uint32)
        T, B = int(lengths.sum()), len(batch)
        ids = np.concatenate([np.asarray(i, np.int64) for i, _ in batch])
        types = np.concatenate([np.asarray(t, np.int64) for _, t in batch])
        for what, v, n in (("token ids", ids, c.vocab_size), ("token type ids", types, c.type_vocab_size)):
            if v.size and (v.min() < 0 or v.max() >= n):
                raise ValidationError(f"{what} must be in [0, {n}), got {v.min()}..{v.max()}")
        info = np.zeros((T, 4), np.uint32)
        info[:, 0] = np.concatenate([np.arange(n) for n in lengths]) + c.position_offset
        info[:, 1] = types
        info[:, 2] = np.repeat(starts, lengths)
        info[:, 3] = np.repeat(lengths, lengths)
        spans = np.stack([starts, lengths], 1).astype(np.uint32)
        with self._lock, device_lock(self.device):
            s = self._scratch_buffers()
            q = self.device.queue
            q.write_buffer(s.tokens, 0, np.concatenate([channel_layout.header(0, 1, 1, T),
                                                        ids.astype(np.uint32)]).tobytes())
            q.write_buffer(s.info, 0, info.tobytes())
            q.write_buffer(s.texts, 0, spans.tobytes())
            plan = self._plan(T, B, mode, scores)
            enc = self.device.create_command_encoder()
            cpass = enc.begin_compute_pass()
            replay(cpass, plan)
            cpass.end()
            width = (self.head[2].rows if scores else c.hidden_size)
            nbytes = B * width * 4
            rb = self.device.create_buffer(size=nbytes, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            enc.copy_buffer_to_buffer(s.scores if scores else s.pooled, 0, rb, 0, nbytes)
            q.submit([enc.finish()])
        rb.map_sync(wgpu.MapMode.READ)
        out = np.frombuffer(rb.read_mapped(), np.float32).reshape(B, width).copy()
        rb.unmap()
        rb.destroy()
        return out[:, :c.num_labels] if scores else out

    def _scratch_buffers(self) -> EncoderScratch:
        if self._scratch is None:
            self._scratch = EncoderScratch(self, self.max_pass_tokens)
        return self._scratch

    def _plan(self, T: int, B: int, mode: str, scores: bool):
        key = (T, B, mode, scores)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) > 256:  # every batch shape is a plan: keep the recent ones
                self._plans.clear()
            rec = Recorder(self.device, self.binds)
            with self.lib.compiling():
                encoder_pass(EncoderKernels(self, rec, T, scope=(T,)), self, self._scratch, B, mode, scores)
            plan = self._plans[key] = rec.plan
        return plan

    def release(self) -> None:
        """Drop the device buffers (weights, scratch, plans); later passes raise."""
        self.closed = True
        self._plans.clear()
        self.binds.clear()
        self._scratch = None
