"""The int8 decoder: the generator's Snake convolutions in 8-bit integers, calibrated on a fixed
text set (`_calibration`), and kept only as far as its audio stays within a bound of the float
graph's. Imports onnx, onnxruntime and numpy (in the child that builds variants), never torch.

Those convolutions are ~75% of a chunk's compute on a CPU, and ONNX Runtime's `QLinearConv`
runs them ~4x faster than its float Conv where the CPU has 8-bit dot products (x86's
AVX-512 VNNI or AVX-VNNI; ARM's dot-product extension, a Pi 5's or a Jetson Orin's): measured
here on 128 channels x 11 taps, 790 GOP/s against 190 GFLOP/s on one AVX-512 core.
`ConvInteger`, the other standard int8 convolution, has no such kernel (40 GOP/s).

QLinearConv quantises its input and output per tensor, and those channels' ranges differ by
orders of magnitude, so each convolution is written as

    QuantizeLinear(x; s_c, axis=1) -> QLinearConv(x_scale 1; W') -> DequantizeLinear(r_o, axis=1)

with s_c each input channel's range / 127 (a per-channel scale QLinearConv cannot take, moved
into the weights: W'[o, c] = W[o, c] * s_c / r_o) and r_o each output channel's range / 127
(likewise: every output channel then spans the same 8 bits, and the dequantisation restores
it). The weights are quantised per output channel (symmetric, int8); the bias in int32 at
the scale QLinearConv requires. Ranges are the 99.99th percentile of each channel's
magnitude on each calibration line, the largest over the lines (the rarest peaks clipped:
measured on the real weights, 2.5 dB against torch where the plain maxima gave 2.8).

Not every block takes 8 bits equally well: measured alone, resblocks.4 costs ~2.5 dB, the
noise blocks ~0.2. So the blocks (`groups`) are added from the least sensitive on, each
kept only while the check lines' audio stays within `bound` of the float graph's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from ._quality import log_spectral_distance

__all__ = ["PERCENTILE", "conv_ranges", "groups_of", "quantise", "quantised_variant"]

log = logging.getLogger("speechd.engine")

#: Each channel's range: this percentile of its magnitude on a calibration line.
PERCENTILE: Final = 99.99
#: Tensors fetched per calibration pass (each is channels x samples / 5 floats: ~7 MB for
#: 128 channels and 3 s of audio), so a pass's memory stays bounded.
TENSORS_PER_PASS: Final = 24
_ZERO_POINT: Final = 128  # uint8's middle: symmetric ranges


def groups_of(convs: Sequence[str]) -> dict[str, list[str]]:
    """Convolution node names by the block they are in (the name's path without its last
    two parts: `/decoder/generator/resblocks.4/convs2.1/Conv` -> `.../resblocks.4`)."""
    groups: dict[str, list[str]] = {}
    for name in convs:
        block = name.rsplit("/", 2)[0] if name.count("/") >= 2 else name
        groups.setdefault(block, []).append(name)
    return groups


def conv_ranges(
    model: Any, convs: Sequence[str], feeds: Sequence[dict[str, np.ndarray]], threads: int = 0
) -> dict[str, np.ndarray]:
    """Each channel's range (PERCENTILE of its magnitude, the largest over `feeds`) of the
    input and output of every convolution in `convs`, by tensor name."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    by_name = {n.name: n for n in model.graph.node}
    tensors = sorted(
        {t for name in convs for t in (by_name[name].input[0], by_name[name].output[0])}
    )
    ranges: dict[str, np.ndarray] = {}
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    for start in range(0, len(tensors), TENSORS_PER_PASS):
        names = tensors[start : start + TENSORS_PER_PASS]
        probe = type(model)()
        probe.CopyFrom(model)
        for name in names:
            probe.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
        data = probe.SerializeToString()
        del probe  # one copy of the graph at a time besides `model`: ~250 MB each
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        del data
        for feed in feeds:
            for name, value in zip(names, session.run(names, feed), strict=True):
                peak = np.percentile(np.abs(value.reshape(value.shape[1], -1)), PERCENTILE, axis=1)
                ranges[name] = np.maximum(ranges.get(name, 0.0), peak)
        del session
    return ranges


