#!/usr/bin/python
"""Ansible module: can the apt and deb822_repository modules import their Python libraries here (read-only)?"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_deps_facts
short_description: Find out whether python3-apt and python3-debian can be imported, as apt and deb822_repository look
description:
  - C(python_apt) - ansible.builtin.apt's own search (ansible-core 2.19, modules/apt.py C(main())) - the
    interpreter this module runs under imports C(apt), C(apt.debfile) and C(apt_pkg), or one of
    C(/usr/bin/python3) and C(/usr/bin/python) imports C(apt) (apt would respawn under it).
  - C(python_debian) - the interpreter this module runs under imports C(debian.deb822)
    (ansible.builtin.deb822_repository has no other search, in check mode neither).
  - Without python3-apt, ansible.builtin.apt installs it by itself in a normal run but fails in check mode; the host
    phase then previews its apt tasks from dpkg (docs/field.md#check-mode-on-a-minimal-host).
  - Changes nothing; supports check mode.
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Find out whether apt's Python bindings are there
  a800.vllm.apt_deps_facts:
  register: found
"""

RETURN = r"""
apt_deps:
  description: >-
    interpreter (this one), python_apt (bool), python_apt_interpreter (the one that imports it, or null), probed
    (the interpreters, in apt's order) and python_debian (bool).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.common.respawn import probe_interpreters_for_module  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.apt_preview import apt_deps  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.exit_json(changed=False, apt_deps=apt_deps(probe_interpreters_for_module))


if __name__ == "__main__":
    main()
