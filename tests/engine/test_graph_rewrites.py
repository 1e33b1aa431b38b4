"""The decoder graph's rewrites (`_graph_rewrites`) and its int8 form (`_quantise`), on kokoro's
own generator block (AdaINResBlock1: AdaIN, Snake, dilated convolutions) traced as the export
traces it: each step finds every site it is written for, and the graph computes what it did
(to float rounding; int8 within a few percent). The real decoder's figures are the model
tier's (tests/engine/test_variants_model.py) and the benchmark's."""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from speechd.engine import _graph_rewrites, _quantise  # noqa: E402

CHANNELS = 16
STYLE = 8
SAMPLES = 400


def _block(snake_into_conv: bool = True) -> Any:
    """AdaINResBlock1 with weights, alphas and norms away from their initial values (alpha 1,
    unit norms would hide a wrongly folded scale), traced to ONNX as `_trace` does."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight_norm's and the TorchScript exporter's notices
        return _traced(snake_into_conv)


def _traced(snake_into_conv: bool) -> Any:
    import torch
    from kokoro.istftnet import AdaINResBlock1

    torch.manual_seed(3)
    block = AdaINResBlock1(CHANNELS, kernel_size=3, dilation=(1, 3, 5), style_dim=STYLE).eval()
    with torch.no_grad():
        for name, parameter in block.named_parameters():
            if "alpha" in name:
                parameter.copy_(torch.rand_like(parameter) * 2 + 0.05)
            elif "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.3)
            elif "weight" in name:
                parameter.mul_(5)

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = block

        def forward(self, x: Any, s: Any) -> Any:
            y = self.block(x, s)
            if not snake_into_conv:  # a Snake that no convolution reads
                return y + torch.sin(y * 2.0) ** 2 / 2.0
            return y

    buffer = io.BytesIO()
    x, s = torch.randn(1, CHANNELS, SAMPLES), torch.randn(1, STYLE)
    with torch.no_grad():
        torch.onnx.export(
            Wrapped(),
            (x, s),
            buffer,
            dynamo=False,
            opset_version=17,
            input_names=["x", "s"],
            output_names=["y"],
            dynamic_axes={"x": {2: "samples"}, "y": {2: "samples"}},
        )
    return onnx.load_from_string(buffer.getvalue())


def _run(model: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return np.asarray(session.run(None, feeds)[0])


def _feeds(seed: int, samples: int = SAMPLES) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((1, CHANNELS, samples)).astype(np.float32),
        "s": rng.standard_normal((1, STYLE)).astype(np.float32),
    }


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2) / np.mean(b**2)))


def _ops(model: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def test_every_step_rewrites_each_of_its_sites_and_the_block_computes_the_same() -> None:
    model = _block()
    feeds = [_feeds(1), _feeds(2, samples=777)]  # another length: nothing of the trace stuck
    before = [_run(model, f) for f in feeds]
    ops = _ops(model)
    done = _graph_rewrites.optimise(model)
    # Six AdaINs, six Snakes, each before a convolution of its own.
    assert done.sites == {
        "adain_into_norm": 6,
        "snake_into_conv": 6,
        "scale_into_norm": 6,
        "square_as_mul": 0,
    }
    assert len(done.snake_convs) == 6
    after = _ops(model)
    assert after.get("Pow", 0) == 0 and ops["Pow"] == 6
    assert after["Sin"] == ops["Sin"] == 6
    assert after["InstanceNormalization"] == ops["InstanceNormalization"] == 6
    assert after["Conv"] == ops["Conv"]
    for feed, expected in zip(feeds, before, strict=True):
        assert _relative(_run(model, feed), expected) < 1e-5


@pytest.mark.parametrize("step", [name for name, _ in _graph_rewrites.STEPS])
def test_each_step_alone_keeps_what_the_block_computes(step: str) -> None:
    model = _block()
    feed = _feeds(4)
    expected = _run(model, feed)
    _graph_rewrites.optimise(model, [step])
    assert _relative(_run(model, feed), expected) < 1e-5


def test_a_snake_no_convolution_reads_is_left_a_snake_but_squares_by_multiplying() -> None:
    model = _block(snake_into_conv=False)
    feed = _feeds(5)
    expected = _run(model, feed)
    done = _graph_rewrites.optimise(model)
    assert done.sites["snake_into_conv"] == 6  # the block's own; not the one after it
    assert done.sites["square_as_mul"] == 1
    assert _ops(model).get("Pow", 0) == 0
    assert _relative(_run(model, feed), expected) < 1e-5


def test_an_unknown_step_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown rewrite steps: fold_everything"):
        _graph_rewrites.optimise(_block(), ["fold_everything"])


def test_int8_runs_the_snake_convolutions_as_qlinearconv_within_a_few_percent() -> None:
    """White noise through six 8-bit convolutions in a row: ~5% RMS. A channel scaled or
    biased wrongly would be off by its whole size, so every channel is checked too."""
    model = _block()
    done = _graph_rewrites.optimise(model)
    feeds = [_feeds(seed) for seed in range(4)]
    expected = [_run(model, f) for f in feeds]
    ranges = _quantise.conv_ranges(model, done.snake_convs, feeds)
    assert _quantise.quantise(model, done.snake_convs, ranges) == 6
    ops = _ops(model)
    assert ops["QLinearConv"] == 6 and ops.get("Conv", 0) == 0
    for feed, reference in zip(feeds, expected, strict=True):
        got = _run(model, feed)
        assert _relative(got, reference) < 0.1
        assert max(_relative(got[:, c], reference[:, c]) for c in range(CHANNELS)) < 0.2


def test_blocks_are_grouped_by_their_path() -> None:
    names = [
        "/decoder/generator/resblocks.4/convs2.1/Conv",
        "/decoder/generator/resblocks.4/convs1.0/Conv",
        "/decoder/generator/noise_res.0/convs1.0/Conv",
    ]
    assert _quantise.groups_of(names) == {
        "/decoder/generator/resblocks.4": names[:2],
        "/decoder/generator/noise_res.0": names[2:],
    }
