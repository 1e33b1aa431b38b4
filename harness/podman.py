"""podman for the container tier (and `loadtest/bench_images.py`): the images built as a user
builds them, from this machine's own packages, without a container registry.

- podman runs with a `containers.conf` of its own (`CONTAINERS_CONF`): runc (crun cannot run
  on a host whose cgroups are in hybrid mode) and file and process limits no higher than a
  process here may set (podman asks for more by default, and the host refuses).
- The base image, `debian:bookworm-slim`, is made by mmdebstrap from the Debian mirror apt
  uses here (registries are out of reach), once, and kept; the Containerfiles' `FROM` lines
  stay the ones a user builds.
- pip inside a build trusts the CA bundle pip trusts here (a TLS-inspecting network): the
  build secret `pip-cert`, which RUN steps see while they run and the image never keeps.
- torch comes from a folder of wheels that pip's own configuration names (`find-links`),
  when one holds the CPU wheel the images pin (the build context `torch-wheels`); otherwise
  from PyTorch's CPU index, as for a user.
- The model cache volume gets the Kokoro-82M weights laid out as the first start leaves them:
  Hugging Face's cache (`huggingface/hub/models--hexgrad--Kokoro-82M`), with the ONNX export
  beside them when the weights folder has a complete one, so no test waits on an export.

Nothing here imports pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = [
    "ADDON_IMAGE",
    "BASE_IMAGE",
    "CPU_IMAGE",
    "CUDA_IMAGE",
    "NATS_IMAGE",
    "ONNX_IMAGE",
    "ROOT",
    "Container",
    "Podman",
    "wait_ready",
]

ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = "docker.io/library/debian:bookworm-slim"
CPU_IMAGE = "localhost/speechd:cpu"  # the name compose.yaml builds and runs
CUDA_IMAGE = "localhost/speechd:cuda"
ONNX_IMAGE = "localhost/speechd:onnx"
ADDON_IMAGE = "localhost/speechd-addon:test"
NATS_IMAGE = "docker.io/library/nats:2.12"  # compose.yaml's; here a stand-in (`nats_image`)
#: Any commit name will do: the hub cache's refs/main points at it.
HUB_REVISION = "0" * 40
HUB_REPO = "huggingface/hub/models--hexgrad--Kokoro-82M"
BUILD_TIMEOUT_S = 1800.0  # a cold build fetches ~1 GB from PyPI
_CONF = """\
[engine]
runtime = "runc"

