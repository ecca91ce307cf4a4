"""A containerd of our own, for a real node's tests (docs/node.md).

Debian's containerd and runc, started with a config under a work directory of ours (its own
socket, root and state), so it never meets a containerd of the machine's. Leaving the
machine as it was is part of the job: every container and task is removed, containerd is
stopped, no mount stays under the work directory, and the cgroups and /run/containerd
paths that runc's shim makes outside the work directory are removed again.

    with running_containerd(workdir, namespace="staticfleet-test") as cd:
        ref = cd.import_image(Path("build/image/staticfleet.oci.tar"))
        out = cd.run(ref, ["staticfleet", "--version"], read_only=True)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from staticfleet.processes import terminate

# Where the runc shim of containerd 1.6 keeps its sockets, fifos and runc state whatever the
# config says (its defaults, not settable from containerd's config without the CRI plugin).
SHIM_STATE_DIR = Path("/run/containerd")
CGROUP_V1_ROOT = Path("/sys/fs/cgroup")

# Plugins a node's image tests do not use; CRI comes in with the kubelet (docs/node.md).
_DISABLED_PLUGINS = (
    "io.containerd.grpc.v1.cri",
    "io.containerd.internal.v1.tracing",
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
)


# The pod sandbox image containerd's CRI pins (scripts/node/build.sh builds it as an archive).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"


class ContainerdError(RuntimeError):
    """containerd or ctr failed; the message carries their output."""


def containerd_config(workdir: Path) -> str:
    """The config.toml (version 2) of a containerd living under workdir."""
    disabled = ", ".join(f'"{name}"' for name in _DISABLED_PLUGINS)
    return (
        "version = 2\n"
        f'root = "{workdir / "root"}"\n'
        f'state = "{workdir / "state"}"\n'
        f"disabled_plugins = [{disabled}]\n"
        "[grpc]\n"
        f'  address = "{workdir / "containerd.sock"}"\n'
        "[ttrpc]\n"
        f'  address = "{workdir / "containerd.sock.ttrpc"}"\n'
    )


def containerd16_cri_config(
    workdir: Path, cni_conf_dir: Path, runc: Path = Path("/usr/bin/runc")
) -> str:
    """The config.toml (version 2) of Debian's containerd 1.6 with CRI for a kubelet.

    kubelet v1.36.3 still runs on it: containerd 1.6 has no CRI RuntimeConfig call, and
    kubelet falls back to its own cgroupDriver (docs/node.md).
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    runc_table = f"{cri}.containerd.runtimes.runc"
    return (
        "version = 2\n"
        f'root = "{workdir / "root"}"\n'
        f'state = "{workdir / "state"}"\n'
        "[grpc]\n"
        f'  address = "{workdir / "containerd.sock"}"\n'
        "[ttrpc]\n"
        f'  address = "{workdir / "containerd.sock.ttrpc"}"\n'
        f"[{cri}]\n"
        f'  sandbox_image = "{PAUSE_IMAGE}"\n'
        # Root here lacks CAP_SYS_RESOURCE: no container may get a lower oom_score_adj than
        # containerd's own (kubelet asks -998 for sandboxes; runc's init would fail).
        "  restrict_oom_score_adj = true\n"
        f"[{cri}.containerd]\n"
        '  snapshotter = "overlayfs"\n'
        f"[{runc_table}]\n"
        '  runtime_type = "io.containerd.runc.v2"\n'
        f"[{runc_table}.options]\n"
        f'  BinaryName = "{runc}"\n'
        f'  Root = "{workdir / "runc"}"\n'
        "  SystemdCgroup = false\n"
        f"[{cri}.cni]\n"
        '  bin_dir = "/usr/lib/cni"\n'
        f'  conf_dir = "{cni_conf_dir}"\n'
    )


def containerd2_cri_config(
    workdir: Path, cni_conf_dir: Path, runc: Path = Path("/usr/bin/runc")
) -> str:
    """The config.toml (version 3) of a containerd v2 with CRI for a kubelet (docs/node.md).

    cgroupfs (not systemd) cgroups: this machine has no systemd; runc's state under workdir.
    """
    cri_images = "plugins.'io.containerd.cri.v1.images'"
    cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
    runc_table = f"{cri_runtime}.containerd.runtimes.runc"
    return (
        "version = 3\n"
        f'root = "{workdir / "root"}"\n'
        f'state = "{workdir / "state"}"\n'
        "[grpc]\n"
        f'  address = "{workdir / "containerd.sock"}"\n'
        "[ttrpc]\n"
        f'  address = "{workdir / "containerd.sock.ttrpc"}"\n'
        f"[{cri_images}]\n"
        "  snapshotter = 'overlayfs'\n"
        f"[{cri_images}.pinned_images]\n"
        f"  sandbox = '{PAUSE_IMAGE}'\n"
        f"[{runc_table}]\n"
        "  runtime_type = 'io.containerd.runc.v2'\n"
        f"[{runc_table}.options]\n"
        f"  BinaryName = '{runc}'\n"
        f"  Root = '{workdir / 'runc'}'\n"
        "  SystemdCgroup = false\n"
        # Root here lacks CAP_SYS_RESOURCE (see containerd16_cri_config).
        f"[{cri_runtime}]\n"
        "  restrict_oom_score_adj = true\n"
        f"[{cri_runtime}.cni]\n"
        "  bin_dirs = ['/usr/lib/cni']\n"
        f"  conf_dir = '{cni_conf_dir}'\n"
    )


