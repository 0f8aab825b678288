#!/usr/bin/env bash
# Runs the whole test suite on the real adapter (lavapipe on a CPU-only machine).
# Skips are failures here (PIEGPU_STRICT_SKIPS=1): setup.sh installs every checker.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
export PIEGPU_STRICT_SKIPS=1
python3 -m pytest -q -p no:cacheprovider tests "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "test.sh: pytest collected no tests -- that is a failure" >&2
  exit 1
fi
exit $rc
