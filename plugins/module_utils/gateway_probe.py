"""The gateway smoke's requests (models, the served id listed, a chat) sent through the gateway and judged with the
diagnosis catalogue; smoke() is the whole run the gateway_smoke module returns, masked."""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, WARN, check, counts
from ansible_collections.a800.vllm.plugins.module_utils.gateway_catalogue import Catalogue
from ansible_collections.a800.vllm.plugins.module_utils.gateway_checks import static_checks
from ansible_collections.a800.vllm.plugins.module_utils.gateway_urls import (
    V1_SUFFIX,
    Masker,
    hide_userinfo,
    is_local,
    key_state,
    split_base,
)
from ansible_collections.a800.vllm.plugins.module_utils.openai_api import chat_fields, error_info
from ansible_collections.a800.vllm.plugins.module_utils.smoke import messages_check

BODY_LIMIT = 4000


def exchange(method: str, url: str, params: dict[str, Any], payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """One request as a tool sends it: the key exactly as given. Returns status, text, exception, elapsed_s."""
    headers = {"Accept": "application/json", "User-Agent": "a800-vllm-gateway-smoke"}
    if params["api_key"].strip():
        headers["Authorization"] = f"Bearer {params['api_key']}"
    data = None
    if payload is not None:
        data = json.dumps(payload).encode()
        headers["Content-Type"] = "application/json"
    handlers: list[Any] = []
    if params["proxy"]:
        handlers.append(urllib.request.ProxyHandler({"http": params["proxy"], "https": params["proxy"]}))
    if not params["validate_certs"]:
        handlers.append(urllib.request.HTTPSHandler(context=ssl._create_unverified_context()))
    opener = urllib.request.build_opener(*handlers)
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    start = time.monotonic()
    out: dict[str, Any] = {"status": None, "text": "", "exception": None}
    try:
        with opener.open(request, timeout=params["timeout_s"]) as response:
            out.update(status=response.status, text=response.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as exc:
        out.update(status=exc.code, text=exc.read().decode("utf-8", "replace"))
    except urllib.error.URLError as exc:
        out["exception"] = f"{type(exc.reason).__name__}: {exc.reason}"
    except (OSError, ValueError, http.client.HTTPException) as exc:
        out["exception"] = f"{type(exc).__name__}: {exc}"
    out["elapsed_s"] = round(time.monotonic() - start, 3)
    return out


def shape_of(status: int | None, text: str) -> str:
    """completion (a body with choices), no-choices (JSON without them) or the error shape of error_info."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return "not-json"
    if isinstance(body, dict) and body.get("choices"):
        return "completion"
    if isinstance(body, dict) and body.get("type") == "message":
        return "message"  # the Anthropic Messages API's answer
    shape = error_info(status or 0, text)["shape"]
    return "no-choices" if shape == "not-json" else shape


class Prober:
    """The requests through the gateway, as the tools send them, and their check records."""

    def __init__(self, params: dict[str, Any], cat: Catalogue, mask: Masker, urls: dict[str, str]) -> None:
        self.params, self.cat, self.mask, self.urls = params, cat, mask, urls
        self.checks: list[dict[str, Any]] = []
        self.exchanges: list[dict[str, Any]] = []
        self.served: list[str] | None = None
        base = urllib.parse.urlsplit(urls["base_url"])
        proxy = urllib.parse.urlsplit(params["proxy"]) if params["proxy"] else None
        env_proxy = urllib.request.getproxies().get(base.scheme)
        if proxy is None and env_proxy and not urllib.request.proxy_bypass(base.hostname or ""):
            proxy = urllib.parse.urlsplit(env_proxy)  # the environment's proxy, as the tools would use it
        self.via = "proxy" if proxy else "direct"
        hop = proxy or base
        self.local = is_local(hop.hostname)
        self.proxy_shown = hide_userinfo(urllib.parse.urlunsplit(proxy)) if proxy else "(none)"
        port = hop.port or (443 if hop.scheme == "https" else 80)
        cat.values.update(proxy=self.proxy_shown, hop=f"{hop.hostname}:{port}" + (" (proxy)" if proxy else ""))

    def request(self, check: str, method: str, url: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = exchange(method, url, self.params, payload)
        answer["shape"] = "none" if answer["status"] is None else shape_of(answer["status"], answer["text"])
        self.exchanges.append(
            {
                "check": check,
                "method": method,
                "url": url,
                "status": answer["status"],
                "elapsed_s": answer["elapsed_s"],
                "via": self.via,
            }
        )
        return answer

    def event(self, check: str, answer: dict[str, Any] | None = None) -> dict[str, Any]:
        """What the catalogue matches: the check, the answer, the key's state and the way the request went."""
        answer = answer or {}
        error_type = error_info(answer["status"], answer.get("text") or "")["type"] if answer.get("status") else None
        return {
            "check": check,
            "status": answer.get("status"),
            "shape": answer.get("shape"),
            "error_type": error_type,
            "url": answer.get("url"),
            "body": answer.get("text"),
            "exception": answer.get("exception"),
            "key": key_state(self.params["api_key"]),
            "via": self.via,
            "local": self.local,
        }

    def add(self, name: str, status: str, fact: str, measured: Any, expected: Any, detail: str, diag=None) -> None:
        if diag is None:
            self.checks.append(check(name, status, fact, measured, expected, detail, diagnosis=None))
        else:
            self.checks.append(
                check(
                    name,
                    status,
                    fact,
                    measured,
                    expected,
                    f"{detail}. {diag['cause']}",
                    diag["fix"],
                    diagnosis=diag["name"],
                )
            )

    def failed(self, name: str, method: str, url: str, answer: dict[str, Any], expected: str) -> None:
        """A request without the expected answer: the whole body (or the exception) and the diagnosis."""
        self.cat.values.update(url=url, status=str(answer["status"]))
        diag = self.cat.diagnose(self.event(name, {**answer, "url": url}))
        if answer["status"] is None:
            measured = self.mask(answer["exception"])
            through = f", through proxy {self.proxy_shown}" if self.via == "proxy" else ""
            detail = f"{method} {url} got no answer ({measured}{through})"
        else:
            measured = f"HTTP {answer['status']}: {self.mask(answer['text'][:BODY_LIMIT])}"
            detail = f"{method} {url} -> HTTP {answer['status']}"
        self.add(name, FAIL, f"{method} {url}", measured, expected, detail, diag)

    def models(self) -> None:
        """GET /v1/models: a model list."""
        url, expected = self.urls["models"], "HTTP 200, a model list"
        answer = self.request("gateway_models", "GET", url)
        if answer["status"] == 200:
            try:
                self.served = [str(m.get("id")) for m in json.loads(answer["text"]).get("data", [])]
            except (json.JSONDecodeError, AttributeError, TypeError):
                self.served = None
        if self.served is None:
            self.failed("gateway_models", "GET", url, answer, expected)
            return
        listed = ", ".join(self.served) or "(none)"
        self.cat.values["served_models"] = listed
        self.add("gateway_models", PASS, f"GET {url}", self.served, expected, f"the gateway lists: {listed}")

    def listed(self) -> None:
        """The model id among the served models, exact case."""
        model = self.params["model"]
        if self.served is None or not model.strip():
            return
        if model in self.served:
            self.add("model_listed", PASS, "gateway_model", model, self.served, f"{model} is served (exact match)")
            return
        near = [s for s in self.served if s.lower() == model.strip().lower()]
        detail = (
            f"{model!r} differs from the served {near[0]!r} in case only: model ids are case-sensitive"
            if near
            else f"{model!r} is not among the served models ({', '.join(self.served) or 'none'})"
        )
        diag = self.cat.diagnose(self.event("model_listed"))
        self.add("model_listed", FAIL, "gateway_model", model, self.served, detail, diag)

    def chat(self) -> None:
        """POST /v1/chat/completions: the article's 17 x 24, answered through the gateway."""
        params, url = self.params, self.urls["chat"]
        if not params["model"].strip():
            return
        payload = {
            "model": params["model"],
            "messages": [{"role": "user", "content": params["prompt"]}],
            "max_tokens": params["max_tokens"],
            "temperature": params["temperature"],
        }
        answer = self.request("gateway_chat", "POST", url, payload)
        expected = f"HTTP 200, content containing {params['expect']}"
        if answer["status"] != 200 or answer["shape"] != "completion":
            self.failed("gateway_chat", "POST", url, answer, expected)
            return
        fields = chat_fields(json.loads(answer["text"]))
        content, reasoning = fields["content"] or "", fields["reasoning"] or ""
        measured = {
            "content": self.mask(content[:BODY_LIMIT]),
            "finish_reason": fields["finish_reason"],
            "reasoning_chars": len(reasoning),
        }
        fact = f"POST {url}"
        if params["expect"] in content:
            self.add("gateway_chat", PASS, fact, measured, expected, f"answered {content.strip()[:80]!r}")
        elif not content.strip() and fields["finish_reason"] == "length":
            detail = f"empty content, finish_reason length, {len(reasoning)} characters of reasoning"
            diag = self.cat.named("budget_spent_on_reasoning")
            self.add("gateway_chat", WARN, fact, measured, expected, detail, diag)
        else:
            detail = f"the answer {content.strip()[:80]!r} does not contain {params['expect']}"
            diag = self.cat.diagnose(self.event("gateway_chat", {**answer, "url": url}))
            self.add("gateway_chat", FAIL, fact, measured, expected, detail, diag)

    def messages(self) -> None:
        """POST /v1/messages: the same question through the Anthropic Messages API, as Claude Code sends it (its
        base URL without /v1, the token as Authorization: Bearer)."""
        params, url = self.params, self.urls["messages"]
        if not params["model"].strip():
            return
        payload = {
            "model": params["model"],
            "max_tokens": params["max_tokens"],
            "messages": [{"role": "user", "content": params["prompt"]}],
        }
        answer = self.request("gateway_messages", "POST", url, payload)
        expected = f"HTTP 200, an Anthropic message with {params['expect']} in a text block"
        if answer["status"] != 200 or answer["shape"] != "message":
            self.failed("gateway_messages", "POST", url, answer, expected)
            return
        judged = messages_check(200, json.loads(answer["text"]), params["expect"], params["max_tokens"])
        diag = None
        if judged["status"] == WARN:
            diag = self.cat.named("budget_spent_on_reasoning")
        elif judged["status"] == FAIL:
            diag = self.cat.diagnose(self.event("gateway_messages", {**answer, "url": url}))
        self.add("gateway_messages", judged["status"], f"POST {url}", judged["measured"], expected, judged["detail"],
                 diag)  # fmt: skip


def smoke(params: dict[str, Any]) -> dict[str, Any]:
    """The whole run: static checks, then (with probe) the requests. Everything returned is masked."""
    mask = Masker(params["api_key"])
    base, parts, _ = split_base(params["base_url"])
    base = hide_userinfo(base)  # a base URL with credentials is refused, and never shown with its password
    suggested = V1_SUFFIX.sub("", base) if parts else base
    urls = {
        "base_url": base,
        "sdk_base_url": f"{base}/v1",
        "models": f"{base}/v1/models",
        "chat": f"{base}/v1/chat/completions",
        "messages": f"{base}/v1/messages",
    }
    values = {
        "base_url": base,
        "suggested_base_url": suggested,
        "doubled_url": urls["chat"],
        "model": params["model"],
        "served_models": "(not listed)",
        "proxy": hide_userinfo(params["proxy"]) if params["proxy"] else "(none)",
        "url": "",
        "status": "",
    }
    cat = Catalogue(params["diagnoses"], values)
    checks, usable = static_checks(params, cat, mask)
    exchanges: list[dict[str, Any]] = []
    if params["probe"] and usable:
        prober = Prober(params, cat, mask, urls)
        prober.models()
        prober.listed()
        prober.chat()
        prober.messages()
        checks += prober.checks
        exchanges = prober.exchanges
    by_status = counts(checks)
    diagnoses = list(dict.fromkeys(c["diagnosis"] for c in checks if c["diagnosis"]))
    msg = "gateway: " + ", ".join(f"{n} {s}" for s, n in by_status.items() if n)
    if diagnoses:
        msg += " - " + ", ".join(diagnoses)
    result = {"checks": checks, "diagnoses": diagnoses, "urls": urls, "exchanges": exchanges, "msg": msg}
    try:  # a last pass over everything that leaves the module
        return json.loads(mask(json.dumps(result)))
    except json.JSONDecodeError:
        return result
