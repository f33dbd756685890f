"""Load this collection's filter plugins into the controller once, before the first task forks a worker."""

from __future__ import annotations

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader

DOCUMENTATION = r"""
name: controller_preload
type: aggregate
short_description: Load the collection's filters in the controller, so that no task's worker imports them again
description:
  - ansible-core runs each task in a worker forked from the controller. A filter called by its FQCN
    (C(a800.vllm.preflight_failures)) makes the loader import every file of the collection's C(plugins/filter) in that
    worker, and the worker exits with the task, so each task that used one paid for all the imports again.
  - This callback makes the same lookup once in the controller, when the run starts; every worker forked after it
    inherits the loaded files.
  - It prints nothing and changes no result. Without it a run is the same, only slower.
requirements:
  - enabled in ansible.cfg's C(callbacks_enabled)
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "a800.vllm.controller_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook) -> None:
        # Any of the collection's filters: the loader imports all the files of plugins/filter to find it.
        filter_loader.get("a800.vllm.preflight_failures")
