#!/usr/bin/env bash
# The whole test run, from a fresh machine: the real Kokoro-82M weights, system packages, a
# virtual environment, the static checks (ruff, Python 3.10 with vermin, aarch64 wheels for
# Jetson), the manual (`mkdocs build --strict`: a broken link or anchor in docs/ fails), then
# every test tier but `gpu` (the container tier among them: podman and its tools through apt).
# Extra arguments go to pytest. Idempotent: a second run fetches and builds nothing again (the
# wheel check is cached for a week; the container tier's base image and layers are kept). The
# README's second set-up command; docs/getting-started.md says more.
#
# The weights for the model tier are decided first (scripts/_weights.sh says how), so a
# machine that cannot have them stops at once: SPEECHD_TEST_MODEL_DIR, else built offline by
# ../shared/kokoro-weights (CI), else fetched from the Hugging Face hub.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/_weights.sh

need=()
command -v ffmpeg >/dev/null || need+=(ffmpeg)
command -v chromium >/dev/null || need+=(chromium)
# The manual's reverse-proxy settings are run for real (docs/operations/proxies.md, by
# tests/api/gateway/test_behind_real_proxy.py).
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || need+=(nginx-light)
command -v caddy >/dev/null || need+=(caddy)
# The container tier builds and runs the images, compose.yaml and the Home Assistant add-on
# with podman on runc (tests/containers; mmdebstrap makes the base image, registries aside).
for tool in podman runc buildah mmdebstrap fuse-overlayfs slirp4netns; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
command -v newuidmap >/dev/null || need+=(uidmap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "scripts/test.sh: please install ${need[*]} (Debian: apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
# Ubuntu 22.04's (JetPack 6's) venv brings pip 22.0; the wheel check needs 23.1 (a no-op after).
.venv/bin/python -m pip install -q --disable-pip-version-check 'pip>=23.1'
# torch is pinned here (a CPU wheel), never in the package: GPU and Jetson users bring their own.
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0 -e '.[test]'

export HF_HUB_OFFLINE=1
export TORCHINDUCTOR_CACHE_DIR="$SPEECHD_CACHE/inductor"
if [ -n "$build_weights" ]; then
  .venv/bin/python "$build_weights" "$SPEECHD_TEST_MODEL_DIR" >/dev/null
fi

.venv/bin/ruff check speechd tests harness loadtest clients scripts containers
# Python 3.10 (JetPack 6) is supported but not installed here: a static minimum-version check.
.venv/bin/vermin -q -t=3.10- --violations --no-tips speechd clients harness loadtest scripts tests containers || {
  echo "scripts/test.sh: code above needs a newer Python than 3.10" >&2; exit 1; }
# Installable on a Jetson without a compiler: every runtime dependency but torch has a wheel
# for linux aarch64 on CPython 3.10 (JetPack 6) and 3.12 (JetPack 7).
.venv/bin/python scripts/check_aarch64_wheels.py
# The manual, offline (no web fonts; the flags page is rendered from the CLI by
# scripts/mkdocs_hooks.py), into build/site; the theme's end-of-life notice is not a failure.
# Its warnings are shown and fail the run; never --quiet, which drops the warnings --strict
# counts, so that a broken link passed (tests/scripts/test_docs.py runs this line on a tree
# with one).
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict 2>&1 | { grep -vE '^(INFO|  - )' || true; }
exec .venv/bin/pytest --run-all "$@"
