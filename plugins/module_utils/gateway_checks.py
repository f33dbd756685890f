"""The gateway settings checked before any request is sent: base URL, key, model id, proxy. One check record each."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, WARN, check
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
        checks.append(model_id_check(model, params.get("served_model") or "", params.get("model_mapping", False), cat))

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


def model_id_check(model: str, served: str, mapping: bool, cat: Catalogue) -> dict[str, Any]:
    """The tools send the model id verbatim and vLLM matches --served-model-name exactly, case included: a mismatch
    fails the first real call. A gateway that maps model ids (gateway_model_mapping) turns it into a warning."""
    expected = f"{served} (the servers' --served-model-name, case-sensitive)" if served else "the served model name"
    if not served or model == served:
        detail = f"the tools send {model}, the servers serve {served}" if served else "no served model name to compare"
        return check("model_id", PASS, "gateway_model", model, expected, detail, diagnosis=None)
    name = "model_id_case" if model.lower() == served.lower() else "model_id_mismatch"
    diag = cat.named(name)
    detail = f"gateway_model is {model!r} and the servers serve {served!r}. {diag['cause']}"
    if mapping:
        return check(
            "model_id",
            WARN,
            "gateway_model",
            model,
            expected,
            detail + " gateway_model_mapping is true: the gateway is trusted to map it",
            diag["fix"],
            diagnosis=name,
        )
    return check("model_id", FAIL, "gateway_model", model, expected, detail, diag["fix"], diagnosis=name)


FLEET_COUNTERS = ("vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total")


def _counters(reading: dict[str, Any]) -> dict[str, float] | None:
    """One server's counters from a GET /metrics result ({status, content}), summed over their labels."""
    from ansible_collections.a800.vllm.plugins.module_utils.openai_api import metric_total, parse_prometheus

    if reading.get("status") != 200 or not reading.get("content"):
        return None
    families = parse_prometheus(reading["content"])
    return {name: metric_total(families, name) for name in FLEET_COUNTERS}


def fleet_check(before: dict[str, dict], after: dict[str, dict], answered: int, diag: dict[str, str]) -> dict:
    """Did this fleet answer the smoke? A gateway that answered may have answered from any upstream with that model
    id; only the servers' own counters (vllm:request_success_total, the prompt and generation token totals) read
    before and after the smoke prove that the requests reached this fleet. before/after: {host: {status, content}};
    answered: the smoke requests the gateway answered; diag: the catalogue's answered_elsewhere entry."""
    name, fact = "fleet_answered", "vllm:request_success_total of each serving host, before and after the smoke"
    expected = f">= {answered} requests counted by this fleet's servers"
    if answered == 0:
        return check(name, PASS, fact, 0, expected, "the gateway answered no smoke request: nothing to attribute")
    deltas: dict[str, dict[str, float]] = {}
    unread: list[str] = []
    for host in sorted(set(before) | set(after)):
        b, a = _counters(before.get(host) or {}), _counters(after.get(host) or {})
        if b is None or a is None:
            unread.append(host)
        else:
            deltas[host] = {k: a[k] - b[k] for k in FLEET_COUNTERS}
    if not deltas:
        return check(
            name,
            WARN,
            fact,
            None,
            expected,
            f"no server's /metrics could be read ({', '.join(unread) or 'no serving hosts'}): the answer is not "
            "attributed to this fleet",
            "let the control node reach each server's /metrics (gateway_fleet, gateway_fleet_metrics_port)",
        )
    counted = sum(d["vllm:request_success_total"] for d in deltas.values())
    detail = "; ".join(
        f"{h}: +{d['vllm:request_success_total']:.0f} requests, +{d['vllm:prompt_tokens_total']:.0f} prompt and "
        f"+{d['vllm:generation_tokens_total']:.0f} generated tokens"
        for h, d in deltas.items()
    ) + (f"; not read: {', '.join(unread)}" if unread else "")
    if counted >= answered:
        return check(name, PASS, fact, counted, expected, detail)
    if counted == 0 and not unread:
        return check(
            name, FAIL, fact, counted, expected, f"{detail}. {diag['cause']}", diag["fix"], diagnosis=diag["name"]
        )
    return check(
        name,
        WARN,
        fact,
        counted,
        expected,
        f"{detail}: fewer requests counted than the gateway answered (another upstream, or a server not read)",
        diag["fix"],
    )
