#!/usr/bin/python
"""Ansible module: check the gateway settings (base URL, key, model id) and smoke the chain through the gateway
the way the client tools call it, with a named diagnosis for every failure (read-only)."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.a800.vllm.plugins.module_utils.gateway_catalogue import catalogue_errors
from ansible_collections.a800.vllm.plugins.module_utils.gateway_probe import smoke

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
  served_model:
    description:
      - The servers' C(--served-model-name) (C(model_profile.served_model_name)); C(model) must equal it, case
        included (check C(model_id)). Empty - not compared.
    type: str
    default: ""
  model_mapping:
    description: The gateway maps its own model ids to the servers' name - a different C(model) is only a warning.
    type: bool
    default: false
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
    description: The chat message (required with O(probe), as are O(expect), O(max_tokens), O(temperature)).
    type: str
    required: false
  expect:
    description: Text the answer must contain.
    type: str
    required: false
  max_tokens:
    description: C(max_tokens) of the chat request.
    type: int
    required: false
  temperature:
    description: C(temperature) of the chat request.
    type: float
    required: false
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


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "model": {"type": "str", "default": ""},
            "served_model": {"type": "str", "default": ""},
            "model_mapping": {"type": "bool", "default": False},
            "proxy": {"type": "str", "default": ""},
            "diagnoses": {"type": "list", "elements": "dict", "required": True},
            "probe": {"type": "bool", "default": True},
            # the arithmetic check (model_profile.smoke: prompt, expect_in_content, max_tokens, temperature)
            "prompt": {"type": "str"},
            "expect": {"type": "str"},
            "max_tokens": {"type": "int"},
            "temperature": {"type": "float"},
            "timeout_s": {"type": "float", "default": 60.0},
            "validate_certs": {"type": "bool", "default": True},
        },
        required_if=[("probe", True, ("prompt", "expect", "max_tokens", "temperature"))],
        supports_check_mode=True,
    )
    errors = catalogue_errors(module.params["diagnoses"])
    if errors:
        module.fail_json(msg="; ".join(errors))
    module.exit_json(changed=False, **smoke(module.params))


if __name__ == "__main__":
    main()
