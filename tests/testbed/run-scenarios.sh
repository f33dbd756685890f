#!/usr/bin/env bash
# Run Molecule scenarios (and make targets) side by side, in one of two ways:
#
#   tests/testbed/run-scenarios.sh --workers 4 +serve real-engine field make:unit ...
#       a queue: N workers, each takes the next item when its last one ends (CI). Give the items longest first:
#       the longest start first and the short ones fill the gaps, so that the workers finish together on any
#       machine, whatever its speed for one kind of item (longest-processing-time-first scheduling).
#   tests/testbed/run-scenarios.sh serve,preflight-negative airgap,field default,driver-upgrade,real-engine
#       lanes: the items of one lane one after the other, the lanes side by side.
#
# An item is a scenario of molecule/ (`molecule test -s NAME`) or `make:TARGET` (`make TARGET`, e.g. the pytest
# suites, which wait on servers much of the time and fill the CPU the scenarios leave idle). Every scenario of
# molecule/ must be named exactly once, so that none is left out of CI by accident; a worker or lane goes on after
# a failed item, so that one run shows every failure. Scenarios never share a host name (each names its own
# platforms), so items do not collide. Each worker or lane writes its log to .ansible-home/molecule-lane-N.log; at
# the end every log is printed, then one line per item with its result and duration, then what failed the items
# that failed. Exits 1 when any item failed. Each item's own log: .ansible-home/item-NAME.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .ansible-home
summary=.ansible-home/molecule-summary
failed_logs=.ansible-home/failed-item-logs
: >"$summary"
: >"$failed_logs"

workers=0
if [ "${1:-}" = --workers ]; then
  workers=${2:?--workers needs a number}
  shift 2
fi

# An item (or, in lanes, a lane) written +NAME is critical (the longest): when there is one, every other item runs
# at a lower CPU priority (nice 10, inherited by its ansible-playbook, pytest and vLLM processes; the containers' own
# processes keep theirs), so that the longest is not the last to finish on a saturated machine.
priority=false
for spec in "$@"; do [ "${spec#+}" = "$spec" ] || priority=true; done

run_item() {  # item, critical (true|false), worker or lane label: runs it, logs it, records it; 1 when it failed
  local item=$1 critical=$2 label=$3 start ok log nice=()
  if [ "$priority" = true ] && [ "$critical" = false ]; then nice=(nice -n 10); fi
  start=$(date +%s)
  log=".ansible-home/item-${item#make:}.log"
  case $item in
    make:*) "${nice[@]}" make --no-print-directory "${item#make:}" >"$log" 2>&1 && ok=PASS || ok=FAIL ;;
    *) "${nice[@]}" molecule test -s "$item" >"$log" 2>&1 && ok=PASS || ok=FAIL ;;
  esac
  cat "$log"
  echo "$ok  $item  $(( $(date +%s) - start )) s  ($label)" >>"$summary"
  [ "$ok" = PASS ] || { echo "$log" >>"$failed_logs"; return 1; }
}

lane() {  # lane number, items (comma-separated; a leading + marks the critical lane)
  local n=$1 item critical=false rc=0
  [ "${2#+}" = "$2" ] || critical=true
  for item in $(echo "${2#+}" | tr ',' ' '); do
    run_item "$item" "$critical" "lane $n" || rc=1
  done
  return $rc
}

queue=.ansible-home/queue
take() {  # the next item of the queue, or nothing when it is empty (one taker at a time)
  (
    flock 9
    head -n 1 "$queue"
    sed -i 1d "$queue"
  ) 9>"$queue.lock"
}

worker() {  # worker number: takes items until the queue is empty
  local n=$1 item rc=0
  while item=$(take) && [ -n "$item" ]; do
    if [ "${item#+}" = "$item" ]; then run_item "$item" false "worker $n" || rc=1
    else run_item "${item#+}" true "worker $n" || rc=1; fi
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

# The machine's CPU time over the lanes (/proc/stat, every CPU): busy well under 100 % means the items wait on
# something other than the CPU (servers starting, alerts' windows) and more workers would fill it.
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
read -r busy0 idle0 < <(cpu_ticks)
pids=()
n=0
if [ "$workers" -gt 0 ]; then
  echo "$@" | tr ', ' '\n\n' | grep . >"$queue"
  for n in $(seq 1 "$workers"); do
    worker "$n" >".ansible-home/molecule-lane-$n.log" 2>&1 &
    pids+=($!)
  done
else
  for spec in "$@"; do
    n=$((n + 1))
    lane "$n" "$spec" >".ansible-home/molecule-lane-$n.log" 2>&1 &
    pids+=($!)
  done
fi
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
for i in $(seq 1 "$n"); do
  if [ "$workers" -gt 0 ]; then echo "----- worker $i -----"; else echo "----- lane $i: ${!i} -----"; fi
  cat ".ansible-home/molecule-lane-$i.log"
done
echo "----- lanes -----"
cat "$summary"
read -r busy1 idle1 < <(cpu_ticks)
echo "CPU over the lanes: $(( 100 * (busy1 - busy0) / (busy1 - busy0 + idle1 - idle0 + 1) )) % busy on $(nproc) CPUs" \
  | tee -a .ansible-home/phase-times
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
