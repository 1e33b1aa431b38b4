"""The GPU check's measurements (scripts/gpu_check.sh installs what this needs, then runs it).

    python scripts/gpu_check.py --model-dir DIR [--device cuda|cuda:N|cpu] [--quick]
        [--skip-tests] [--budget-s 450]

Prints, in this order, each as soon as it is measured:

1. the machine: torch, CUDA, the device, NVML;
2. load and warm-up: `load_engine` (on CUDA it includes the CUDA warm-up, shown apart) and
   the worker's own warm-up (`speechd.worker.warm_up`), in this process;
3. the real-time factor per chunk length (phonemes), median of a few runs each;
4. whether two attempts of one chunk give identical bytes: the same chunk and seed
   synthesized twice, other chunks in between (as a retry would be), PCM and mp3 compared;
5. the cost per item against the batch size on the device (`loadtest.bench_batch`: torch,
   then ONNX Runtime in a child process where it has the device's provider), with what the
   worker's warm-up measurement gives and the size `--max-batch auto` would keep;
6. peak GPU memory of this process (torch's allocator; batches of up to 16 included);
7. sharing the device (issue 30): the sanity check's figures (device against CPU), an unload
   and a wake in this process (time, RSS, torch's reserve), and a real out-of-memory: torch's
   allocator held just above the weights, then the longest chunk (made in pieces, or the
   reason it could not be);
8. time to first audio at 1, 4 and 16 concurrent streams through `speechd serve`, once with
   `--max-batch 1` and once with `--max-batch auto` (with the size auto kept, from /readyz,
   and the batches the worker ran, from /metrics), with the figures its /metrics showed
   meanwhile (GPU load, power, joules per audio second, the worker's GPU memory); then
   `loadtest.bench_device` through `speechd serve --idle-unload`
   (RSS held, after the unload and after the wake, the wake time, first audio warm against
   idle, the device memory the worker holds);
9. torch against ONNX Runtime on the device (`loadtest.bench_engine`'s rtf per length and
   memory), where onnxruntime has the device's provider (onnxruntime-gpu for CUDA); left out
   of a quick run;
10. the model tier and the gpu tests (`-m "(model or gpu) and not browser"`) on the device,
   with what is left of the budget.

`--device cpu` runs the same steps on the CPU with smaller sizes (`--quick` is implied): a
dry run of this script's own logic where there is no GPU. Nothing here asserts speed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "clients")]

from loadtest._servers import start_speechd  # noqa: E402
from loadtest._workload import paragraph  # noqa: E402

VOICE = "af_heart"
_BEGAN = time.monotonic()


def say(text: str = "") -> None:
    print(text, flush=True)


def elapsed() -> float:
    return time.monotonic() - _BEGAN


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


# -- 1, 2: the machine, load and warm-up --------------------------------------------------


def machine(device: str) -> None:
    import torch

    say(f"python {platform.python_version()}, torch {torch.__version__}, CUDA build "
        f"{torch.version.cuda or 'none'}, {platform.machine()}")  # fmt: skip
    if device.startswith("cuda") and torch.cuda.is_available():
        index = int(device.partition(":")[2] or 0)
        props = torch.cuda.get_device_properties(index)
        say(f"device {device}: {props.name}, {props.total_memory / 2**30:.1f} GiB, "
            f"compute capability {props.major}.{props.minor}, "
            f"{torch.cuda.device_count()} CUDA device(s) visible")  # fmt: skip
    try:
        import pynvml

        pynvml.nvmlInit()
        say(f"NVML: driver {pynvml.nvmlSystemGetDriverVersion()}")
        pynvml.nvmlShutdown()
    except Exception as exc:  # ImportError, NVMLError: telemetry just leaves it out
        say(f"NVML: not available ({type(exc).__name__}: {exc})")


def load(model_dir: str, device: str) -> tuple[Any, Any]:
    from speechd.engine import EngineConfig, load_engine
    from speechd.text import ChunkPolicy
    from speechd.worker import ChunkTimes, warm_up

    captured = _Captured()
    logging.getLogger("speechd.engine").addHandler(captured)
    logging.getLogger("speechd.engine").setLevel(logging.INFO)
    began = time.perf_counter()
    # torch by name: these steps read torch's allocator, and `auto` would take ONNX Runtime
    # wherever onnxruntime-gpu is installed (the model tier in step 7 runs both runtimes).
    engine = load_engine(EngineConfig(model_dir=model_dir, device=device, engine="torch"))
    load_s = time.perf_counter() - began
    cuda_warm = [m for m in captured.messages if m.startswith("CUDA warm-up")]
    times = ChunkTimes()
    began = time.perf_counter()
    warm_up(engine, ChunkPolicy(), VOICE, times)
    warm_s = time.perf_counter() - began
    say(f"load_engine on {engine.device}: {load_s:.2f} s"
        + (f" (of which {cuda_warm[0]})" if cuda_warm else ""))  # fmt: skip
    say(f"worker warm-up (speechd.worker.warm_up): {warm_s:.2f} s, measured rtf "
        f"{times.rtf:.4f}")  # fmt: skip
    return engine, times


# -- 3: rtf per chunk length --------------------------------------------------------------


def _phonemes(engine: Any, tokens: int) -> str:
    """A run of real phonemes about `tokens` long, cut at a word boundary."""
    from speechd.text import ChunkPolicy

    text = " ".join(paragraph(8, seed) for seed in range(4))
    chunks = engine.plan(text, VOICE, ChunkPolicy().with_rtf(0.0))
    joined = " ".join(c.phonemes for c in chunks)
    cut = joined[:tokens]
    return cut[: cut.rfind(" ")] if " " in cut and len(joined) > tokens else cut


def rtf_per_length(engine: Any, lengths: list[int], runs: int) -> None:
    from speechd.text import Chunk

    say(f"{'tokens':>7} {'audio s':>8} {'gen ms p50':>11} {'rtf':>8}")
    for tokens in lengths:
        chunk = Chunk(index=0, text="rtf probe", phonemes=_phonemes(engine, tokens))
        engine.synthesize(chunk, VOICE, 1.0, seed=1)  # this length's first call
        gens, audio = [], 0.0
        for run in range(runs):
            began = time.perf_counter()
            out = engine.synthesize(chunk, VOICE, 1.0, seed=run)
            gens.append(time.perf_counter() - began)
            audio = out.duration_s
        gen = statistics.median(gens)
        say(f"{len(chunk.phonemes):7d} {audio:8.2f} {gen * 1000:11.1f} {gen / audio:8.4f}")


# -- 4: two attempts of one chunk -----------------------------------------------------------


def two_attempts(engine: Any) -> None:
    from speechd.audio import new_encoder
    from speechd.text import Chunk
    from speechd.worker import chunk_seed

    seed = chunk_seed("gpu-check-cast", 3)
    chunk = Chunk(index=3, text="attempt", phonemes=_phonemes(engine, 120))
    first = engine.synthesize(chunk, VOICE, 1.0, seed=seed).pcm
    for other in (40, 200):  # a retry comes after other casts' chunks
        engine.synthesize(Chunk(0, "other", _phonemes(engine, other)), VOICE, 1.0, seed=7)
    second = engine.synthesize(chunk, VOICE, 1.0, seed=seed).pcm
    unseeded = engine.synthesize(chunk, VOICE, 1.0, seed=seed + 1).pcm

    def mp3(pcm: np.ndarray) -> bytes:
        return new_encoder("mp3", engine.sample_rate).encode(pcm, final=True)

    same_pcm = first.shape == second.shape and bool(np.array_equal(first, second))
    diff = float(np.max(np.abs(first - second))) if first.shape == second.shape else float("inf")
    same_mp3 = mp3(first) == mp3(second)
    say(f"same chunk, same seed, twice on {engine.device}: PCM identical: "
        f"{'yes' if same_pcm else 'NO'} (max |diff| {diff:.3g}, sha256 "
        f"{hashlib.sha256(first.tobytes()).hexdigest()[:12]} / "
        f"{hashlib.sha256(second.tobytes()).hexdigest()[:12]}); mp3 bytes identical: "
        f"{'yes' if same_mp3 else 'NO'}")  # fmt: skip
    other_seed = first.shape != unseeded.shape or not np.array_equal(first, unseeded)
    say(f"another seed gives other PCM: {'yes' if other_seed else 'no'} (the seed matters)")


# -- 5: the cost per item against the batch size ---------------------------------------------


def batch_costs(engine: Any, model_dir: str, device: str, quick: bool, timeout_s: float) -> None:
    """loadtest.bench_batch's figures: torch here, on this process's engine; ONNX Runtime in
    a child process, where it has the device's provider. The CPU dry run: batches 1 and 2
    of a short chunk."""
    from loadtest.bench_batch import measure, report

    cpu = device == "cpu"
    sizes = [1, 2] if cpu else [1, 2, 4, 8, 16]
    tokens, repeat = (40 if cpu else 150), (1 if quick else 3)
    for line in report(measure(engine, VOICE, tokens, sizes, repeat)):
        say(line)
    why = _onnx_on(device)
    if why is None and timeout_s < 60:
        why = f"{timeout_s:.0f} s of the budget left"
    if why is not None:
        say(f"\n[onnx] batch costs skipped: {why}")
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients")])}
    command = [sys.executable, "-m", "loadtest.bench_batch", "--model-dir", model_dir,
               "--device", device, "--engines", "onnx", "--sizes", ",".join(map(str, sizes)),
               "--tokens", str(tokens), "--repeat", str(repeat)]  # fmt: skip
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        say(f"\n[onnx] batch costs: did not finish within {timeout_s:.0f} s")
        return
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        say(f"\n[onnx] batch costs: bench_batch failed: {tail}")
        return
    lines = done.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("[onnx]")), len(lines))
    for line in lines[start - 1 :]:
        say(line)


def peak_memory(device: str) -> None:
    import torch

    if not device.startswith("cuda"):
        say("peak GPU memory: n/a on the CPU")
        return
    index = int(device.partition(":")[2] or 0)
    say(f"peak GPU memory (this process, torch allocator, batches included): "
        f"{torch.cuda.max_memory_allocated(index) / 2**20:.0f} MiB allocated, "
        f"{torch.cuda.max_memory_reserved(index) / 2**20:.0f} MiB reserved")  # fmt: skip


# -- 7: sharing the device (issue 30) --------------------------------------------------------


def _reserved_mib(device: str) -> str:
    import torch

    if not device.startswith("cuda"):
        return "n/a"
    return f"{torch.cuda.memory_reserved(int(device.partition(':')[2] or 0)) / 2**20:.0f} MiB"


def sharing(engine: Any) -> None:
    """The sanity check's figures, an unload and a wake in this process (RSS and torch's
    reserve), and a real out-of-memory: the allocator held just above what the weights take,
    then the longest chunk asked for (it should be made in pieces)."""
    from speechd.engine._heap import _resident_bytes
    from speechd.text import ChunkPolicy

    device = engine.device
    if engine.sanity is not None:
        say(f"sanity check against the CPU: {engine.sanity.describe()}")
    else:
        say("sanity check: none on the CPU (nothing to compare it with)")
    if engine.fallback:
        say(f"the engine left {device} for the CPU: {engine.fallback}")
    rss = (_resident_bytes() or 0) / 2**20
    say(f"held: RSS {rss:.0f} MiB, torch reserve {_reserved_mib(device)}")
    began = time.perf_counter()
    engine.unload()
    unload_s = time.perf_counter() - began
    rss = (_resident_bytes() or 0) / 2**20
    context = " (the CUDA context itself stays while the process lives)" if device != "cpu" else ""
    say(f"unloaded in {unload_s:.2f} s: RSS {rss:.0f} MiB, torch reserve "
        f"{_reserved_mib(device)}{context}")  # fmt: skip
    wake_s = engine.load()
    rss = (_resident_bytes() or 0) / 2**20
    say(f"woken in {wake_s:.2f} s (warm-up included): RSS {rss:.0f} MiB, torch reserve "
        f"{_reserved_mib(device)}")  # fmt: skip
    if not device.startswith("cuda") or engine.runtime != "torch":
        say("a real out-of-memory: n/a (torch on CUDA only)")
        return
    import torch

    index = int(device.partition(":")[2] or 0)
    total = torch.cuda.get_device_properties(index).total_memory
    torch.cuda.empty_cache()
    tight = torch.cuda.memory_allocated(index) + (64 << 20)
    text = " ".join(paragraph(8, seed) for seed in range(3))
    policy = ChunkPolicy(max_tokens=500, sentence_tokens=500).with_rtf(0.0)
    chunks = engine.plan(text, VOICE, policy)
    longest = max(chunks, key=lambda c: len(c.phonemes))
    torch.cuda.set_per_process_memory_fraction(tight / total, index)
    try:
        began = time.perf_counter()
        made = engine.synthesize(longest, VOICE, 1.0, seed=1)
        say(f"a real out-of-memory: {len(longest.phonemes)} phonemes with the allocator held "
            f"to {tight / 2**20:.0f} MiB: made ({made.duration_s:.1f} s of audio in "
            f"{time.perf_counter() - began:.2f} s, {len(made.durations)} durations for "
            f"{len(made.tokens)} tokens + 2 markers)")  # fmt: skip
    except Exception as exc:  # ModelUnavailable (stayed full), or a failure to report
        say(f"a real out-of-memory: {type(exc).__name__}: {exc}")
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, index)
        torch.cuda.empty_cache()


def idle_unload(model_dir: str, device: str, timeout_s: float) -> None:
    """loadtest.bench_device through `speechd serve --idle-unload 2s`, torch only, 2 rounds."""
    if timeout_s < 90:
        say(f"idle unload through speechd serve: skipped, {timeout_s:.0f} s of the budget left")
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients")])}
    command = [sys.executable, "-m", "loadtest.bench_device", "--model-dir", model_dir,
               "--device", device, "--engines", "torch", "--rounds", "2",
               "--idle-unload", "2"]  # fmt: skip
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        say(f"idle unload through speechd serve: did not finish within {timeout_s:.0f} s")
        return
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        say(f"idle unload through speechd serve: bench_device failed: {tail}")
        return
    for line in done.stdout.splitlines():
        if line.strip():
            say(line)


# -- 8: time to first audio through `speechd serve` ------------------------------------------

_FIGURES = {
    "speechd_device_gpu_utilization_percent": "gpu %",
    "speechd_device_power_watts": "power W",
    "speechd_worker_energy_per_audio_second_joules": "J/audio s",
    "speechd_worker_gpu_memory_bytes": "worker GPU MiB",
    "speechd_device_memory_used_bytes": "device mem MiB",
    "speechd_worker_cpu_percent": "worker cpu %",
    "speechd_worker_resident_memory_bytes": "worker RSS MiB",
}


async def _figures(client: Any, url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    response = await client.get(url + "/metrics")
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name in _FIGURES:
                value = sample.value / 2**20 if "MiB" in _FIGURES[sample.name] else sample.value
                found[sample.name] = found.get(sample.name, 0.0) + value
    return found


async def _stream(client: Any, url: str, text: str) -> tuple[float | None, float]:
    began = time.monotonic()
    first = None
    body = {"model": "tts-1", "voice": VOICE, "input": text, "response_format": "pcm"}
    async with client.stream("POST", url + "/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        async for piece in response.aiter_raw():
            if piece and first is None:
                first = time.monotonic() - began
    return first, time.monotonic() - began


async def _sample_peaks(client: Any, url: str, peaks: dict[str, float]) -> None:
    import httpx

    while True:
        try:
            for name, value in (await _figures(client, url)).items():
                peaks[name] = max(peaks.get(name, value), value)
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.5)


async def _batches(client: Any, url: str) -> str:
    """The worker's batch size (/readyz) and the steps it ran by size (/metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    ready = (await client.get(url + "/readyz")).json()
    kept = sorted({str(d.get("max_batch", "?")) for d in ready.get("devices", {}).values()})
    steps = total = 0.0
    text = (await client.get(url + "/metrics")).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "speechd_worker_batch_size_count":
                steps += sample.value
            elif sample.name == "speechd_worker_batch_size_sum":
                total += sample.value
    mean = f"{total / steps:.2f}" if steps else "-"
    return f"max batch {'/'.join(kept) or '?'}, {steps:.0f} steps, {mean} chunks per step"


