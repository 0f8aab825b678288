"""A small SPIR-V disassembler for debugging emitted modules (no external tools needed).

`disassemble(module)` prints one instruction per line in spirv-dis style, with OpName
names in place of ids, enum operands by name and constants by value. Opcodes outside
the emitter's table print as `Op<number>` with raw operands.
"""

from __future__ import annotations

import struct

from . import spec

OPS = spec.OPCODES
_ENUMS = {
    "storage": spec.STORAGE_CLASSES,
    "decoration": spec.DECORATIONS,
    "builtin": spec.BUILTINS,
    "capability": {1: "Shader", 9: "Float16", 11: "Int64"},
    "addressing": {0: "Logical"},
    "memory": {1: "GLSL450"},
    "model": {5: "GLCompute"},
    "mode": {17: "LocalSize"},
}
# Operand kinds after the (type, result) ids: i id, l literal, s string, c constant value, x GLSL
# instruction, m control mask, e:<enum>; a leading * repeats the kind to the end.
_SIGNATURES = {
    "OpCapability": "e:capability", "OpExtInstImport": "s", "OpMemoryModel": "e:addressing e:memory",
    "OpEntryPoint": "e:model i s *i", "OpExecutionMode": "i e:mode *l", "OpName": "i s",
    "OpMemberName": "i l s", "OpDecorate": "i e:decoration *l", "OpMemberDecorate": "i l e:decoration *l",
    "OpTypeInt": "l l", "OpTypeFloat": "l", "OpTypeVector": "i l", "OpTypePointer": "e:storage i",
    "OpConstant": "c", "OpVariable": "e:storage", "OpFunction": "m i", "OpExtInst": "i x *i",
    "OpCompositeExtract": "i *l", "OpLoopMerge": "i i m", "OpSelectionMerge": "i m", "OpSource": "l l",
}


def words_of(module) -> list:
    """The words of a module given as bytes or a list of ints."""
    if isinstance(module, (bytes, bytearray, memoryview)):
        b = bytes(module)
        if len(b) % 4:
            raise ValueError(f"a SPIR-V module is whole 32-bit words; got {len(b)} bytes")
        return list(struct.unpack(f"<{len(b) // 4}I", b))
    return [int(w) for w in module]


def instructions(module) -> list:
    """(opcode, operand words) for every instruction after the 5-word header."""
    w = words_of(module)
    if len(w) < 5 or w[0] != spec.MAGIC:
        raise ValueError("not a SPIR-V module (bad magic number)")
    out, pos = [], 5
    while pos < len(w):
        count, opcode = w[pos] >> 16, w[pos] & 0xFFFF
        if count == 0 or pos + count > len(w):
            raise ValueError(f"truncated or corrupt instruction at word {pos}")
        out.append((opcode, w[pos + 1: pos + count]))
        pos += count
    return out


def _string(words: list) -> tuple:
    """(decoded string, words consumed)."""
    b = b""
    for n, word in enumerate(words):
        chunk = struct.pack("<I", word)
        if b"\0" in chunk:
            return (b + chunk[: chunk.index(b"\0")]).decode("utf-8", "replace"), n + 1
        b += chunk
    return b.decode("utf-8", "replace"), len(words)


