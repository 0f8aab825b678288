#!/usr/bin/env bash
# Runs the whole test suite on the real adapter (lavapipe on a CPU-only machine).
# Skips are failures here (PIEGPU_STRICT_SKIPS=1): setup.sh installs every checker.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# A cargo that runs: where the one on PATH does not (rustup's proxy with no default toolchain for this user), Debian's,
# which setup.sh installs, with Debian's rustc and rustdoc (cargo runs the rustc on PATH, the proxy too).
CARGO_BIN=cargo
if ! cargo --version >/dev/null 2>&1 && /usr/bin/cargo --version >/dev/null 2>&1; then
  CARGO_BIN=/usr/bin/cargo
  export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
fi
export PIEGPU_STRICT_SKIPS=1
python3 -m pytest -q -p no:cacheprovider tests "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "test.sh: pytest collected no tests -- that is a failure" >&2
  exit 1
fi
# The JS SDK (sdk/js): its own test run. A missing node fails here rather than skipping the SDK.
if ! command -v node >/dev/null 2>&1; then
  echo "test.sh: node is not installed, so the JS SDK tests (sdk/js) cannot run. Fix: install Node.js 20+" >&2
  exit 1
fi
(cd sdk/js && node --test test/*.test.js) || { echo "test.sh: the JS SDK tests (sdk/js) failed" >&2; exit 1; }
# The Rust SDK (sdk/rust, std only, no registry needed). A missing cargo fails here rather than skipping it.
if ! "$CARGO_BIN" --version >/dev/null 2>&1; then
  echo "test.sh: no cargo runs (\`cargo --version\` fails), so the Rust SDK tests (sdk/rust) cannot run. Fix: install Rust (rustup default stable, or Debian's cargo)" >&2
  exit 1
fi
(cd sdk/rust && "$CARGO_BIN" test --offline --quiet) || { echo "test.sh: the Rust SDK tests (sdk/rust) failed" >&2; exit 1; }
exit $rc
