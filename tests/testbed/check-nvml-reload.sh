#!/usr/bin/env bash
# End-to-end check of the test bed's emulation of "GPUs lost on systemctl daemon-reload" (docs/testbed.md), on a
# throw-away simulated host (test double): NVIDIA's notice https://github.com/NVIDIA/nvidia-docker/issues/1730.
#
#   tests/testbed/check-nvml-reload.sh [NAME]     (default NAME: nvml-test-1; KEEP=1 keeps the host afterwards)
#
# 1. builds what changed (build-images.sh), starts the sim host NAME as tests/testbed/tasks/sim_host_up.yml does
#    (volume NAME-docker, the stand-in apt repository at /srv/nvidia-standin), installs the stand-in driver and
#    toolkit (Debian 12 names), registers the runtime, reboots the host: the device nodes are back, no /dev/char links;
# 2. (a) without links: a --gpus container's `nvidia-smi -L` works, and fails after `systemctl daemon-reload` with
#    "Failed to initialize NVML: Unknown Error";
# 3. (b) after `nvidia-ctk system create-dev-char-symlinks --create-all`: a new container keeps its GPUs across a
#    daemon-reload; the old one stays broken (it must be re-created).
# Every wait has a timeout; the host and its volume are removed at the end, whatever happened. Exit 0: all as above.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=${1:-nvml-test-1}
volume="$name-docker"
repo=${TESTBED_WORK:-/var/tmp/a800-testbed}/apt-repo
sim=a800-testbed/sim-host:latest
probe=a800-testbed/probe:latest
failures=0

