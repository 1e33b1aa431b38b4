"""Zeroconf: the Wyoming server advertised as `_wyoming._tcp.local.`, so Home Assistant
discovers it by itself (as wyoming-piper does, with python-zeroconf).

The address advertised is the one the server listens on, announced on that interface only,
or, when it listens on every address (`0.0.0.0`), the one this host reaches the mDNS group
from, announced on every interface. The service is withdrawn when the server stops.

A name already taken on the network (two machines with one host name, or `speechd serve` and
`speechd wyoming` on one) is not an error: as Avahi does, the next free one of `NAME (2)`,
`NAME (3)`, ... is taken, and the log says which. Whatever else python-zeroconf refuses
(a name over 63 bytes, no free name) is `AdvertisingFailed`, with the reason.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

__all__ = ["MAX_NAME_BYTES", "SERVICE_TYPE", "Advertisement", "AdvertisingFailed", "default_name"]

log = logging.getLogger("speechd.wyoming")

SERVICE_TYPE = "_wyoming._tcp.local."
MAX_NAME_BYTES: Final = 63
"""An instance name's longest, in UTF-8 (DNS-SD's, RFC 6763 4.1.1)."""
_MDNS_GROUP = "224.0.0.251"
_MAX_TRIES: Final = 16  # names tried before giving up: NAME, NAME (2) ... NAME (16)


class AdvertisingFailed(Exception):
    """The service could not be advertised (the message says why); serving goes on."""


def default_name() -> str:
    """`speechd-<host name>`: one per machine, readable in Home Assistant's discovery."""
    host = socket.gethostname().split(".", 1)[0] or "host"
    return _shortened(f"speechd-{host}", MAX_NAME_BYTES)


def _shortened(text: str, limit: int) -> str:
    """`text` cut to at most `limit` bytes of UTF-8, at a character's edge."""
    return text.encode()[:limit].decode(errors="ignore")


def _nth(name: str, n: int) -> str:
    """The `n`th name to try: `name`, then `name (2)`, `name (3)`, ... within 63 bytes."""
    if n == 1:
        return name
    suffix = f" ({n})"
    return _shortened(name, MAX_NAME_BYTES - len(suffix)).rstrip() + suffix


def _host_label(name: str) -> str:
    """A host name (`<label>.local.`) for an instance name: letters, digits and hyphens."""
    label = "".join(c if c.isascii() and c.isalnum() else "-" for c in name)
    label = "-".join(part for part in label.split("-") if part)
    return label[:MAX_NAME_BYTES] or "speechd"


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
        """Register the service under the first free name (see the module docstring);
        `AdvertisingFailed` when none could be."""
        from zeroconf import Error, InterfaceChoice, NonUniqueNameException
        from zeroconf.asyncio import AsyncZeroconf

        try:
            zeroconf = AsyncZeroconf(
                interfaces=InterfaceChoice.All if self.everywhere else [self.address]
            )
        except (Error, OSError) as exc:
            raise AdvertisingFailed(f"mDNS is not available here ({exc})") from exc
        try:
            for n in range(1, _MAX_TRIES + 1):
                info = self._info_for(_nth(self.name, n))
                try:
                    await zeroconf.async_register_service(info)
                except NonUniqueNameException:
                    continue
                break
            else:
                raise AdvertisingFailed(
                    f"{self.name!r} and the next {_MAX_TRIES - 1} names are taken on this network"
                )
        except Error as exc:
            await zeroconf.async_close()
            raise AdvertisingFailed(f"{self.name!r}: {exc or type(exc).__name__}") from exc
        except BaseException:
            await zeroconf.async_close()
            raise
        self._zeroconf, self._info = zeroconf, info
        if n > 1:
            log.warning(
                "the zeroconf name %r is taken on this network; advertising as %r instead",
                self.name,
                info.name.removesuffix("." + SERVICE_TYPE),
            )
        log.info("advertising %s on %s:%d (zeroconf)", info.name, self.address, self.port)

    def _info_for(self, name: str) -> AsyncServiceInfo:
        from zeroconf.asyncio import AsyncServiceInfo

        return AsyncServiceInfo(
            SERVICE_TYPE,
            f"{name}.{SERVICE_TYPE}",
            addresses=[socket.inet_aton(self.address)],
            port=self.port,
            server=f"{_host_label(name)}.local.",
        )

    async def close(self) -> None:
        zeroconf, info = self._zeroconf, self._info
        self._zeroconf = self._info = None
        if zeroconf is None:
            return
        if info is not None:
            await zeroconf.async_unregister_service(info)
        await zeroconf.async_close()
