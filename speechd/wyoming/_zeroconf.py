"""Zeroconf: the Wyoming server advertised as `_wyoming._tcp.local.`, so Home Assistant
discovers it by itself (as wyoming-piper does, with python-zeroconf).

The address advertised is the one the server listens on, or, when it listens on every
address (`0.0.0.0`), the one this host reaches the mDNS group from. The service is withdrawn
when the server stops.
"""

from __future__ import annotations

import ipaddress
import logging
import socket

__all__ = ["SERVICE_TYPE", "Advertisement", "default_name"]

log = logging.getLogger("speechd.wyoming")

SERVICE_TYPE = "_wyoming._tcp.local."
_MDNS_GROUP = "224.0.0.251"


def default_name() -> str:
    """`speechd-<host name>`: one per machine, readable in Home Assistant's discovery."""
    host = socket.gethostname().split(".", 1)[0] or "host"
    return f"speechd-{host}"[:63]  # a DNS label


def _outward_address() -> str:
    """The address this host reaches the mDNS group from (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((_MDNS_GROUP, 5353))
        return str(probe.getsockname()[0])


class Advertisement:
    """The server's mDNS record, registered by `start` and withdrawn by `close`."""

    def __init__(self, name: str, host: str, port: int) -> None:
        if host in ("", "0.0.0.0", "::"):
            host = _outward_address()
        self.address = str(ipaddress.IPv4Address(socket.gethostbyname(host)))
        self.name = name or default_name()
        self.port = port
        self._zeroconf: object | None = None
        self._info: object | None = None

    async def start(self) -> None:
        from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

        info = AsyncServiceInfo(
            SERVICE_TYPE,
            f"{self.name}.{SERVICE_TYPE}",
            addresses=[socket.inet_aton(self.address)],
            port=self.port,
            server=f"{self.name}.local.",
        )
        zeroconf = AsyncZeroconf()
        try:
            await zeroconf.async_register_service(info)
        except BaseException:
            await zeroconf.async_close()
            raise
        self._zeroconf, self._info = zeroconf, info
        log.info("advertising %s on %s:%d (zeroconf)", info.name, self.address, self.port)

    async def close(self) -> None:
        zeroconf, info = self._zeroconf, self._info
        self._zeroconf = self._info = None
        if zeroconf is None:
            return
        await zeroconf.async_unregister_service(info)  # type: ignore[attr-defined]
        await zeroconf.async_close()  # type: ignore[attr-defined]
