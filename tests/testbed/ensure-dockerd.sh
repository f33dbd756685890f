#!/usr/bin/env bash
# Start a Docker engine on this machine when none answers (CI and fresh machines have only the client).
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
command -v dockerd >/dev/null || { echo "dockerd missing: apt-get install docker.io" >&2; exit 1; }
log=${DOCKERD_LOG:-/var/log/dockerd-testbed.log}
echo "starting dockerd (log: $log)"
# Only stdin, stdout and stderr go to the daemon: a descriptor the caller holds open (build-images.sh's lock on fd 9)
# would stay held for as long as dockerd runs, and the next build would wait on it for good.
(
  for fd in /proc/self/fd/*; do
    fd=${fd##*/}
    if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
  exec setsid dockerd >"$log" 2>&1 < /dev/null
) &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { echo "dockerd is up"; exit 0; }
  sleep 1
done
echo "dockerd did not answer within 60 s; last log lines:" >&2
tail -n 20 "$log" >&2
exit 1
