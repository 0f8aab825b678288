"""Which path a constrained generate() takes (device automaton or llguidance's host masks), and the device path's loop.

grammar_mode="device" runs a request on the device when its grammar is regular (regex=, json_schema= without
recursion) and its tables fit automaton.MAX_TABLE_BYTES, and raises (saying why) where it cannot; "host" (and, for
now, "auto": see plan()) uses llguidance's host masks (inferlets/grammar_loop.py); stats.grammar_reason says why.

The device path is plain run-ahead (Generation.run_ahead_pieces) with the automaton in the epilogue: the host follows
the state from the tokens as they arrive (one table lookup each) only to end the run where the grammar is complete
and to close it before max_tokens runs out -- the same rule as the host path (grammar_loop.CLOSE_LOOKAHEAD): when
the shortest completion (exact, by BFS over the automaton) only just fits, it is prefilled unsampled.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ValidationError
from ..inferlets.automaton import Unfit, build
from ..inferlets.schema_regex import request_regex
from ..inferlets.device_grammar import DeviceGrammar, padded_size
from ..inferlets.grammar_loop import budget_close
from ..runtime.loops import DecodeLoop, decode_loop
from ..samplers import SamplerStates, SeqContext

MODES = ("auto", "device", "host")
AUTO_REASON = ("grammar_mode='auto' uses llguidance's host masks (canonical tokens where the grammar forces bytes); "
               "grammar_mode='device' runs the automaton ahead (docs/grammar.md)")


@dataclass
class GrammarPlan:
    """The path one constrained request takes."""

    mode: str  # "device" or "host"
    reason: str
    automaton: object = None  # the TokenAutomaton on the device path


def _pieces(model) -> tuple:
    """(token bytes, vocabulary key) of the model's tokenizer, computed once per model."""
    hit = getattr(model, "_automaton_vocab", None)
    if hit is None:
        from ..inferlets.automaton import vocabulary_key
        from ..model.token_bytes import token_bytes
        pieces = token_bytes(model.tokenizer, model.config.vocab_size)
        hit = (pieces, vocabulary_key(pieces, model.config.eos_token_ids))
        model._automaton_vocab = hit
    return hit


def plan(model, request: dict, mode: str, constraint) -> GrammarPlan | None:
    """The GrammarPlan of a request's constraint keywords (None without a constraint); ValidationError for a bad
    grammar_mode, or grammar_mode="device" on a grammar the device cannot run (the message says why)."""
    if mode not in MODES:
        raise ValidationError(f"grammar_mode must be one of {list(MODES)}, got {mode!r}")
    if constraint is None:
        return None
    if mode == "host":
        return GrammarPlan("host", "grammar_mode='host'")
    if mode == "auto":  # measured: greedy on the default model, {"city": string} gave "Ciudad de la Ciudad de la ..."
        # on the device and "Paris" on the host, whose masks allow only the canonical tokens where a grammar forces
        # bytes (the automaton allows every tokenization there). Until the tables restrict forced stretches the same
        # way, "auto" keeps llguidance; grammar_mode="device" runs ahead.
        return GrammarPlan("host", AUTO_REASON)
    kind = constraint.kind
    try:
        regex = request_regex(kind, request.get(kind) if kind != "json_object" else True)
        pieces, key = _pieces(model)
        automaton = build(regex, pieces, model.config.eos_token_ids, key)
    except Unfit as e:
        raise ValidationError(f"grammar_mode='device': {e}. Fix: grammar_mode='auto' (or 'host') runs it on the "
                              "host with llguidance") from None
    return GrammarPlan("device", f"regular grammar: {automaton.states} states, {automaton.classes} token classes, "
                                 f"{automaton.nbytes / 2**20:.2f} MiB of tables", automaton)


@dataclass
class _Sampling:
    loop: DecodeLoop
    states: SamplerStates
    grammar: DeviceGrammar


def _sampling(sess, sampler, vocab: int, table_size: int) -> _Sampling:
    states = SamplerStates(sampler, vocab, "grammar")
    grammar = DeviceGrammar(vocab, table_size)
    return _Sampling(decode_loop(sess.ws, lambda logits: grammar.step(states, logits), name="grammar:"), states,
                     grammar)


def closing(automaton, state: int, left: int) -> str | None:
    """grammar_loop.budget_close with `left` tokens to go in `state`, from the automaton's exact shortest completion."""
    d = int(automaton.distance[state])
    return budget_close(d if d <= left else None, left)


async def device_pieces(gen, sess):
    """Async generator of text pieces of Generation `gen` on the device automaton, after its prompt is prefilled."""
    automaton = gen.grammar.automaton
    vocab = gen.model.config.vocab_size
    size = padded_size(automaton.table.size)
    sampling = sess.loop(("grammar-device", gen.sampler.trace_key, size),
                         lambda: _sampling(sess, gen.sampler, vocab, size))
    sampling.grammar.load(automaton)
    state, draws = 0, 0
    pending = gen.prompt_ids[-1]

    def until(tok: int) -> bool:
        nonlocal state, draws
        draws += 1
        if tok in gen.out.stop_ids:
            return True
        state = automaton.next(state, tok)
        if state < 0:
            raise RuntimeError(f"device grammar: token {tok} is not allowed in the automaton's state; the device "
                               "and host tables disagree (please report it)")
        return automaton.is_done(state) or closing(automaton, state, gen.budget - len(gen.tokens)) is not None

    while not gen.out.stop_reason:
        left = gen.budget - len(gen.tokens)
        what = closing(automaton, state, left)
        if what == "end" or (what is None and automaton.is_done(state)):
            gen.out.end("grammar complete")
            return
        if what == "force":
            path = automaton.completion(state, left)
            await sess.extend([pending] + path[:-1])
            pending = sess.pending = path[-1]
            for t in path:
                state = automaton.next(state, t)
                piece, more = gen.accept(t)
                if piece:
                    yield piece
                if not more:
                    return
            continue
        sampling.states.seed(SeqContext(tuple(sess.tokens + [pending]), vocab, gen.seed, draws), sampler=gen.sampler)
        sampling.grammar.seed(automaton, state)
        async for piece in gen.run_ahead_pieces(sess, sampling, pending, until):
            yield piece
        pending = sess.pending


__all__ = ["GrammarPlan", "plan", "device_pieces", "closing", "MODES"]