[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
"""


class Podman:
    """The podman command with this tier's configuration (its file written into `folder`)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        conf = folder / "containers.conf"
        conf.write_text(_CONF)
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.binary = shutil.which("podman") or "podman"

    def __call__(
        self, *args: str, timeout: float = 300.0, check: bool = True, nice: bool = False
    ) -> subprocess.CompletedProcess[str]:
        command = [self.binary, *args]
        if nice:  # builds: the machine is shared
            command = ["nice", "-n", "10", *command]
        done = subprocess.run(
            command, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"podman {' '.join(args[:3])} ... exited {done.returncode}: "
                f"{_tail(done.stderr or done.stdout)}"
            )
        return done

    def exists(self, image: str) -> bool:
        return self("image", "exists", image, check=False).returncode == 0

    def ensure_base(self) -> bool:
        """The base image, made once with mmdebstrap (True when made now)."""
        if self.exists(BASE_IMAGE):
            return False
        mirror = debian_mirror()
        debootstrap = subprocess.Popen(
            ["nice", "-n", "10", "mmdebstrap", "--quiet", "--variant=minbase", "bookworm", "-",
             mirror],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert debootstrap.stdout is not None
        imported = subprocess.run(
            [self.binary, "import", "-", BASE_IMAGE],
            stdin=debootstrap.stdout, env=self.env, capture_output=True, text=True,
            timeout=900, check=False,
        )  # fmt: skip
        debootstrap.stdout.close()
        _, err = debootstrap.communicate(timeout=60)
        if debootstrap.returncode != 0 or imported.returncode != 0:
            raise RuntimeError(
                f"mmdebstrap bookworm from {mirror}: {_tail(err.decode(errors='replace'))} "
                f"{_tail(imported.stderr)}"
            )
        return True

    def build(
        self,
        containerfile: Path,
        tag: str,
        context: Path = ROOT,
        *,
        args: dict[str, str] | None = None,
        cache: bool = True,
        pip: bool = True,
        timeout: float = BUILD_TIMEOUT_S,
    ) -> float:
        """Build `tag` as a user would (`--format docker`: the OCI format has no
        HEALTHCHECK), with this machine's CA bundle and torch wheels where it runs pip (`pip`);
        the seconds it took."""
        command = ["build", "--format", "docker", "--layers", "-f", str(containerfile), "-t", tag]
        if not cache:
            command.append("--no-cache")
        ca = ca_bundle() if pip else None
        if ca is not None:
            command += ["--secret", f"id=pip-cert,src={ca}"]
        wheels = torch_wheels(torch_version(containerfile)) if pip else None
        if wheels is not None:
            command += ["--build-context", f"torch-wheels={wheels}"]
        for name, value in (args or {}).items():
            command += ["--build-arg", f"{name}={value}"]
        started = time.monotonic()
        self(*command, str(context), timeout=timeout, nice=True)
        return time.monotonic() - started

    def volume(self, name: str) -> str:
        """The named volume `name`, made if it is not there."""
        if self("volume", "exists", name, check=False).returncode != 0:
            self("volume", "create", name)
        return name

    def size(self, image: str) -> int:
        return int(self("image", "inspect", image, "--format", "{{.Size}}").stdout.strip())

    def fill_models(self, volume: str, weights: Path, image: str = CPU_IMAGE) -> None:
        """`volume` (made if need be) holding the weights as Hugging Face's cache holds
        them, owned by the images' user; the ONNX export too when `weights` has one."""
        self.volume(volume)
        script = f"""set -e
repo=/var/cache/speechd/{HUB_REPO}
snapshot=$repo/snapshots/{HUB_REVISION}
mkdir -p $repo/refs $snapshot
printf %s {HUB_REVISION} > $repo/refs/main
cp -a /weights/config.json /weights/voices $snapshot/
cp -a /weights/*.pth $snapshot/
for export in /weights/speechd-onnx/*/; do
  [ -f "$export/export.json" ] || continue
  mkdir -p $snapshot/speechd-onnx && cp -a "$export" $snapshot/speechd-onnx/
done
chown -R speechd:speechd /var/cache/speechd
"""
        self(
            "run", "--rm", "--user", "root", "--entrypoint", "sh",
            "-v", f"{volume}:/var/cache/speechd", "-v", f"{weights}:/weights:ro",
            image, "-c", script, timeout=600,
        )  # fmt: skip

    def start(
        self,
        name: str,
        image: str,
        *command: str,
        volumes: Sequence[str] = (),
        env: dict[str, str] | None = None,
        ports: Sequence[int] = (8000,),
        extra: Sequence[str] = (),
    ) -> Container:
        """A detached container, its `ports` published on free loopback ports."""
        self("rm", "-f", "--ignore", name, check=False)
        args = ["run", "-d", "--name", name]
        for port in ports:
            args += ["-p", f"127.0.0.1::{port}"]
        for volume in volumes:
            args += ["-v", volume]
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        self(*args, *extra, image, *command)
        return Container(self, name)


@dataclass
class Container:
    podman: Podman
    name: str

    def port(self, inner: int = 8000) -> int:
        out = self.podman("port", self.name, f"{inner}/tcp").stdout.strip().splitlines()[0]
        return int(out.rsplit(":", 1)[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port()}"

    def logs(self) -> str:
        done = self.podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def running(self) -> bool:
        done = self.podman("inspect", self.name, "--format", "{{.State.Running}}", check=False)
        return done.stdout.strip() == "true"

    def signal(self, name: str) -> None:
        self.podman("kill", "--signal", name, self.name)

    def wait(self, timeout: float) -> int:
        """The container's exit status, once it has stopped (TimeoutError after `timeout`)."""
        deadline = time.monotonic() + timeout
        while self.running():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} still running after {timeout:.0f} s")
            time.sleep(0.2)
        state = self.podman("inspect", self.name, "--format", "{{.State.ExitCode}}").stdout
        return int(state.strip())

    def rss_bytes(self) -> int:
        """The resident memory of every process in the container."""
        rows = self.podman("top", self.name, "rss").stdout.split()[1:]
        return sum(_kib(value) for value in rows)

    def remove(self) -> None:
        self.podman("rm", "-f", "-t", "5", "--ignore", self.name, check=False)


def _kib(value: str) -> int:
    """`ps`'s RSS column (KiB, or with an M/G suffix) in bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    match = re.fullmatch(r"([\d.]+)([kmg]?)", value.lower())
    if match is None:
        return 0
    return int(float(match.group(1)) * units.get(match.group(2) or "k", 1 << 10))


def wait_ready(url: str, timeout: float, container: Container | None = None) -> float:
    """Seconds until `url`/readyz answers 200 (TimeoutError with the container's log tail)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                return time.monotonic() - started
        if container is not None and not container.running():
            break
        time.sleep(0.25)
    tail = _tail(container.logs(), 3000) if container is not None else ""
    raise TimeoutError(f"{url}/readyz not ready after {time.monotonic() - started:.0f} s: {tail}")


def _tail(text: str, limit: int = 1500) -> str:
    return text.strip()[-limit:]


# ------------------------------------------------------------------ this machine's settings


_SOURCE = re.compile(r"\s*(?:URIs:|deb(?:\s+\[[^\]]*\])?)\s+(\S+/debian)/?\s")


def debian_mirror() -> str:
    """The Debian mirror apt uses here (deb822 `URIs:` or a sources.list `deb` line)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                match = _SOURCE.match(line + " ")
                if match:
                    return match.group(1)
    return "http://deb.debian.org/debian"


def _pip_config() -> dict[str, list[str]]:
    """pip's configuration here (`pip config list`): each key's values, whatever its scope."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    )
    found: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        found.setdefault(name, []).extend(value.strip().strip("'\"").split())
    return found


def ca_bundle() -> Path | None:
    """The CA bundle pip trusts here: its `cert` setting or `PIP_CERT`, else Python's."""
    for value in [os.environ.get("PIP_CERT", ""), *_pip_config().get("cert", [])]:
        if value and Path(value).is_file():
            return Path(value)
    default = ssl.get_default_verify_paths().cafile
    return Path(default) if default and Path(default).is_file() else None


def torch_version(containerfile: Path) -> str:
    """The torch release a Containerfile pins (`ARG TORCH_VERSION=`)."""
    match = re.search(r"^ARG TORCH_VERSION=(\S+)", containerfile.read_text(), re.MULTILINE)
    return match.group(1) if match else ""


def torch_wheels(version: str) -> Path | None:
    """A folder pip's configuration names (`find-links`) that holds torch `version`'s CPU
    wheel for the images' Python (CPython 3.11, x86_64), or None."""
    if not version:
        return None
    pattern = f"torch-{version}+cpu-cp311-cp311-*x86_64.whl"
    for value in _pip_config().get("find-links", []):
        folder = Path(value.removeprefix("file://"))
        if folder.is_dir() and any(folder.glob(pattern)):
            return folder
    return None


def worker_audio(url: str) -> dict[str, float]:
    """Each worker's audio made so far (`speechd_worker_audio_made_seconds_total`), by id."""
    text = httpx.get(url + "/metrics", timeout=10).text
    made = {}
    for line in text.splitlines():
        match = re.match(r'speechd_worker_audio_made_seconds_total\{worker="([^"]+)"\} (\S+)', line)
        if match:
            made[match.group(1)] = float(match.group(2))
    return made


def inspect(podman: Podman, name: str) -> dict[str, object]:
    return json.loads(podman("inspect", name).stdout)[0]


@contextlib.contextmanager
def removed(*containers: Container) -> Iterator[None]:
    try:
        yield
    finally:
        for container in containers:
            container.remove()
