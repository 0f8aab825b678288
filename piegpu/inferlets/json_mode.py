"""JSON mode: decoding constrained to JSON (optionally to a small schema), the mask applied on the device.

Each step the host advances a JSON pushdown automaton over the bytes of the token just
drawn, computes which token ids keep the text a valid prefix (TokenMasker: a trie walk
memoized per automaton state), packs them as u32[vocab/32] and puts them into a
host->device channel. The epilogue unpacks the bits (gather + shifts), masks the logits
and samples (greedy argmax, or any Sampler chain), feeding the token back on the device.
A depth-1 loop (pipe.submit per token): the next mask depends on the token just drawn.
EOS is allowed only when the value is complete, and tokens whose end state could not
close within the remaining budget are refused, so the text always parses.

    text, value = generate_json(model, "Describe a cat as JSON.", schema, max_tokens=48, chat=True)
"""

from __future__ import annotations

import codecs
import json
import time
from dataclasses import dataclass, field

from ..dtypes import dtype
from ..errors import PieGpuError, ValidationError
from ..runtime.channel import Channel
from ..runtime.forward import ForwardPass
from ..runtime.loops import decode_loop
from ..runtime.session import run_sync
from ..samplers import OPTIONS, SamplerStates, SeqContext, from_spec
from .json_grammar import JsonGrammar
from .json_schema import validate
from .token_mask import TokenMasker, TokenVocabulary, device_allowed


@dataclass
class JsonStats:
    """What one constrained generation did."""

    tokens: int = 0
    passes: int = 0
    mask_s: float = 0.0  # host time computing masks and advancing the automaton
    decode_s: float = 0.0
    new_walks: int = 0  # automaton states whose token walk was computed (not memoized)
    stop_reason: str = ""


@dataclass
class _Loop:
    fwd: ForwardPass
    token_in: Channel
    token_out: Channel
    mask: Channel
    states: SamplerStates


