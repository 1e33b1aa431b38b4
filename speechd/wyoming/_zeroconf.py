"""Zeroconf: the Wyoming server advertised as `_wyoming._tcp.local.`, so Home Assistant
discovers it by itself (as wyoming-piper does, with python-zeroconf).

The address advertised is the one the server listens on, announced on that interface only,
or, when it listens on every address (`0.0.0.0`), the one this host reaches the mDNS group
from, announced on every interface. The service is withdrawn when the server stops.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

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
        everywhere = host in ("", "0.0.0.0", "::")
        self.address = str(
            ipaddress.IPv4Address(_outward_address() if everywhere else socket.gethostbyname(host))
        )
        self.everywhere = everywhere
        """Whether it is announced on every interface (else on the listening address's)."""
        self.name = name or default_name()
        self.port = port
        self._zeroconf: AsyncZeroconf | None = None
        self._info: AsyncServiceInfo | None = None

    async def start(self) -> None:
        from zeroconf import InterfaceChoice
        from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

        info = AsyncServiceInfo(
            SERVICE_TYPE,
            f"{self.name}.{SERVICE_TYPE}",
            addresses=[socket.inet_aton(self.address)],
            port=self.port,
            server=f"{self.name}.local.",
        )
        zeroconf = AsyncZeroconf(
            interfaces=InterfaceChoice.All if self.everywhere else [self.address]
        )
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
        if info is not None:
            await zeroconf.async_unregister_service(info)
        await zeroconf.async_close()
