#!/usr/bin/env bash
# Run lanes of suites and scenarios (tests/testbed/run-scenarios.sh) on a machine put under pressure on purpose, to
# find the tests that pass only on an idle machine before CI does (`make test-under-load`):
#   - CPU: stress-ng burns every core (one worker per CPU, at the lanes' own priority);
#   - memory: stress-ng keeps UNDER_LOAD_VM_PCT of the memory allocated and touched, which pushes the page cache out;
#   - the page cache: dropped every UNDER_LOAD_DROP_S seconds (/proc/sys/vm/drop_caches: root), so that nothing
#     relies on files staying cached between two steps (the weights, the images' layers, Python's imports);
#   - the lanes side by side, as CI runs them.
#
#   make test-under-load                                     the default lanes (UNDER_LOAD_LANES)
#   make test-under-load UNDER_LOAD_LANES="make:unit real-engine"   lanes of your choice
#
# Everything is bounded: stress-ng and the drop loop end after UNDER_LOAD_MAX_S (default 5400 s) or when the lanes
# end, whichever is first. The lanes' results, with the failures that failed them, are run-scenarios.sh's.
set -uo pipefail
cd "$(dirname "$0")/../.."
max_s=${UNDER_LOAD_MAX_S:-5400}
vm_pct=${UNDER_LOAD_VM_PCT:-40}
drop_s=${UNDER_LOAD_DROP_S:-30}
read -r -a lanes <<<"${UNDER_LOAD_LANES:-make:unit,driver-upgrade real-engine make:contract}"
command -v stress-ng >/dev/null || { echo "stress-ng is missing: make deps installs it" >&2; exit 2; }
# The lanes need the Makefile's environment (the toolchain on PATH, ANSIBLE_HOME and the collections of this clone).
[ -n "${MAKELEVEL:-}" ] || { echo "run it as: make test-under-load [UNDER_LOAD_LANES='...']" >&2; exit 2; }

start=$(date +%s)
stress-ng --cpu "$(nproc)" --vm 1 --vm-bytes "${vm_pct}%" --vm-keep --timeout "${max_s}s" --quiet &
stress=$!
(
  deadline=$(( $(date +%s) + max_s ))
  drops=0
  while [ "$(date +%s)" -lt "$deadline" ]; do
    sleep "$drop_s"
    sync && echo 1 >/proc/sys/vm/drop_caches 2>/dev/null && drops=$((drops + 1))
    echo "$drops" >.ansible-home/under-load-drops
  done
) &
dropper=$!
trap 'kill "$stress" "$dropper" 2>/dev/null; wait 2>/dev/null' EXIT
mkdir -p .ansible-home
echo "under load: stress-ng --cpu $(nproc) --vm 1 --vm-bytes ${vm_pct}%, page cache dropped every ${drop_s} s;" \
  "lanes: ${lanes[*]}"
RUN_SCENARIOS_SUBSET=true tests/testbed/run-scenarios.sh "${lanes[@]}"
rc=$?
echo "under load: lanes ended with $rc after $(( $(date +%s) - start )) s; page cache dropped" \
  "$(cat .ansible-home/under-load-drops 2>/dev/null || echo 0) times; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
