"""The streaming response the gateway's bodies use; it lives in `speechd.openai_compat`
(speech streams end incomplete the same way), named here for the gateway's modules."""

from __future__ import annotations

from speechd.openai_compat._streaming import AbortBody, AppResponse, StreamApp

__all__ = ["AbortBody", "AppResponse", "StreamApp"]
