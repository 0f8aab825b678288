"""Progress of long work (downloads, reading and uploading weights, the first compile): a tqdm bar on a terminal,
lines on stderr where a server logs it, nothing when stderr is not a terminal or the caller asked for quiet.

load_model(verbose=False) runs quiet() around its work (a context variable: other threads are not quieted);
`piegpu serve` calls as_lines() once, for the whole process.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from typing import Iterator

from tqdm import tqdm

LINE_INTERVAL_S = 5.0  # a progress line at most this often
LINE_DELAY_S = 2.0  # work done sooner than this writes no line

_quiet = contextvars.ContextVar("piegpu_progress_quiet", default=False)
_lines = [False]  # as_lines(): process-wide


def mode() -> str:
    """"bar" (stderr is a terminal), "lines" (as_lines() was called) or "off"."""
    if _quiet.get():
        return "off"
    if _lines[0]:
        return "lines"
    isatty = getattr(sys.stderr, "isatty", None)
    return "bar" if isatty is not None and isatty() else "off"


@contextlib.contextmanager
def quiet(on: bool = True) -> Iterator[None]:
    """No progress output inside the block (when `on`)."""
    token = _quiet.set(_quiet.get() or on)
    try:
        yield
    finally:
        _quiet.reset(token)


def as_lines() -> None:
    """From now on, progress is written as plain lines on stderr (a server's log), not as a bar."""
    _lines[0] = True


class _LineWriter:
    """A file for tqdm that turns its carriage-return redraws into whole lines."""

    def write(self, s: str) -> None:
        text = s.replace("\r", "").strip()
        if text:
            print(f"piegpu: {text}", file=sys.stderr, flush=True)

    def flush(self) -> None:
        """Nothing buffered."""


class Bar(tqdm):
    """tqdm in the current mode: a bar on stderr, log lines, or disabled."""

    def __init__(self, *args, **kwargs):
        kwargs.pop("name", None)  # huggingface_hub names its bars
        m = mode()
        kwargs["disable"] = m == "off"
        if m == "lines":  # every line kept, the last one too
            kwargs.pop("dynamic_ncols", None)
            kwargs.update(file=_LineWriter(), mininterval=LINE_INTERVAL_S, ascii=True, ncols=100, leave=True,
                          delay=max(kwargs.get("delay") or 0, LINE_DELAY_S))
        else:
            kwargs.setdefault("file", sys.stderr)
        super().__init__(*args, **kwargs)


HubBar = Bar  # what huggingface_hub's downloads take as tqdm_class


def bar(total: int | None, desc: str, unit: str = "it", delay: float = 0.0) -> Bar:
    """A progress bar for `total` units of `desc` (None: a count), shown once the work has taken `delay` seconds
    (use as a context manager; .update(n) as work is done)."""
    fmt = None if total is not None else "{desc}: {n_fmt} " + unit + " [{elapsed}]"
    return Bar(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, delay=delay, bar_format=fmt)
