"""Rewrites of the exported decoder graph (`back.onnx`) that ONNX Runtime does not make on its
own: each a named step that computes the same function with fewer passes over the decoder's
large tensors (the generator's activations are 128-256 channels at 1/5 of the audio rate).
Imports onnx and numpy, never torch.

Where the time goes without them (ONNX Runtime's profiler, one 5.9 s chunk on 2 threads):
the decoder is ~92% of a chunk, and of it convolutions ~64%, then the elementwise passes
of the Snake activations and the AdaIN norms around them (Sin 13%, Add 5%, Mul 5%, Pow 2%,
InstanceNormalization 4%). Every convolution of the generator's residual blocks reads

    AdaIN:  h = (1 + gamma) * InstanceNorm(x; w, b) + beta      gamma, beta = fc(style)
    Snake:  y = h + (1 / a) * sin(a * h) ** 2                    a: per channel, learned
    conv:   Conv(y; W, B)

nine passes over a large tensor (InstanceNorm, Mul, Add, Mul, Sin, Pow, Mul, Add, Conv).
The steps, in the order `optimise` applies them:

`adain_into_norm`
    (1 + gamma) * IN(x; w, b) + beta is IN(x; w * (1 + gamma), b * (1 + gamma) + beta): the
    style's scale and shift move into the norm's own per-channel scale and bias (computed on
    C numbers per chunk, from the style, where the graph computed gamma and beta anyway).
    Batch 1 only (the norm's scale is one vector), which the single graphs are.
`snake_into_conv`
    With u = a * h, the Snake is (u + sin(u) ** 2) / a, and the division by a is a scale of
    each of the convolution's input channels: folded into its weights (W / a). `sin ** 2`
    becomes sin * sin (`Pow` is a generic kernel; one multiply is not).
`scale_into_norm`
    a * IN(x; s, b) is IN(x; a * s, a * b): the Snake's input scale moves into the norm
    before it, on C numbers.
`square_as_mul`
    Every remaining x ** 2 as x * x.

So the nine passes become five (InstanceNorm, Sin, Mul, Add, Conv) at each of the 48 Snake
sites of Kokoro-82M's decoder, and AdaIN's two disappear at the 22 others. Each step matches
its pattern exactly and counts the sites it rewrote (a graph that traced otherwise is left
as it was where it does not match); what counts is the audio, which `_variants` checks
against the graph the rewrite came from before keeping it.

The decoder's time after them is ~80% convolutions, which no float rewrite makes cheaper:
ONNX Runtime's float Conv runs them at ~190 GFLOP/s on one AVX-512 core, near what the core
can do. Writing them as height-one 2-D convolutions (which ONNX Runtime's NCHWc layout path
takes on x86) measured within noise of that (0.97x CPU time), so it is not a step here; the
int8 decoder (`_quantise`) is what makes them cheaper.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

__all__ = ["STEPS", "Rewrites", "optimise"]


class _Graph:
    """An ONNX graph being rewritten: who makes and who reads each value, the constants
    (initializers, Constant nodes, through Identity), and new nodes and initializers."""

    def __init__(self, model: Any) -> None:
        from onnx import numpy_helper

        self.model = model
        self.graph = model.graph
        self._to_array = numpy_helper.to_array
        self._from_array = numpy_helper.from_array
        self.outputs = {o.name for o in self.graph.output}
        self._fresh = 0
        self.snake_convs: list[str] = []
        """The convolutions `snake_into_conv` rewrote (node names), in graph order."""
        self.index()

    def index(self) -> None:
        self.producer: dict[str, Any] = {}
        self.consumers: dict[str, list[Any]] = collections.defaultdict(list)
        for node in self.graph.node:
            for name in node.output:
                self.producer[name] = node
            for name in node.input:
                self.consumers[name].append(node)
        self.initializers = {i.name: i for i in self.graph.initializer}

    def const(self, name: str) -> np.ndarray | None:
        """The value of `name` when it is a constant (an initializer, a Constant node, or an
        Identity of one); None otherwise."""
        for _ in range(8):
            if name in self.initializers:
                return self._to_array(self.initializers[name])
            node = self.producer.get(name)
            if node is None:
                return None
            if node.op_type == "Constant":
                value = next((a for a in node.attribute if a.name == "value"), None)
                return None if value is None else self._to_array(value.t)
            if node.op_type != "Identity":
                return None
            name = node.input[0]
        return None

    def only_reader(self, name: str) -> Any | None:
        """The one node reading `name`, if exactly one does and it is not a graph output."""
        readers = self.consumers.get(name, [])
        return readers[0] if len(readers) == 1 and name not in self.outputs else None

    def name(self, hint: str) -> str:
        self._fresh += 1
        return f"speechd/{hint}_{self._fresh}"

    def add_const(self, array: np.ndarray, hint: str) -> str:
        name = self.name(hint)
        tensor = self._from_array(np.ascontiguousarray(array), name)
        self.graph.initializer.append(tensor)
        self.initializers[name] = tensor
        return name

    def node(self, op: str, inputs: list[str], hint: str, **attrs: Any) -> tuple[Any, str]:
        from onnx import helper

        out = self.name(hint)
        return helper.make_node(op, inputs, [out], name=out, **attrs), out

    def replace(self, nodes: list[Any]) -> None:
        """Set the graph's nodes to `nodes` (in any order), sorted so each comes after what it
        reads, dropping what no graph output needs; then index again."""
        self.graph.ClearField("node")
        self.graph.node.extend(_live(_toposort(nodes, self.graph), self.outputs))
        used = {i for n in self.graph.node for i in n.input}
        kept = [i for i in self.graph.initializer if i.name in used]
        self.graph.ClearField("initializer")
        self.graph.initializer.extend(kept)
        self.index()


def _toposort(nodes: list[Any], graph: Any) -> list[Any]:
    ready = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    made_by = {out: n for n in nodes for out in n.output}
    order: list[Any] = []
    done: set[int] = set()

    def visit(node: Any) -> None:
        stack = [(node, False)]
        while stack:
            current, expanded = stack.pop()
            key = id(current)
            if key in done:
                continue
            if expanded:
                done.add(key)
                order.append(current)
                continue
            stack.append((current, True))
            for name in current.input:
                maker = made_by.get(name)
                if name not in ready and maker is not None and id(maker) not in done:
                    stack.append((maker, False))

    for node in nodes:
        visit(node)
    return order


def _live(nodes: list[Any], outputs: set[str]) -> list[Any]:
    needed = set(outputs)
    kept: list[Any] = []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(node.input)
    return kept[::-1]


def _other(node: Any, name: str) -> str | None:
    """The input of a two-input node that is not `name`."""
    inputs = list(node.input)
    if len(inputs) != 2 or name not in inputs:
        return None
    return inputs[1] if inputs[0] == name else inputs[0]


def _is_scalar(value: np.ndarray | None, target: float) -> bool:
    return value is not None and value.size == 1 and float(value.reshape(())) == target


@dataclass
class _Edit:
    """Nodes to drop and nodes to add, gathered by a step before the graph changes."""

    dropped: set[int] = field(default_factory=set)
    added: list[Any] = field(default_factory=list)
    sites: int = 0

    def apply(self, g: _Graph) -> int:
        if self.sites:
            kept = [n for n in g.graph.node if id(n) not in self.dropped]
            g.replace(kept + self.added)
        return self.sites


# ---------------------------------------------------------------- the steps


def adain_into_norm(g: _Graph) -> int:
    """Add(Mul(Add(gamma, 1), IN(x; w, b)), beta) -> IN(x; w * (1 + gamma), b * (1 + gamma) +
    beta), gamma and beta of shape (1, C, 1) (batch 1)."""
    edit = _Edit()
    for norm in list(g.graph.node):
        if norm.op_type != "InstanceNormalization" or len(norm.input) != 3:
            continue
        mul = g.only_reader(norm.output[0])
        if mul is None or mul.op_type != "Mul":
            continue
        scale = _other(mul, norm.output[0])  # 1 + gamma
        add = g.only_reader(mul.output[0])
        if scale is None or add is None or add.op_type != "Add":
            continue
        shift = _other(add, mul.output[0])  # beta
        if shift is None or not _plus_one(g, scale):
            continue
        shape = g.add_const(np.array([-1], dtype=np.int64), "flat")
        # The norm's own affine, as (1, C, 1) columns, folded with the style's.
        w_in, b_in = norm.input[1], norm.input[2]
        w3, out_w3 = g.node(
            "Reshape", [w_in, g.add_const(np.array([1, -1, 1], dtype=np.int64), "col")], "w3"
        )
        b3, out_b3 = g.node(
            "Reshape", [b_in, g.add_const(np.array([1, -1, 1], dtype=np.int64), "col")], "b3"
        )
        sw, out_sw = g.node("Mul", [scale, out_w3], "adain_scale")
        sb, out_sb = g.node("Mul", [scale, out_b3], "adain_bias_scaled")
        sbb, out_sbb = g.node("Add", [out_sb, shift], "adain_bias")
        fw, out_fw = g.node("Reshape", [out_sw, shape], "adain_scale_flat")
        fb, out_fb = g.node("Reshape", [out_sbb, shape], "adain_bias_flat")
        from onnx import helper

        fused = helper.make_node(
            "InstanceNormalization",
            [norm.input[0], out_fw, out_fb],
            [add.output[0]],
            name=g.name("adain"),
            epsilon=_attr(norm, "epsilon", 1e-5),
        )
        edit.dropped |= {id(norm), id(mul), id(add)}
        edit.added += [w3, b3, sw, sb, sbb, fw, fb, fused]
        edit.sites += 1
    return edit.apply(g)


def snake_into_conv(g: _Graph) -> int:
    """Conv(x + (1 / a) * sin(a * x) ** 2) -> Conv'(u + sin(u) * sin(u)), u = a * x, W' = W / a
    (a constant (1, C, 1), the convolution's input channels; every reader of the Snake a
    Conv of constant weights, group 1)."""
    edit = _Edit()
    for sin in list(g.graph.node):
        if sin.op_type != "Sin":
            continue
        inner = g.producer.get(sin.input[0])  # a * x
        if inner is None or inner.op_type != "Mul":
            continue
        alpha_name = next((i for i in inner.input if g.const(i) is not None), None)
        if alpha_name is None:
            continue
        alpha = g.const(alpha_name)
        x = _other(inner, alpha_name)
        square = g.only_reader(sin.output[0])
        if alpha is None or x is None or square is None or square.op_type != "Pow":
            continue
        if not _is_scalar(g.const(square.input[1]), 2.0):
            continue
        weighted = g.only_reader(square.output[0])  # (1 / a) * sin ** 2
        if weighted is None or weighted.op_type != "Mul":
            continue
        inverse = _other(weighted, square.output[0])
        if inverse is None or not _reciprocal_of(g, inverse, alpha):
            continue
        total = g.only_reader(weighted.output[0])  # x + ...
        if total is None or total.op_type != "Add" or _other(total, weighted.output[0]) != x:
            continue
        # x is read by the Snake alone (the Mul and the Add), so nothing else sees u.
        if {id(n) for n in g.consumers[x]} != {id(inner), id(total)}:
            continue
        convs = g.consumers[total.output[0]]
        channels = alpha.reshape(-1)
        if alpha.ndim != 3 or alpha.shape[0] != 1 or alpha.shape[2] != 1:
            continue
        if not convs or not all(_plain_conv(g, c, channels.size) for c in convs):
            continue
        if not np.all(np.isfinite(1.0 / channels)):
            continue
        s2, out_s2 = g.node("Mul", [sin.output[0], sin.output[0]], "sin_squared")
        snake, out_snake = g.node("Add", [inner.output[0], out_s2], "snake")
        for conv in convs:
            if not conv.name:
                conv.name = g.name("conv")
            g.snake_convs.append(conv.name)
            weights = g.const(conv.input[1])
            assert weights is not None
            scaled = (weights / channels[None, :, None]).astype(weights.dtype)
            conv.input[1] = g.add_const(scaled, "snake_conv_w")
            conv.input[0] = out_snake
        edit.dropped |= {id(square), id(weighted), id(total)}
        edit.added += [s2, snake]
        edit.sites += 1
    return edit.apply(g)


def scale_into_norm(g: _Graph) -> int:
    """Mul(a, IN(x; s, b)) -> IN(x; s * a, b * a), a a constant (1, C, 1) and the norm's
    output read by that Mul alone."""
    edit = _Edit()
    from onnx import helper

    for mul in list(g.graph.node):
        if mul.op_type != "Mul":
            continue
        norm = next(
            (
                g.producer[i]
                for i in mul.input
                if i in g.producer and g.producer[i].op_type == "InstanceNormalization"
            ),
            None,
        )
        if norm is None or g.only_reader(norm.output[0]) is not mul:
            continue
        alpha_name = _other(mul, norm.output[0])
        alpha = None if alpha_name is None else g.const(alpha_name)
        if alpha is None or alpha.ndim != 3 or alpha.shape[0] != 1 or alpha.shape[2] != 1:
            continue
        flat = g.add_const(alpha.reshape(-1).astype(np.float32), "alpha")
        ws, out_ws = g.node("Mul", [norm.input[1], flat], "norm_scale")
        bs, out_bs = g.node("Mul", [norm.input[2], flat], "norm_bias")
        fused = helper.make_node(
            "InstanceNormalization",
            [norm.input[0], out_ws, out_bs],
            [mul.output[0]],
            name=g.name("scaled_norm"),
            epsilon=_attr(norm, "epsilon", 1e-5),
        )
        edit.dropped |= {id(mul), id(norm)}
        edit.added += [ws, bs, fused]
        edit.sites += 1
    return edit.apply(g)


def square_as_mul(g: _Graph) -> int:
    """Pow(x, 2) -> Mul(x, x)."""
    count = 0
    from onnx import helper

    for position, node in enumerate(list(g.graph.node)):
        if node.op_type == "Pow" and _is_scalar(g.const(node.input[1]), 2.0):
            square = helper.make_node(
                "Mul", [node.input[0], node.input[0]], list(node.output), name=node.name
            )
            g.graph.node.remove(node)
            g.graph.node.insert(position, square)
            count += 1
    if count:
        g.index()
    return count


def _attr(node: Any, name: str, default: Any) -> Any:
    from onnx import helper

    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _plus_one(g: _Graph, name: str) -> bool:
    """Whether `name` is computed as something + 1 (AdaIN's 1 + gamma)."""
    node = g.producer.get(name)
    if node is None or node.op_type != "Add":
        return False
    return any(_is_scalar(g.const(i), 1.0) for i in node.input)


def _reciprocal_of(g: _Graph, name: str, alpha: np.ndarray) -> bool:
    """Whether `name` is 1 / alpha: a Reciprocal or Div(1, .) of alpha, or its value."""
    value = g.const(name)
    if value is not None:
        return value.shape == alpha.shape and bool(np.allclose(value * alpha, 1.0, rtol=1e-5))
    node = g.producer.get(name)
    if node is None:
        return False
    if node.op_type == "Reciprocal":
        source = g.const(node.input[0])
        return source is not None and np.array_equal(source, alpha)
    if node.op_type == "Div" and _is_scalar(g.const(node.input[0]), 1.0):
        source = g.const(node.input[1])
        return source is not None and np.array_equal(source, alpha)
    return False


def _plain_conv(g: _Graph, conv: Any, channels: int) -> bool:
    if conv.op_type != "Conv" or int(_attr(conv, "group", 1)) != 1:
        return False
    weights = g.const(conv.input[1])
    return weights is not None and weights.ndim == 3 and weights.shape[1] == channels


#: The steps in the order `optimise` applies them, by name.
STEPS: Final[tuple[tuple[str, Callable[[_Graph], int]], ...]] = (
    ("adain_into_norm", adain_into_norm),
    ("snake_into_conv", snake_into_conv),
    ("scale_into_norm", scale_into_norm),
    ("square_as_mul", square_as_mul),
)


@dataclass(frozen=True)
class Rewrites:
    """What `optimise` did: sites rewritten per step, in order."""

    sites: dict[str, int]
    snake_convs: tuple[str, ...] = ()
    """The convolutions after a Snake (node names): what an int8 decoder quantises."""

    def describe(self) -> str:
        return ", ".join(f"{name} {n}" for name, n in self.sites.items())


def optimise(model: Any, steps: Iterable[str] | None = None) -> Rewrites:
    """Apply the named `steps` (default: all of `STEPS`, in order) to `model` (an
    onnx.ModelProto of the decoder, batch 1), in place; the sites each rewrote."""
    wanted = set(steps) if steps is not None else {name for name, _ in STEPS}
    unknown = wanted - {name for name, _ in STEPS}
    if unknown:
        raise ValueError(f"unknown rewrite steps: {', '.join(sorted(unknown))}")
    g = _Graph(model)
    sites = {name: step(g) for name, step in STEPS if name in wanted}
    return Rewrites(sites, tuple(g.snake_convs))
