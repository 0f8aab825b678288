"""Reading GGUF metadata fields with errors that name the file and the key."""

from __future__ import annotations

from typing import Any

from ..errors import ModelError


def field_contents(f: Any, key: str, source: str) -> Any:
    """The value of a GGUF metadata field; ModelError (naming file and key) if its bytes do not decode."""
    try:
        return f.contents()
    except (UnicodeDecodeError, ValueError, IndexError, TypeError) as e:  # damaged strings or arrays
        raise ModelError(f"{source}: GGUF metadata {key!r} is corrupt ({type(e).__name__}: {e}); "
                         "re-download the file") from None
