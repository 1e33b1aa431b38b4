"""`speechd wyoming`: the Wyoming server alone, against a store that workers share."""

from __future__ import annotations

import asyncio
import logging
import signal

from speechd.config import Settings

from ._door import wyoming_door

__all__ = ["run_wyoming"]

log = logging.getLogger("speechd.wyoming")


def run_wyoming(settings: Settings) -> int:
    """Serve Wyoming until SIGTERM/SIGINT; 0 on a clean stop, 1 when it cannot listen."""

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            async with wyoming_door(settings):
                await stop.wait()
        except OSError as exc:
            log.error("cannot serve Wyoming on %s: %s", settings.wyoming_uri, exc)
            return 1
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        return 0

    return asyncio.run(main())
