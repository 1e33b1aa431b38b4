"""The device the model tier runs on: `SPEECHD_TEST_DEVICE` (scripts/gpu_check.sh sets it to
`cuda`), else the CPU, which is what CI has."""

from __future__ import annotations

import os

__all__ = ["DEVICE"]

DEVICE = os.environ.get("SPEECHD_TEST_DEVICE") or "cpu"