async def _levels(url: str, levels: list[int], sentences: int, label: str = "") -> None:
    import httpx

    timeout = httpx.Timeout(10.0, read=600.0)
    async with httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=None)) as c:
        seed = 100
        for level in levels:
            peaks: dict[str, float] = {}
            texts = []
            for _ in range(level):
                seed += 1
                texts.append(f"Stream {seed}. {paragraph(sentences, seed)}")
            sampling = asyncio.create_task(_sample_peaks(c, url, peaks))
            results = await asyncio.gather(*(_stream(c, url, t) for t in texts))
            sampling.cancel()
            firsts = sorted(r[0] for r in results if r[0] is not None)
            seen = ", ".join(
                f"{label} {peaks[name]:.1f}" for name, label in _FIGURES.items() if name in peaks
            )
            done = max(r[1] for r in results)
            say(f"{label}{level:3d} streams: time to first audio p50 "
                f"{statistics.median(firsts):.3f} s, max {firsts[-1]:.3f} s; last stream done "
                f"{done:.2f} s; /metrics peaks: {seen or 'none'}")  # fmt: skip
        say(f"{label}{await _batches(c, url)}")


def serve(model_dir: str, device: str, levels: list[int], sentences: int) -> None:
    """The levels through `speechd serve --max-batch 1`, then `--max-batch auto` (a fresh
    server each: auto measures the batch costs at warm-up)."""
    for max_batch in ("1", "auto"):
        label = f"[max-batch {max_batch}] "
        with tempfile.TemporaryDirectory(prefix="speechd-gpu-check-") as work:
            began = time.monotonic()
            server = start_speechd(
                "speechd",
                policy="deadline",
                model_dir=model_dir,
                device=device,
                threads=None,
                workdir=Path(work),
                extra=["--max-batch", max_batch],
            )
            try:
                server.wait_ready(timeout=300)
                say(f"{label}speechd serve --device {device}: ready (model loaded and warm) "
                    f"{time.monotonic() - began:.1f} s after start")  # fmt: skip
                asyncio.run(_levels(server.url, levels, sentences, label))
            finally:
                server.stop()


