"""Pie's compiler goldens (tests/fixtures/ptir, see SOURCE.md there), read once per session."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ptir"
GOLDENS = sorted(FIXTURES.glob("*.txt"))
# Programs that need a pass input, kernel or stage piegpu's forward pass does not provide (with the reason).
NOT_PROVIDED = {"mtp_verify_tail": ("pass input 'mtp_logits'",),
                "pentathlon_iter": ("stage on_attn_proj", "pass input 'query'", "kernel 'envelope_dot'",
                                    "sink 'attn_page_mask'", "pass input 'value_head'")}


def containers() -> dict:
    """Every container of every golden file: program name -> bytes."""
    out = {}
    for path in GOLDENS:
        for m in re.finditer(r"^name: (\S+)\nhash: \S+\ncontainer: ([0-9a-f]+)$", path.read_text(), re.M):
            out[m.group(1)] = bytes.fromhex(m.group(2))
    return out


CONTAINERS = containers()


@pytest.fixture(scope="session")
def golden_texts() -> dict:
    """Golden file stem -> its text."""
    return {p.stem: p.read_text() for p in GOLDENS}
