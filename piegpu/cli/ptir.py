"""`piegpu ptir check FILE...`: replay Pie's compiler golden files on a piegpu backend."""

from __future__ import annotations

from pathlib import Path

from ..errors import PieGpuError


def _cmd_check(args) -> int:
    from ..ptir import check_golden
    mismatched = 0
    for path in args.files:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise PieGpuError(f"ptir check: cannot read {path}: {e.strerror}") from None
        try:
            report = check_golden(text, backend=args.backend, name=Path(path).stem)
        except ValueError as e:
            raise PieGpuError(f"ptir check: {path} is not a Pie compiler golden file ({e}). Fix: pass a file "
                              "from Pie's compiler/tests/golden/") from None
        if report.unsupported:
            print(f"UNSUPPORTED {path}: {report.unsupported}")
            continue
        status = "ok" if report.ok else "MISMATCH"
        print(f"{status:8} {path}: {len(report.checks)} checks on {args.backend}"
              + ("" if report.ok else f", {len(report.mismatches)} differ"))
        for c in report.mismatches:
            print(f"    line {c.line}: {c.what}: expected {c.expected}, got {c.got}")
        mismatched += not report.ok
    return 1 if mismatched else 0


def add_parser(sub) -> None:
    """Register `piegpu ptir check`."""
    p = sub.add_parser("ptir", help="Pie PTIR containers: check Pie's compiler golden files on a backend")
    psub = p.add_subparsers(dest="ptir_command", required=True)
    c = psub.add_parser("check", help="replay golden files (verdict, hash, every step and take); non-zero exit "
                                      "on any mismatch")
    c.add_argument("files", nargs="+", metavar="FILE.txt")
    c.add_argument("--backend", default="wgsl", choices=("interp", "wgsl", "spirv", "stablehlo"),
                   help="where the programs run (default wgsl)")
    c.set_defaults(func=_cmd_check)
