"""The site's one proxy setting as apt, a task's environment and dockerd read it (plugins/module_utils/network.py),
and what a daemon.json change costs the running containers (plugins/module_utils/docker_daemon.py)."""

from __future__ import annotations

import pytest
from ansible_collections.a800.vllm.plugins.module_utils.docker_daemon import RELOADABLE_KEYS, daemon_json_change
from ansible_collections.a800.vllm.plugins.module_utils.network import (
    apt_direct_hosts,
    apt_proxy_conf,
    docker_proxy_dropin,
    proxy_checks,
    proxy_environment,
)

PROXY = {
    "http": "http://10.0.0.5:3128",
    "https": "http://10.0.0.5:3128",
    "no_proxy": "localhost,127.0.0.1,.intranet,10.0.0.0/8,mirror.intranet",
}


def test_no_proxy_writes_nothing():
    for empty in ({}, None, {"http": "", "https": ""}):
        assert proxy_environment(empty) == {}
        assert apt_proxy_conf(empty) == ""
        assert docker_proxy_dropin(empty) == ""
        assert proxy_checks(empty) == []


def test_the_environment_has_both_spellings():
    env = proxy_environment(PROXY)
    assert env["http_proxy"] == env["HTTP_PROXY"] == "http://10.0.0.5:3128"
    assert env["https_proxy"] == env["HTTPS_PROXY"] == "http://10.0.0.5:3128"
    assert env["no_proxy"] == env["NO_PROXY"] == "localhost,127.0.0.1,.intranet,10.0.0.0/8,mirror.intranet"


def test_apt_gets_the_proxy_and_direct_hosts_it_can_express():
    """apt has no no_proxy list: exact hosts become Acquire::<scheme>::Proxy::<host> "DIRECT"; a CIDR range cannot be
    expressed and is left out; a leading-dot domain is written as its host name."""
    assert apt_direct_hosts(PROXY) == ["localhost", "127.0.0.1", "intranet", "mirror.intranet"]
    conf = apt_proxy_conf(PROXY).splitlines()
    assert 'Acquire::http::Proxy "http://10.0.0.5:3128";' in conf
    assert 'Acquire::https::Proxy "http://10.0.0.5:3128";' in conf
    assert 'Acquire::http::Proxy::mirror.intranet "DIRECT";' in conf
    assert 'Acquire::https::Proxy::mirror.intranet "DIRECT";' in conf
    assert not any("10.0.0.0/8" in line for line in conf)


def test_dockerd_gets_a_systemd_drop_in():
    dropin = docker_proxy_dropin(PROXY).splitlines()
    assert dropin[1] == "[Service]"
    assert 'Environment="HTTP_PROXY=http://10.0.0.5:3128"' in dropin
    assert 'Environment="NO_PROXY=localhost,127.0.0.1,.intranet,10.0.0.0/8,mirror.intranet"' in dropin


@pytest.mark.parametrize(
    ("proxy", "says"),
    [
        ({"http": "10.0.0.5:3128"}, "proxy.http is '10.0.0.5:3128': give the proxy as http://host:port"),
        ({"https": "socks5://p:1080"}, "proxy.https is 'socks5://p:1080'"),
        ({"no_proxy": "localhost"}, "proxy.no_proxy is set but neither proxy.http nor proxy.https"),
        ({"http": "http://p:3128", "ftp": "x"}, "unknown keys ['ftp']"),
        ("http://p:3128", "proxy must be a mapping"),
    ],
)
def test_a_bad_setting_names_the_variable_and_the_fix(proxy, says):
    problems = proxy_checks(proxy)
    assert len(problems) == 1 and says in problems[0], problems


def test_a_daemon_json_change_reloads_when_dockerd_can():
    """The dockerd reference's reloadable keys (SIGHUP) cost nothing; any other key needs a restart."""
    current = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}, "log-driver": "json-file"}
    assert daemon_json_change(current, dict(current))["action"] == "none"
    reload = daemon_json_change(current, {**current, "live-restore": True, "registry-mirrors": ["https://m"]})
    assert reload == {"changed_keys": ["live-restore", "registry-mirrors"], "action": "reload", "restart_keys": []}
    restart = daemon_json_change(current, {**current, "live-restore": True, "log-driver": "journald"})
    assert restart["action"] == "restart" and restart["restart_keys"] == ["log-driver"]
    removed = daemon_json_change(current, {"runtimes": current["runtimes"]})
    assert removed["action"] == "restart" and removed["changed_keys"] == ["log-driver"]
    assert {"live-restore", "runtimes", "registry-mirrors", "default-runtime"} <= RELOADABLE_KEYS
    assert "exec-opts" not in RELOADABLE_KEYS and "data-root" not in RELOADABLE_KEYS
