#!/usr/bin/env bash
# Run Molecule scenarios in lanes: the scenarios of one lane one after the other, the lanes side by side.
#
#   tests/testbed/run-scenarios.sh serve,preflight-negative airgap,field default,driver-upgrade,real-engine
#
# Scenarios never share a host name (each names its own platforms), so lanes do not collide. Each lane writes its
# log to .ansible-home/molecule-lane-N.log; at the end every log is printed, lane by lane, then one line per scenario
# with its result and duration. Exits 1 when any scenario failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .ansible-home
summary=.ansible-home/molecule-summary
: >"$summary"

lane() {  # lane number, scenarios (comma-separated)
  local n=$1 s start rc=0
  for s in ${2//,/ }; do
    start=$(date +%s)
    if molecule test -s "$s"; then
      echo "PASS  $s  $(( $(date +%s) - start )) s  (lane $n)" >>"$summary"
    else
      rc=1
      echo "FAIL  $s  $(( $(date +%s) - start )) s  (lane $n)" >>"$summary"
    fi
  done
  return $rc
}

# Every scenario of molecule/ in exactly one lane: a new scenario cannot be left out of CI by accident.
given=$(echo "$@" | tr ', ' '\n\n' | grep . | sort)
present=$(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | xargs -n1 basename | sort)
if [ "$given" != "$present" ]; then
  echo "the lanes must name every scenario of molecule/ once:" >&2
  diff <(echo "$given") <(echo "$present") >&2
  exit 2
fi

pids=()
n=0
for spec in "$@"; do
  n=$((n + 1))
  lane "$n" "$spec" >".ansible-home/molecule-lane-$n.log" 2>&1 &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
for i in $(seq 1 "$n"); do
  echo "----- lane $i: ${!i} -----"
  cat ".ansible-home/molecule-lane-$i.log"
done
echo "----- scenarios -----"
cat "$summary"
want=$(echo "$given" | grep -c .)
got=$(grep -c . "$summary")
[ "$want" = "$got" ] || { echo "ran $got of $want scenarios"; rc=1; }
exit $rc
