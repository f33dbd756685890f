#!/usr/bin/env bash
# Run Molecule scenarios (and make targets) in lanes: the items of one lane one after the other, the lanes side by
# side.
#
#   tests/testbed/run-scenarios.sh serve,preflight-negative airgap,field default,driver-upgrade,real-engine
#   tests/testbed/run-scenarios.sh field serve,driver-upgrade make:unit,make:contract,default ...
#
# An item is a scenario of molecule/ (`molecule test -s NAME`) or `make:TARGET` (`make TARGET`, e.g. the pytest
# suites, which wait on servers much of the time and fill the CPU the scenarios leave idle). Every scenario of
# molecule/ must be named exactly once, so that none is left out of CI by accident; a lane goes on after a failed
# item, so that one run shows every failure. Scenarios never share a host name (each names its own
# platforms), so lanes do not collide. Each lane writes its log to .ansible-home/molecule-lane-N.log; at the end
# every log is printed, lane by lane, then one line per item with its result and duration. Exits 1 when any item
# failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .ansible-home
summary=.ansible-home/molecule-summary
: >"$summary"

lane() {  # lane number, items (comma-separated)
  local n=$1 item start ok rc=0
  for item in ${2//,/ }; do
    start=$(date +%s)
    case $item in
      make:*) make --no-print-directory "${item#make:}" && ok=PASS || ok=FAIL ;;
      *) molecule test -s "$item" && ok=PASS || ok=FAIL ;;
    esac
    echo "$ok  $item  $(( $(date +%s) - start )) s  (lane $n)" >>"$summary"
    [ "$ok" = PASS ] || rc=1
  done
  return $rc
}

# Every scenario of molecule/ in exactly one lane: a new scenario cannot be left out of CI by accident.
items=$(echo "$@" | tr ', ' '\n\n' | grep .)
given=$(echo "$items" | grep -v '^make:' | sort)
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
echo "----- lanes -----"
cat "$summary"
want=$(echo "$items" | grep -c .)
got=$(grep -c . "$summary")
[ "$want" = "$got" ] || { echo "ran $got of $want items"; rc=1; }
exit $rc
