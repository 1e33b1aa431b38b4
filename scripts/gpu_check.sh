#!/usr/bin/env bash
# The GPU check: one command, meant to finish under 8 minutes on one GPU. Never run by CI.
#
#   bash scripts/gpu_check.sh [--device cuda|cuda:N|cpu] [--python PY] [--quick] [--skip-tests]
#
# Installs what it needs (unless --python names an interpreter that has it all): a virtual
# environment .venv-gpu that sees the system's packages (a Jetson's NVIDIA torch stays
# visible), torch from PyPI when no CUDA torch is there (x86_64 only: on a Jetson, install
# NVIDIA's wheel first, see docs/gpus.md), speechd with the nvml and test extras, and the
# Kokoro-82M weights (scripts/_weights.sh). Then scripts/gpu_check.py prints load and
# warm-up time, rtf per chunk length, whether two attempts of one chunk give identical
# bytes, the cost per item against batch size (torch, and ONNX Runtime where it has the
# device's provider), peak GPU memory, time to first audio at 1, 4 and 16 streams through
# `speechd serve` with --max-batch 1 and with auto, torch against ONNX Runtime (onnxruntime-gpu), and runs the model tier on
# the device. `--device cpu` is a dry run of the same steps on the CPU (smaller sizes, no
# runtime comparison), for where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
device=cuda
python=""
pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --quick|--skip-tests) pass+=("$1"); shift ;;
    *) echo "scripts/gpu_check.sh: unknown argument $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done

. scripts/_weights.sh

if [ -z "$python" ]; then
  [ -x .venv-gpu/bin/python ] || python3 -m venv --system-site-packages .venv-gpu
  python=.venv-gpu/bin/python
  if ! "$python" -c 'import sys, torch; sys.exit(0 if sys.argv[1] == "cpu" or torch.cuda.is_available() else 1)' "$device" 2>/dev/null; then
    if [ "$(uname -m)" = aarch64 ]; then
      echo "scripts/gpu_check.sh: no CUDA torch here: install NVIDIA's torch wheel for this JetPack first (docs/gpus.md, Jetson)" >&2
      exit 1
    fi
    "$python" -m pip install -q --disable-pip-version-check torch  # PyPI's x86_64 torch has CUDA
  fi
  keep="$(mktemp)"
  # The installed distribution's version, not torch.__version__: PyPI's CUDA wheel says
  # 2.13.0 in its metadata and 2.13.0+cu130 in torch.__version__, and a constraint on the
  # latter matches nothing, so pip refused the install (found in the cuda image).
  "$python" -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' > "$keep"
  "$python" -m pip install -q --disable-pip-version-check -c "$keep" -e '.[nvml,test]'
  rm -f "$keep"
  # The test extra brings the CPU onnxruntime; both wheels are the module onnxruntime, so on
  # x86_64 CUDA it is swapped for onnxruntime-gpu (a Jetson brings NVIDIA's own build).
  if [ "$device" != cpu ] && [ "$(uname -m)" = x86_64 ] && ! "$python" -c 'import onnxruntime, sys; sys.exit("CUDAExecutionProvider" not in onnxruntime.get_available_providers())' 2>/dev/null; then
    "$python" -m pip uninstall -q -y onnxruntime
    "$python" -m pip install -q --disable-pip-version-check onnxruntime-gpu
  fi
fi
if [ -n "$build_weights" ]; then
  "$python" "$build_weights" "$SPEECHD_TEST_MODEL_DIR" >/dev/null
fi

export HF_HUB_OFFLINE=1 TORCHINDUCTOR_CACHE_DIR="$SPEECHD_CACHE/inductor"
export PYTHONPATH="$(pwd):$(pwd)/clients${PYTHONPATH:+:$PYTHONPATH}"
echo "scripts/gpu_check.sh: ready to measure $((SECONDS - started)) s after start"
exec "$python" scripts/gpu_check.py --model-dir "$SPEECHD_TEST_MODEL_DIR" --device "$device" \
  --budget-s "$((470 - (SECONDS - started)))" "${pass[@]}"
