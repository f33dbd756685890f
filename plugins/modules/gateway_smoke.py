#!/usr/bin/python
"""Ansible module: check the gateway settings (base URL, key, model id) and smoke the chain through the gateway
the way the client tools call it, with a named diagnosis for every failure (read-only)."""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, WARN, check
from ansible_collections.a800.vllm.plugins.module_utils.openai_api import chat_fields, error_info

DOCUMENTATION = r"""
---
module: gateway_smoke
short_description: Check the gateway settings and smoke the chain through a unified-key gateway, diagnosing failures
description:
  - Static checks first, without any request - C(base_url) (http or https, a host, no query, and not ending in
    C(/v1), because the client appends C(/v1) again - C(.../api/v1/v1/chat/completions) answers 404), C(api_key)
    (set, no whitespace around or inside it, no quotes around it; the key itself is never shown, only its defect),
    C(model) (set, no whitespace) and C(proxy) (when set, an http URL with a port).
  - With O(probe), then the smoke through the gateway, as the article's tools call it (the base URL plus C(/v1)),
    first C(GET <base_url>/v1/models) (the model id must be listed, exact case), then
    C(POST <base_url>/v1/chat/completions) with O(prompt) (the answer must contain O(expect); an empty content with
    C(finish_reason=length) is a warning, the token budget was spent on reasoning). The key is sent as a bearer
    token in the Authorization header exactly as given (not stripped), like a tool reading it from its settings,
    and no Authorization header is sent when it is empty.
  - A failed request is matched against O(diagnoses) (status, body, exception, URL, key state, proxy) and the first
    matching entry names the cause and the fix; an error body is returned whole (it is what a tool that reads
    C(choices[0]) chokes on).
  - The key never appears in the result - no_log on O(api_key), and it is masked in every body, URL and message.
  - Never changes anything; supports check mode. The module fails only on invalid options; failed checks are
    returned as records with C(status=fail).
options:
  base_url:
    description: The gateway's base URL as the tools get it, without C(/v1) (e.g. C(https://taotoken.net/api)).
    type: str
    required: true
  api_key:
    description: The gateway key; empty means no key (no Authorization header).
    type: str
    default: ""
  model:
    description: The model id the tools send; must equal the server's C(--served-model-name) exactly.
    type: str
    default: ""
  proxy:
    description:
      - A proxy the tools go through (C(http://127.0.0.1:7890)); empty uses the environment's proxy variables
        (C(https_proxy), C(no_proxy)), as the tools do.
    type: str
    default: ""
  diagnoses:
    description:
      - The diagnosis catalogue (C(gateway_diagnoses) of the gateway role), a list of C({name, match, cause, fix}).
      - C(match) is a list of alternatives; an alternative matches when all of its keys match - C(check) (check
        names), C(status) (HTTP statuses), C(key) (C(missing), C(whitespace), C(quoted), C(present)), C(shape)
        (C(completion), C(no-choices), C(error-object), C(error-string), C(object-error), C(not-json)), C(via)
        (C(direct), C(proxy)), C(local) (the first hop is this machine), and the regular expressions C(url),
        C(body) and C(exception) (searched). An entry without C(match) is only used by the static checks, by name.
      - C(cause) and C(fix) may hold C({base_url}), C(suggested_base_url), C(doubled_url), C(model),
        C(served_models), C(proxy), C(hop) (host:port of the first hop - the proxy, else the gateway), C(url),
        C(status) in braces.
      - Order matters, the first matching entry is the diagnosis.
    type: list
    elements: dict
    required: true
  probe:
    description: Send the requests; false runs the static checks only (the gateway role's validation).
    type: bool
    default: true
  prompt:
    description: The chat message.
    type: str
    default: What is 17 multiplied by 24? Answer briefly.
  expect:
    description: Text the answer must contain.
    type: str
    default: "408"
  max_tokens:
    description: C(max_tokens) of the chat request.
    type: int
    default: 150
  temperature:
    description: C(temperature) of the chat request.
    type: float
    default: 0.6
  timeout_s:
    description: Timeout of each request.
    type: float
    default: 60
  validate_certs:
    description: Verify the gateway's TLS certificate.
    type: bool
    default: true
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Smoke through the gateway
  gateway_smoke:
    base_url: https://taotoken.net/api
    api_key: "{{ gateway_api_key }}"
    model: glm-5.2-nvfp4
    diagnoses: "{{ gateway_diagnoses }}"
  register: smoke
"""

