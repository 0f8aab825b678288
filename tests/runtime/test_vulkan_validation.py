"""piegpu under the Khronos Vulkan validation layer (synchronization validation on), and the batching
path on a second Vulkan driver (SwiftShader) against lavapipe.

Debian's chromium package (scripts/setup.sh installs it) ships the layer
(/usr/lib/chromium/libVkLayer_khronos_validation.so) and SwiftShader's ICD, but no layer manifest: the
test writes one into a temporary folder and enables the layer for a subprocess through the loader's
environment (VK_LAYER_PATH, VK_INSTANCE_LAYERS). The layer's settings come from the environment too:
VK_LAYER_VALIDATE_SYNC=1 is synchronization validation (the deprecated
VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT does the same plus a
warning), VK_LAYER_ENABLE_MESSAGE_LIMIT=0 lifts the default limit of 10 reports per message id, and
VK_LAYER_REPORT_FLAGS=info,warn,error adds the one info message listing the enabled checks, from which
the test confirms that "Synchronization" is on. The layer prints its reports to the process's stdout
(its default debug_action, VK_DBG_LAYER_ACTION_LOG_MSG); wgpu's logger does not see them.

One exception is allowed, and only in its exact wording: naga (wgpu-native 29) decorates every array
type with an ArrayStride, also an array in workgroup memory, where Vulkan forbids explicit layout
(VUID-StandaloneSpirv-None-10684; naga issue gfx-rs/wgpu#7696, fix in review as gfx-rs/wgpu#9295). No
WGSL spelling of a workgroup array avoids it (an array, a struct -- Offset -- and an array of atomics
are all flagged; only scalars, vectors and matrices are not), and the epilogue kernels' reductions
(piegpu/wgsl/emit.py, shared arrays) need one. Function-local arrays, which hit the same rule, are
kept out of the shaders lavapipe runs (the formats' block_decode, matvec_decode's accumulators, the
epilogue snippets' rows: shaders/), so such a report fails this test. Still holding them: attend.wgsl's
query and accumulators, in attention.wgsl and attention_tokens.wgsl, which adapters without lavapipe's
subgroup forms run (SwiftShader, GPUs); attention.wgsl needs workgroup arrays besides. spirv-val stops
at a module's first error, so a module with a workgroup array is not checked further.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/lib/chromium")
LAYER_SO = CHROMIUM / "libVkLayer_khronos_validation.so"
SWIFTSHADER_ICD = CHROMIUM / "vk_swiftshader_icd.json"
REPO = Path(__file__).resolve().parents[2]

# a line of a layer report that makes the run fail
REPORT = re.compile(r"Validation Error|VUID-|SYNC-HAZARD")
# the one tolerated report: naga's ArrayStride on a workgroup array (see the module docstring)
NAGA_WORKGROUP_STRIDE = re.compile(
    r"Validation Error: \[ VUID-StandaloneSpirv-None-10684 \].*?\n"
    r"vkCreateShaderModule\(\): pCreateInfo->pCode \(spirv-val produced an error\):\n"
    r"Invalid explicit layout decorations on type '[^']*', the Workgroup storage class has an explicit layout "
    r"from the ArrayStride decoration\n"
    r"\s*%\w+ = OpVariable %_ptr_Workgroup_\w+ Workgroup\n"
    r"(?:.*\n)*?The Vulkan spec states: .*\n")

# Runs in the subprocess: load the default model, greedy and seeded top-p generate, greedy at window 8 (passes
# submitted in groups of 4), a batch of 4
# (window 4: several passes in flight, device-fed tokens, reused bind groups), six prompts over two rows (rows
# handed over with passes in flight), and one /v1/completions request through the server at window 2.
WORKLOAD = textwrap.dedent('''
    import json, socket, sys, threading, time, urllib.request
    import piegpu
    from piegpu.runtime.device import get_device

    t0 = time.perf_counter()
    model = piegpu.load_model(verbose=False)
    print("adapter:", get_device().name, flush=True)
    print("greedy:", repr(model.generate("The capital of France is", max_tokens=8).run()), flush=True)
    print("top-p:", repr(model.generate("Once upon a time", max_tokens=8, sampler="top-p", top_p=0.9,
                                        temperature=0.8, seed=7).run()), flush=True)
    # a GPU's window: 8 passes in flight, four compute passes and their copies in one command buffer a submit
    print("groups:", repr(model.generate("The capital of France is", max_tokens=10, window=8).run()), flush=True)
    gens = model.generate_batch(["Hello", "The sky is", "1, 2, 3,", "Water boils at"], max_tokens=8, window=4)
    print("batch:", [g.tokens for g in gens], flush=True)
    # six prompts over two rows at window 4: rows change hands with passes in flight (runtime/batch_run.py)
    gens = model.generate_batch(["Hello", "The sky is", "1, 2, 3,", "Water boils at", "Red, green,", "Once"],
                                max_tokens=5, max_batch=2, window=4)
    print("handovers:", [g.tokens for g in gens], flush=True)

    import uvicorn
    from piegpu.server import Engine, build_app
    engine = Engine(model, max_batch=4, window=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_app(engine, "default"), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    engine.start()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            sys.exit("the server did not start")
        time.sleep(0.05)
    body = json.dumps({"model": "default", "prompt": "Once upon a time", "max_tokens": 4,
                       "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        print("server:", json.loads(r.read())["choices"][0]["text"].__repr__(), flush=True)
    server.should_exit = True
    thread.join(30)
    engine.stop()
    print(f"workload done in {time.perf_counter() - t0:.1f} s", flush=True)
''')

# Runs in the subprocess under one ICD: the adapter, then generate_batch's greedy tokens as JSON.
BATCH_TOKENS = textwrap.dedent('''
    import json
    import piegpu
    from piegpu.runtime.device import get_device
    model = piegpu.load_model(verbose=False)
    info = dict(get_device().adapter.info)
    gens = model.generate_batch(["The capital of France is", "1, 2, 3, 4,"], max_tokens=6, window=2)
    # three prompts over two rows: the third takes a row over with passes in flight (runtime/batch_run.py)
    more = model.generate_batch(["Hello", "The sky is", "Water boils at"], max_tokens=4, max_batch=2, window=2)
    print("RESULT " + json.dumps({"adapter": info, "tokens": [g.tokens for g in gens + more]}), flush=True)
''')


def _require(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} is missing: Debian's chromium package ships it. Fix: bash scripts/setup.sh "
                    "(or apt-get install chromium)")


def _layer_env(tmp_path: Path) -> dict:
    """The environment that loads the validation layer with synchronization validation."""
    (tmp_path / "VkLayer_khronos_validation.json").write_text(json.dumps({
        "file_format_version": "1.2.0",
        "layer": {"name": "VK_LAYER_KHRONOS_validation", "type": "GLOBAL", "library_path": str(LAYER_SO),
                  "api_version": "1.4.309", "implementation_version": "1",
                  "description": "Khronos validation layer (Debian's chromium build)"}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VK_LAYER_") and k != "VK_INSTANCE_LAYERS"}
    env.update(VK_LAYER_PATH=str(tmp_path), VK_INSTANCE_LAYERS="VK_LAYER_KHRONOS_validation",
               VK_LAYER_VALIDATE_SYNC="1", VK_LAYER_ENABLE_MESSAGE_LIMIT="0",
               VK_LAYER_REPORT_FLAGS="info,warn,error", PYTHONUNBUFFERED="1")
    return env


def _run(script: str, env: dict, timeout: float) -> str:
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=timeout)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"the script exited with {r.returncode}:\n{out[-6000:]}"
    return out


def layer_failures(out: str) -> tuple:
    """(the reports that fail the run, the count of tolerated naga workgroup reports) in a process's output."""
    tolerated = len(NAGA_WORKGROUP_STRIDE.findall(out))
    rest = NAGA_WORKGROUP_STRIDE.sub("", out)
    reports = re.split(r"\n(?=Validation (?:Error|Warning|Information|Performance Warning|Verbose): )", "\n" + rest)
    return [r.strip() for r in reports if REPORT.search(r)], tolerated


