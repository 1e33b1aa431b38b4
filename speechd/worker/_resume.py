"""The resume checkpoint a cast's records carry (header `k`), with which a new attempt goes on
from the last record that ends a chunk (resume by reference, see `_attempts`)."""

from __future__ import annotations

import base64

import msgspec

__all__ = ["Resume", "read_resume", "resume_header"]


class Resume(msgspec.Struct, frozen=True, array_like=True):
    """The resume checkpoint (`k`) of a record that ends its chunk: the playable sequence's
    samples and compute (ms) up to it, and the encoder's checkpoint after it."""

    samples: int
    gen_ms: int
    encoder: bytes


_resume_encoder = msgspec.msgpack.Encoder()
_resume_decoder = msgspec.msgpack.Decoder(Resume)


def resume_header(state: Resume) -> bytes:
    """`state` as a `k` header's value."""
    return base64.b64encode(_resume_encoder.encode(state))


def read_resume(value: bytes) -> Resume:
    """A `k` header's checkpoint (ValueError if it is not one)."""
    try:
        return _resume_decoder.decode(base64.b64decode(value, validate=True))
    except (msgspec.DecodeError, ValueError) as exc:
        raise ValueError(f"not a resume checkpoint: {exc}") from exc
