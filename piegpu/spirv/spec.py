"""Numbers from the SPIR-V 1.3 and GLSL.std.450 specifications that the emitter and disassembler use.

Only what piegpu emits is listed; the disassembler prints anything else as `Op<number>`.
"""

from __future__ import annotations

MAGIC = 0x07230203
VERSION_1_3 = 0x00010300
GENERATOR = 0  # piegpu has no registered generator id; 0 reads as "unknown tool"

# opcode name -> number
OPCODES = {
    "OpNop": 0, "OpSource": 3, "OpName": 5, "OpMemberName": 6, "OpExtension": 10, "OpExtInstImport": 11,
    "OpExtInst": 12, "OpMemoryModel": 14, "OpEntryPoint": 15, "OpExecutionMode": 16, "OpCapability": 17,
    "OpTypeVoid": 19, "OpTypeBool": 20, "OpTypeInt": 21, "OpTypeFloat": 22, "OpTypeVector": 23,
    "OpTypeArray": 28, "OpTypeRuntimeArray": 29, "OpTypeStruct": 30, "OpTypePointer": 32,
    "OpTypeFunction": 33, "OpConstantTrue": 41, "OpConstantFalse": 42, "OpConstant": 43,
    "OpFunction": 54, "OpFunctionParameter": 55, "OpFunctionEnd": 56, "OpFunctionCall": 57,
    "OpVariable": 59, "OpLoad": 61, "OpStore": 62, "OpAccessChain": 65, "OpDecorate": 71,
    "OpMemberDecorate": 72, "OpCompositeExtract": 81,
    "OpConvertFToU": 109, "OpConvertFToS": 110, "OpConvertSToF": 111, "OpConvertUToF": 112, "OpBitcast": 124,
    "OpSNegate": 126, "OpFNegate": 127, "OpIAdd": 128, "OpFAdd": 129, "OpISub": 130, "OpFSub": 131,
    "OpIMul": 132, "OpFMul": 133, "OpUDiv": 134, "OpSDiv": 135, "OpFDiv": 136, "OpUMod": 137, "OpSRem": 138,
    "OpLogicalEqual": 164, "OpLogicalNotEqual": 165, "OpLogicalOr": 166, "OpLogicalAnd": 167,
    "OpLogicalNot": 168, "OpSelect": 169, "OpIEqual": 170, "OpINotEqual": 171, "OpUGreaterThan": 172,
    "OpSGreaterThan": 173, "OpUGreaterThanEqual": 174, "OpSGreaterThanEqual": 175, "OpULessThan": 176,
    "OpSLessThan": 177, "OpULessThanEqual": 178, "OpSLessThanEqual": 179, "OpFOrdEqual": 180,
    "OpFUnordEqual": 181, "OpFOrdNotEqual": 182, "OpFUnordNotEqual": 183, "OpFOrdLessThan": 184,
    "OpFUnordLessThan": 185, "OpFOrdGreaterThan": 186, "OpFUnordGreaterThan": 187,
    "OpFOrdLessThanEqual": 188, "OpFUnordLessThanEqual": 189, "OpFOrdGreaterThanEqual": 190,
    "OpFUnordGreaterThanEqual": 191, "OpShiftRightLogical": 194, "OpShiftRightArithmetic": 195,
    "OpShiftLeftLogical": 196, "OpBitwiseOr": 197, "OpBitwiseXor": 198, "OpBitwiseAnd": 199, "OpNot": 200,
    "OpControlBarrier": 224, "OpMemoryBarrier": 225, "OpAtomicLoad": 227, "OpAtomicStore": 228,
    "OpAtomicExchange": 229, "OpAtomicCompareExchange": 230, "OpAtomicIAdd": 234, "OpAtomicUMax": 239,
    "OpLoopMerge": 246, "OpSelectionMerge": 247, "OpLabel": 248, "OpBranch": 249,
    "OpBranchConditional": 250, "OpReturn": 253, "OpReturnValue": 254, "OpUnreachable": 255,
}
OP = type("OP", (), {k[2:]: v for k, v in OPCODES.items()})  # OP.IAdd == 128
OPNAMES = {v: k for k, v in OPCODES.items()}