# -- 9: torch against ONNX Runtime ----------------------------------------------------------


def _onnx_on(device: str) -> str | None:
    """Why ONNX Runtime cannot run on `device` here (None: it can)."""
    try:
        import onnxruntime
    except ImportError:
        return "onnxruntime is not installed (pip install 'speechd[onnx-gpu]')"
    wanted = "CPUExecutionProvider" if device == "cpu" else "CUDAExecutionProvider"
    if wanted not in onnxruntime.get_available_providers():
        return f"onnxruntime {onnxruntime.__version__} has no {wanted} (onnxruntime-gpu has)"
    return None


def runtimes(model_dir: str, device: str, timeout_s: float) -> None:
    """bench_engine's rtf per length and memory, torch beside ONNX Runtime, on the device."""
    why = _onnx_on(device)
    if why is not None:
        say(f"torch against ONNX Runtime: skipped, {why}")
        return
    if timeout_s < 60:
        say(f"torch against ONNX Runtime: skipped, {timeout_s:.0f} s of the budget left")
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients")])}
    command = [sys.executable, "-m", "loadtest.bench_engine", "--model-dir", model_dir,
               "--device", device, "--repeat", "1", "--section", "1", "--section", "4"]  # fmt: skip
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        say(f"torch against ONNX Runtime: did not finish within {timeout_s:.0f} s")
        return
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        say(f"torch against ONNX Runtime: bench_engine failed: {tail}")
        return
    for line in done.stdout.splitlines():
        if line.startswith("   "):  # the figures, not the progress lines
            say(line)


