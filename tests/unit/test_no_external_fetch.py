"""Nothing in the roles reaches outside what the inventory configures: every URL and image the hosts fetch is a
variable with its value in the inventory (the bill of materials, the site's mirrors), never a literal in a role's
defaults, vars or tasks. An air-gapped site then points the inventory at its mirrors or the offline bundle and
nothing else is tried (docs/field.md#air-gapped-sites-and-proxies).

Human-facing text (messages, descriptions, diagnoses' causes and fixes) may show example URLs; loopback URLs are the
host's own server.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

# Keys whose values are read by people, not fetched.
# `source`: where a diagnosis' quote of a tool's message comes from (its `shows` items).
TEXT_KEYS = {"name", "msg", "fail_msg", "success_msg", "description", "cause", "fix", "meaning", "detail", "note",
             "source"}  # fmt: skip
URL = re.compile(r"\b(?:https?|ftp)://([^/\s'\"]+)")
LOOPBACK = re.compile(r"^(?:127\.[0-9.]+|localhost|\[::1\])(?::[0-9]+)?$")
# A registry image reference: [registry[:port]/]repository[/...]:tag or @sha256:..., e.g. ubuntu:24.04,
# nvcr.io/nvidia/cuda:12.9.0-base, vllm/vllm-openai:v0.26.0.
IMAGE = re.compile(
    r"^(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127}|@sha256:[0-9a-f]{64})$"
)
IMAGE_KEYS = re.compile(r"(?:^|_)(?:image|image_name|base)$")


def role_files() -> list[Path]:
    files = []
    for sub in ("defaults", "vars", "tasks", "handlers"):
        files += sorted(ROOT.glob(f"roles/*/{sub}/**/*.yml"))
    return files


def literals(node, key: str = ""):
    """(key, string) for every string value, skipping text meant for people."""
    if isinstance(node, dict):
        for k, v in node.items():
            if str(k) not in TEXT_KEYS:
                yield from literals(v, str(k))
    elif isinstance(node, list):
        for item in node:
            yield from literals(item, key)
    elif isinstance(node, str):
        yield key, node


def external_urls(text: str) -> list[str]:
    hosts = []
    for host in URL.findall(text):
        if "{{" in host or LOOPBACK.match(host):
            continue
        hosts.append(host)
    return hosts


def offenders(path: Path) -> list[str]:
    found = []
    for doc in yaml.safe_load_all(path.read_text()):
        for key, value in literals(doc):
            if "{{" in value and "}}" in value and not external_urls(value.replace("{{", "").replace("}}", "")):
                continue
            for host in external_urls(value):
                found.append(f"{key}: URL of {host} ({value[:80]!r})")
            if IMAGE_KEYS.search(key) and IMAGE.match(value.strip()):
                found.append(f"{key}: registry image {value.strip()!r}")
    return found


@pytest.mark.parametrize("path", role_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_role_fetches_a_literal_url_or_image(path):
    assert offenders(path) == [], (
        f"{path.relative_to(ROOT)} names what to fetch itself; make it a variable whose value lives in the inventory "
        "(bom.yml or network.yml)"
    )


def test_the_scan_finds_what_it_must():
    """The scanner itself: an external URL or a registry image in a role file is caught; loopback, templated and
    human-facing text are not."""
    doc = yaml.safe_load(
        """
        verify_image: ubuntu:24.04
        gpu_comm_check_image: "{{ a800_bom.vllm_image.base }}"
        repo_base: https://developer.download.nvidia.com/compute/cuda/repos
        health: "http://127.0.0.1:{{ serve_port }}/health"
        templated: "{{ base }}/ubuntu2404"
        tasks:
          - name: Fetch from https://example.com (a task name is for people)
            ansible.builtin.get_url:
              url: https://example.com/key.gpg
              dest: /tmp/key
            fail_msg: "see https://docs.example.com"
        """
    )
    found = []
    for key, value in literals(doc):
        found += [f"{key}:{h}" for h in external_urls(value)]
        if IMAGE_KEYS.search(key) and IMAGE.match(value.strip()):
            found.append(f"{key}:{value}")
    assert found == [
        "verify_image:ubuntu:24.04",
        "repo_base:developer.download.nvidia.com",
        "url:example.com",
    ]


def test_the_inventory_holds_every_external_source():
    """What the hosts fetch from outside is in the inventory, where a site replaces it with its mirror."""
    bom = (ROOT / "inventories/prod/group_vars/all/bom.yml").read_text()
    assert "https://developer.download.nvidia.com/compute/cuda/repos" in bom
    assert "https://nvidia.github.io/libnvidia-container" in bom
    assert "base: vllm/vllm-openai:v0.26.0" in bom