cleanup() {
  if [ "${KEEP:-0}" != 1 ]; then
    timeout 60 docker rm -f "$name" >/dev/null 2>&1 || true
    timeout 60 docker volume rm "$volume" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

step() { printf '\n=== %s\n' "$*"; }
in_host() { timeout "${T:-60}" docker exec "$name" "$@"; }
expect() {  # expect DESCRIPTION COMMAND...: prints the command's output; counts a failure when it fails
  local what=$1 rc=0
  shift
  "$@" || rc=$?
  if [ "$rc" = 0 ]; then echo "ok: $what"; else echo "FAILED: $what (rc $rc)"; failures=$((failures + 1)); fi
}
wait_boot() {  # systemd up and the inner engine answering, within 120 s
  local i
  for i in $(seq 1 60); do
    if timeout 10 docker exec "$name" sh -c 'systemctl is-system-running --wait >/dev/null 2>&1;
        docker info --format "{{.ServerVersion}}" >/dev/null 2>&1'; then
      return 0
    fi
    sleep 2
  done
  echo "the sim host $name did not come up in time" >&2
  return 1
}

step "images (build-images.sh rebuilds only what changed)"
timeout 900 "$here/build-images.sh"

step "start the sim host $name"
cleanup
timeout 60 docker run -d --name "$name" --hostname "$name" \
  --cap-add SYS_ADMIN --cap-add NET_ADMIN --security-opt seccomp=unconfined --cgroupns host \
  --tmpfs /run --tmpfs /run/lock -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
  -v "$volume:/var/lib/docker" -v "$repo:/srv/nvidia-standin:ro" \
  --stop-signal SIGRTMIN+3 --restart unless-stopped --label a800-testbed=sim-host \
  "$sim" /lib/systemd/systemd >/dev/null
echo '{}' | timeout 30 docker exec -i "$name" tee /etc/nvidia-standin/gpus.json >/dev/null
wait_boot
timeout 120 bash -c "docker save $probe | docker exec -i $name docker load"

step "install the stand-in driver and toolkit from /srv/nvidia-standin (Debian 12 names), register the runtime"
T=300 in_host bash -euc '
  list=/etc/apt/sources.list.d/nvml-test.list
  m=file:/srv/nvidia-standin key=/usr/share/keyrings/nvml-test-standin.gpg
  gpg --dearmor -o $key < /srv/nvidia-standin/libnvidia-container/gpgkey
  printf "%s\n" "deb [trusted=yes] $m/distro/bookworm ./" "deb [signed-by=$key] $m/compute/cuda/repos/debian12/x86_64/ /" \
    "deb [signed-by=$key] $m/libnvidia-container/stable/deb/amd64/ /" > $list
  apt_local="-o Dir::Etc::SourceList=$list -o Dir::Etc::SourceParts=- -q"
  export DEBIAN_FRONTEND=noninteractive
  apt-get $apt_local update >/dev/null
  apt-get $apt_local install -y "linux-headers-$(uname -r)" >/dev/null
  apt-get $apt_local install -y nvidia-kernel-open-dkms nvidia-driver-cuda nvidia-container-toolkit >/dev/null
  nvidia-ctk runtime configure --runtime=docker
  systemctl restart docker'
wait_boot

step "reboot the sim host: the stand-in driver's device nodes come back, without /dev/char links"
started=$(timeout 30 docker inspect -f '{{.State.StartedAt}}' "$name")
in_host systemctl reboot 2>/dev/null || true  # ("Failed to connect to bus": no logind in the sim host; it reboots)
for _ in $(seq 1 30); do
  [ "$(timeout 30 docker inspect -f '{{.State.StartedAt}}' "$name")" != "$started" ] && break
  sleep 1
done
wait_boot
expect "the sim host rebooted (its container restarted)" \
  test "$(timeout 30 docker inspect -f '{{.State.StartedAt}}' "$name")" != "$started"
expect "the driver not used since the boot (the nodes are the boot unit's)" \
  in_host test ! -e /run/nvidia-standin/loaded-driver
expect "device nodes after the reboot" in_host sh -c 'ls -l /dev/nvidia*'
expect "no /dev/char links after the reboot" in_host sh -c '! ls /dev/char/195:* /dev/char/510:* 2>/dev/null'

step "(a) without /dev/char links: a --gpus container loses its GPUs on daemon-reload"
old=$(T=60 in_host docker run -d --gpus all "$probe" busybox sleep 600)
echo "container ${old:0:12}"
expect "nvidia-smi -L in it before the reload" in_host docker exec "$old" nvidia-smi -L
in_host sh -c "cat /run/nvidia-standin/containers/$old.json | grep -E '\"(protected|rootfs)\"'"
expect "systemctl daemon-reload" in_host systemctl daemon-reload
out=$(in_host docker exec "$old" nvidia-smi -L 2>&1) && rc=0 || rc=$?
printf '%s\n(rc %s)\n' "$out" "$rc"
expect "nvidia-smi -L in it after the reload fails with the NVML error" \
  test "$out" = "Failed to initialize NVML: Unknown Error" -a "$rc" != 0

step "(b) nvidia-ctk system create-dev-char-symlinks --create-all, then a new container keeps its GPUs"
expect "create-dev-char-symlinks" in_host nvidia-ctk system create-dev-char-symlinks --create-all
in_host sh -c 'ls -l /dev/char/ | grep nvidia'
new=$(T=60 in_host docker run -d --gpus all "$probe" busybox sleep 600)
echo "container ${new:0:12}"
in_host sh -c "cat /run/nvidia-standin/containers/$new.json | grep -E '\"(protected|rootfs)\"'"
expect "nvidia-smi -L in it before the reload" in_host docker exec "$new" nvidia-smi -L
expect "systemctl daemon-reload" in_host systemctl daemon-reload
expect "nvidia-smi -L in it after the reload" in_host docker exec "$new" nvidia-smi -L
expect "the container created before the links stays broken" \
  sh -c "! timeout 30 docker exec $name docker exec $old nvidia-smi -L"
expect "a removed container's record is dropped at the next reload" in_host sh -c \
  "docker rm -f $old >/dev/null && systemctl daemon-reload && test ! -e /run/nvidia-standin/containers/$old.json"

step "result"
if [ "$failures" = 0 ]; then echo "PASS: GPUs lost on daemon-reload without /dev/char links, kept with them"; exit 0; fi
echo "FAIL: $failures check(s) failed"
exit 1
