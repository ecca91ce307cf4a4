"""The soak's network: one network namespace per member slot, joined by a veth pair to a
bridge in the driver's namespace where the coordinator listens, on a private /24. Loss and
partitions are packet drops inside the member's namespace (iptables); delay is the
relay's (`staticfleet.soak.relay`), because this machine's kernel has no `sch_netem`
(docs/soak.md). Needs root; everything made is named `sfs<driver pid>-…` so a later run can
remove what an interrupted one left."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

PREFIX = "sfs"  # + the driver's pid: the owner of a namespace, link or mount
_OWNED = re.compile(rf"^{PREFIX}(\d+)-")
_SUBNET = re.compile(r"^10\.203\.(\d+)\.")
# Held while a soak picks its subnet and puts its bridge's address on it: two soaks started
# at once (make test runs two smokes on two workers) read the same free subnet otherwise.
SUBNET_LOCK = "/run/lock/staticfleet-soak-subnet.lock"


class NetworkError(RuntimeError):
    """A command that makes or changes the soak's network failed."""


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done


def missing_privileges() -> str | None:
    """Why the network and disk kinds cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "iptables", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH"
    return None


def free_subnet(routes: str, first: int = 33) -> int:
    """x of the first 10.203.x.0/24 no route of `ip route` touches."""
    used = {int(m.group(1)) for line in routes.splitlines() if (m := _SUBNET.match(line))}
    for x in range(first, 255):
        if x not in used:
            return x
    raise NetworkError("no free 10.203.x.0/24")


def stale_owners(names: Iterable[str], alive: Iterable[int]) -> set[str]:
    """The names made by a driver that is no longer running."""
    running = set(alive)
    return {n for n in names if (m := _OWNED.match(n)) and int(m.group(1)) not in running}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers() -> list[str]:
    """Remove the namespaces and links of soaks whose driver is gone; returns their names."""
    namespaces = [line.split()[0] for line in run("ip", "netns", "list").stdout.splitlines()]
    links = [
        m.group(1)
        for line in run("ip", "-o", "link", "show").stdout.splitlines()
        if (m := re.match(r"^\d+:\s+([^:@]+)", line))
    ]
    owners = {int(m.group(1)) for n in namespaces + links if (m := _OWNED.match(n))}
    alive = [pid for pid in owners if pid_alive(pid)]
    removed = []
    for name in sorted(stale_owners(namespaces, alive)):
        run("ip", "netns", "del", name, check=False)
        removed.append(name)
    for name in sorted(stale_owners(links, alive)):
        run("ip", "link", "del", name, check=False)
        removed.append(name)
    return removed


@dataclass
class SoakNetwork:
    """The bridge, and one namespace and veth pair per member slot."""

    slots: Sequence[str]
    owner: int = field(default_factory=os.getpid)
    subnet: int = 0

    def __post_init__(self) -> None:
        self.tag = f"{PREFIX}{self.owner}"
        self.bridge = f"{self.tag}-br"
        self._made: list[tuple[str, str]] = []  # ("netns"|"link", name), to remove

    @property
    def host(self) -> str:
        """The coordinator's address: the bridge's."""
        return f"10.203.{self.subnet}.1"

    def namespace(self, slot: str) -> str:
        return f"{self.tag}-m{self.slots.index(slot)}"

    def address(self, slot: str) -> str:
        return f"10.203.{self.subnet}.{10 + self.slots.index(slot)}"

    def command_prefix(self, slot: str) -> list[str]:
        """Run a command in the slot's namespace (`ip netns exec` execs: the pid is kept)."""
        return ["ip", "netns", "exec", self.namespace(slot)]

    def create(self) -> None:
        os.makedirs(os.path.dirname(SUBNET_LOCK), exist_ok=True)
        with open(SUBNET_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.subnet = free_subnet(run("ip", "route").stdout)
            run("ip", "link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            run("ip", "addr", "add", f"{self.host}/24", "dev", self.bridge)
            # Up while locked: the /24's route appears in `ip route` only then.
            run("ip", "link", "set", self.bridge, "up")
        for index, slot in enumerate(self.slots):
            namespace, veth = self.namespace(slot), f"{self.tag}-h{index}"
            run("ip", "netns", "add", namespace)
            self._made.append(("netns", namespace))
            run(
                "ip",
                "link",
                "add",
                veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                namespace,
            )
            self._made.append(("link", veth))
            run("ip", "link", "set", veth, "master", self.bridge, "up")
            run("ip", "-n", namespace, "addr", "add", f"{self.address(slot)}/24", "dev", "eth0")
            run("ip", "-n", namespace, "link", "set", "eth0", "up")
            run("ip", "-n", namespace, "link", "set", "lo", "up")

    def drop(self, slot: str, percent: int) -> None:
        """Drop `percent` of the packets between the slot and the coordinator, both ways
        (100: a partition). Replaces an earlier drop."""
        self.heal(slot)
        match = ["-m", "statistic", "--mode", "random", "--probability", f"{percent / 100:.2f}"]
        for chain, side in (("OUTPUT", "-d"), ("INPUT", "-s")):
            run(
                *self.command_prefix(slot),
                "iptables",
                "-A",
                chain,
                side,
                self.host,
                *(match if percent < 100 else []),
                "-j",
                "DROP",
            )

    def heal(self, slot: str) -> None:
        for chain in ("OUTPUT", "INPUT"):
            run(*self.command_prefix(slot), "iptables", "-F", chain)

    def remove(self) -> None:
        """Remove everything made (the namespaces take their veth ends and rules along)."""
        for kind, name in reversed(self._made):
            if kind == "netns":
                run("ip", "netns", "del", name, check=False)
            else:
                run("ip", "link", "del", name, check=False)
        self._made.clear()
