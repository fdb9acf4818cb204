"""The outside, made local for the egress tests: a web server on an ordinary engine network.

The server (the session image running Python's http.server as root) answers on ports 80 and
8080, and with TLS on 443 (a self-signed certificate made at start), under two network
aliases, ``allowed.test`` and ``denied.test``; it serves a tiny package index at ``/simple/``
(one wheel, ``demo-pkg``) and echoes UDP on port 9999. Everything carries the managed label
and the given owner, and is removed by ``close``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.config import LABEL_MANAGED, LABEL_OWNER

ALIASES = ("allowed.test", "denied.test")
PAGE = "hello from outside\n"
WHEEL = "demo_pkg-1.0-py3-none-any.whl"
_SERVE = """
import http.server, socketserver, threading, socket, ssl
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9999))
    while True:
        data, peer = s.recvfrom(2048); s.sendto(data, peer)
threading.Thread(target=udp, daemon=True).start()
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True
handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory="/srv")
threading.Thread(target=Server(("0.0.0.0", 8080), handler).serve_forever, daemon=True).start()
tls = Server(("0.0.0.0", 443), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/tmp/cert.pem", "/tmp/key.pem")
tls.socket = context.wrap_socket(tls.socket, server_side=True)
threading.Thread(target=tls.serve_forever, daemon=True).start()
Server(("0.0.0.0", 80), handler).serve_forever()
"""
# A self-signed certificate made at start: the session must see exactly this one through the
# proxy (it tunnels TLS, never terminates it).
_CERT = (
    "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=allowed.test "
    "-addext subjectAltName=DNS:allowed.test,DNS:denied.test "
    "-keyout /tmp/key.pem -out /tmp/cert.pem 2>/dev/null"
)


@dataclass
class Outside:
    client: Any
    network: str
    container: Any
    root: Path

    @property
    def ip(self) -> str:
        self.container.reload()
        return str(self.container.attrs["NetworkSettings"]["Networks"][self.network]["IPAddress"])

    def certificate_sha256(self) -> str:
        """The fingerprint of the server's own TLS certificate."""
        done = self.container.exec_run(
            ["sh", "-c", "openssl x509 -in /tmp/cert.pem -outform DER | sha256sum"]
        )
        return str(done.output.decode().split()[0])

    def close(self) -> None:
        self.container.remove(force=True)
        self.client.networks.get(self.network).remove()
        shutil.rmtree(self.root, ignore_errors=True)


def start_outside(client: Any, owner: str, root: Path, name: str, *, big_mb: int = 0) -> Outside:
    """Start the web server on a new network ``name``; ``big_mb``: also serve /big of that size."""
    write_site(root, big_mb)
    labels = {LABEL_MANAGED: "true", LABEL_OWNER: owner}
    network = client.networks.create(name, driver="bridge", labels=labels)
    container = client.containers.create(
        "sandbox-session:latest",
        ["sh", "-c", f'{_CERT} && exec python3 -c "$0"', _SERVE],
        name=name,
        labels=labels,
        user="0:0",
        volumes={str(root): {"bind": "/srv", "mode": "ro"}},
        network=network.name,
        detach=True,
    )
    network.disconnect(container)
    network.connect(container, aliases=list(ALIASES))
    container.start()
    outside = Outside(client, network.name, container, root)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        probe = container.exec_run(
            ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1/')"]
        )
        if probe.exit_code == 0:
            return outside
        time.sleep(0.2)
    outside.close()
    raise RuntimeError("the outside web server did not start")


def write_site(root: Path, big_mb: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    (root / "index.html").write_text(PAGE)
    simple = root / "simple" / "demo-pkg"
    simple.mkdir(parents=True, exist_ok=True)
    (root / "packages").mkdir(exist_ok=True)
    (root / "packages" / WHEEL).write_bytes(wheel())
    (simple / "index.html").write_text(f'<a href="../../packages/{WHEEL}">{WHEEL}</a>\n')
    (root / "simple" / "index.html").write_text('<a href="demo-pkg/">demo-pkg</a>\n')
    if big_mb:
        with (root / "big").open("wb") as handle:
            chunk = bytes(range(256)) * 4096
            for _ in range(big_mb):
                handle.write(chunk)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def wheel() -> bytes:
    """A minimal valid wheel of ``demo-pkg`` 1.0."""
    files = {
        "demo_pkg/__init__.py": b"VALUE = 42\n",
        "demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
        "demo_pkg-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("demo_pkg-1.0.dist-info/RECORD,,")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("demo_pkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return buffer.getvalue()