RETURN = r"""
checks:
  description:
    - One record per check - C(name), C(status) (pass, warn, fail), C(fact) (the setting or request it read),
      C(measured), C(expected), C(detail), C(fix) (empty when passed) and C(diagnosis) (a catalogue name or null).
    - Static checks C(base_url), C(api_key), C(model), C(proxy) (when set); probes C(gateway_models),
      C(model_listed), C(gateway_chat).
  returned: always
  type: list
  elements: dict
diagnoses:
  description: The diagnosis names of the failed and warned checks, first seen first.
  returned: always
  type: list
  elements: str
urls:
  description:
    - C(base_url) (as the tools get it, trailing slash removed), C(sdk_base_url) (base plus C(/v1), for the OpenAI
      SDKs, which append only the endpoint), C(models) and C(chat) (the final URLs).
  returned: always
  type: dict
exchanges:
  description: The requests sent - check, method, url, status (null without a response), elapsed_s, via.
  returned: always
  type: list
  elements: dict
msg:
  description: One line - the counts per status and the diagnoses.
  returned: always
  type: str
"""

MASK = "********"
BODY_LIMIT = 4000
MATCH_KEYS = {"check", "status", "key", "shape", "via", "local", "url", "body", "exception"}
REGEX_KEYS = {"url", "body", "exception"}
V1_SUFFIX = re.compile(r"/v1(/chat/completions|/models)?/*$")
PLACEHOLDER = re.compile(r"\{(\w+)\}")


class Masker:
    """Replaces the key (as given and stripped) in any text that leaves the module."""

    def __init__(self, key: str) -> None:
        self.secrets = sorted({s for s in (key, key.strip(), key.strip("'\" \t")) if len(s) >= 4}, key=len)[::-1]

    def __call__(self, text: Any) -> Any:
        if not isinstance(text, str):
            return text
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return text


def key_state(key: str) -> str:
    """missing, whitespace (around or inside), quoted (quote characters around it) or present."""
    if not key.strip():
        return "missing"
    if re.search(r"\s", key):
        return "whitespace"
    if key[0] in "'\"" or key[-1] in "'\"":
        return "quoted"
    return "present"