# Instructions whose first two operands are (result type, result id) / (result id) only.
HAS_TYPE_AND_RESULT = frozenset(OPCODES[n] for n in (
    "OpExtInst", "OpConstantTrue", "OpConstantFalse", "OpConstant", "OpFunction", "OpFunctionParameter",
    "OpFunctionCall", "OpVariable", "OpLoad", "OpAccessChain", "OpCompositeExtract", "OpConvertFToU",
    "OpConvertFToS", "OpConvertSToF", "OpConvertUToF", "OpBitcast", "OpSNegate", "OpFNegate", "OpIAdd",
    "OpFAdd", "OpISub", "OpFSub", "OpIMul", "OpFMul", "OpUDiv", "OpSDiv", "OpFDiv", "OpUMod", "OpSRem",
    "OpLogicalEqual", "OpLogicalNotEqual", "OpLogicalOr", "OpLogicalAnd", "OpLogicalNot", "OpSelect",
    "OpIEqual", "OpINotEqual", "OpUGreaterThan", "OpSGreaterThan", "OpUGreaterThanEqual",
    "OpSGreaterThanEqual", "OpULessThan", "OpSLessThan", "OpULessThanEqual", "OpSLessThanEqual",
    "OpFOrdEqual", "OpFUnordEqual", "OpFOrdNotEqual", "OpFUnordNotEqual", "OpFOrdLessThan",
    "OpFUnordLessThan", "OpFOrdGreaterThan", "OpFUnordGreaterThan", "OpFOrdLessThanEqual",
    "OpFUnordLessThanEqual", "OpFOrdGreaterThanEqual", "OpFUnordGreaterThanEqual", "OpShiftRightLogical",
    "OpShiftRightArithmetic", "OpShiftLeftLogical", "OpBitwiseOr", "OpBitwiseXor", "OpBitwiseAnd", "OpNot",
    "OpAtomicLoad", "OpAtomicExchange", "OpAtomicCompareExchange", "OpAtomicIAdd", "OpAtomicUMax"))
HAS_RESULT_ONLY = frozenset(OPCODES[n] for n in (
    "OpExtInstImport", "OpTypeVoid", "OpTypeBool", "OpTypeInt", "OpTypeFloat", "OpTypeVector", "OpTypeArray",
    "OpTypeRuntimeArray", "OpTypeStruct", "OpTypePointer", "OpTypeFunction", "OpLabel"))

# Operand enums
CAP_SHADER, CAP_FLOAT16, CAP_INT64 = 1, 9, 11
ADDRESSING_LOGICAL, MEMORY_GLSL450 = 0, 1
EXEC_GLCOMPUTE = 5
MODE_LOCAL_SIZE = 17

SC_INPUT, SC_WORKGROUP, SC_FUNCTION, SC_STORAGE_BUFFER = 1, 4, 7, 12
STORAGE_CLASSES = {0: "UniformConstant", 1: "Input", 2: "Uniform", 3: "Output", 4: "Workgroup",
                   6: "Private", 7: "Function", 9: "PushConstant", 12: "StorageBuffer"}

DEC_BLOCK, DEC_ARRAY_STRIDE, DEC_BUILTIN, DEC_BINDING, DEC_DESCRIPTOR_SET, DEC_OFFSET = 2, 6, 11, 33, 34, 35
DECORATIONS = {2: "Block", 3: "BufferBlock", 6: "ArrayStride", 11: "BuiltIn", 24: "NonWritable",
               33: "Binding", 34: "DescriptorSet", 35: "Offset"}

BUILTIN_NUM_WORKGROUPS, BUILTIN_WORKGROUP_ID, BUILTIN_LOCAL_INVOCATION_INDEX = 24, 26, 29
BUILTINS = {24: "NumWorkgroups", 26: "WorkgroupId", 27: "LocalInvocationId", 28: "GlobalInvocationId",
            29: "LocalInvocationIndex"}

SCOPE_DEVICE, SCOPE_WORKGROUP = 1, 2
SEM_RELAXED = 0
SEM_ACQUIRE_RELEASE, SEM_UNIFORM_MEMORY, SEM_WORKGROUP_MEMORY = 0x8, 0x40, 0x100

# GLSL.std.450 extended instruction numbers
GLSL = {
    "FAbs": 4, "SAbs": 5, "FSign": 6, "SSign": 7, "Floor": 8, "Sin": 13, "Cos": 14, "Tanh": 21, "Exp": 27,
    "Log": 28, "Exp2": 29, "Log2": 30, "Sqrt": 31, "InverseSqrt": 32, "FMin": 37, "UMin": 38, "SMin": 39,
    "FMax": 40, "UMax": 41, "SMax": 42, "FClamp": 43, "Ldexp": 53,
}
GLSL_NAMES = {v: k for k, v in GLSL.items()}
