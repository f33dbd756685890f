#!/usr/bin/env python3
"""Build the local repositories of STAND-IN NVIDIA packages (test doubles) for the simulated A800 hosts.

The packages carry the vendors' names and version schemes and the repositories their layout, so that the roles
find, pin and hold them as they would NVIDIA's and Ubuntu's, and a wrong path or pin fails:

    OUT/compute/cuda/repos/ubuntu2204/x86_64/   NVIDIA's CUDA repository per release (flat, signed: InRelease,
    OUT/compute/cuda/repos/ubuntu2404/x86_64/     3bf863cc.pub and cuda-archive-keyring.gpg as NVIDIA lays them out)
    OUT/compute/cuda/repos/debian12/x86_64/
    OUT/libnvidia-container/stable/deb/amd64/   the container toolkit's repository (flat, signed), key in
    OUT/libnvidia-container/gpgkey                OUT/libnvidia-container/gpgkey
    OUT/distro/<codename>/                      a stand-in of the distribution's own archive (unsigned, added by the
                                                  test bed's OS identity): linux-headers for the running kernel and,
                                                  on Ubuntu, Canonical's precompiled NVIDIA modules

Every package of a per-release directory refuses (in its preinst) to install on another release, as a package
built against another release's libraries would fail. The DKMS packages build their module only when the headers of
the running kernel are installed (DKMS's own message otherwise). Three driver versions of branch 580 are published,
so that a test can show that a pin holds when a newer version is available, with NVIDIA's Ubuntu revisions of each:
-0ubuntu1 up to 580.105.08, -1ubuntu1 from 580.126.09 (docs/field.md#nvidia-driver-packages), so that a pin bump
crosses the change (molecule/driver-upgrade). The binaries are the stand-ins in ./bin.

    build_repo.py --out DIR
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = HERE / "bin"
DRIVER_VERSIONS = ["580.95.05", "580.105.08", "580.126.09"]
UNVERSIONED_VERSIONS = ["590.44.01"]  # branch 590: NVIDIA's names lose the branch
TOOLKIT_VERSIONS = ["1.17.8", "1.18.0"]
BRANCH = "580"
# The Debian revision of NVIDIA's Ubuntu packages changed within branch 580 (-0ubuntu1 up to 580.105.08, -1ubuntu1
# from 580.126.09 on); the Debian 12 repository's is -1.
UBUNTU_REVISIONS = {
    "580.95.05": "0ubuntu1",
    "580.105.08": "0ubuntu1",
    "580.126.09": "1ubuntu1",
    "590.44.01": "0ubuntu1",  # as the stand-in had it; NVIDIA's revision of 590 was not checked here
}
# NVIDIA's per-release directories: (directory, os-release VERSION_ID, naming scheme)
CUDA_RELEASES = [
    ("ubuntu2204", "22.04", "ubuntu"),
    ("ubuntu2404", "24.04", "ubuntu"),
    ("debian12", "12", "debian"),
]
DISTROS = [("jammy", "22.04"), ("noble", "24.04"), ("bookworm", "12")]
KERNEL = os.uname().release  # the simulated hosts share the kernel of the machine that builds this
PERSISTENCED_PID = "/run/nvidia-persistenced/nvidia-persistenced.pid"


def cuda_revision(scheme: str, upstream: str) -> str:
    """The Debian revision of a driver version in NVIDIA's repository of that naming scheme."""
    return "1" if scheme == "debian" else UBUNTU_REVISIONS[upstream]


@dataclass
class Pkg:
    name: str
    version: str
    description: str
    depends: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    provides: list[str] = field(default_factory=list)
    files: dict[str, str | Path] = field(default_factory=dict)  # target path -> text or source file
    preinst: str = ""
    postinst: str = ""
    prerm: str = ""


def unit(description: str, exec_start: str, pidfile: str) -> str:
    return (
        f"[Unit]\nDescription={description} (test double)\n\n[Service]\nType=simple\n"
        f"ExecStart={exec_start}\nPIDFile={pidfile}\n\n[Install]\nWantedBy=multi-user.target\n"
    )


def release_guard(directory: str, version_id: str) -> str:
    """preinst: refuse another release, as a package built for another release's libraries would."""
    return (
        ". /etc/os-release\n"
        f'if [ "$VERSION_ID" != "{version_id}" ]; then\n'
        f'  echo "stand-in: this package is from NVIDIA\'s {directory} repository; this host is $PRETTY_NAME" >&2\n'
        "  exit 1\nfi\n"
    )