def hide_userinfo(url: str) -> str:
    """A URL without the password of its user info (proxy URLs may carry credentials)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:{MASK}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def is_local(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Catalogue:
    """The diagnosis catalogue: matching of failed exchanges, lookup by name, placeholders in cause and fix."""

    def __init__(self, entries: list[dict[str, Any]], values: dict[str, str]) -> None:
        self.entries = entries
        self.values = values

    def render(self, text: str) -> str:
        return PLACEHOLDER.sub(lambda m: str(self.values.get(m.group(1), m.group(0))), text or "")

    def named(self, name: str) -> dict[str, str]:
        for entry in self.entries:
            if entry.get("name") == name:
                return {"name": name, "cause": self.render(entry["cause"]), "fix": self.render(entry["fix"])}
        return {"name": name, "cause": f"({name}: no entry in the diagnosis catalogue)", "fix": ""}

    @staticmethod
    def _matches(alt: dict[str, Any], event: dict[str, Any]) -> bool:
        for key, want in alt.items():
            have = event.get(key)
            if key in REGEX_KEYS:
                if have is None or not re.search(want, str(have)):
                    return False
            elif key == "local":
                if bool(have) != bool(want):
                    return False
            elif have not in (want if isinstance(want, list) else [want]):
                return False
        return True

    def diagnose(self, event: dict[str, Any]) -> dict[str, str]:
        for entry in self.entries:
            if any(self._matches(alt, event) for alt in entry.get("match") or []):
                return self.named(entry["name"])
        return {
            "name": "unknown",
            "cause": "no entry of the diagnosis catalogue matches this answer",
            "fix": "read the whole body in `measured`; add an entry to gateway_diagnoses when the cause is found",
        }


def catalogue_errors(entries: list[dict[str, Any]]) -> list[str]:
    errors = []
    for index, entry in enumerate(entries):
        where = f"diagnoses[{index}] ({entry.get('name', '?')})"
        missing = [k for k in ("name", "cause", "fix") if not entry.get(k)]
        if missing:
            errors.append(f"{where}: needs {', '.join(missing)}")
        alternatives = entry.get("match") or []
        if not isinstance(alternatives, list):
            errors.append(f"{where}: match must be a list of alternatives")
            continue
        for alt in alternatives:
            if not isinstance(alt, dict):
                errors.append(f"{where}: each match alternative is a mapping")
                continue
            unknown = sorted(set(alt) - MATCH_KEYS)
            if unknown:
                errors.append(f"{where}: unknown match keys {unknown} (known: {sorted(MATCH_KEYS)})")
            for key in REGEX_KEYS & set(alt):
                try:
                    re.compile(alt[key])
                except (re.error, TypeError) as exc:
                    errors.append(f"{where}: {key} does not compile ({exc})")
    return errors


def split_base(base_url: str) -> tuple[str, urllib.parse.SplitResult | None, str]:
    """The base URL without trailing slashes, its parts, and what is wrong with its form ('' when nothing)."""
    raw = base_url
    base = raw.strip().rstrip("/")
    if not base:
        return base, None, "empty"
    if raw != raw.strip() or re.search(r"\s", base):
        return base, None, "holds whitespace"
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https"):
        return base, None, f"scheme {parts.scheme or '(none)'!r} is not http or https"
    if not parts.hostname:
        return base, None, "has no host"
    try:
        valid_port = parts.port is None or parts.port > 0
    except ValueError:  # not a number, or out of range
        valid_port = False
    if not valid_port:
        return base, None, "has an invalid port"
    if parts.query or parts.fragment:
        return base, None, "has a query or a fragment"
    if parts.username or parts.password:
        return base, None, "holds credentials (the key goes into the Authorization header, not the URL)"
    return base, parts, ""


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
        return {
            "check": check,
            "status": answer.get("status"),
            "shape": answer.get("shape"),
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
        checks += prober.checks
        exchanges = prober.exchanges
    counts = {s: sum(c["status"] == s for c in checks) for s in (PASS, WARN, FAIL)}
    diagnoses = list(dict.fromkeys(c["diagnosis"] for c in checks if c["diagnosis"]))
    msg = "gateway: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    if diagnoses:
        msg += " - " + ", ".join(diagnoses)
    result = {"checks": checks, "diagnoses": diagnoses, "urls": urls, "exchanges": exchanges, "msg": msg}
    try:  # a last pass over everything that leaves the module
        return json.loads(mask(json.dumps(result)))
    except json.JSONDecodeError:
        return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "model": {"type": "str", "default": ""},
            "proxy": {"type": "str", "default": ""},
            "diagnoses": {"type": "list", "elements": "dict", "required": True},
            "probe": {"type": "bool", "default": True},
            "prompt": {"type": "str", "default": "What is 17 multiplied by 24? Answer briefly."},
            "expect": {"type": "str", "default": "408"},
            "max_tokens": {"type": "int", "default": 150},
            "temperature": {"type": "float", "default": 0.6},
            "timeout_s": {"type": "float", "default": 60.0},
            "validate_certs": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    errors = catalogue_errors(module.params["diagnoses"])
    if errors:
        module.fail_json(msg="; ".join(errors))
    module.exit_json(changed=False, **smoke(module.params))


if __name__ == "__main__":
    main()
