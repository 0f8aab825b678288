"""The hand-written WGSL of shaders/: loading, composing snippets, compiling pipelines."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.resources
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..errors import CompileError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable  # Python 3.11+; 3.10 has the same class in importlib.abc

_BINDING = re.compile(r"@group\(0\)\s*@binding\((\d+)\)\s*var(?:<(uniform|storage,\s*read_write|storage,\s*read)>\s*\w+"
                      r"|\s+\w+\s*:\s*(texture_2d<u32>|texture_2d<f32>|texture_storage_2d<(?:rgba32float|rgba32uint),\s*write>))")
_TEXTURE_KINDS = {"texture_2d<u32>": "texture-uint", "texture_2d<f32>": "texture-float"}
_STORAGE_TEXTURES = {"rgba32float": "texture-rgba32-write", "rgba32uint": "texture-rgba32uint-write"}  # format -> kind


@lru_cache(maxsize=None)
def shader_root() -> Traversable:
    """The folder of the WGSL sources (an importlib.resources Traversable).

    A wheel carries the repository's top-level shaders/ as the resource package
    piegpu.shaders (mapped in pyproject.toml). A source checkout, run in place or
    installed editable, has no importable piegpu.shaders (setuptools' editable
    finder skips mapped folders without __init__.py): there it is the checkout's shaders/.
    """
    try:
        return importlib.resources.files("piegpu.shaders")
    except ModuleNotFoundError:
        checkout = Path(__file__).resolve().parents[2] / "shaders"
        if checkout.is_dir():
            return checkout
        raise CompileError(
            "piegpu's shaders are missing: the package piegpu.shaders is not installed and "
            f"{checkout} does not exist. Fix: reinstall piegpu (pip install --force-reinstall piegpu)"
        ) from None


_INCLUDE = re.compile(r"^//! include (\S+)[ \t]*$", re.M)


@lru_cache(maxsize=None)
def shader_source(name: str) -> str:
    """The text of shaders/<name>.wgsl (`name` may name a subfolder: "formats/q4_1").

    A line `//! include blocks/nibbles` is replaced by that file's text: helpers several
    snippets share (shaders/blocks/) are written once.
    """
    path = shader_root()
    for part in f"{name}.wgsl".split("/"):
        path = path / part
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CompileError(f"shader {path} is missing ({e}). Fix: reinstall piegpu") from e
    return _INCLUDE.sub(lambda m: shader_source(m.group(1)), text)


def includes(name: str) -> set:
    """The files shaders/<name>.wgsl includes, directly or through another include."""
    path = shader_root()
    for part in f"{name}.wgsl".split("/"):
        path = path / part
    direct = set(_INCLUDE.findall(path.read_text(encoding="utf-8")))
    return direct.union(*(includes(d) for d in direct))


def compose(name: str, params: dict, snippets: dict | None = None) -> str:
    """shaders/<name>.wgsl with {{KEY}} replaced by params and {{FORMAT}}/{{EPILOGUE}} by snippets."""
    text = shader_source(name)
    for key, snippet in (snippets or {}).items():
        text = text.replace("{{" + key + "}}", shader_source(snippet))
    for key, value in params.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, float):
            value = repr(float(value))
        text = text.replace("{{" + key + "}}", str(value))
    left = re.findall(r"\{\{(\w+)\}\}", text)
    if left:
        raise CompileError(f"shader {name}: unfilled parameters {sorted(set(left))}")
    return text


_SUBGROUP = re.compile(r"\bsubgroup\w*\s*\(|\bsubgroup_invocation_id\b")


def standard_wgsl(src: str) -> str:
    """src as standard WGSL for Tint (browsers): `enable subgroups;` first where it uses subgroups.

    The WGSL spec needs that directive before any subgroup builtin; naga in wgpu-native 0.32
    rejects it ("not yet implemented") and takes subgroup builtins without it, so the runtime
    composes without and this adds it for other compilers.
    """
    return "enable subgroups;\n" + src if _SUBGROUP.search(src) else src


def rows_per_call(epilogue: str) -> int:
    """Rows the matvec epilogue snippet `epilogue` ("epilogues/rope_kv") takes a call: 4 where it defines
    epilogue4, else 2 (shader_code.epilogue_calls)."""
    return 4 if "fn epilogue4(" in shader_source(epilogue) else 2

def binding_kinds(src: str) -> list:
    """[(binding index, 'uniform' | 'storage-read' | 'storage-rw' | 'texture-uint' | 'texture-float' |
    'texture-rgba32-write' | 'texture-rgba32uint-write')] declared in a WGSL source."""
    out = []
    for idx, kind, texture in _BINDING.findall(src):
        if texture:
            kind = _TEXTURE_KINDS.get(texture) or _STORAGE_TEXTURES[texture.split("<")[1].split(",")[0]]
        else:
            kind = "uniform" if kind == "uniform" else ("storage-rw" if "read_write" in kind else "storage-read")
        out.append((int(idx), kind))
    return sorted(out)


class Kernel:
    """A compiled compute pipeline and the bind group layout derived from its source."""

    def __init__(self, device, src: str, label: str):
        import wgpu
        self.label = label
        self.bindings = binding_kinds(src)
        types = {"uniform": wgpu.BufferBindingType.uniform,
                 "storage-read": wgpu.BufferBindingType.read_only_storage,
                 "storage-rw": wgpu.BufferBindingType.storage}
        textures = {"texture-uint": {"texture": {"sample_type": wgpu.TextureSampleType.uint, "view_dimension": "2d"}},
                    "texture-float": {"texture": {"sample_type": wgpu.TextureSampleType.unfilterable_float,
                                                  "view_dimension": "2d"}},
                    **{kind: {"storage_texture": {"access": wgpu.StorageTextureAccess.write_only, "format": fmt,
                                                  "view_dimension": "2d"}} for fmt, kind in _STORAGE_TEXTURES.items()}}
        entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                    **(textures[k] if k in textures else {"buffer": {"type": types[k]}})}
                   for i, k in self.bindings]
        self.layout = device.create_bind_group_layout(entries=entries)
        try:
            module = device.create_shader_module(code=src, label=label)
            self.pipeline = device.create_compute_pipeline(
                layout=device.create_pipeline_layout(bind_group_layouts=[self.layout]),
                compute={"module": module, "entry_point": "main"}, label=label)
        except Exception as e:
            raise CompileError(f"the driver rejected shader {label}: {e}") from e

    def bind(self, device, buffers: dict):
        """A bind group from {binding index: buffer, (buffer, offset, size) or texture view}."""
        entries = []
        for i, kind in self.bindings:
            b = buffers.get(i)
            if b is None:
                raise CompileError(f"shader {self.label}: binding {i} has no buffer")
            if kind.startswith("texture"):
                entries.append({"binding": i, "resource": b})
            elif isinstance(b, tuple):
                buf, off, size = b
                entries.append({"binding": i, "resource": {"buffer": buf, "offset": off, "size": size}})
            else:
                entries.append({"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}})
        return device.create_bind_group(layout=self.layout, entries=entries)


class ShaderLibrary:
    """Compiled kernels by source hash (one pipeline per distinct composed source)."""

    def __init__(self, device):
        self.device = device
        self._kernels: dict = {}
        self._by_params: dict = {}
        self.show_progress = True  # load_model(verbose=False) turns the compile bar off
        self._depth = 0  # compiling() blocks open
        self._bar = None

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """Kernels compiled inside the block (a pass's plan: the first ones compile) count on one progress bar."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0 and self._bar is not None:
                self._bar.close()
                self._bar = None

    def _count_compile(self) -> None:
        if self._depth and self.show_progress:
            if self._bar is None:
                from ..runtime.progress import bar
                self._bar = bar(None, "compiling shaders", unit="kernels", delay=0.5)
            self._bar.update(1)

    def kernel(self, name: str, params: dict, snippets: dict | None = None) -> Kernel:
        """The compiled kernel for shader `name` with these parameters and snippets."""
        memo = (name, tuple(sorted(params.items())), tuple(sorted((snippets or {}).items())))
        k = self._by_params.get(memo)
        if k is not None:  # building a plan asks for the same kernels many times: skip composing and hashing
            return k
        src = compose(name, params, snippets)
        key = hashlib.sha256(src.encode()).hexdigest()
        k = self._kernels.get(key)
        if k is None:
            shown = {a: (b if len(str(b)) <= 40 else f"<{len(str(b))} chars>") for a, b in params.items()}
            label = f"{name}[{','.join(f'{a}={b}' for a, b in sorted(shown.items()))}]"
            k = self._kernels[key] = Kernel(self.device, src, label)
            self._count_compile()
        self._by_params[memo] = k
        return k

    def __len__(self) -> int:
        return len(self._kernels)
