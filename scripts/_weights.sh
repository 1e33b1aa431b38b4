# Sourced by scripts/test.sh and scripts/gpu_check.sh (from the repository root): where the
# model tier's Kokoro-82M weights come from, decided before anything slow runs, so a machine
# that cannot have them stops at once with one line saying what to set.
#
#   SPEECHD_TEST_MODEL_DIR, if set (it must hold config.json);
#   else ../shared/kokoro-weights/prepare.py builds them offline (CI; SPEECHD_KOKORO_WEIGHTS
#     names another builder folder): it needs torch, so it only sets $build_weights for the
#     caller to run once its virtual environment is there;
#   else scripts/fetch_weights.py fetches them from the Hugging Face hub (HF_ENDPOINT for a
#     mirror), standard library only, into $SPEECHD_CACHE/kokoro-82m.
# Exports SPEECHD_CACHE and SPEECHD_TEST_MODEL_DIR; exits the caller (1) when it cannot.
export SPEECHD_CACHE="${SPEECHD_CACHE:-$HOME/.cache/speechd}"
build_weights=""
if [ -n "${SPEECHD_TEST_MODEL_DIR:-}" ]; then
  if [ ! -f "$SPEECHD_TEST_MODEL_DIR/config.json" ]; then
    echo "$0: SPEECHD_TEST_MODEL_DIR=$SPEECHD_TEST_MODEL_DIR has no config.json: point it at a folder laid out like hexgrad/Kokoro-82M" >&2
    exit 1
  fi
else
  weights="${SPEECHD_KOKORO_WEIGHTS:-$(pwd)/../shared/kokoro-weights}"
  export SPEECHD_TEST_MODEL_DIR="$SPEECHD_CACHE/kokoro-82m"
  if [ -f "$weights/prepare.py" ]; then
    build_weights="$weights/prepare.py"
  else
    python3 scripts/fetch_weights.py "$SPEECHD_TEST_MODEL_DIR" || exit 1
  fi
fi
