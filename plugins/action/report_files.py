"""Action: write a host's report files on the controller, in one call, without a module run.

The reports (verify.json, report.md) are evidence written where Ansible runs. `copy` and `template` delegated to
localhost ran a module through a local connection for each file, and `file` once more for the directory: three
Python processes, about a second each on a loaded 2-CPU controller, in every run of every host. Here the action
itself writes them (docs/testbed.md#controller-reads has the same reasoning for reads).

A file whose content is unchanged is left alone (its mtime too); a changed one is replaced atomically (a temporary
file in the same directory, then os.replace), so a reader never sees half a report. Check mode writes nothing: the
last reports stay as they are. The result is never changed: a report is not a change to the host; `written` lists
the files that were (re)written.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.action import ActionBase
from ansible_collections.a800.vllm.plugins.module_utils.atomic_file import replace_if_changed


def write_reports(directory: str, files: dict[str, str], mode: int = 0o644) -> list[str]:
    """Write each name -> content under directory (created, 0755); return the paths whose content changed."""
    os.makedirs(directory, mode=0o755, exist_ok=True)
    written = []
    for name, content in files.items():
        if not name or os.sep in name or name in (".", ".."):
            raise AnsibleActionFail(f"report_files: {name!r} is not a file name (files are written in dir only)")
        path = os.path.join(directory, name)
        if replace_if_changed(path, to_bytes(content), mode):
            written.append(path)
    return written


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("dir", "files"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(
            argument_spec={
                "dir": {"type": "path", "required": True},
                "files": {"type": "dict", "required": True},
            }
        )
        files = {str(name): str(content) for name, content in args["files"].items()}
        result["changed"] = False
        result["dir"] = args["dir"]
        if self._task.check_mode:
            result["written"] = []
            result["msg"] = "check mode: the reports are left as they are"
            return result
        result["written"] = write_reports(args["dir"], files)
        return result
