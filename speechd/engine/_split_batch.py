"""`_split`'s two halves for a batch of chunks: padded, and masked so that no item's audio
depends on its batch-mates. Imports torch and kokoro: only the torch runtime and the ONNX
export load this module.

    BatchFront(input_ids (B, T), lengths (B,), style (B, 256), speed (B,))
        -> durations (B, T; 0 past each item's length), d (B, T, C), t_en (B, C', T)
    BatchBack(d, t_en, frames (B, F), frame_lengths (B,), style, phase (B, 9),
              noise (B, F * 600, 1)) -> audio (B, F * 600; 0 past each item's length)

Each item's tokens (markers included) sit at the start of its row, padding after them; each
item's frames likewise. Padding alone is not enough: Kokoro's time-wise operations would mix
a row's padding into its last valid values. Every one of them is made blind to it here:

- attention (ALBERT) takes the padding mask; the text encoders are Kokoro's own masked code
  (they already pack their LSTMs); the duration LSTM and the prosody LSTM (`shared`), which
  KModel runs unpacked, are packed (`pack_padded_sequence`);
- every instance norm inside AdaIN (predictor, decoder, and the generator's AdaIN blocks)
  takes its mean and variance over the item's valid frames only (`_adain`);
- every convolution and transposed convolution whose window reaches past an item's end reads
  zeros there, as it does alone (its own zero padding): the padding is re-zeroed before each;
- the harmonic source's phase is a cumulative sum, so the padding's F0 is zeroed (its phase
  then stays constant, which is what the upsampling's edge clamp reads alone); the STFT's
  reflect padding reflects each item at its own end (a gather); the inverse STFT's window
  envelope counts each item's own frames only.

Per item: its style row (voice or blend, chosen by its length), its speed (durations divided
by it), its phases and noise (drawn on the host from its own seed, `excitation`, exactly as
alone). What remains between an item made alone and in a batch is float rounding (other
matrix shapes, a masked mean instead of torch's instance norm), measured in
`speechd.engine._batch`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ._split import Back

__all__ = ["BatchBack", "BatchFront", "split_batch_model"]


def _mask(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(B, 1, L) float: 1 where a position of `x` (..., L) is below its row's `valid`."""
    positions = torch.arange(x.shape[-1], device=x.device)
    return (positions[None, None, :] < valid[:, None, None]).to(x.dtype)


