"""Pie's compiler goldens replayed with every pass's WGSL compiled by Tint and run in Chromium's WebGPU."""

from __future__ import annotations

from piegpu.ptir import check_golden
from tests.browser.eta_items import ProgramItem, limits_from
from tests.ptir.conftest import GOLDENS, NOT_PROVIDED


def test_every_runnable_golden_matches_in_chromium(browser):
    limits = limits_from(browser.limits)

    def chromium(prog, args):
        item = ProgramItem(prog, args, limits, f"ptir {prog.hash[:12]}")
        (reply,) = browser.run([item.item])
        return list(item.outputs(reply))

    failures, takes = [], 0
    for path in GOLDENS:
        if path.stem in NOT_PROVIDED:
            continue
        report = check_golden(path.read_text(), backend=chromium, name=path.stem)
        takes += sum(c.what.startswith("take") for c in report.checks)
        if not report.ok:
            failures.append(repr(report))
    assert not failures, "\n".join(failures)
    assert takes >= 25