def dkms_scripts(version: str) -> tuple[str, str]:
    """DKMS builds the module for the running kernel, and only with that kernel's headers (DKMS's message)."""
    ko = "/lib/modules/$(uname -r)/updates/dkms/nvidia.ko"
    postinst = (
        "k=$(uname -r)\n"
        'if [ ! -e "/lib/modules/$k/build" ]; then\n'
        '  echo "Error! Your kernel headers for kernel $k cannot be found at /lib/modules/$k/build or '
        '/lib/modules/$k/source." >&2\n'
        '  echo "Please install the linux-headers-$k package or use the --kernelsourcedir option." >&2\n'
        "  exit 1\nfi\n"
        f'mkdir -p "$(dirname {ko})" && echo "stand-in nvidia.ko {version} (DKMS, unsigned)" > "{ko}"\n'
    )
    return postinst, f'rm -f "{ko}"\n'


def dkms_packages(closed: str, open_: str, version: str, upstream: str, description: str) -> list[Pkg]:
    """The two DKMS packages of a driver (proprietary and open modules), each the other's conflict."""
    pkgs = []
    for name, other in ((closed, open_), (open_, closed)):
        postinst, prerm = dkms_scripts(upstream)
        pkgs.append(
            Pkg(
                name,
                version,
                f"{description}{' (open kernel modules)' if name == open_ else ''} (stand-in)",
                conflicts=[other],
                files={f"/usr/share/doc/{name}/STANDIN": "test double\n"},
                postinst=postinst,
                prerm=prerm,
            )
        )
    return pkgs


def nvidia_smi_files(upstream: str) -> dict[str, str | Path]:
    return {"/usr/bin/nvidia-smi": BIN / "nvidia-smi", "/usr/lib/nvidia-standin/driver-version": upstream + "\n"}


def persistenced_files(binary_pkg: str) -> dict[str, str | Path]:
    # As the distributions ship it: --no-persistence-mode (persistence is lost at every reboot without a drop-in).
    return {
        "/usr/bin/nvidia-persistenced": BIN / "standin-daemon",
        "/lib/systemd/system/nvidia-persistenced.service": unit(
            f"NVIDIA Persistence Daemon ({binary_pkg})",
            "/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose",
            PERSISTENCED_PID,
        ),
    }


def fabricmanager_files() -> dict[str, str | Path]:
    fm_pid = "/run/nvidia-fabricmanager/nv-fabricmanager.pid"
    return {
        "/usr/bin/nv-fabricmanager": BIN / "standin-daemon",
        "/lib/systemd/system/nvidia-fabricmanager.service": unit(
            "NVIDIA fabric manager service", f"/usr/bin/nv-fabricmanager --pidfile {fm_pid} --needs-nvswitch", fm_pid
        ),
    }


def ubuntu_cuda_packages(upstream: str, rev: str) -> list[Pkg]:
    """NVIDIA's CUDA repository for Ubuntu, a branch before 590: the branch is in every name."""
    v, b = f"{upstream}-{rev}", BRANCH
    pkgs = [
        Pkg(
            f"nvidia-utils-{b}",
            v,
            "NVIDIA driver support binaries (stand-in nvidia-smi)",
            conflicts=[f"nvidia-utils-{b}-server"],
            files=nvidia_smi_files(upstream),
        ),
        Pkg(
            f"nvidia-compute-utils-{b}",
            v,
            "NVIDIA compute utilities (stand-in nvidia-persistenced)",
            depends=[f"nvidia-utils-{b} (= {v})"],
            conflicts=[f"nvidia-compute-utils-{b}-server"],
            files=persistenced_files(f"nvidia-compute-utils-{b}"),
        ),
        Pkg(
            f"libnvidia-compute-{b}",
            v,
            "NVIDIA libcompute package (stand-in)",
            files={f"/usr/lib/nvidia-standin/libnvidia-compute-{b}": upstream + "\n"},
        ),
        Pkg(
            f"nvidia-fabricmanager-{b}",
            v,
            "NVIDIA Fabric Manager for NVSwitch systems (stand-in)",
            depends=[f"nvidia-utils-{b} (= {v})"],
            files=fabricmanager_files(),
        ),
    ]
    pkgs += dkms_packages(f"nvidia-dkms-{b}", f"nvidia-dkms-{b}-open", v, upstream, "NVIDIA DKMS package")
    for flavour in ("", "-open"):
        desktop = f"nvidia-driver-{b}" if flavour else f"nvidia-driver-{b}-open"
        pkgs.append(
            Pkg(
                f"nvidia-driver-{b}{flavour}",
                v,
                f"NVIDIA driver metapackage, desktop stack{' (open kernel modules)' if flavour else ''} (stand-in)",
                depends=[
                    f"nvidia-utils-{b} (= {v})",
                    f"nvidia-compute-utils-{b} (= {v})",
                    f"libnvidia-compute-{b} (= {v})",
                    f"nvidia-dkms-{b}{flavour} (= {v})",
                ],
                conflicts=[desktop],
                provides=["nvidia-driver"],
                files={f"/usr/share/doc/nvidia-driver-{b}{flavour}/STANDIN": "test double\n"},
            )
        )
    return pkgs


