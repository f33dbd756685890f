"""Filters: turning PCIe ACS redirection off (role host_tuning), judging the bits read again, and whether the chosen
method can work under the kernel's lockdown.

The logic lives in plugins/module_utils/pcie_acs.py (pure Python, unit-tested), imported through the collection.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils import pcie_acs


def acs_kernel_arg(report: dict[str, Any]) -> str:
    """`pci=disable_acs_redir=<bdf>;...` for a pcie_acs_facts report: its bridges with redirection on and the
    devices the running command line already lists; '' when there are none."""
    return pcie_acs.disable_acs_redir_arg(
        report.get("redirect_bridges") or [], (report.get("cmdline") or {}).get("disable_acs_redir")
    )


def grub_escape(arg: str) -> str:
    """A kernel argument as it must be written inside GRUB_CMDLINE_LINUX_DEFAULT="..." (`;` as `\\;`)."""
    return pcie_acs.grub_escape(arg)


def acs_verdict(report: dict[str, Any], method: str, applied: bool = True) -> dict[str, Any]:
    """The check record of the ACS bits read again after host_tuning_acs_method was applied."""
    return pcie_acs.acs_verdict(report, method, applied=applied)


def acs_lockdown_check(
    lockdown_text: str | None, disable_acs: Any, method: str, source: str = pcie_acs.LOCKDOWN_FILE
) -> dict[str, Any]:
    """The check record of host_tuning_acs_method against the kernel's lockdown (the text of `source`, None when
    there is no such file): setpci fails on a locked-down kernel."""
    return pcie_acs.acs_lockdown_check(lockdown_text, disable_acs, method, source)


class FilterModule:
    def filters(self) -> dict:
        return {
            "acs_kernel_arg": acs_kernel_arg,
            "grub_escape": grub_escape,
            "acs_verdict": acs_verdict,
            "acs_lockdown_check": acs_lockdown_check,
        }
