#!/usr/bin/env bash
# The CPU's decoder graphs (`--graph`): ONNX Runtime's float, fused and int8 decoders timed
# and checked against torch's float32 on the CPU at hand. Never run by CI: run it on the
# machine whose figures you want, quiet (one run at a time, nothing else busy).
#
#   bash scripts/cpu_graph_check.sh [--python PY] [--threads N] [--rounds N]
#
# Meant above all for ARM boards with 8-bit dot products (a Jetson Orin's CPU, a Raspberry
# Pi 5: `grep -w asimddp /proc/cpuinfo`), where ONNX Runtime's int8 convolutions run on its
# dot-product kernels, which a x86 machine cannot time: the int8 graph is the same ONNX
# there (QuantizeLinear, QLinearConv, DequantizeLinear), its numerics are checked on x86 by
# the model tier, and this script is what times it on the board. Also fine on any x86 CPU.
#
# Uses PY (default .venv/bin/python: `pip install -e '.[onnx,test]'`, with torch and kokoro
# for the export and the reference) and the weights scripts/_weights.sh finds. The first run
# exports the weights (~1 minute) and builds the graphs (a few minutes; more on a board).
# Prints the CPU's dot-product flags, then `loadtest.bench_engine` with the three graphs:
# compute per audio second per chunk length with each graph's ratio to the float graph
# (section 1), and quality against torch (section 6: durations, log-spectral distance,
# recall), with the load average before and after. The graph `--graph auto` would take is
# the fastest within its bound and 5% faster than the more exact one.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --threads|--rounds) pass+=("$1" "$2"); shift 2 ;;
    *) echo "scripts/cpu_graph_check.sh: unknown argument $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done

. scripts/_weights.sh
if [ -n "$build_weights" ]; then
  "$python" "$build_weights" "$SPEECHD_TEST_MODEL_DIR" >/dev/null
fi
export HF_HUB_OFFLINE=1
export PYTHONPATH="$(pwd):$(pwd)/clients${PYTHONPATH:+:$PYTHONPATH}"

echo "CPU: $(uname -m), $(nproc) cores; dot-product flags:" \
  "$(grep -m1 -owE 'avx512_vnni|avx_vnni|amx_int8|asimddp|i8mm' /proc/cpuinfo | sort -u | tr '\n' ' ' || true)"
exec "$python" -m loadtest.bench_engine --model-dir "$SPEECHD_TEST_MODEL_DIR" --device cpu \
  --engines torch,onnx --graphs float,fused,int8 --section 1 --section 6 "${pass[@]}"
