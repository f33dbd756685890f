#!/usr/bin/python
"""Ansible module: look up a message a client tool showed (Claude Code, Cline, an SDK) in the gateway's diagnosis
catalogue - what it means and what to change (read-only, nothing sent)."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.a800.vllm.plugins.module_utils.gateway_catalogue import Catalogue, catalogue_errors

DOCUMENTATION = r"""
---
module: gateway_explain
short_description: Explain a message a client tool showed from the gateway's diagnosis catalogue
description:
  - Matches O(message) against the C(shows) items of O(diagnoses) (each a C({tool, text, pattern, source}); the
    pattern is a Python regular expression, searched in the message with its whitespace collapsed) and returns every
    matching entry in catalogue order, with its cause and fix.
  - Several entries can match one message (Claude Code shows the same "issue with the selected model" text for an
    unknown model id, a path the gateway does not route and a missing Messages API); the gateway smoke
    (gateway_smoke) tells them apart from the answers it gets.
  - Fails when no entry matches, naming the smoke as the next step. Sends nothing, changes nothing; supports check
    mode.
options:
  message:
    description: The message as the tool showed it (copied from the terminal or the editor panel).
    type: str
    required: true
  diagnoses:
    description: The diagnosis catalogue (C(gateway_diagnoses) of the gateway role).
    type: list
    elements: dict
    required: true
  values:
    description: Values for the placeholders of cause and fix (C(base_url), C(model), C(served_models), ...).
    type: dict
    default: {}
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Explain what Claude Code showed
  gateway_explain:
    message: "Not logged in · Please run /login"
    diagnoses: "{{ gateway_diagnoses }}"
    values: {model: glm-5.2-nvfp4}
"""

RETURN = r"""
explained:
  description: The matching entries, catalogue order - C(name), C(tool), C(shown) (the text the entry quotes),
    C(cause), C(fix).
  returned: always
  type: list
  elements: dict
msg:
  description: One line per matching entry, or why none matched.
  returned: always
  type: str
"""

SMOKE = "ansible-playbook playbooks/gateway.yml -e gateway_enabled=true"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "message": {"type": "str", "required": True},
            "diagnoses": {"type": "list", "elements": "dict", "required": True},
            "values": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params = module.params
    errors = catalogue_errors(params["diagnoses"])
    if errors:
        module.fail_json(msg="; ".join(errors), explained=[])
    if not params["message"].strip():
        module.fail_json(msg="gateway_tool_message is empty: set it to the message the tool showed", explained=[])
    explained = Catalogue(params["diagnoses"], dict(params["values"])).explain(params["message"])
    if not explained:
        module.fail_json(
            msg="no entry of the diagnosis catalogue quotes this message; smoke the chain as the tools call it "
            f"({SMOKE}), and add a `shows` item to gateway_diagnoses when the cause is found",
            explained=[],
        )
    lines = [f'DIAGNOSIS {e["name"]} ({e["tool"]}: "{e["shown"]}"): {e["cause"]} FIX: {e["fix"]}' for e in explained]
    if len(explained) > 1:
        lines.append(f"{len(explained)} causes show this message; the gateway smoke tells them apart ({SMOKE})")
    module.exit_json(changed=False, explained=explained, msg="\n".join(lines))


if __name__ == "__main__":
    main()