def quantise(model: Any, convs: Sequence[str], ranges: dict[str, np.ndarray]) -> int:
    """Rewrite the convolutions `convs` of `model` (in place) as QuantizeLinear, QLinearConv,
    DequantizeLinear (see the module); how many it rewrote."""
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    wanted = set(convs)
    nodes: list[Any] = []
    done = 0
    for node in graph.node:
        if node.name not in wanted:
            nodes.append(node)
            continue
        weights = numpy_helper.to_array(initializers[node.input[1]]).astype(np.float64)
        out_channels, in_channels = weights.shape[:2]
        bias = (
            numpy_helper.to_array(initializers[node.input[2]]).astype(np.float64)
            if len(node.input) > 2 and node.input[2]
            else np.zeros(out_channels)
        )
        s = np.maximum(ranges[node.input[0]], 1e-12) / 127
        r = np.maximum(ranges[node.output[0]], 1e-12) / 127
        scaled = weights * s[None, :, None] / r[:, None, None]
        # Per output channel: the weights' scale, never so small that the bias overflows int32.
        t = np.maximum(np.abs(scaled).max(axis=(1, 2)) / 127, np.abs(bias / r) / 2**30)
        t = np.maximum(t, 1e-30)
        quantised = np.clip(np.round(scaled / t[:, None, None]), -127, 127).astype(np.int8)
        bias_q = np.round(bias / r / t).astype(np.int32)
        prefix = f"speechd/int8{node.name}"

        def constant(value: np.ndarray, suffix: str, prefix: str = prefix) -> str:
            name = f"{prefix}/{suffix}"
            graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
            return name

        one = constant(np.array(1.0, np.float32), "one")
        middle = constant(np.array(_ZERO_POINT, np.uint8), "zero")
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        nodes += [
            helper.make_node(
                "QuantizeLinear",
                [
                    node.input[0],
                    constant(s.astype(np.float32), "x_scale"),
                    constant(np.full(in_channels, _ZERO_POINT, np.uint8), "x_zero"),
                ],
                [f"{prefix}/x"],
                name=f"{prefix}/quantise",
                axis=1,
            ),
            helper.make_node(
                "QLinearConv",
                [
                    f"{prefix}/x",
                    one,
                    middle,
                    constant(quantised, "w"),
                    constant(t.astype(np.float32), "w_scale"),
                    constant(np.zeros(out_channels, np.int8), "w_zero"),
                    one,
                    middle,
                    constant(bias_q, "bias"),
                ],
                [f"{prefix}/y"],
                name=f"{prefix}/conv",
                **attributes,
            ),
            helper.make_node(
                "DequantizeLinear",
                [
                    f"{prefix}/y",
                    constant(r.astype(np.float32), "y_scale"),
                    constant(np.full(out_channels, _ZERO_POINT, np.uint8), "y_zero"),
                ],
                list(node.output),
                name=f"{prefix}/dequantise",
                axis=1,
            ),
        ]
        done += 1
    graph.ClearField("node")
    graph.node.extend(nodes)
    used = {i for n in graph.node for i in n.input}
    kept = [i for i in graph.initializer if i.name in used]
    graph.ClearField("initializer")
    graph.initializer.extend(kept)
    return done


def quantised_variant(
    fused: Any,
    convs: Sequence[str],
    calibrate: Sequence[dict[str, np.ndarray]],
    check: Sequence[dict[str, np.ndarray]],
    reference: Sequence[np.ndarray],
    bound: float,
    *,
    threads: int = 0,
) -> tuple[bytes, list[str], float] | None:
    """The int8 variant of the `fused` decoder (not changed): its serialised model, the
    blocks it quantises and its largest distance (dB) from `reference` (the float graph's
    audio for `check`); None when no block keeps within `bound`. Blocks are tried alone first (their
    sensitivity), then added from the least sensitive on, each kept while the whole stays
    within `bound`."""
    ranges = conv_ranges(fused, convs, calibrate, threads)
    groups = groups_of(convs)

    def build(blocks: Sequence[str]) -> bytes:
        model = type(fused)()
        model.CopyFrom(fused)
        quantise(model, [c for b in blocks for c in groups[b]], ranges)
        return bytes(model.SerializeToString())

    def distance(blocks: Sequence[str]) -> float:
        return _distance(build(blocks), check, reference, threads)

    everything = list(groups)
    whole = distance(everything)
    log.info("int8 decoder, every block: %.2f dB from the float graph", whole)
    if whole <= bound:
        return build(everything), everything, whole
    alone = {block: distance([block]) for block in everything}
    log.info(
        "int8 decoder, each block alone: %s",
        ", ".join(f"{b.rsplit('/', 1)[-1]} {d:.2f} dB" for b, d in alone.items()),
    )
    kept: list[str] = []
    worst = 0.0
    for block in sorted(everything, key=lambda b: alone[b]):
        if alone[block] > bound:
            break
        trial = distance([*kept, block]) if kept else alone[block]
        if trial <= bound:
            kept, worst = [*kept, block], trial
    if not kept:
        return None
    return build(kept), kept, worst


def _distance(
    model: bytes,
    feeds: Sequence[dict[str, np.ndarray]],
    reference: Sequence[np.ndarray],
    threads: int,
) -> float:
    run = session_runner(model, threads)
    del model
    return max(
        log_spectral_distance(run(feed), expected)
        for feed, expected in zip(feeds, reference, strict=True)
    )


def session_runner(model: bytes | str, threads: int = 0) -> Callable[[dict[str, Any]], np.ndarray]:
    """A CPU session over `model` (bytes or a path), as a function of its feeds -> audio."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    options.enable_mem_pattern = False
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def run(feed: dict[str, Any]) -> np.ndarray:
        (audio,) = session.run(None, feed)
        return np.asarray(audio, dtype=np.float32).reshape(-1)

    return run
