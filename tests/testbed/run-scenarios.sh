#!/usr/bin/env bash
# Run Molecule scenarios (and make targets) in lanes: the items of one lane one after the other, the lanes side by
# side.
#
#   tests/testbed/run-scenarios.sh serve,preflight-negative airgap,field default,driver-upgrade,real-engine
#   tests/testbed/run-scenarios.sh field +serve,driver-upgrade make:unit,make:contract,default ...
#
# An item is a scenario of molecule/ (`molecule test -s NAME`) or `make:TARGET` (`make TARGET`, e.g. the pytest
# suites, which wait on servers much of the time and fill the CPU the scenarios leave idle). Every scenario of
# molecule/ must be named exactly once, so that none is left out of CI by accident; a lane goes on after a failed
# item, so that one run shows every failure. Scenarios never share a host name (each names its own
# platforms), so lanes do not collide. Each lane writes its log to .ansible-home/molecule-lane-N.log; at the end
# every log is printed, lane by lane, then one line per item with its result and duration, then what failed the
# items that failed. Exits 1 when any item failed. Each item's own log: .ansible-home/item-NAME.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .ansible-home
summary=.ansible-home/molecule-summary
failed_logs=.ansible-home/failed-item-logs
: >"$summary"
: >"$failed_logs"

# A lane written +ITEMS is the critical one (the longest): when there is one, the other lanes run at a lower CPU
# priority (nice 10, inherited by their ansible-playbook, pytest and vLLM processes; the containers' own processes
# keep theirs), so that the longest lane is not the last to finish on a saturated machine.
priority=false
for spec in "$@"; do [ "${spec#+}" = "$spec" ] || priority=true; done

lane() {  # lane number, items (comma-separated; a leading + marks the critical lane)
  local n=$1 item start ok rc=0
  if [ "$priority" = true ] && [ "${2#+}" = "$2" ]; then renice -n 10 -p "$BASHPID" >/dev/null; fi
  for item in $(echo "${2#+}" | tr ',' ' '); do
    start=$(date +%s)
    log=".ansible-home/item-${item#make:}.log"
    case $item in
      make:*) make --no-print-directory "${item#make:}" >"$log" 2>&1 && ok=PASS || ok=FAIL ;;
      *) molecule test -s "$item" >"$log" 2>&1 && ok=PASS || ok=FAIL ;;
    esac
    cat "$log"
    echo "$ok  $item  $(( $(date +%s) - start )) s  (lane $n)" >>"$summary"
    [ "$ok" = PASS ] || { rc=1; echo "$log" >>"$failed_logs"; }
  done
  return $rc
}

# Every scenario of molecule/ in exactly one lane: a new scenario cannot be left out of CI by accident.
items=$(echo "$@" | tr -d '+' | tr ', ' '\n\n' | grep .)
given=$(echo "$items" | grep -v '^make:' | sort)
present=$(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | xargs -n1 basename | sort)
# RUN_SCENARIOS_SUBSET=true (tests/testbed/under-load.sh) runs only the items named, each scenario at most once.
if [ "${RUN_SCENARIOS_SUBSET:-false}" = true ]; then
  if [ -n "$(echo "$given" | uniq -d)" ] || [ -n "$(comm -23 <(echo "$given") <(echo "$present"))" ]; then
    echo "a scenario named twice or not in molecule/: $(echo "$given" | tr '\n' ' ')" >&2
    exit 2
  fi
elif [ "$given" != "$present" ]; then
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
# When an item failed, its failures themselves, last, so that the tail of a long log (what CI keeps) names them: only
# the items that failed, and of those only what failed them (not the rescued or expected failures a passing
# scenario prints; tests/testbed/lane_failures.py).
if [ -s "$failed_logs" ]; then
  echo "----- failures -----"
  # shellcheck disable=SC2046  # one path a line, no spaces
  python3 tests/testbed/lane_failures.py $(cat "$failed_logs")
fi
want=$(echo "$items" | grep -c .)
got=$(grep -c . "$summary")
[ "$want" = "$got" ] || { echo "ran $got of $want items"; rc=1; }
exit $rc