@pytest.mark.slow
def test_default_model_is_clean_under_validation_with_sync(tmp_path):
    """generate (greedy, top-p), generate_batch and a server request: no validation error, no sync hazard."""
    _require(CHROMIUM)
    _require(LAYER_SO)
    out = _run(WORKLOAD, _layer_env(tmp_path), timeout=300)
    assert "workload done" in out, out[-4000:]
    shown = ("adapter:", "greedy:", "top-p:", "groups:", "batch:", "server:", "workload done")
    print("\n".join(x for x in out.splitlines() if x.startswith(shown)))
    enabled = re.search(r"Current Validation Enabled:\n((?:\s+- .*\n)+)", out)
    assert enabled, f"the layer did not load (no CURRENT-VALIDATION-ENABLED report):\n{out[-4000:]}"
    assert "- Synchronization" in enabled.group(1), f"synchronization validation is off:\n{enabled.group(0)}"
    failures, tolerated = layer_failures(out)
    ids = sorted({m for f in failures for m in re.findall(r"VUID-[\w-]+|SYNC-HAZARD[\w-]*", f)})
    print(f"validation layer: {len(failures)} reports failing {ids}; {tolerated} tolerated "
          "(naga's ArrayStride on workgroup arrays, gfx-rs/wgpu#7696)")
    assert not failures, (f"{len(failures)} validation reports {ids}:\n\n" + "\n\n".join(failures[:20])
                          + ("\n\n..." if len(failures) > 20 else ""))


