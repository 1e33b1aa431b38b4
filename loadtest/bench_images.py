"""The images' figures: size, build time (cold and cached), time from `run` to ready with the
weights in the model cache volume, and memory idle and serving.

    python -m loadtest.bench_images [--images cpu,onnx,cuda] [--no-cold] [--model-dir DIR]

Builds each image as the container tier does (harness/podman.py: podman on runc,
the base image made by mmdebstrap, this machine's CA bundle and torch wheels), first with
`--no-cache` (cold: every package fetched again, the base image kept) unless `--no-cold`, then
again at once (cached: every layer reused); then runs it with a fresh store and a model cache
volume holding the weights (and their ONNX export, when the weights folder has one) and times
`podman run` to `/readyz` 200. The onnx image needs the export there (it cannot make one):
it is measured only when the weights folder has one (`speechd-onnx/`, which the model tier's
first run leaves). RSS is every process in the container: idle a few seconds after
ready, and the peak while it serves one paragraph through the openai SDK. The load average is
printed before and after: figures taken on a busy machine say little.

Kokoro-FastAPI's CPU image is not measured: its Dockerfile (docker/cpu/Dockerfile.optimized)
cannot be built from its repository's files without a registry and GitHub. It starts `FROM
python:3.12` (Docker Hub; Debian's mirror has no Python 3.12 to make a stand-in from), fetches
uv from astral.sh, resolves torch from download.pytorch.org through its uv.lock, fetches its
weights from GitHub releases and (by default) UniDic's dictionary from its own host, none of
which this network reaches; and its `COPY --exclude` needs BuildKit's Dockerfile syntax 1.7,
which buildah 1.28 refuses ("COPY only supports the --chmod, --chown and --from flags").
"""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
import threading
import time
from pathlib import Path

from openai import OpenAI

from harness.podman import CPU_IMAGE, CUDA_IMAGE, ONNX_IMAGE, ROOT, Podman, wait_ready

IMAGES = {"cpu": CPU_IMAGE, "onnx": ONNX_IMAGE, "cuda": CUDA_IMAGE}
PARAGRAPH = (
    "The lighthouse keeper climbed the stairs every evening at dusk. He wiped the great lens "
    "clean, trimmed the wick, and watched the ships pass the rocks below."
)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(podman: Podman, name: str, model_dir: Path, cold: bool) -> dict[str, str]:
    image = IMAGES[name]
    containerfile = ROOT / "containers" / name / "Containerfile"
    figures: dict[str, str] = {}
    if cold:
        figures["build, cold"] = f"{podman.build(containerfile, image, cache=False):.0f} s"
    figures["build, cached"] = f"{podman.build(containerfile, image):.1f} s"
    figures["size"] = f"{podman.size(image) / 1e9:.2f} GB"
    run = secrets.token_hex(3)
    models = f"speechd-bench-models-{run}"
    store = podman.volume(f"speechd-bench-store-{run}")
    podman.fill_models(models, model_dir, image)
    started = time.monotonic()
    container = podman.start(
        f"speechd-bench-{name}-{run}",
        image,
        volumes=[f"{store}:/var/lib/speechd", f"{models}:/var/cache/speechd"],
    )
    try:
        wait_ready(container.url, 900, container)
        figures["run to ready"] = f"{time.monotonic() - started:.1f} s"
        time.sleep(3)
        figures["RSS idle"] = f"{container.rss_bytes() / 2**20:.0f} MiB"
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], container.rss_bytes())
                done.wait(0.25)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        client = OpenAI(base_url=container.url + "/v1", api_key="unused", timeout=600)
        client.audio.speech.create(model="tts-1", voice="af_heart", input=PARAGRAPH)
        done.set()
        sampler.join()
        figures["RSS serving (peak)"] = f"{peak[0] / 2**20:.0f} MiB"
    finally:
        container.remove()
        podman("volume", "rm", "-f", store, models, check=False)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", default="cpu,onnx", help="cpu, onnx, cuda (cpu,onnx)")
    parser.add_argument("--no-cold", action="store_true", help="skip the --no-cache build")
    parser.add_argument(
        "--model-dir",
        default=os.environ.get("SPEECHD_TEST_MODEL_DIR")
        or str(Path.home() / ".cache" / "speechd" / "kokoro-82m"),
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.images.split(",") if n.strip()]
    unknown = set(names) - set(IMAGES)
    if unknown:
        parser.error(f"unknown images: {', '.join(sorted(unknown))} (cpu, onnx, cuda)")
    exports = list(Path(args.model_dir).glob("speechd-onnx/*/export.json"))
    if "onnx" in names and not exports:
        print(f"onnx: not measured, no ONNX export in {args.model_dir}/speechd-onnx")
        names.remove("onnx")
    podman = Podman(Path(tempfile.mkdtemp(prefix="speechd-bench-")))
    podman.ensure_base()
    print(f"load average before: {_load()}")
    for name in names:
        for what, value in measure(podman, name, Path(args.model_dir), not args.no_cold).items():
            print(f"{name:6} {what:20} {value}")
    print(f"load average after: {_load()}")
    print("Kokoro-FastAPI cpu: not built (see this file's docstring for why)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
