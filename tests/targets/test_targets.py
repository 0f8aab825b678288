"""The target table (piegpu/targets.py): one row per target, read by Program.emit/run, the runtime and the CLI."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from piegpu import dtype, eta, targets
from piegpu.errors import CompileError, ValidationError
from piegpu.eta.ops import OPS, GroupOp
from piegpu.kernel.plan import Limits, plan
from piegpu.kernel.render import Renderer
from piegpu.targets import RUNNERS, TARGETS, WGPU_TARGETS, renderer
from tests.targets import corpus

ROOT = Path(targets.__file__).parent


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_target_emits_the_golden_programs(target):
    for name, prog in corpus.golden_programs():
        code = prog.emit(target)
        assert isinstance(code, bytes if target == "spirv" else str), (target, name)  # API.md section 2
        assert code == renderer(target).emit(prog) and code


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_renderer_has_one_entry_point(target):
    """Each target module declares a Renderer; no module-level emit/render pair beside it."""
    r = renderer(target)
    assert isinstance(r, Renderer) and r.target == target and r.version
    module = importlib.import_module(TARGETS[target].module)
    assert not hasattr(module, "emit") and not hasattr(module, "render"), TARGETS[target].module


@pytest.mark.parametrize("target", [t for t in sorted(TARGETS) if t != "stablehlo"])
def test_emit_plans_with_the_given_limits_else_the_targets(target):
    prog = eta.trace(lambda x: eta.softmax(x), eta.spec([3, 900], dtype.f32))
    r = renderer(target)
    small = Limits(max_workgroup=64)
    assert prog.emit(target, limits=small) == r.emit(prog, small) == r.render(plan(prog, small))
    assert prog.emit(target) == r.render(plan(prog, r.limits))
    assert prog.emit(target) != r.emit(prog, small)  # the limits reach the planner


def test_unknown_targets_backends_and_options_are_validation_errors():
    prog = eta.trace(lambda x: x + 1.0, eta.spec([2], dtype.f32))
    with pytest.raises(ValidationError, match="unknown target 'ptx'.*'wgsl'"):
        prog.emit("ptx")
    with pytest.raises(ValidationError, match="unknown backend 'msl'.*'interp'"):
        prog.run(np.zeros(2, np.float32), backend="msl")
    with pytest.raises(ValidationError, match="prefix"):
        prog.emit("wgsl", prefix="p_")
    assert "p_k0_map" in prog.emit("cuda", prefix="p_")


def test_runners_are_the_interpreter_and_the_targets_with_one():
    assert RUNNERS == {"interp": "piegpu.eta.interp_run",
                       **{n: t.runner for n, t in TARGETS.items() if t.runner}}
    assert set(WGPU_TARGETS) == {"wgsl", "spirv"} and set(WGPU_TARGETS) <= set(RUNNERS)
    from piegpu.eta import backends
    assert backends.RUNNERS is RUNNERS  # a backend registered there (tests/reliability) is one run() finds


def test_only_wgpu_targets_compile_for_the_device():
    from piegpu.runtime import compiled
    for target in sorted(set(TARGETS) - set(WGPU_TARGETS)):
        with pytest.raises(CompileError, match="cannot run through wgpu"):
            compiled.emitter_version(target)


def test_the_command_line_offers_every_target():
    from piegpu.cli import build_parser
    parser = build_parser()
    for target in TARGETS:
        assert parser.parse_args(["compile", "f.py:fn", "--target", target]).target == target
    with pytest.raises(SystemExit):
        parser.parse_args(["compile", "f.py:fn", "--target", "ptx"])


def test_importing_eta_and_the_table_loads_no_emitter():
    code = ("import sys, piegpu.eta, piegpu.targets as t\n"
            "loaded = [m for m in sys.modules if m.startswith(('piegpu.kernel', 'piegpu.runtime'))\n"
            "          or any(m == r.module for r in t.TARGETS.values())]\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT.parent)


@pytest.mark.parametrize("target", WGPU_TARGETS)
def test_the_cache_key_hashes_every_module_that_makes_kernels(target):
    """Every piegpu module that emitting loads (beyond tracing) is in emitter_sources, and the op groups too."""
    code = ("import sys\n"
            "from piegpu import dtype, eta\n"
            "fn = lambda x, s: (eta.top_k(x, 3)[1], eta.cumsum(x) + eta.gumbel(s, [4, 50]), eta.pow(x, 0.5))\n"
            "prog = eta.trace(fn, eta.spec([4, 50], dtype.f32), eta.spec([2], dtype.u32))\n"
            "before = set(sys.modules)\n"
            f"prog.emit({target!r})\n"
            "print('\\n'.join(sys.modules[m].__file__ for m in sorted(set(sys.modules) - before)\n"
            "                 if m.startswith('piegpu.') and m != 'piegpu.eta.backends'))\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT.parent)
    from piegpu.runtime.compiled import emitter_sources
    hashed = {p.resolve() for p in emitter_sources(target)}
    loaded = {Path(f).resolve() for f in out.stdout.split()}
    assert loaded and loaded <= hashed, sorted(str(p) for p in loaded - hashed)
    assert {ROOT / "kernel" / "cxx.py", ROOT / "targets.py", ROOT / "eta" / "ops.py"} <= hashed


# ---- where each op is lowered -----------------------------------------------------------------

def test_every_op_is_lowered_by_the_planner():
    """Elementwise ops are inlined by their rule, templated ones get kernels; the planner stores the rest itself."""
    from piegpu.kernel.inline import INLINE
    from piegpu.kernel.templates import TEMPLATES
    assert set(TEMPLATES) == set(GroupOp.TEMPLATED)
    assert not set(INLINE) & (set(TEMPLATES) | set(GroupOp.ELEMENTWISE))
    assert set(OPS) - set(INLINE) - set(TEMPLATES) - set(GroupOp.ELEMENTWISE) == {"input", "chan_put"}


def test_the_where_lowered_table_names_real_files_and_every_target():
    doc = targets.__doc__
    files = set(re.findall(r"\b(\w+/\w+\.py)\b", doc))
    for group, names in re.findall(r"\b(\w+)/\{([\w,]+)\}\.py", doc):
        files |= {f"{group}/{n}.py" for n in names.split(",")}
    assert len(files) > 10 and all((ROOT / f).exists() for f in files), sorted(f for f in files
                                                                              if not (ROOT / f).exists())
    rows = {line.split()[0] for line in doc.splitlines() if line.startswith("    ") and line.split()}
    assert set(TARGETS) <= rows
    for line in doc.split("op (GroupOp")[1].splitlines()[1:]:
        for group in re.findall(r"\b[A-Z]{3,}\b", re.split(r"\s{2,}", line.strip())[0]):
            assert hasattr(GroupOp, group), group


def test_op_groups_come_from_the_table():
    assert set(GroupOp.RUNTIME) == {n for n, d in OPS.items() if d.runtime} == {
        "intrinsic", "chan_take", "chan_read", "chan_put"}
    assert set(GroupOp.COMMITTED) < set(GroupOp.CHANNEL) < set(GroupOp.RUNTIME)
    assert set(GroupOp.UNARY) | set(GroupOp.BINARY) < set(GroupOp.ELEMENTWISE)
    assert {"select", "cast", "bitcast"} <= set(GroupOp.ELEMENTWISE)
    for name, members in vars(GroupOp).items():
        if name.isupper():
            assert members and set(members) <= set(OPS), name
            assert list(members) == [n for n in OPS if n in members], f"{name} is not in table order"