def test_layer_failures_parses_reports():
    """The report filter: a naga workgroup report is tolerated, a function-local one and a hazard are not."""
    wg = ("Validation Error: [ VUID-StandaloneSpirv-None-10684 ] | MessageID = 0xb210f7c2\n"
          "vkCreateShaderModule(): pCreateInfo->pCode (spirv-val produced an error):\n"
          "Invalid explicit layout decorations on type '7[%7]', the Workgroup storage class has an explicit "
          "layout from the ArrayStride decoration\n"
          "  %17 = OpVariable %_ptr_Workgroup__arr_float_uint_128 Workgroup\n\n"
          "Command to reproduce:\n\tspirv-val <input.spv> --relax-block-layout --target-env vulkan1.3\n\n"
          "The Vulkan spec states: All variables must have valid explicit layout decorations (https://x)\n")
    fn = wg.replace("the Workgroup storage", "the Function storage").replace(
        "%17 = OpVariable %_ptr_Workgroup__arr_float_uint_128 Workgroup",
        "%214 = OpVariable %_ptr_Function__arr_v4float_uint_8 Function %211")
    hazard = ("Validation Error: [ SYNC-HAZARD-READ-AFTER-WRITE ] | MessageID = 0xe4d96472\n"
              "vkCmdDispatch(): Hazard READ_AFTER_WRITE for VkBuffer 0x1[]\n")
    assert layer_failures("greedy: 'x'\n" + wg + wg) == ([], 2)
    failures, tolerated = layer_failures("a\n" + wg + fn + hazard + "done\n")
    assert tolerated == 1 and len(failures) == 2
    assert "Function storage" in failures[0] and "SYNC-HAZARD" in failures[1]


@pytest.mark.slow
def test_batch_greedy_tokens_equal_on_swiftshader_and_lavapipe():
    """generate_batch's greedy tokens on SwiftShader (storage-buffer weights, no subgroups: other kernels)
    equal lavapipe's, also where a row changes hands with passes in flight."""
    _require(CHROMIUM)
    _require(SWIFTSHADER_ICD)
    base = {k: v for k, v in os.environ.items()
            if k not in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES", "VK_INSTANCE_LAYERS", "PIEGPU_ADAPTER")}
    results = {}
    for name, extra in (("lavapipe", {}),
                        ("swiftshader", {"VK_ICD_FILENAMES": str(SWIFTSHADER_ICD),
                                         "VK_DRIVER_FILES": str(SWIFTSHADER_ICD)})):
        out = _run(BATCH_TOKENS, {**base, **extra}, timeout=300)
        line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
        assert line, out[-4000:]
        results[name] = json.loads(line[len("RESULT "):])
        print(name, results[name]["adapter"].get("device"), results[name]["tokens"])
    assert "llvmpipe" in results["lavapipe"]["adapter"]["device"].lower(), results["lavapipe"]["adapter"]
    assert "swiftshader" in results["swiftshader"]["adapter"]["device"].lower(), results["swiftshader"]["adapter"]
    assert results["swiftshader"]["tokens"] == results["lavapipe"]["tokens"]
