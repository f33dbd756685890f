#!/usr/bin/env bash
# Record the preflight and the host phase's preview (--check --diff) on a real GPU host, read-only, as localhost in
# a800_servers with the production group_vars (inventories/prod), so that the tests hold the parsers and the
# checks to what a real host prints (tests/fixtures/hosts/<host>/).
#
#   tests/testbed/record-real-host.sh OUTDIR [TOOLDIR]
#
# TOOLDIR (default .device) holds what a bare host lacks: whl/ (the pinned ansible-core and its compiled
# dependencies for the host's Python) and collections/ (community.docker, community.general, ansible.posix), made
# on a machine that has them (the toolchain's .venv). Nothing is installed on the host itself: the wheels go to
# /tmp/a800-record-site. Each run's output, exit code and wall time are written to OUTDIR.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: $0 OUTDIR [TOOLDIR]}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tools=$(cd "${2:-.device}" 2>/dev/null && pwd) || tools=""
site=/tmp/a800-record-site
if [ -n "$tools" ] && [ -d "$tools/whl" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$tools"/whl/*.whl \
    || exit 1
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} PATH=$site/bin:$PATH
fi
inventory=$(mktemp -d)
ln -s "$PWD/inventories/prod/group_vars" "$inventory/group_vars"
cat >"$inventory/hosts.yml" <<EOF
all:
  children:
    a800_servers:
      hosts:
        localhost:
          ansible_connection: local
          ansible_python_interpreter: $(command -v python3)
EOF
export ANSIBLE_HOME=$PWD/.ansible-home ANSIBLE_COLLECTIONS_PATH=$PWD/collections${tools:+:$tools/collections} \
  ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 ANSIBLE_INVENTORY=$inventory/hosts.yml
{
  echo "recorded $(date -u +%FT%TZ) on $(hostname)"
  grep PRETTY_NAME /etc/os-release
  python3 --version
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -8
  python3 -c 'import apt_pkg' 2>&1 | tail -1 || true
  command -v docker || echo "no docker"
  ansible-playbook --version | head -1
} >"$out/host.txt" 2>&1
record() {  # name, then the ansible-playbook arguments
  local name=$1 start rc
  shift
  start=$(date +%s%N)
  ansible-playbook "$@" >"$out/$name.txt" 2>&1
  rc=$?
  tenths=$(( ($(date +%s%N) - start) / 100000000 ))
  echo "$name rc=$rc wall_s=$((tenths / 10)).$((tenths % 10))" | tee -a "$out/runs.txt"
}
record preflight playbooks/preflight.yml
record host-check-diff playbooks/host.yml --check --diff
rm -rf "$inventory"
