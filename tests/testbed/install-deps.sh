#!/usr/bin/env bash
# Install the machine packages the test bed needs (Debian/Ubuntu) and start a Docker engine if none answers.
# Used by `make demo`, `make test` and .ci/run; re-running it installs nothing new.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
packages=(docker.io debootstrap rsync iptables dpkg-dev fio vmtouch gnupg openssh-client)  # gnupg: stand-in repository keys; ssh: an unreachable host in the API tests
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
if ! docker info >/dev/null 2>&1; then
  $sudo "$here/ensure-dockerd.sh"
fi
