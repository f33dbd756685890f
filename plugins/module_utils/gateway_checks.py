"""The gateway settings checked before any request is sent: base URL, key, model id, proxy. One check record each."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, check
from ansible_collections.a800.vllm.plugins.module_utils.gateway_catalogue import Catalogue
from ansible_collections.a800.vllm.plugins.module_utils.gateway_urls import (
    V1_SUFFIX,
    Masker,
    hide_userinfo,
    key_state,
    split_base,
)


def static_checks(params: dict[str, Any], cat: Catalogue, mask: Masker) -> tuple[list[dict[str, Any]], bool]:
    """The checks of the settings alone, and whether the base URL and proxy allow a request at all."""
    checks: list[dict[str, Any]] = []

    def add(name: str, fact: str, measured: Any, expected: str, detail: str, diagnosis: str | None = None) -> None:
        if diagnosis is None:
            checks.append(check(name, PASS, fact, measured, expected, detail, diagnosis=None))
        else:
            diag = cat.named(diagnosis)
            checks.append(
                check(
                    name, FAIL, fact, measured, expected, f"{detail}. {diag['cause']}", diag["fix"], diagnosis=diagnosis
                )
            )

    base, parts, problem = split_base(params["base_url"])
    expected = "http(s)://host/path, without /v1"
    if problem:
        add(
            "base_url",
            "gateway_base_url",
            hide_userinfo(mask(params["base_url"])),
            expected,
            f"the base URL {problem}",
            "base_url_invalid",
        )
    elif V1_SUFFIX.search(parts.path):
        suffix = V1_SUFFIX.search(parts.path).group(0)
        detail = f"the base URL ends in {suffix} and the client appends /v1 again: {cat.values['doubled_url']} -> 404"
        add("base_url", "gateway_base_url", base, f"{cat.values['suggested_base_url']}", detail, "doubled_v1")
    else:
        add("base_url", "gateway_base_url", base, expected, f"the tools append /v1: {base}/v1/chat/completions")

    key = params["api_key"]
    state = key_state(key)
    expected = "set, no whitespace, no quotes around it"
    if state == "present":
        add("api_key", "gateway_api_key", f"set ({len(key)} characters)", expected, "the key is set")
    else:
        lead, trail = len(key) - len(key.lstrip()), len(key) - len(key.rstrip())
        inner = len(re.findall(r"\s", key.strip()))
        measured = {
            "missing": "empty" if not key else f"only whitespace ({len(key)} characters)",
            "whitespace": f"{lead} leading, {trail} trailing, {inner} inner whitespace characters "
            "(the stripped key differs from the key as given)",
            "quoted": "quote characters around the key",
        }[state]
        add("api_key", "gateway_api_key", measured, expected, f"gateway_api_key: {measured}", f"key_{state}")

    model = params["model"]
    if not model.strip() or re.search(r"\s", model):
        problem_text = "empty" if not model.strip() else "holding whitespace"
        add(
            "model",
            "gateway_model",
            model,
            "the served model name, exactly",
            f"the model id is {problem_text}",
            "model_missing",
        )
    else:
        add("model", "gateway_model", model, "set, no whitespace", f"model id {model}")

    proxy_ok = True
    if params["proxy"]:
        proxy = urllib.parse.urlsplit(params["proxy"])
        try:
            port = proxy.port
        except ValueError:
            port = None
        shown = hide_userinfo(mask(params["proxy"]))
        if proxy.scheme not in ("http", "https") or not proxy.hostname or not port:
            proxy_ok = False
            add(
                "proxy",
                "gateway_proxy",
                shown,
                "http://host:port",
                "the proxy URL is not http(s)://host:port",
                "proxy_invalid",
            )
        else:
            add("proxy", "gateway_proxy", shown, "http://host:port", "the tools go through this proxy")
    return checks, (not problem and proxy_ok)
