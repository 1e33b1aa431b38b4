"""Figures the container tier reads on its way (image sizes, build and start times, memory),
for the record, never asserted: each line goes to test-artifacts/container-figures.txt with
the load average when it was read, since a busy machine makes them meaningless."""

from __future__ import annotations

import os
import time

from harness.podman import ROOT

__all__ = ["FIGURES", "record"]

FIGURES = ROOT / "test-artifacts" / "container-figures.txt"


def record(image: str, what: str, value: str) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S')}  {image:8} {what}: {value}  (load {load})"
    FIGURES.parent.mkdir(exist_ok=True)
    with FIGURES.open("a", encoding="utf-8") as file:
        file.write(line + "\n")
    print(line)
