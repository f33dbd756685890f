#!/bin/sh
# a800-acs-disable (installed by the role host_tuning as /usr/local/sbin/a800-acs-disable, run at boot by
# a800-acs-disable.service before docker.service): turns PCIe ACS off on every device that has the capability, with
# the loop of NCCL's troubleshooting guide, section "PCI Access Control Services (ACS)"
# (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html; docs/field.md#pcie-acs-and-iommu):
# a device whose ACS control register cannot be read (`setpci ... ECAP_ACS+0x6.w`) has no ACS capability and is
# skipped; the others get the register written to 0000. Differences from the guide: `lspci -D`, so that the
# addresses carry their PCI domain (hosts with more than one), no sudo (systemd runs it as root), each write read
# back, and a summary line and a non-zero exit when a write failed (the unit then shows as failed). The read-back
# because setpci does not check its writes: a refused one (a locked-down kernel refuses every write to config space:
# docs/field.md#kernel-lockdown-and-setpci) prints pciutils' "sysfs_write: write failed: Operation not permitted"
# and setpci still exits 0.
# Proof that it worked is the bits read again, `lspci -vvv` (ACSCtl: ReqRedir- CmpltRedir-); the role does that.
set -u

for tool in lspci setpci; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "a800-acs-disable: $tool not found (install pciutils)" >&2
        exit 1
    fi
done

cleared=0
failed=0
for BDF in $(lspci -D -d "*:*:*" | awk '{print $1}'); do
    # skip if it doesn't support ACS
    if ! setpci -v -s "$BDF" ECAP_ACS+0x6.w >/dev/null 2>&1; then
        continue
    fi
    setpci -v -s "$BDF" ECAP_ACS+0x6.w=0000
    wrote=$?
    now=$(setpci -s "$BDF" ECAP_ACS+0x6.w 2>/dev/null)
    if [ "$wrote" -eq 0 ] && [ "$now" = 0000 ]; then
        cleared=$((cleared + 1))
    else
        echo "a800-acs-disable: could not write the ACS control register of $BDF (it reads '$now' after the" \
            "write; a locked-down kernel refuses every write: cat /sys/kernel/security/lockdown)" >&2
        failed=$((failed + 1))
    fi
done

echo "a800-acs-disable: ACS control register cleared on $cleared device(s), $failed failed"
[ "$failed" -eq 0 ]