def pinning_package(upstream: str, rev: str, names: list[str]) -> Pkg:
    """nvidia-driver-pinning-<version>: an apt preferences file that holds every package of the driver at it."""
    branch = upstream.split(".")[0]
    pref = "".join(f"Package: {n}\nPin: version {upstream}-*\nPin-Priority: 1000\n\n" for n in names)
    return Pkg(
        f"nvidia-driver-pinning-{upstream}",
        (rev and f"{upstream}-{rev}") or upstream,
        f"APT driver pinning file for driver version {upstream} (stand-in, branch {branch})",
        # apt reads only preferences.d files without an extension or ending in .pref (apt_preferences(5))
        files={f"/etc/apt/preferences.d/nvidia-driver-pinning-{upstream}.pref": pref},
    )


def ubuntu_unversioned_packages(upstream: str, rev: str) -> list[Pkg]:
    """Branch 590 and later: the names lose the branch; the pinning package locks the version."""
    v = f"{upstream}-{rev}"
    pkgs = [
        # stand-in simplification: nvidia-smi and the persistence daemon arrive with libnvidia-compute
        Pkg(
            "libnvidia-compute",
            v,
            "NVIDIA libcompute package (stand-in, with nvidia-smi and nvidia-persistenced)",
            conflicts=[f"nvidia-utils-{BRANCH}", f"nvidia-compute-utils-{BRANCH}"],
            files={**nvidia_smi_files(upstream), **persistenced_files("libnvidia-compute")},
        ),
        Pkg("nvidia-fabricmanager", v, "NVIDIA Fabric Manager (stand-in)", files=fabricmanager_files()),
    ]
    pkgs += dkms_packages("nvidia-dkms", "nvidia-dkms-open", v, upstream, "NVIDIA DKMS package")
    pkgs.append(pinning_package(upstream, rev, [p.name for p in pkgs]))
    return pkgs


def debian_cuda_packages(upstream: str, rev: str) -> list[Pkg]:
    """NVIDIA's CUDA repository for Debian 12: Debian's names, no branch in them, a pinning package."""
    v = f"{upstream}-{rev}"
    pkgs = [
        Pkg(
            "nvidia-persistenced",
            v,
            "daemon to maintain persistent software state in the NVIDIA driver (stand-in)",
            files=persistenced_files("nvidia-persistenced"),
        ),
        Pkg(
            "nvidia-driver-cuda",
            v,
            "NVIDIA driver CUDA integration components (stand-in nvidia-smi)",
            depends=[f"nvidia-persistenced (= {v})"],
            files=nvidia_smi_files(upstream),
        ),
        Pkg("nvidia-fabricmanager", v, "NVIDIA Fabric Manager (stand-in)", files=fabricmanager_files()),
    ]
    pkgs += dkms_packages(
        "nvidia-kernel-dkms", "nvidia-kernel-open-dkms", v, upstream, "NVIDIA binary kernel module DKMS source"
    )
    pkgs.append(pinning_package(upstream, rev, [p.name for p in pkgs]))
    return pkgs


