#!/usr/bin/env python3
"""Build the local apt repository of STAND-IN NVIDIA packages (test doubles) for the simulated A800 host.

The packages carry the real package names and version schemes, so the roles install, pin and hold them
exactly as they would NVIDIA's; their binaries are the stand-ins in ./bin. Two versions of each series are
published, so that a test can show that a pin holds when a newer version is available.

    build_repo.py --out DIR      ->  DIR/*.deb, DIR/Packages(.gz); an apt source line:
                                     deb [trusted=yes] file:DIR ./
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = HERE / "bin"
DRIVER_VERSIONS = ["580.95.05", "580.105.08"]
TOOLKIT_VERSIONS = ["1.17.8", "1.18.0"]
DRIVER_BRANCH = "580"


@dataclass
class Pkg:
    name: str
    version: str
    description: str
    depends: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    provides: list[str] = field(default_factory=list)
    files: dict[str, str | Path] = field(default_factory=dict)  # target path -> text or source file
    postinst: str = ""


def unit(description: str, exec_start: str, pidfile: str) -> str:
    return (
        f"[Unit]\nDescription={description} (test double)\n\n[Service]\nType=simple\n"
        f"ExecStart={exec_start}\nPIDFile={pidfile}\n\n[Install]\nWantedBy=multi-user.target\n"
    )


def driver_packages(upstream: str) -> list[Pkg]:
    v = f"{upstream}-0ubuntu1"
    b = DRIVER_BRANCH
    persisted = "/run/nvidia-persistenced/nvidia-persistenced.pid"
    fm_pid = "/run/nvidia-fabricmanager/nv-fabricmanager.pid"
    pkgs = [
        Pkg(
            f"nvidia-utils-{b}",
            v,
            "NVIDIA driver support binaries (stand-in: nvidia-smi test double)",
            files={
                "/usr/bin/nvidia-smi": BIN / "nvidia-smi",
                "/usr/lib/nvidia-standin/driver-version": upstream + "\n",
            },
        ),
        Pkg(
            f"nvidia-compute-utils-{b}",
            v,
            "NVIDIA compute utilities (stand-in: nvidia-persistenced test double)",
            depends=[f"nvidia-utils-{b} (= {v})"],
            files={
                "/usr/bin/nvidia-persistenced": BIN / "standin-daemon",
                "/lib/systemd/system/nvidia-persistenced.service": unit(
                    "NVIDIA Persistence Daemon", f"/usr/bin/nvidia-persistenced {persisted}", persisted
                ),
            },
        ),
        Pkg(
            f"nvidia-fabricmanager-{b}",
            v,
            "NVIDIA Fabric Manager for NVSwitch systems (stand-in)",
            depends=[f"nvidia-utils-{b} (= {v})"],
            files={
                "/usr/bin/nv-fabricmanager": BIN / "standin-daemon",
                "/lib/systemd/system/nvidia-fabricmanager.service": unit(
                    "NVIDIA fabric manager service", f"/usr/bin/nv-fabricmanager {fm_pid} --needs-nvswitch", fm_pid
                ),
            },
        ),
    ]
    for flavour in ("", "-open"):
        other = f"nvidia-driver-{b}" if flavour else f"nvidia-driver-{b}-open"
        pkgs.append(
            Pkg(
                f"nvidia-driver-{b}{flavour}",
                v,
                f"NVIDIA driver metapackage{' (open kernel modules)' if flavour else ''} (stand-in)",
                depends=[f"nvidia-utils-{b} (= {v})", f"nvidia-compute-utils-{b} (= {v})"],
                conflicts=[other],
                provides=["nvidia-driver"],
                files={f"/usr/share/doc/nvidia-driver-{b}{flavour}/STANDIN": "test double\n"},
            )
        )
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
        deb = out / f"{pkg.name}_{pkg.version}_all.deb"
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
            check=True,
            capture_output=True,
        )
        return deb


def inputs_hash() -> str:
    h = hashlib.sha256()
    for p in sorted([Path(__file__), *BIN.iterdir()]):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    out: Path = ap.parse_args().out
    stamp = out / ".inputs"
    if stamp.exists() and stamp.read_text() == inputs_hash():
        print(f"stand-in apt repository: up to date ({out})")
        return
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():  # empty it in place: the directory may be bind-mounted into running hosts
        old.unlink()
    pkgs = [p for v in DRIVER_VERSIONS for p in driver_packages(v)]
    pkgs += [p for v in TOOLKIT_VERSIONS for p in toolkit_packages(v)]
    for pkg in pkgs:
        build_deb(pkg, out)
    index = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=out, check=True, capture_output=True, text=True
    ).stdout
    (out / "Packages").write_text(index)
    (out / "Packages.gz").write_bytes(gzip.compress(index.encode()))
    stamp.write_text(inputs_hash())
    print(f"stand-in apt repository: {len(pkgs)} packages in {out}")


if __name__ == "__main__":
    main()
