"""The streaming response the gateway's bodies use; it lives in `speechd.api._streaming`
(speech streams end incomplete the same way), named here for the gateway's modules."""

from __future__ import annotations

from .._streaming import AbortBody, AppResponse, StreamApp

__all__ = ["AbortBody", "AppResponse", "StreamApp"]
