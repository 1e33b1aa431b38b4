"""The torch runtime's decoder with the float rewrites the ONNX graph gets (`_graph_rewrites`),
written as modules: the same algebra, so the two runtimes' decoders do the same work. Imports
torch and kokoro: the torch runtime loads this module.

    AdaIN:  (1 + gamma) * IN(x; w, b) + beta      -> IN(x; w (1 + gamma), b (1 + gamma) + beta)
    Snake:  conv(h + sin(a h)**2 / a)             -> conv'(u + sin(u)**2), u = a h, W' = W / a,
            a folded into the norm before it as well

Eager torch runs every operation as its own pass over the tensor, so AdaIN then Snake then a
convolution is nine passes; fused it is five (the norm, sin, square and add in place, the
convolution). `fuse` also takes the weight norm off the convolutions (kokoro computes each
convolution's weight from its direction and norm on every call): the weight is computed once
(the same value), for the batched halves too.

Batch 1 only, which is what `_split.Back` runs: a fused module given a batch (the batched
halves call the modules' parts themselves, masked, and never these forwards) runs kokoro's
own forward.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["fuse"]


def _adain_forward(self: Any, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """AdaIN1d with the style's scale and shift in the norm's own (batch 1)."""
    if x.shape[0] != 1:
        return self.speechd_unfused(x, s)
    weight, bias = _norm_affine(self, s)
    return F.instance_norm(x, weight=weight, bias=bias, eps=self.norm.eps)


def _norm_affine(adain: Any, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    gamma, beta = adain.fc(s).view(-1).chunk(2)
    scale = 1 + gamma
    return adain.norm.weight * scale, adain.norm.bias * scale + beta


def _snake_norm(adain: Any, alpha: torch.Tensor, x: torch.Tensor, s: torch.Tensor) -> Any:
    """u + sin(u)**2 with u = alpha * AdaIN(x): the Snake before a convolution whose weights
    carry its 1 / alpha."""
    weight, bias = _norm_affine(adain, s)
    a = alpha.view(-1)
    u = F.instance_norm(x, weight=weight * a, bias=bias * a, eps=adain.norm.eps)
    return torch.sin(u).square_().add_(u)


def _res_block_forward(self: Any, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """AdaINResBlock1 (the generator's blocks and its noise blocks), fused (batch 1)."""
    if x.shape[0] != 1:
        return self.speechd_unfused(x, s)
    parts = zip(
        self.convs1, self.convs2, self.adain1, self.adain2, self.alpha1, self.alpha2, strict=True
    )
    for (c1, c2, n1, n2, a1, a2), (w1, w2) in zip(parts, self.speechd_weights, strict=True):
        xt = _conv(c1, w1, _snake_norm(n1, a1, x, s))
        xt = _conv(c2, w2, _snake_norm(n2, a2, xt, s))
        x = xt + x
    return x


def _conv(conv: nn.Conv1d, weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return F.conv1d(x, weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)


def _without_weight_norm(module: nn.Module) -> None:
    from torch.nn.utils import remove_weight_norm

    for part in module.modules():
        if any(hasattr(part, f"weight_{x}") for x in ("g", "v")):
            remove_weight_norm(part)


def fuse(model: nn.Module) -> int:
    """Fuse `model`'s AdaIN and Snake blocks (a KModel, in place); how many modules were."""
    from kokoro.istftnet import AdaIN1d, AdaINResBlock1

    _without_weight_norm(model)
    fused = 0
    for module in model.modules():
        if isinstance(module, AdaINResBlock1):
            weights = []
            with torch.no_grad():
                for c1, c2, a1, a2 in zip(
                    module.convs1, module.convs2, module.alpha1, module.alpha2, strict=True
                ):
                    weights.append(
                        (
                            (c1.weight / a1.view(1, -1, 1)).contiguous(),
                            (c2.weight / a2.view(1, -1, 1)).contiguous(),
                        )
                    )
            module.speechd_weights = weights
            module.speechd_unfused = module.forward
            module.forward = types.MethodType(_res_block_forward, module)
            fused += 1
        elif isinstance(module, AdaIN1d):
            module.speechd_unfused = module.forward
            module.forward = types.MethodType(_adain_forward, module)
            fused += 1
    return fused