@dataclass(frozen=True)
class Containerd:
    address: Path
    namespace: str
    ctr_binary: str = "ctr"

    def ctr(self, *args: str, timeout_s: float = 120.0) -> str:
        """Run `ctr` against this containerd; its stdout, or ContainerdError."""
        argv = [
            self.ctr_binary,
            "--address",
            str(self.address),
            "--namespace",
            self.namespace,
            *args,
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        if proc.returncode != 0:
            raise ContainerdError(
                f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
            )
        return proc.stdout

    def import_image(self, archive: Path) -> str:
        """Import an OCI archive; the image's name (its org.opencontainers.image.ref.name)."""
        before = set(self.image_names())
        self.ctr("image", "import", str(archive), timeout_s=600.0)
        new = sorted(set(self.image_names()) - before)
        names = new or sorted(before)
        if len(names) != 1:
            raise ContainerdError(f"importing {archive} gave images {names}, expected one")
        return names[0]

    def image_names(self) -> list[str]:
        # CRI (namespace k8s.io) also names each image by its id, sha256:...; not a name.
        names = self.ctr("image", "list", "--quiet").split()
        return [name for name in names if not name.startswith("sha256:")]

    def run(
        self,
        image: str,
        argv: Sequence[str],
        *,
        read_only: bool = True,
        name: str = "probe",
        timeout_s: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv in a new container of image as the image's user, and remove it."""
        flags = ["--rm", *(["--read-only"] if read_only else [])]
        cmd = [self.ctr_binary, "--address", str(self.address), "--namespace", self.namespace]
        cmd += ["run", *flags, image, name, *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)

    def remove_all(self) -> None:
        """Kill and delete every task and container of the namespace."""
        for cid in self.ctr("containers", "list", "--quiet").split():
            with contextlib.suppress(ContainerdError):
                self.ctr("task", "kill", "--signal", "SIGKILL", cid)
            with contextlib.suppress(ContainerdError):
                self.ctr("task", "delete", "--force", cid)
            with contextlib.suppress(ContainerdError):
                self.ctr("containers", "delete", cid)


def _wait_for_socket(
    proc: subprocess.Popen[bytes], sock: Path, log: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while not sock.exists():
        if proc.poll() is not None:
            raise ContainerdError(f"containerd exited {proc.returncode}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise ContainerdError(f"containerd: no {sock} after {timeout_s}s:\n{_tail(log)}")
        time.sleep(0.1)


def _tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:]


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    points = []
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            point = line.split()[1].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return points


def _remove_empty_tree(path: Path) -> None:
    """rmdir path and the directories below it, deepest first; files keep theirs."""
    if not path.is_dir():
        return
    for sub, _dirs, _files in sorted(os.walk(path), key=lambda entry: -len(entry[0])):
        with contextlib.suppress(OSError):
            os.rmdir(sub)


def leave_machine_clean(workdir: Path, namespace: str, shim_dir_existed: bool) -> None:
    """Undo what containerd and runc left outside a stopped containerd's work directory."""
    for point in reversed(_mounts_under(workdir)):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
    # cgroup v1: runc makes /<namespace>/<container> in every hierarchy; cgroups are removed
    # with rmdir (their files are not real files), deepest first.
    if CGROUP_V1_ROOT.is_dir():
        for hierarchy in CGROUP_V1_ROOT.iterdir():
            _remove_empty_tree(hierarchy / namespace)
    if not shim_dir_existed:
        _remove_empty_tree(SHIM_STATE_DIR)
    else:
        _remove_empty_tree(SHIM_STATE_DIR / "runc" / namespace)


@contextlib.contextmanager
def running_containerd(
    workdir: Path,
    namespace: str = "staticfleet-test",
    *,
    config: str | None = None,
    bin_dir: Path | None = None,
    timeout_s: float = 30.0,
) -> Iterator[Containerd]:
    """A containerd under workdir (made afresh), stopped and cleaned up on exit.

    config: its config.toml (default: containerd_config(workdir), Debian's containerd 1.6
    without CRI); bin_dir: where containerd, its shim and ctr come from (default: PATH).
    """
    if os.geteuid() != 0:
        raise ContainerdError("containerd needs root (it mounts layers and makes cgroups)")
    env = dict(os.environ)
    if bin_dir is not None:
        # containerd finds its shim on PATH: ours first, before a Debian one.
        env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    for binary in ("containerd", "ctr", "runc", "containerd-shim-runc-v2"):
        if shutil.which(binary, path=env["PATH"]) is None:
            raise ContainerdError(f"no {binary} on PATH: run scripts/node/install-packages.sh")
    shim_dir_existed = SHIM_STATE_DIR.exists()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    (workdir / "config.toml").write_text(config or containerd_config(workdir))
    log = workdir / "containerd.log"
    sock = workdir / "containerd.sock"
    containerd = shutil.which("containerd", path=env["PATH"]) or "containerd"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["nice", "-n", "10", containerd, "--config", str(workdir / "config.toml")],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    ctr = shutil.which("ctr", path=env["PATH"]) or "ctr"
    cd = Containerd(address=sock, namespace=namespace, ctr_binary=ctr)
    try:
        _wait_for_socket(proc, sock, log, timeout_s)
        yield cd
    finally:
        try:
            if proc.poll() is None:
                with contextlib.suppress(ContainerdError, subprocess.TimeoutExpired):
                    cd.remove_all()
        finally:
            terminate(proc, 30)
            leave_machine_clean(workdir, namespace, shim_dir_existed)
            # The content store and snapshots (hundreds of MB); config and log stay to read.
            shutil.rmtree(workdir / "root", ignore_errors=True)
