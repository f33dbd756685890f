#!/bin/sh
# Check every file of this offline bundle against MANIFEST.sha256 (sha256sum format), before anything is used; the
# same check as roles/bundle/tasks/verify.yml, for a site host that has no Ansible yet. Prints each file that is
# missing or does not match, and exits non-zero then.
set -eu
cd "$(dirname "$0")"
if sha256sum --check --strict --quiet MANIFEST.sha256; then
  echo "bundle verified: $(wc -l < MANIFEST.sha256) files match MANIFEST.sha256"
else
  echo "bundle NOT verified: the files above are missing or differ from MANIFEST.sha256" >&2
  exit 1
fi
