"""Multi-turn chat on one working set: generate(messages, chat=True, reuse_prefix=True) prefills only the new turn.

What the Qt chat example relies on: each turn re-renders the whole history with the chat
template, the working set keeps the longest prefix it already holds, and the answer equals
the one a fresh prefill of the whole history gives (greedy, the default model, lavapipe).
"""

from __future__ import annotations

import pytest

from piegpu.errors import ValidationError

Q1 = "What is the capital of France?"
Q2 = "And of Germany?"


def _history_tokens(model, messages) -> int:
    return len(model.tokenizer.encode(model.chat_prompt(messages)).ids)


def test_second_turn_prefills_only_the_new_tokens_and_equals_a_fresh_prefill(default_model):
    model = default_model
    ws = model.working_set(512)
    msgs = [{"role": "user", "content": Q1}]
    g1 = model.generate(msgs, chat=True, working_set=ws, reuse_prefix=True, max_tokens=16)
    first = g1.run()
    assert "Paris" in first
    assert g1.stats.reused_tokens == 0 and g1.stats.prompt_tokens == _history_tokens(model, msgs)
    held = ws.length
    msgs = msgs + [{"role": "assistant", "content": first}, {"role": "user", "content": Q2}]
    whole = _history_tokens(model, msgs)
    g2 = model.generate(msgs, chat=True, working_set=ws, reuse_prefix=True, max_tokens=16)
    second = g2.run()
    # Everything the first turn embedded (its prompt and its answer) is kept; only the rest is prefilled.
    assert g2.stats.reused_tokens == held
    assert g2.stats.prompt_tokens == whole - held < whole
    fresh = model.generate(msgs, chat=True, max_tokens=16)
    assert fresh.run() == second and fresh.tokens == g2.tokens
    assert "Berlin" in second


def test_a_cancelled_turn_and_an_edited_history_reuse_what_still_matches(default_model):
    model = default_model
    ws = model.working_set(512)
    msgs = [{"role": "user", "content": "Tell me a long story about a dragon."}]
    seen = []

    def on_token(piece):
        seen.append(piece)
        if len(seen) == 3:
            g.cancel()

    g = model.generate(msgs, chat=True, working_set=ws, reuse_prefix=True, max_tokens=64, on_token=on_token)
    partial = g.run()
    assert g.stats.stop_reason == "cancelled" and 3 <= len(g.tokens) <= 4
    after_cancel = msgs + [{"role": "assistant", "content": partial}, {"role": "user", "content": Q1}]
    g2 = model.generate(after_cancel, chat=True, working_set=ws, reuse_prefix=True, max_tokens=12)
    text = g2.run()
    assert g2.stats.reused_tokens >= _history_tokens(model, msgs)  # the first prompt at least, no re-prefill
    assert text == model.generate(after_cancel, chat=True, max_tokens=12).run()
    # Edit the first message: only the tokens before the edit (system prompt, "Tell me a") still match.
    edited = [{"role": "user", "content": "Tell me a short poem."}] + after_cancel[1:]
    g3 = model.generate(edited, chat=True, working_set=ws, reuse_prefix=True, max_tokens=12)
    text3 = g3.run()
    assert 0 < g3.stats.reused_tokens < _history_tokens(model, msgs)
    assert g3.stats.reused_tokens + g3.stats.prompt_tokens == _history_tokens(model, edited)
    assert text3 == model.generate(edited, chat=True, max_tokens=12).run()


def test_reuse_prefix_and_message_prompts_reject_misuse_clearly(default_model):
    model = default_model
    with pytest.raises(ValidationError, match="reuse_prefix=True.*Fix: pass working_set="):
        model.generate("hi", reuse_prefix=True)
    with pytest.raises(ValidationError, match=r"chat=True.*list of \{role, content\}"):
        model.generate(42, chat=True)
    with pytest.raises(ValidationError, match="messages\\[0\\]"):
        model.generate([{"role": "user"}], chat=True)
    with pytest.raises(ValidationError, match="n=.*reuse_prefix"):
        model.generate("hi", n=2, reuse_prefix=True)
    ws = model.working_set(16)
    with pytest.raises(ValidationError, match="room for 16"):
        model.generate([{"role": "user", "content": Q1}], chat=True, working_set=ws, reuse_prefix=True)
