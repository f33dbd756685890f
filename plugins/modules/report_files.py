"""Documentation of the report_files action (plugins/action/report_files.py): it runs on the controller only."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: report_files
short_description: Write report files on the controller in one call
description:
  - Writes each entry of O(files) into O(dir) on the controller (created with mode 0755), mode 0644, replaced
    atomically; a file whose content is unchanged is left alone.
  - Check mode writes nothing. The result is never changed (a report is not a change to the host); RV(written)
    lists the files that were written.
  - An action plugin only: nothing runs on the host, no module process on the controller.
options:
  dir:
    description: The controller directory of the files.
    type: path
    required: true
  files:
    description: File name (no directory part) to content.
    type: dict
    required: true
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Write the reports
  a800.vllm.report_files:
    dir: "{{ verify_reports_dir }}/{{ inventory_hostname }}"
    files:
      verify.json: "{{ verify_result | to_nice_json }}\n"
      report.md: "{{ lookup('ansible.builtin.template', 'report.md.j2') }}"
"""

RETURN = r"""
dir:
  description: The directory written to.
  returned: always
  type: str
written:
  description: The paths whose content changed and were written (none in check mode).
  returned: always
  type: list
  elements: str
"""