def distro_packages(codename: str, version_id: str) -> list[Pkg]:
    """The distribution's archive: headers of the running kernel; on Ubuntu, Canonical's precompiled modules."""
    headers = f"/usr/src/linux-headers-{KERNEL}"
    pkgs = [
        Pkg(
            f"linux-headers-{KERNEL}",
            f"{KERNEL}.1",
            f"Header files for Linux {KERNEL} (stand-in)",
            files={f"{headers}/Makefile": "# stand-in kernel headers\n"},
            postinst=f"mkdir -p /lib/modules/{KERNEL} && ln -sfn {headers} /lib/modules/{KERNEL}/build\n",
            prerm=f"rm -f /lib/modules/{KERNEL}/build\n",
        )
    ]
    if codename == "bookworm":
        return pkgs
    b = BRANCH
    # The archive carries one build of the kernel's module package, for one driver version (the first here), and it
    # pins that version in its dependencies, as linux-restricted-modules does; the user-space packages come in both.
    built = DRIVER_VERSIONS[0]
    ko = f"/lib/modules/{KERNEL}/kernel/nvidia-{b}srv-open/nvidia.ko"
    pkgs.append(
        Pkg(
            f"linux-modules-nvidia-{b}-server-open-{KERNEL}",
            f"{KERNEL}.1",
            f"Linux kernel nvidia modules for version {KERNEL}, signed by Canonical (stand-in)",
            depends=[
                f"nvidia-kernel-common-{b}-server (<= {built}-1)",
                f"nvidia-kernel-common-{b}-server (>= {built})",
            ],
            files={ko: f"stand-in nvidia.ko {built} (precompiled, signed)\n"},
        )
    )
    for upstream in DRIVER_VERSIONS:
        v = f"{upstream}-0ubuntu0.{version_id}.1"
        pkgs += [
            Pkg(
                f"nvidia-kernel-common-{b}-server",
                v,
                "Shared files used with the kernel module (stand-in)",
                files={f"/usr/share/doc/nvidia-kernel-common-{b}-server/STANDIN": "test double\n"},
            ),
            Pkg(
                f"nvidia-headless-no-dkms-{b}-server-open",
                v,
                "NVIDIA headless metapackage, no DKMS (stand-in)",
                depends=[f"nvidia-kernel-common-{b}-server (= {v})"],
                files={f"/usr/share/doc/nvidia-headless-no-dkms-{b}-server-open/STANDIN": "test double\n"},
            ),
            Pkg(
                f"nvidia-utils-{b}-server",
                v,
                "NVIDIA driver support binaries (stand-in nvidia-smi)",
                conflicts=[f"nvidia-utils-{b}"],
                files=nvidia_smi_files(upstream),
            ),
            Pkg(
                f"nvidia-compute-utils-{b}-server",
                v,
                "NVIDIA compute utilities (stand-in nvidia-persistenced)",
                depends=[f"nvidia-utils-{b}-server (= {v})"],
                conflicts=[f"nvidia-compute-utils-{b}"],
                files=persistenced_files(f"nvidia-compute-utils-{b}-server"),
            ),
        ]
    return pkgs


def toolkit_packages(upstream: str) -> list[Pkg]:
    v = f"{upstream}-1"
    ver_file = {"/usr/lib/nvidia-standin/toolkit-version": upstream + "\n"}
    return [
        Pkg(
            "libnvidia-container1",
            v,
            "NVIDIA container runtime library (stand-in)",
            files={"/usr/lib/nvidia-standin/libnvidia-container-version": upstream + "\n"},
        ),
        Pkg(
            "libnvidia-container-tools",
            v,
            "NVIDIA container runtime library, tools (stand-in)",
            depends=[f"libnvidia-container1 (= {v})"],
            files={"/usr/bin/nvidia-container-cli": BIN / "nvidia-container-cli"},
        ),
        Pkg(
            "nvidia-container-toolkit-base",
            v,
            "NVIDIA Container Toolkit base (stand-in nvidia-ctk)",
            files={
                "/usr/bin/nvidia-ctk": BIN / "nvidia-ctk",
                "/usr/bin/nvidia-container-runtime": BIN / "nvidia-container-runtime",
                **ver_file,
            },
        ),
        Pkg(
            "nvidia-container-toolkit",
            v,
            "NVIDIA Container Toolkit (stand-in, no-op runtime hook)",
            depends=[f"nvidia-container-toolkit-base (= {v})", f"libnvidia-container-tools (= {v})"],
            files={"/usr/bin/nvidia-container-runtime-hook": BIN / "nvidia-container-runtime-hook"},
        ),
    ]