@dataclass
class JsonMode:
    """A schema's grammar and token masker for one model (reuse it: masks are memoized per state)."""

    model: object
    schema: object = None
    max_whitespace: int = 4
    stats: JsonStats = field(default_factory=JsonStats)

    def __post_init__(self):
        self.grammar = JsonGrammar(self.schema, self.max_whitespace)
        self.vocab = TokenVocabulary.of(self.model.tokenizer, self.model.config.vocab_size)
        self.masker = TokenMasker(self.grammar, self.vocab, self.model.config.eos_token_ids)

    def min_tokens(self) -> int:
        """The fewest tokens any output of this schema needs."""
        return self.grammar.distance(self.grammar.start)

    def generate(self, prompt: str, max_tokens: int = 128, sampler="greedy", temperature: float = 1.0,
                 seed: int = 0, chat: bool = False, on_text=None, **options) -> tuple:
        """(text, parsed value) of a constrained continuation of `prompt`; on_text(piece) streams the text."""
        return run_sync(self.agenerate(prompt, max_tokens, sampler, temperature, seed, chat, on_text, **options))

    async def agenerate(self, prompt: str, max_tokens: int = 128, sampler="greedy", temperature: float = 1.0,
                        seed: int = 0, chat: bool = False, on_text=None, **options) -> tuple:
        """Async generate()."""
        if not isinstance(prompt, str):
            raise ValidationError(f"generate_json: prompt must be a str, got {type(prompt).__name__}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValidationError(f"generate_json: max_tokens must be an int >= 1, got {max_tokens!r}")
        need = self.min_tokens()
        if max_tokens < need:
            raise ValidationError(f"generate_json: the schema's shortest JSON text takes {need} tokens but "
                                  f"max_tokens={max_tokens}. Fix: max_tokens >= {need}")
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValidationError(f"generate_json: unknown arguments {unknown}. Fix: sampler options are {list(OPTIONS)}")
        smp = from_spec(sampler, temperature, None, **options)
        model = self.model
        text = model.chat_prompt(prompt) if chat else prompt
        ids = model.tokenizer.encode(text).ids
        if not ids:
            raise ValidationError("generate_json: the prompt is empty (no tokens). Fix: pass some text")
        sess = model.session(tokens=len(ids) + max_tokens + 1)
        await sess.start(ids)
        loop = self._loop(sess, smp)
        for ch in (loop.token_in, loop.token_out, loop.mask):
            ch.clear()
        loop.token_in.put([ids[-1]])
        loop.states.seed(SeqContext(tuple(ids), self.vocab.size, seed))
        st = self.stats = JsonStats()
        walks0 = self.masker.walk_count
        g, masker = self.grammar, self.masker
        eos = set(model.config.eos_token_ids)
        sid = g.start
        out: list = []
        fed = [ids[-1]]  # the token each pass embeds: the prompt's last, then each drawn token
        t0 = time.perf_counter()
        try:
            sid = await self._decode(sess, loop, sid, out, fed, max_tokens, eos, on_text)
        finally:
            sess.embedded(fed[:st.passes])
        st.decode_s = time.perf_counter() - t0
        st.tokens = len(out)
        st.new_walks = masker.walk_count - walks0
        if not g.accepting(sid):
            raise PieGpuError(f"JSON mode: the text is incomplete after {len(out)} tokens (budget bookkeeping bug)")
        result = b"".join(self.vocab.pieces[t] for t in out).decode("utf-8")
        value = json.loads(result)
        errors = validate(value, g.schema.source) if self.schema is not None else []
        if errors:
            raise PieGpuError(f"JSON mode: the output violates the schema: {errors}")
        return result, value

    async def _decode(self, sess, loop: _Loop, sid: int, out: list, fed: list, max_tokens: int, eos: set,
                      on_text) -> int:
        g, masker, st = self.grammar, self.masker, self.stats
        utf8 = codecs.getincrementaldecoder("utf-8")()  # tokens may end inside a multi-byte character
        for step in range(max_tokens):
            if g.closed(sid):
                st.stop_reason = "value closed"
                return sid
            tm = time.perf_counter()
            loop.mask.put(masker.mask(sid, max_tokens - step))
            st.mask_s += time.perf_counter() - tm
            await sess.pipe.submit(loop.fwd)
            st.passes += 1
            tok = await loop.token_out.take_scalar()
            fed.append(tok)
            if tok in eos:
                if not g.accepting(sid):
                    raise PieGpuError(f"JSON mode: the device drew EOS ({tok}) where the grammar did not allow it")
                st.stop_reason = "eos"
                return sid
            tm = time.perf_counter()
            sid = masker.advance(sid, tok)  # a token outside the mask raises: device and host disagree
            st.mask_s += time.perf_counter() - tm
            out.append(tok)
            if on_text is not None:
                piece = utf8.decode(self.vocab.pieces[tok])
                if piece:
                    on_text(piece)
        st.stop_reason = "max_tokens"
        return sid

    def _loop(self, sess, smp) -> _Loop:
        return sess.loop(("json", id(self), smp), lambda: self._build_loop(sess, smp))

    def _build_loop(self, sess, smp) -> _Loop:
        V = self.vocab.size
        mask = Channel([self.vocab.words], dtype.u32).named("json:mask")
        states = SamplerStates(smp, V, "json")
        loop = decode_loop(sess.ws, lambda logits: states.step(logits, device_allowed(mask.take(), V)), name="json:")
        return _Loop(loop.fwd, loop.token_in, loop.token_out, mask, states)


def json_mode(model, schema=None, max_whitespace: int = 4) -> JsonMode:
    """The JsonMode of (model, schema), cached on the model's session so masks stay memoized across calls."""
    try:
        key = ("json-mode", json.dumps(schema, sort_keys=True), max_whitespace)
    except (TypeError, ValueError) as e:
        raise ValidationError(f"generate_json: the schema is not JSON data ({e}). Fix: pass dicts, lists, "
                              "strings and numbers, e.g. {'type': 'object'}") from None
    cache = _modes_of(model)
    jm = cache.get(key)
    if jm is None:
        jm = cache[key] = JsonMode(model, schema, max_whitespace)
    return jm


def _modes_of(model) -> dict:
    modes = getattr(model, "_json_modes", None)
    if modes is None:
        modes = model._json_modes = {}
    return modes


def generate_json(model, prompt: str, schema=None, max_tokens: int = 128, sampler="greedy",
                  temperature: float = 1.0, seed: int = 0, chat: bool = False, on_text=None, **options) -> tuple:
    """(text, value): a continuation of `prompt` that is JSON (an object when schema is None) satisfying `schema`."""
    return json_mode(model, schema).generate(prompt, max_tokens, sampler, temperature, seed, chat, on_text,
                                             **options)


__all__ = ["JsonMode", "JsonStats", "json_mode", "generate_json", "validate"]
