"""Simulated hosts for multi-host tests: Linux network namespaces on a private bridge.

:class:`NetLab` creates a bridge with the first address of a /24 it picks in
10.254.0.0/16 (one no route of this machine uses), and "hosts": network namespaces
each joined to the bridge by a veth pair, with their own address on that /24 and
no other route. The broker and the S3 server listen on the bridge address, so the
only traffic is between the bridge and the namespaces. :meth:`NetLab.cut` and
:meth:`NetLab.mend` take a host's link down and up. :meth:`NetLab.teardown`
removes every namespace, link and address the lab created (and only those).

Needs root (``CAP_NET_ADMIN``, ``CAP_SYS_ADMIN``) and iproute2; :func:`missing_capability`
says why a machine cannot run it.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess
import uuid
from dataclasses import dataclass


class NetLabError(RuntimeError):
    """A namespace, link or address could not be created; the message has ip's output."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetLabError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout}")
    return proc


def missing_capability() -> str | None:
    """Why network namespaces cannot be used here, or None if they can."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    if os.geteuid() != 0:
        return f"network namespaces need root; running as uid {os.geteuid()}"
    probe = f"ksprobe{uuid.uuid4().hex[:6]}"
    proc = _ip("netns", "add", probe, check=False)
    if proc.returncode != 0:
        return f"`ip netns add` is not allowed here: {proc.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.254.0.0/16 that no address or route of this machine touches."""
    used = _ip("-4", "route", "show", "table", "all").stdout + _ip("-4", "addr").stdout
    candidates = list(range(1, 255))
    random.shuffle(candidates)
    for third in candidates:
        net = ipaddress.IPv4Network(f"10.254.{third}.0/24")
        if f"10.254.{third}." not in used:
            return net
    raise NetLabError("no free /24 in 10.254.0.0/16")


@dataclass
class Host:
    """One simulated host: a network namespace with one address on the lab's bridge."""

    name: str  # the namespace
    address: str
    host_link: str  # the veth end on the bridge (cut here)

    def prefix(self) -> list[str]:
        """Command prefix that runs a program inside this host."""
        return ["ip", "netns", "exec", self.name]


class NetLab:
    """A bridge and namespaced hosts; see the module docstring."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:4]
        self.subnet = _free_subnet()
        self.bridge = f"ks{self.tag}br"
        self.bridge_address = str(self.subnet.network_address + 1)
        self.hosts: list[Host] = []
        self._created_bridge = False

    def start(self) -> NetLab:
        """Create the bridge and give it the subnet's first address."""
        _ip("link", "add", self.bridge, "type", "bridge")
        self._created_bridge = True
        _ip("addr", "add", f"{self.bridge_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        return self

    def add_host(self) -> Host:
        """A new namespace joined to the bridge, with the next free address."""
        k = len(self.hosts) + 1
        host = Host(
            name=f"ks{self.tag}n{k}",
            address=str(self.subnet.network_address + 10 + k),
            host_link=f"ks{self.tag}h{k}",
        )
        inner = f"ks{self.tag}v{k}"
        _ip("netns", "add", host.name)
        self.hosts.append(host)
        _ip("link", "add", host.host_link, "type", "veth", "peer", "name", inner)
        _ip("link", "set", host.host_link, "master", self.bridge)
        _ip("link", "set", host.host_link, "up")
        _ip("link", "set", inner, "netns", host.name)
        _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", inner)
        _ip("-n", host.name, "link", "set", inner, "up")
        _ip("-n", host.name, "link", "set", "lo", "up")
        return host

    def cut(self, host: Host) -> None:
        """Take ``host``'s link down: nothing reaches it or leaves it."""
        _ip("link", "set", host.host_link, "down")

    def mend(self, host: Host) -> None:
        """Bring ``host``'s link back up."""
        _ip("link", "set", host.host_link, "up")

    def teardown(self) -> list[str]:
        """Delete every namespace, veth and the bridge created here; the errors, if any."""
        errors = []
        for host in self.hosts:
            # Deleting the namespace deletes its veth end, and with it the peer.
            for args in (("netns", "del", host.name), ("link", "del", host.host_link)):
                proc = _ip(*args, check=False)
                gone = "Cannot find" in proc.stderr or "No such file" in proc.stderr
                if proc.returncode != 0 and not gone:
                    errors.append(proc.stderr.strip())
        self.hosts.clear()
        if self._created_bridge:
            proc = _ip("link", "del", self.bridge, check=False)
            if proc.returncode != 0:
                errors.append(proc.stderr.strip())
            self._created_bridge = False
        return errors