# -- 10: the model tier ------------------------------------------------------------------------


def model_tier(model_dir: str, device: str, timeout_s: float) -> None:
    if timeout_s < 60:
        say(f"model tier: skipped, {timeout_s:.0f} s of the budget left")
        return
    env = {**os.environ, "SPEECHD_TEST_DEVICE": device, "SPEECHD_TEST_MODEL_DIR": model_dir}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "clients")])
    env.setdefault("HF_HUB_OFFLINE", "1")
    command = [sys.executable, "-m", "pytest", "tests", "-m", "(model or gpu) and not browser",
               "--run-model", "--run-slow", "-q", "-p", "no:cacheprovider"]  # fmt: skip
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        say(f"model tier on {device}: did not finish within {timeout_s:.0f} s")
        return
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    say(f"model tier on {device}: {lines[-1] if lines else 'no output'}")
    for line in failed:
        say(f"  {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (implied on cpu)")
    parser.add_argument("--skip-tests", action="store_true", help="leave out the model tier")
    parser.add_argument("--budget-s", type=float, default=450.0, help="seconds in all (450)")
    args = parser.parse_args()
    from speechd.engine import parse_device

    device = parse_device(args.device)
    quick = args.quick or device == "cpu"
    lengths = [24, 96, 250] if quick else [16, 32, 64, 128, 250, 400]
    levels = [1, 2, 4] if device == "cpu" else [1, 4, 16]
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    say("== machine")
    machine(device)
    say("\n== load and warm-up")
    engine, _ = load(args.model_dir, device)
    say("\n== real-time factor per chunk length (compute s per audio s)")
    rtf_per_length(engine, lengths, runs=2 if quick else 5)
    say("\n== two attempts of one chunk")
    two_attempts(engine)
    say(f"\n== cost per item against batch size ({elapsed():.0f} s so far)")
    batch_costs(engine, args.model_dir, device, quick, min(150.0, args.budget_s - elapsed() - 300))
    say()
    peak_memory(engine.device)
    say("\n== sharing the device: the sanity check, unload and wake, a real out-of-memory")
    sharing(engine)
    del engine  # its memory back before the server's worker loads its own model
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
    say(f"\n== time to first audio through speechd serve ({elapsed():.0f} s so far)")
    serve(args.model_dir, device, levels, sentences=1 if quick else 2)
    say(f"\n== idle unload through speechd serve ({elapsed():.0f} s so far)")
    idle_unload(args.model_dir, device, min(150.0, args.budget_s - elapsed() - 150))
    say(f"\n== torch against ONNX Runtime ({elapsed():.0f} s so far)")
    if quick:
        say("torch against ONNX Runtime: skipped in a quick run (python -m loadtest.bench_engine)")
    else:
        runtimes(args.model_dir, device, min(150.0, args.budget_s - elapsed() - 120))
    if args.skip_tests:
        say("\nmodel tier: skipped (--skip-tests)")
    else:
        say(f"\n== the model tier ({elapsed():.0f} s so far)")
        model_tier(args.model_dir, device, args.budget_s - elapsed())
    say(f"\ngpu check done in {elapsed():.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