def build_deb(pkg: Pkg, out: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        for target, src in pkg.files.items():
            dest = root / target.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(src, Path):
                shutil.copyfile(src, dest)
                dest.chmod(0o755)
            else:
                dest.write_text(src)
                dest.chmod(0o644)
        control = [
            f"Package: {pkg.name}",
            f"Version: {pkg.version}",
            "Architecture: all",
            "Maintainer: a800-testbed <testbed@localhost>",
            "Section: non-free/libs",
            "Priority: optional",
            f"Description: {pkg.description}",
            " Test double built by tests/testbed/standin-nvidia.",
        ]
        for key, values in (("Depends", pkg.depends), ("Conflicts", pkg.conflicts), ("Provides", pkg.provides)):
            if values:
                control.insert(3, f"{key}: {', '.join(values)}")
        (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        for script in ("preinst", "postinst", "prerm"):
            text = getattr(pkg, script)
            if text:
                path = root / "DEBIAN" / script
                path.write_text("#!/bin/sh\nset -e\n" + text)
                path.chmod(0o755)
        deb = out / f"{pkg.name}_{pkg.version}_all.deb"
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
            check=True,
            capture_output=True,
        )
        return deb


def inputs_hash() -> str:
    h = hashlib.sha256(KERNEL.encode())
    for p in sorted([Path(__file__), *BIN.iterdir()]):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


class Signer:
    """A throw-away signing key for the stand-in repositories (the vendors sign theirs; apt checks InRelease)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir(mode=0o700)
        self.gpg(
            "--passphrase",
            "",
            "--quick-gen-key",
            "a800 test bed stand-in repositories <testbed@localhost>",
            "ed25519",
            "sign",
            "never",
        )
        self.armored = self.gpg("--armor", "--export").stdout
        self.binary = self.gpg("--export").stdout

    def gpg(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["gpg", "--homedir", str(self.home), "--batch", "--yes", "--pinentry-mode", "loopback", *args],
            check=True,
            capture_output=True,
        )

    def sign(self, release: Path) -> None:
        self.gpg("--clearsign", "-o", str(release.parent / "InRelease"), str(release))
        self.gpg("--armor", "--detach-sign", "-o", str(release.parent / "Release.gpg"), str(release))


def flat_repo(directory: Path, pkgs: list[Pkg], signer: Signer | None, label: str) -> None:
    """A flat repository (apt suite "/"): the .debs, Packages(.gz) and, when signed, Release + InRelease."""
    directory.mkdir(parents=True, exist_ok=True)
    for pkg in pkgs:
        build_deb(pkg, directory)
    index = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", ".", "/dev/null"],
        cwd=directory,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (directory / "Packages").write_text(index)
    (directory / "Packages.gz").write_bytes(gzip.compress(index.encode(), mtime=0))
    if signer is None:
        return
    lines = [
        f"Origin: {label}",
        f"Label: {label}",
        "Architectures: amd64 all",
        "Date: " + time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime()),
        "SHA256:",
    ]
    for name in ("Packages", "Packages.gz"):
        data = (directory / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    (directory / "Release").write_text("\n".join(lines) + "\n")
    signer.sign(directory / "Release")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    out: Path = ap.parse_args().out
    stamp = out / ".inputs"
    if stamp.exists() and stamp.read_text() == inputs_hash():
        print(f"stand-in apt repositories: up to date ({out})")
        return
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():  # empty it in place: the directory may be bind-mounted into running hosts
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    count = 0
    with tempfile.TemporaryDirectory() as tmp:
        signer = Signer(Path(tmp) / "gnupg")
        for directory, version_id, scheme in CUDA_RELEASES:
            if scheme == "debian":
                pkgs = [p for v in DRIVER_VERSIONS for p in debian_cuda_packages(v, cuda_revision(scheme, v))]
            else:
                pkgs = [p for v in DRIVER_VERSIONS for p in ubuntu_cuda_packages(v, cuda_revision(scheme, v))]
                pkgs += [
                    p for v in UNVERSIONED_VERSIONS for p in ubuntu_unversioned_packages(v, cuda_revision(scheme, v))
                ]
            for pkg in pkgs:
                pkg.preinst = release_guard(directory, version_id) + pkg.preinst
            repo = out / "compute" / "cuda" / "repos" / directory / "x86_64"
            flat_repo(repo, pkgs, signer, "NVIDIA CUDA (stand-in)")
            (repo / "3bf863cc.pub").write_bytes(signer.armored)  # NVIDIA's key file name in each directory
            (repo / "cuda-archive-keyring.gpg").write_bytes(signer.binary)  # what cuda-keyring installs
            count += len(pkgs)
        toolkit = [p for v in TOOLKIT_VERSIONS for p in toolkit_packages(v)]
        flat_repo(
            out / "libnvidia-container" / "stable" / "deb" / "amd64",
            toolkit,
            signer,
            "NVIDIA container toolkit (stand-in)",
        )
        (out / "libnvidia-container" / "gpgkey").write_bytes(signer.armored)
        count += len(toolkit)
        for codename, version_id in DISTROS:
            pkgs = distro_packages(codename, version_id)
            flat_repo(out / "distro" / codename, pkgs, None, f"{codename} archive (stand-in)")
            count += len(pkgs)
    stamp.write_text(inputs_hash())
    print(f"stand-in apt repositories: {count} packages in {out}")


if __name__ == "__main__":
    main()
