"""The host's apt sources in both formats: the entries that already serve NVIDIA's repositories are found (so that a
role reuses or replaces them instead of adding a second one that makes apt refuse every source)."""

from __future__ import annotations

from ansible_collections.a800.vllm.plugins.module_utils.apt_sources import entries_for, normalise_uri, read_sources

CUDA = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
TOOLKIT = "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/"


def host_root(tmp_path, files: dict[str, str]):
    for path, text in files.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return str(tmp_path)


def test_the_documented_forms_of_cuda_keyring_and_the_toolkit_are_found(tmp_path):
    root = host_root(tmp_path, {
        # what cuda-keyring writes, and what the toolkit's install guide writes (with apt's literal $(ARCH))
        "/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list":
            f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {CUDA} /\n",
        "/etc/apt/sources.list.d/nvidia-container-toolkit.list":
            "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
            "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
            "#deb https://nvidia.github.io/libnvidia-container/experimental/deb/$(ARCH) /\n",
        "/etc/apt/sources.list": "deb http://archive.ubuntu.com/ubuntu noble main universe\n",
    })  # fmt: skip
    entries = read_sources(root)
    cuda = entries_for(entries, CUDA, "/")
    assert [(e["file"], e["signed_by"]) for e in cuda] == [
        ("/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list", "/usr/share/keyrings/cuda-archive-keyring.gpg")
    ]
    toolkit = entries_for(entries, TOOLKIT, "/")
    assert len(toolkit) == 1  # the commented experimental line is not an entry
    assert toolkit[0]["signed_by"] == "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"


def test_deb822_stanzas_with_several_uris_and_a_disabled_one(tmp_path):
    root = host_root(tmp_path, {
        "/etc/apt/sources.list.d/nvidia-cuda.sources":
            f"Types: deb\nURIs: {CUDA}\nSuites: /\nSigned-By: /etc/apt/keyrings/nvidia-cuda.asc\n\n"
            "Types: deb\nURIs: https://example.invalid/other/\nSuites: /\nEnabled: no\n",
        "/etc/apt/sources.list.d/ubuntu.sources":
            "Types: deb\nURIs: http://archive.ubuntu.com/ubuntu\nSuites: noble noble-updates\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n",
    })  # fmt: skip
    entries = read_sources(root)
    assert len([e for e in entries if e["file"].endswith("ubuntu.sources")]) == 2  # one per suite
    assert [e["signed_by"] for e in entries_for(entries, CUDA.rstrip("/"), "/")] == [
        "/etc/apt/keyrings/nvidia-cuda.asc"
    ]
    assert entries_for(entries, "https://example.invalid/other/", "/") == []  # disabled


def test_a_mirror_or_another_release_is_another_repository(tmp_path):
    root = host_root(tmp_path, {"/etc/apt/sources.list.d/cuda.list": f"deb [arch=amd64] {CUDA} /\n"})
    entries = read_sources(root)
    assert entries_for(entries, CUDA.replace("ubuntu2404", "ubuntu2204"), "/") == []
    assert entries_for(entries, "http://mirror.intra/cuda/repos/ubuntu2404/x86_64/", "/") == []
    assert normalise_uri("file:///srv/x/") == normalise_uri("file:/srv/x")


def test_a_real_ubuntu_24_04_hosts_own_sources_are_read():
    from conftest import ROOT

    real = str(ROOT / "tests" / "fixtures" / "hosts" / "nvidia-h200-ubuntu-24.04")
    entries = read_sources(real)
    archive = [(e["uri"], e["suite"]) for e in entries if e["file"].endswith("ubuntu.sources")]
    assert archive == [
        ("http://archive.ubuntu.com/ubuntu/", "noble"),
        ("http://archive.ubuntu.com/ubuntu/", "noble-updates"),
        ("http://archive.ubuntu.com/ubuntu/", "noble-backports"),
        ("http://security.ubuntu.com/ubuntu/", "noble-security"),
    ]
    assert {e["signed_by"] for e in entries} == {"/usr/share/keyrings/ubuntu-archive-keyring.gpg"}
    assert entries_for(entries, CUDA, "/") == []  # no NVIDIA repository on that host yet
