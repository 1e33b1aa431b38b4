"""Telemetry: what a worker measures of itself and its device, and how it is shown.

The worker process measures (`start_telemetry`: a sampler thread, never the event loop) and
carries its latest `Readings` in its heartbeat notices (`workers/<id>`); the api turns the
ready workers' readings into Prometheus families (`telemetry_families`) at each scrape of
`/metrics`; `speechd top` (`run_top`) shows them live from /metrics. Sources, each used only
where it exists: the process's CPU time and RSS (always), NVML for a CUDA device (the `nvml`
extra, `nvidia-ml-py`), and a Jetson's `tegrastats`. Importing this package is torch-free.

    telemetry = start_telemetry("cuda:0")
    telemetry.audio_made(2.4)            # after each appended chunk
    notice.telemetry = telemetry.reading()
"""

from __future__ import annotations

import contextlib

from ._families import WorkerReadings, telemetry_families
from ._readings import ModelReadings, Readings
from ._sampler import Telemetry, start_telemetry
from ._top import run_top

__all__ = [
    "ModelReadings",
    "Readings",
    "Telemetry",
    "WorkerReadings",
    "run_top",
    "start_telemetry",
    "telemetry_families",
]

for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and _obj.__module__.startswith(__name__ + "."):
        with contextlib.suppress(AttributeError, TypeError):
            _obj.__module__ = __name__
del _name, _obj, contextlib
