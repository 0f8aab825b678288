"""What the server's engine admits and how much a prefill pass takes: the pass budget (piegpu serve
--max-pass-tokens) and the KV pages a request sets aside."""

from __future__ import annotations

from ..errors import ValidationError
from ..runtime.session import PREFILL_CHUNKS

# Prompt tokens one prefill pass takes at most (piegpu serve --max-pass-tokens): the running rows wait for one such pass
# between two of their tokens while prompts are prefilled. At most the largest prefill pass shape (PREFILL_CHUNKS).
# CPU adapters: 64, measured on lavapipe (benchmarks/serve_long_prompt.py, a 1186-token prompt arriving while 4 rows
# stream, one run each: budget 32 / 64 / 128 / 256 -> its TTFT 18.5 / 14.3 / 15.9 / 20.3 s, the rows' inter-token
# latency meanwhile p50 0.44 / 0.61 / 1.15 / 3.24 s: long prefill passes cost more than their share there). GPUs:
# MAX_PASS_TOKENS, the largest shape (not measured here: no GPU on these machines).
MAX_PASS_TOKENS = PREFILL_CHUNKS[0]
CPU_PASS_TOKENS = 64


def check_pass_tokens(n) -> int:
    """n as a prefill pass budget: an int in [1, MAX_PASS_TOKENS] (ValidationError naming the bounds otherwise)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PASS_TOKENS:
        raise ValidationError(f"max_pass_tokens={n!r}: a prefill pass takes 1 to {MAX_PASS_TOKENS} prompt tokens "
                              f"(the largest prefill pass shape). Fix: --max-pass-tokens between 1 and "
                              f"{MAX_PASS_TOKENS}")
    return n


def pages_needed(job, page: int) -> int:
    """KV pages of `page` positions a job's whole length takes (prompt + max_tokens, every choice; the prompt's full
    pages shared by its choices)."""
    prompt = len(job.prompt_ids) // page
    return prompt + len(job.params) * (-(-(len(job.prompt_ids) + job.max_tokens) // page) - prompt)
