#!/bin/sh
# The layout every speechd image shares (cpu, cuda, jetson), run once as root at build time:
# a non-root user `speechd` (uid 1000, where the base has not given that number away) and the
# two folders its volumes mount on.
#
#   /var/lib/speechd     the store (SPEECHD_DATA_DIR): casts, jobs, receipts; keep it
#   /var/cache/speechd   the model cache: Hugging Face's (HF_HOME), the ONNX export
#                        (SPEECHD_CACHE_DIR), TensorRT's engines; can be made again
set -eu
uid=""
getent passwd 1000 >/dev/null || uid="--uid 1000"
# shellcheck disable=SC2086
useradd $uid --user-group --create-home --home-dir /home/speechd --shell /bin/sh speechd
for dir in /var/lib/speechd /var/cache/speechd; do
  mkdir -p "$dir"
  chown speechd:speechd "$dir"
  chmod 0750 "$dir"
done
