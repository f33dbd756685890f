#!/usr/bin/env bash
# Start a Docker engine on this machine when none answers (CI and fresh machines have only the client).
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
command -v dockerd >/dev/null || { echo "dockerd missing: apt-get install docker.io" >&2; exit 1; }
log=${DOCKERD_LOG:-/var/log/dockerd-testbed.log}
echo "starting dockerd (log: $log)"
setsid dockerd >"$log" 2>&1 < /dev/null &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { echo "dockerd is up"; exit 0; }
  sleep 1
done
echo "dockerd did not answer within 60 s; last log lines:" >&2
tail -n 20 "$log" >&2
exit 1
