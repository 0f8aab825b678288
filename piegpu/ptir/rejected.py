"""PtirRejected: a container Pie's validator rejects, with Pie's verdict text."""

from __future__ import annotations

from ..errors import ValidationError


class PtirRejected(ValidationError):
    """A container Pie's validator rejects; `.verdict` is Pie's verdict text."""

    def __init__(self, verdict: str, why: str, fix: str):
        super().__init__(f"PTIR container rejected: {verdict}: {why}. Fix: {fix}")
        self.verdict, self.why = verdict, why


def camel(name: str) -> str:
    """snake_case -> CamelCase, the way Pie prints enum variants."""
    return "".join(p.capitalize() for p in name.split("_"))
