#!/usr/bin/env bash
# Install the machine packages the test bed needs (Debian/Ubuntu) and start a Docker engine if none answers.
#   tests/testbed/install-deps.sh        everything the tests need (`make test`, .ci/run)
#   tests/testbed/install-deps.sh demo   only what `make demo` needs: the engine and what builds its images
# Re-running it installs nothing new.
set -euo pipefail
what=${1:-all}
case $what in all | demo) ;; *) echo "usage: $0 [all|demo]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
# The demo's images: the engine (docker.io, iptables), the base image (debootstrap), the stand-in apt repository
# (dpkg-dev, gnupg: its keys).
packages=(docker.io debootstrap iptables dpkg-dev gnupg)
# The tests' too: rsync, fio and vmtouch (the prewarm's references), ssh (an unreachable host in the API tests),
# stress-ng (make test-under-load).
[ "$what" = demo ] || packages+=(rsync fio vmtouch openssh-client stress-ng)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] || ! ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1; then
  $sudo apt-get update -qq  # build-images.sh also downloads Debian's busybox-static
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "$what" = demo ]; then
  docker info >/dev/null 2>&1 || $sudo "$here/ensure-dockerd.sh"
  exit 0
fi
# promtool, amtool and mtail for the monitoring tests (tests/unit/test_monitoring.py): the distribution's own binaries,
# unpacked from their packages into .tools/ without installing or starting the services on this machine.
tools="$here/../../.tools/monitoring/bin"
if [ ! -x "$tools/promtool" ] || [ ! -x "$tools/amtool" ] || [ ! -x "$tools/mtail" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq prometheus prometheus-alertmanager mtail 2>/dev/null)
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
  mkdir -p "$tools"
  cp "$tmp/root/usr/bin/promtool" "$tmp/root/usr/bin/amtool" "$tmp/root/usr/bin/mtail" "$tools/"
  rm -rf "$tmp"
fi
# nginx for the fleet gateway's tests (tests/unit/test_fleet.py: nginx -t on the rendered gateway, and the gateway
# run on loopback): the distribution's binary, the one the fleet role installs on a gateway host, unpacked the same
# way (Debian 12 and Ubuntu 24.04 ship it in the package nginx, Ubuntu 22.04 in nginx-core). Its libraries (libssl,
# libpcre2-8, zlib, libcrypt) are part of every base system.
nginx_bin="$here/../../.tools/nginx/bin"
if [ ! -x "$nginx_bin/nginx" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq nginx 2>/dev/null)
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
  if [ ! -x "$tmp/root/usr/sbin/nginx" ]; then
    (cd "$tmp" && apt-get download -qq nginx-core 2>/dev/null)
    for deb in "$tmp"/nginx-core_*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
  fi
  mkdir -p "$nginx_bin"
  cp "$tmp/root/usr/sbin/nginx" "$nginx_bin/"
  rm -rf "$tmp"
fi
if ! docker info >/dev/null 2>&1; then
  $sudo "$here/ensure-dockerd.sh"
fi