class _Names:
    """Id -> display name: OpName names, then spirv-dis-like names for types and constants."""

    def __init__(self, insts: list):
        self.names: dict = {}
        self.types: dict = {}  # type id -> ("int", width, signed) | ("float", width)
        self._used: set = set()
        for opcode, ops in insts:
            if opcode == OPS["OpName"]:
                self._set(ops[0], _string(ops[1:])[0])
        for opcode, ops in insts:
            if opcode == OPS["OpTypeInt"]:
                self.types[ops[0]] = ("int", ops[1], ops[2])
                self._set(ops[0], ("int" if ops[2] else "uint") + ("" if ops[1] == 32 else str(ops[1])))
            elif opcode == OPS["OpTypeFloat"]:
                self.types[ops[0]] = ("float", ops[1])
                self._set(ops[0], "float" if ops[1] == 32 else f"float{ops[1]}")
            elif opcode == OPS["OpTypeBool"]:
                self._set(ops[0], "bool")
            elif opcode == OPS["OpTypeVoid"]:
                self._set(ops[0], "void")
            elif opcode == OPS["OpTypeVector"]:
                self._set(ops[0], f"v{ops[2]}{self._bare(ops[1])}")
            elif opcode == OPS["OpTypeRuntimeArray"]:
                self._set(ops[0], f"rtarr_{self._bare(ops[1])}")
            elif opcode == OPS["OpTypeArray"]:
                self._set(ops[0], f"arr_{self._bare(ops[1])}_{self._bare(ops[2])}")
            elif opcode == OPS["OpTypePointer"]:
                self._set(ops[0], f"ptr_{spec.STORAGE_CLASSES.get(ops[1], ops[1])}_{self._bare(ops[2])}")
            elif opcode == OPS["OpConstant"] and len(ops) == 3:
                value = self.constant(ops[0], ops[2]).split(" ")[0].replace("-", "n").replace(".", "_")
                self._set(ops[1], f"{self._bare(ops[0])}_{value}")
            elif opcode in (OPS["OpConstantTrue"], OPS["OpConstantFalse"]):
                self._set(ops[1], "true" if opcode == OPS["OpConstantTrue"] else "false")

    def _set(self, i: int, name: str) -> None:
        if i in self.names:
            return
        base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name) or "_"
        unique, k = base, 1
        while unique in self._used:
            k += 1
            unique = f"{base}_{k}"
        self._used.add(unique)
        self.names[i] = unique

    def _bare(self, i: int) -> str:
        return str(self.names.get(i, i))

    def id(self, i: int) -> str:
        """`%name` or `%number`."""
        return f"%{self._bare(i)}"

    def constant(self, type_id: int, value: int) -> str:
        """A 32-bit constant's value as its type reads it."""
        t = self.types.get(type_id)
        if t and t[0] == "float" and t[1] == 32:
            f = struct.unpack("<f", struct.pack("<I", value))[0]
            return f"{f!r}" if f == f and abs(f) != float("inf") else f"0x{value:08x} ; {f}"
        if t and t[0] == "int" and t[2] and value >= 1 << 31:
            return str(value - (1 << 32))
        return str(value)


def _operands(name: str, ops: list, names: _Names, type_id) -> str:
    sig = _SIGNATURES.get(name, "*i").split()
    parts, pos = [], 0
    decoration = None
    for k, kind in enumerate(sig):
        repeat = kind.startswith("*")
        kind = kind.lstrip("*")
        while pos < len(ops):
            if kind == "i":
                parts.append(names.id(ops[pos]))
                pos += 1
            elif kind == "s":
                s, n = _string(ops[pos:])
                parts.append(f'"{s}"')
                pos += n
            elif kind == "c":
                parts.append(names.constant(type_id, ops[pos]))
                pos += 1
            elif kind == "x":
                parts.append(spec.GLSL_NAMES.get(ops[pos], str(ops[pos])))
                pos += 1
            elif kind.startswith("e:"):
                table = _ENUMS[kind[2:]]
                parts.append(table.get(ops[pos], str(ops[pos])))
                if kind == "e:decoration":
                    decoration = ops[pos]
                pos += 1
            elif kind == "m":  # function / selection / loop control mask
                parts.append("None" if ops[pos] == 0 else hex(ops[pos]))
                pos += 1
            else:  # literal; a BuiltIn decoration's literal is an enum
                v = ops[pos]
                parts.append(spec.BUILTINS.get(v, str(v)) if decoration == spec.DEC_BUILTIN else str(v))
                pos += 1
            if not repeat:
                break
    parts += [str(v) for v in ops[pos:]]  # anything the signature did not cover
    return " ".join(parts)


def disassemble(module) -> str:
    """The module as text: a header comment, then one instruction per line."""
    w = words_of(module)
    insts = instructions(w)
    names = _Names(insts)
    major, minor = (w[1] >> 16) & 0xFF, (w[1] >> 8) & 0xFF
    lines = [f"; SPIR-V {major}.{minor}, generator {w[2]:#x}, bound {w[3]}"]
    for opcode, ops in insts:
        name = spec.OPNAMES.get(opcode, f"Op{opcode}")
        if opcode in spec.HAS_TYPE_AND_RESULT and len(ops) >= 2:
            text = f"{names.id(ops[1])} = {name} {names.id(ops[0])} {_operands(name, ops[2:], names, ops[0])}"
        elif opcode in spec.HAS_RESULT_ONLY and ops:
            text = f"{names.id(ops[0])} = {name} {_operands(name, ops[1:], names, None)}"
        else:
            text = f"{name} {_operands(name, ops, names, None)}"
        indent = "" if opcode in (OPS["OpFunction"], OPS["OpFunctionEnd"], OPS["OpLabel"]) else "  "
        lines.append(indent + text.rstrip())
    return "\n".join(lines) + "\n"
