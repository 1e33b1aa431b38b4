"""Kokoro's forward pass cut in two at the predicted durations, with the decoder's randomness
as inputs: the torch modules both runtimes are built from. Imports torch and kokoro: only the
torch runtime and the ONNX export load this module.

`KModel.forward_with_tokens` does, in one call: text -> durations -> alignment -> prosody and
decoder -> audio, drawing the decoder's noise from torch's generator. Here that becomes

    Front(input_ids, style, speed) -> durations (int64, one per token), d, t_en
    Back(d, t_en, frames, style, phase, noise) -> audio (float32 at 24 kHz)

where `frames` is the token index of every frame (`np.repeat(arange(tokens), durations)`:
the alignment KModel builds as a one-hot matrix, applied here as a gather, which selects
the same values), and `phase` (1, 9) and `noise` (1, samples, 1) are the harmonic source's
random initial phases and its noise. The host draws those from a seed (`_stages`), so the
same seed gives the same audio on either runtime and the ONNX graph holds no random ops.

One change of form, not of distribution: KModel adds independent noise to each of the nine
harmonics and then mixes them with `l_linear` (a 9 -> 1 linear layer); the sum of nine
independent normals weighted by w is one normal of standard deviation |w|, so `Back` takes
one noise value per sample and scales it by |w|: the same random process for a ninth of
the random numbers.

The modules are exactly KModel's layers (same weights, same order of operations) except
that: the batch is always 1 (so the text masks are all false and pack_padded_sequence is an
identity KModel also goes through), the alignment is a gather, and the decoder's STFT is
written with convolutions (`_STFT`, equal to torch's to float rounding).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Back", "Front", "split_model"]


class Front(nn.Module):
    """Tokens -> durations, and the two text encodings the second half aligns."""

    def __init__(self, kmodel: Any) -> None:
        super().__init__()
        self.bert = kmodel.bert
        self.bert_encoder = kmodel.bert_encoder
        self.predictor = kmodel.predictor
        self.text_encoder = kmodel.text_encoder

    def forward(
        self, input_ids: torch.Tensor, style: torch.Tensor, speed: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        tokens = input_ids.shape[1]
        lengths = torch.full((1,), tokens, dtype=torch.long)
        mask = torch.zeros((1, tokens), dtype=torch.bool, device=input_ids.device)
        bert = self.bert(input_ids, attention_mask=torch.ones_like(input_ids, dtype=torch.int32))
        d_en = self.bert_encoder(bert).transpose(-1, -2)
        s = style[:, 128:]
        d = self.predictor.text_encoder(d_en, s, lengths, mask)
        x, _ = self.predictor.lstm(d)
        duration = torch.sigmoid(self.predictor.duration_proj(x)).sum(dim=-1) / speed
        durations = torch.round(duration).clamp(min=1).long().reshape(-1)
        t_en = self.text_encoder(input_ids, lengths, mask)
        return durations, d, t_en


class _Source(nn.Module):
    """SourceModuleHnNSF (with its SineGen) taking its phases and noise from `Back`."""

    def __init__(self, source: Any) -> None:
        super().__init__()
        sine = source.l_sin_gen
        self.harmonics = sine.harmonic_num + 1
        self.sampling_rate = float(sine.sampling_rate)
        self.upsample_scale = float(sine.upsample_scale)
        self.sine_amp = float(sine.sine_amp)
        self.noise_std = float(sine.noise_std)
        self.voiced_threshold = float(sine.voiced_threshold)
        self.linear = source.l_linear
        self.tanh = source.l_tanh
        self.phase: torch.Tensor | None = None
        self.noise: torch.Tensor | None = None

    def forward(self, f0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        assert self.phase is not None and self.noise is not None, "set by Back.forward"
        harmonics = torch.arange(1, self.harmonics + 1, dtype=f0.dtype, device=f0.device)
        rad = (f0 * harmonics / self.sampling_rate) % 1
        rad = torch.cat([rad[:, :1, :] + self.phase[:, None, :], rad[:, 1:, :]], dim=1)
        rad = F.interpolate(
            rad.transpose(1, 2), scale_factor=1 / self.upsample_scale, mode="linear"
        ).transpose(1, 2)
        phase = torch.cumsum(rad, dim=1) * 2 * torch.pi
        phase = F.interpolate(
            phase.transpose(1, 2) * self.upsample_scale,
            scale_factor=self.upsample_scale,
            mode="linear",
        ).transpose(1, 2)
        uv = (f0 > self.voiced_threshold).to(f0.dtype)
        sines = torch.sin(phase) * self.sine_amp * uv
        noise_amp = uv * self.noise_std + (1 - uv) * self.sine_amp / 3
        weight_norm = torch.linalg.vector_norm(self.linear.weight)
        merged = self.linear(sines) + noise_amp * weight_norm * self.noise
        return self.tanh(merged), uv, uv  # (harmonic source, unused noise source, uv)


class _STFT(nn.Module):
    """Kokoro's TorchSTFT (torch.stft and torch.istft: centred, reflect-padded, periodic
    Hann window) written with convolutions, so it traces into an ONNX graph without complex
    tensors. kokoro's own export module, CustomSTFT, pads by replication and leaves the
    inverse unnormalised (its audio differs from torch's by up to 0.7 of full scale on random
    spectra, and is ~0.8x as loud); this one divides by the window's overlap-added square
    as torch.istft does, and agrees with TorchSTFT to float rounding."""

    def __init__(self, stft: Any) -> None:
        super().__init__()
        n_fft, hop = int(stft.filter_length), int(stft.hop_length)
        self.n_fft, self.hop = n_fft, hop
        window = torch.hann_window(n_fft, periodic=True, dtype=torch.float64)
        n = torch.arange(n_fft, dtype=torch.float64)
        k = torch.arange(n_fft // 2 + 1, dtype=torch.float64)
        angle = 2 * torch.pi * k[:, None] * n[None, :] / n_fft  # (bins, n_fft)
        sine = torch.sin(angle)
        sine[0] = 0.0  # exactly: DC and Nyquist have no imaginary part
        if n_fft % 2 == 0:
            sine[-1] = 0.0
        self.register_buffer("forward_real", (torch.cos(angle) * window)[:, None].float())
        self.register_buffer("forward_imag", (-sine * window)[:, None].float())
        # irfft: the bins between DC and Nyquist stand for their conjugates too (weight 2).
        twice = torch.full_like(k, 2.0)
        twice[0] = 1.0
        if n_fft % 2 == 0:
            twice[-1] = 1.0
        scale = (twice / n_fft)[:, None] * window[None, :]
        self.register_buffer("inverse_real", (torch.cos(angle) * scale)[:, None].float())
        self.register_buffer("inverse_imag", (-sine * scale)[:, None].float())
        self.register_buffer("window_square", (window**2)[None, None].float())

    def transform(self, signal: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pad = self.n_fft // 2
        x = F.pad(signal[:, None, :], (pad, pad), mode="reflect")
        real = F.conv1d(x, self.forward_real, stride=self.hop)
        imag = F.conv1d(x, self.forward_imag, stride=self.hop)
        # The first frame is centred on sample 0 of a reflect-padded signal: symmetric, so its
        # spectrum is real, and the rounding noise in its imaginary part would pick +pi or -pi
        # at random (differently in torch and ONNX Runtime). Zero it, as the maths says.
        imag = torch.cat([torch.zeros_like(imag[:, :, :1]), imag[:, :, 1:]], dim=2)
        # A zero imaginary part may still be -0.0, where atan2 says -pi; torch.angle says pi.
        phase = torch.where((imag == 0) & (real < 0), torch.pi, torch.atan2(imag, real))
        return torch.sqrt(real**2 + imag**2), phase

    def inverse(self, magnitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        real = F.conv_transpose1d(magnitude * torch.cos(phase), self.inverse_real, stride=self.hop)
        imag = F.conv_transpose1d(magnitude * torch.sin(phase), self.inverse_imag, stride=self.hop)
        ones = torch.ones_like(magnitude[:, :1, :])
        envelope = F.conv_transpose1d(ones, self.window_square, stride=self.hop)
        pad = self.n_fft // 2
        audio = (real + imag) / envelope
        return audio[:, :, pad : audio.shape[-1] - pad]


class Back(nn.Module):
    """Aligned encodings -> prosody (F0, energy) -> decoder -> audio."""

    def __init__(self, kmodel: Any) -> None:
        super().__init__()
        self.predictor = kmodel.predictor
        self.decoder = kmodel.decoder
        generator = kmodel.decoder.generator
        self.source = _Source(generator.m_source)
        generator.m_source = self.source
        generator.stft = _STFT(generator.stft)

    def forward(
        self,
        d: torch.Tensor,
        t_en: torch.Tensor,
        frames: torch.Tensor,
        style: torch.Tensor,
        phase: torch.Tensor,
        noise: torch.Tensor,
    ) -> torch.Tensor:
        self.source.phase, self.source.noise = phase, noise
        try:
            en = d.transpose(-1, -2).index_select(2, frames)
            f0, n = self.predictor.F0Ntrain(en, style[:, 128:])
            asr = t_en.index_select(2, frames)
            return self.decoder(asr, f0, n, style[:, :128]).reshape(-1)
        finally:
            self.source.phase = self.source.noise = None


def split_model(kmodel: Any) -> tuple[Front, Back]:
    """Both halves of a loaded KModel (its decoder's source module is replaced in place)."""
    return Front(kmodel).eval(), Back(kmodel).eval()
