#!/usr/bin/python
"""Ansible module: the fleet gateway's overhead - the same load through the gateway and straight to the servers."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_bench
short_description: Measure what the fleet's gateway and router add to latency and throughput, against direct
description:
  - At each level of O(concurrency), sends O(requests_per_stream) streamed chat completions per stream through
    O(gateway_url) (nginx + vllm-router), then the same load straight to O(direct_urls), the streams spread over them
    round robin by the client (16 over two hosts - 8 + 8, at once), so that both paths load the same servers alike.
  - Returns, per level, p50 and p99 of TTFT and of the end-to-end latency on both paths, what the gateway adds (ms)
    and the throughput ratio gateway / direct, and the table in Markdown. Figures, not a verdict - the play fails
    only when a request did not complete.
  - Runs on the gateway host (it reaches both), with the project's streaming client (standard library only). In
    check mode it sends nothing.
options:
  gateway_url:
    description: The gateway's base URL, without C(/v1).
    type: str
    required: true
  gateway_key:
    description: A team key of the gateway.
    type: str
    required: true
    no_log: true
  direct_urls:
    description: The serving hosts' base URLs, without C(/v1).
    type: list
    elements: str
    required: true
  direct_key:
    description: The servers' key (serve_api_key), or empty.
    type: str
    default: ""
    no_log: true
  model:
    description: The served model name.
    type: str
    required: true
  concurrency:
    description: The levels.
    type: list
    elements: int
    default: [1, 4, 16]
  requests_per_stream:
    description: Requests each stream sends at each level.
    type: int
    default: 2
  prompt_tokens:
    description: Prompt length of each request.
    type: int
    default: 80
  max_tokens:
    description: Output tokens of each request (ignore_eos).
    type: int
    default: 64
  timeout_s:
    description: Timeout of each request, seconds.
    type: float
    default: 600
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Measure the gateway against direct
  a800.vllm.fleet_bench:
    gateway_url: http://127.0.0.1:8080
    gateway_key: "{{ fleet_gateway_keys[0].key }}"
    direct_urls: [http://gpu-a800-01:8001, http://gpu-a800-02:8001]
    direct_key: "{{ serve_api_key }}"
    model: glm-5.2-nvfp4
"""

RETURN = r"""
fleet_bench:
  description: levels (concurrency, gateway, direct, added_ms, throughput_ratio), hosts, completed, failed, markdown.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.bench_fleet import compare, markdown  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gateway_url": {"type": "str", "required": True},
            "gateway_key": {"type": "str", "required": True, "no_log": True},
            "direct_urls": {"type": "list", "elements": "str", "required": True},
            "direct_key": {"type": "str", "default": "", "no_log": True},
            "model": {"type": "str", "required": True},
            "concurrency": {"type": "list", "elements": "int", "default": [1, 4, 16]},
            "requests_per_stream": {"type": "int", "default": 2},
            "prompt_tokens": {"type": "int", "default": 80},
            "max_tokens": {"type": "int", "default": 64},
            "timeout_s": {"type": "float", "default": 600.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not p["direct_urls"]:
        module.fail_json(msg="direct_urls is empty: give the serving hosts' base URLs")
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, fleet_bench={"levels": [], "failed": 0, "markdown": ""})
    result = compare(
        p["gateway_url"].rstrip("/"),
        p["gateway_key"],
        [u.rstrip("/") for u in p["direct_urls"]],
        p["direct_key"] or None,
        p["model"],
        p["concurrency"],
        p["requests_per_stream"],
        p["prompt_tokens"],
        p["max_tokens"],
        p["timeout_s"],
    )
    result["markdown"] = markdown(result)
    module.exit_json(changed=False, fleet_bench=result)


if __name__ == "__main__":
    main()