def _lstm(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """`lstm` over each row of `x` (B, T, C) up to its length; zeros after."""
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, _ = lstm(packed)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out


def _adain(adain: Any, x: torch.Tensor, s: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Kokoro's AdaIN1d with its instance norm over each row's valid frames only."""
    norm = adain.norm
    count = mask.sum(dim=-1, keepdim=True)
    mean = (x * mask).sum(dim=-1, keepdim=True) / count
    centred = x - mean
    var = (centred * centred * mask).sum(dim=-1, keepdim=True) / count
    normed = centred * torch.rsqrt(var + norm.eps)
    if norm.weight is not None:
        normed = normed * norm.weight[None, :, None] + norm.bias[None, :, None]
    h = adain.fc(s)
    gamma, beta = torch.chunk(h.view(h.size(0), h.size(1), 1), chunks=2, dim=1)
    return (1 + gamma) * normed + beta


def _res_block(block: Any, x: torch.Tensor, s: torch.Tensor, masks: tuple[Any, Any]) -> Any:
    """AdainResBlk1d (predictor and decoder); `masks`: its input's and its output's (twice
    as long where the block upsamples)."""
    inner, outer = masks
    r = block.actv(_adain(block.norm1, x, s, inner))
    if block.upsample_type != "none":
        r = block.pool(r * inner)
    r = block.conv1(r * outer)
    r = block.actv(_adain(block.norm2, r, s, outer))
    r = block.conv2(r * outer)
    shortcut = block.upsample(x)
    if block.learned_sc:
        shortcut = block.conv1x1(shortcut)
    return (r + shortcut) * torch.rsqrt(torch.tensor(2))


def _snake(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    return x + (1 / alpha) * (torch.sin(alpha * x) ** 2)


def _res_block1(block: Any, x: torch.Tensor, s: torch.Tensor, mask: torch.Tensor) -> Any:
    """The generator's AdaINResBlock1."""
    parts = (block.convs1, block.convs2, block.adain1, block.adain2, block.alpha1, block.alpha2)
    layers = zip(*parts, strict=True)
    for c1, c2, n1, n2, a1, a2 in layers:
        xt = c1(_snake(_adain(n1, x, s, mask), a1) * mask)
        xt = c2(_snake(_adain(n2, xt, s, mask), a2) * mask)
        x = xt + x
    return x


class BatchFront(nn.Module):
    """Padded tokens -> per-item durations and the two text encodings."""

    def __init__(self, kmodel: Any) -> None:
        super().__init__()
        self.bert = kmodel.bert
        self.bert_encoder = kmodel.bert_encoder
        self.predictor = kmodel.predictor
        self.text_encoder = kmodel.text_encoder

    def forward(
        self,
        input_ids: torch.Tensor,
        lengths: torch.Tensor,
        style: torch.Tensor,
        speed: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        valid = lengths.to(input_ids.device)
        mask = positions[None, :] >= valid[:, None]  # True on padding, as KModel's text_mask
        bert = self.bert(input_ids, attention_mask=(~mask).to(torch.int32))
        d_en = self.bert_encoder(bert).transpose(-1, -2)
        s = style[:, 128:]
        d = self.predictor.text_encoder(d_en, s, lengths, mask)
        x = _lstm(self.predictor.lstm, d, lengths)
        duration = torch.sigmoid(self.predictor.duration_proj(x)).sum(dim=-1) / speed[:, None]
        durations = torch.round(duration).clamp(min=1).long().masked_fill(mask, 0)
        t_en = self.text_encoder(input_ids, lengths, mask)
        return durations, d, t_en


class BatchBack(nn.Module):
    """Padded aligned encodings -> prosody -> decoder -> audio, item by item in one pass.
    Shares `back`'s modules (its harmonic source and convolutional STFT included)."""

    def __init__(self, back: Back) -> None:
        super().__init__()
        self.predictor = back.predictor
        self.decoder = back.decoder
        self.source = back.source
        generator = back.decoder.generator
        self.stft = generator.stft
        self.hop = int(self.stft.hop)
        self.pad = int(self.stft.n_fft) // 2
        #: Samples of the source signal per generator input position (prod(rates) * hop).
        self.scale = int(self.source.upsample_scale)

    def forward(
        self,
        d: torch.Tensor,
        t_en: torch.Tensor,
        frames: torch.Tensor,
        frame_lengths: torch.Tensor,
        style: torch.Tensor,
        phase: torch.Tensor,
        noise: torch.Tensor,
    ) -> torch.Tensor:
        valid = frame_lengths.to(frames.device)
        index = frames[:, None, :]
        en = torch.gather(d.transpose(-1, -2), 2, index.expand(-1, d.shape[2], -1))
        m1 = _mask(en, valid)
        f0, n = self._prosody(en * m1, style[:, 128:], frame_lengths, m1)
        asr = torch.gather(t_en, 2, index.expand(-1, t_en.shape[1], -1)) * m1
        return self._decode(asr, f0, n, style[:, :128], m1, valid, phase, noise)

    def _prosody(
        self, en: torch.Tensor, s: torch.Tensor, lengths: torch.Tensor, m1: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ProsodyPredictor.F0Ntrain: F0 and energy curves (B, 2F), zero past each item."""
        predictor = self.predictor
        x = _lstm(predictor.shared, en.transpose(-1, -2), lengths).transpose(-1, -2)
        curves = []
        for blocks, proj in ((predictor.F0, predictor.F0_proj), (predictor.N, predictor.N_proj)):
            y, mask = x, m1
            for block in blocks:
                out = block.upsample(mask)  # an upsampling block doubles the valid frames too
                y = _res_block(block, y, s, (mask, out))
                mask = out
            curves.append((proj(y) * mask).squeeze(1))
        return curves[0], curves[1]

    def _decode(
        self,
        asr: torch.Tensor,
        f0_curve: torch.Tensor,
        n: torch.Tensor,
        s: torch.Tensor,
        m1: torch.Tensor,
        valid: torch.Tensor,
        phase: torch.Tensor,
        noise: torch.Tensor,
    ) -> torch.Tensor:
        """Decoder.forward, masked."""
        decoder = self.decoder
        f0 = decoder.F0_conv(f0_curve.unsqueeze(1)) * m1
        energy = decoder.N_conv(n.unsqueeze(1)) * m1
        x = _res_block(decoder.encode, torch.cat([asr, f0, energy], dim=1), s, (m1, m1))
        asr_res = decoder.asr_res(asr)
        mask, residual = m1, True
        for block in decoder.decode:
            if residual:
                x = torch.cat([x * mask, asr_res, f0, energy], dim=1)
            out = block.upsample(mask)
            residual = residual and block.upsample_type == "none"
            x = _res_block(block, x, s, (mask, out))
            mask = out
        return self._generate(x, s, f0_curve, mask, valid, phase, noise)

    def _generate(
        self,
        x: torch.Tensor,
        s: torch.Tensor,
        f0_curve: torch.Tensor,
        mask: torch.Tensor,
        valid: torch.Tensor,
        phase: torch.Tensor,
        noise: torch.Tensor,
    ) -> torch.Tensor:
        """Generator.forward, masked: x (B, 512, 2F) -> audio (B, 2F * scale)."""
        generator = self.decoder.generator
        self.source.phase, self.source.noise = phase, noise
        try:
            f0 = generator.f0_upsamp(f0_curve[:, None]).transpose(1, 2)  # zero past each item
            har_source, _, _ = self.source(f0)
        finally:
            self.source.phase = self.source.noise = None
        samples = 2 * valid * self.scale
        spec, har_phase = self._transform(har_source.transpose(1, 2).squeeze(1), samples)
        har = torch.cat([spec, har_phase], dim=1)
        stages = generator.num_upsamples
        length = 2 * valid  # valid positions of x at the current stage
        for i in range(stages):
            x = F.leaky_relu(x, negative_slope=0.1)
            x_source = generator.noise_convs[i](har)
            x = generator.ups[i](x * mask)
            length = length * int(generator.ups[i].stride[0])
            if i == stages - 1:
                x = generator.reflection_pad(x)
                length = length + 1
            mask = _mask(x, length)
            x_source = _res_block1(generator.noise_res[i], x_source * mask, s, mask)
            x = x + x_source
            total = None
            for j in range(generator.num_kernels):
                y = _res_block1(generator.resblocks[i * generator.num_kernels + j], x, s, mask)
                total = y if total is None else total + y
            x = total / generator.num_kernels
        x = generator.conv_post(F.leaky_relu(x) * mask)
        bins = generator.post_n_fft // 2 + 1
        spec = torch.exp(x[:, :bins, :] * mask) * mask  # exp(0) past the end: no overflow
        audio = self._inverse(spec, torch.sin(x[:, bins:, :]), mask)
        return audio * _mask(audio, samples)[:, 0]

    def _transform(self, signal: torch.Tensor, samples: torch.Tensor) -> tuple[Any, Any]:
        """_STFT.transform of each row up to its `samples`, reflect-padded at its own end;
        frames past its last are zero."""
        stft, pad = self.stft, self.pad
        at = torch.arange(signal.shape[-1] + 2 * pad, device=signal.device) - pad
        last = samples[:, None] - 1
        index = at.abs()[None, :].expand(signal.shape[0], -1)
        index = torch.where(index > last, 2 * last - index, index).clamp(min=0)
        x = torch.gather(signal, 1, index)[:, None, :]
        real = F.conv1d(x, stft.forward_real, stride=self.hop)
        imag = F.conv1d(x, stft.forward_imag, stride=self.hop)
        imag = torch.cat([torch.zeros_like(imag[:, :, :1]), imag[:, :, 1:]], dim=2)  # as alone
        phase = torch.where((imag == 0) & (real < 0), torch.pi, torch.atan2(imag, real))
        frames = _mask(real, samples // self.hop + 1)
        return torch.sqrt(real**2 + imag**2) * frames, phase * frames

    def _inverse(self, magnitude: torch.Tensor, phase: torch.Tensor, mask: Any) -> torch.Tensor:
        """_STFT.inverse, each row's window envelope from its own frames."""
        stft = self.stft
        real = F.conv_transpose1d(magnitude * torch.cos(phase), stft.inverse_real, stride=self.hop)
        imag = F.conv_transpose1d(magnitude * torch.sin(phase), stft.inverse_imag, stride=self.hop)
        envelope = F.conv_transpose1d(mask, stft.window_square, stride=self.hop)
        audio = (real + imag) / envelope.clamp(min=1e-6)  # 0 past an item's frames
        return audio[:, 0, self.pad : audio.shape[-1] - self.pad]


def split_batch_model(kmodel: Any, back: Back) -> tuple[BatchFront, BatchBack]:
    """The batched halves of a KModel whose single halves `split_model` made (`back`: its
    harmonic source and STFT are shared)."""
    return BatchFront(kmodel).eval(), BatchBack(back).eval()
