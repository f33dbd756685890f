#!/usr/bin/env bash
# Put this machine back to the state of a fresh one, as far as this project is concerned, so that the next run
# proves it depends on nothing an earlier run left behind:
#   - the test bed's containers (simulated hosts, gateway stand-ins) and their inner Docker volumes;
#   - the test bed's images: a800-testbed/* and every image built by build-images.sh (label testbed.inputs, e.g.
#     the vLLM test double tagged vllm/vllm-openai:v0.26.0), with their dangling layers;
#   - /var/tmp/a800-* (the test bed's work directory: rootfs, stand-in apt repository, test weights);
#   - in this clone: the virtual environments, .ansible-home (Molecule state, fact cache, collections), reports/,
#     pytest's and ruff's caches.
# What a fresh machine also lacks and this leaves alone: the apt packages (docker.io, ...), the running Docker
# engine, pip's download cache. Used by `make fresh` and `.ci/run` (CI=true or --fresh).
set -euo pipefail
cd "$(dirname "$0")/../.."

# An engine that is installed but stopped (CI ends the session's processes) still holds the images on disk, and
# brings back the simulated hosts (restart policy unless-stopped) when it starts: start it to clean it.
if ! docker info >/dev/null 2>&1 && command -v dockerd >/dev/null; then
  tests/testbed/ensure-dockerd.sh
fi
if docker info >/dev/null 2>&1; then
  containers=$( { docker ps -aq --filter label=a800-testbed; docker ps -aq --filter name='^a800-'; } | sort -u)
  if [ -n "$containers" ]; then
    echo "removing $(wc -w <<<"$containers") test-bed container(s)"
    # shellcheck disable=SC2086  # one ID a word
    docker rm -f $containers >/dev/null
  fi
  volumes=$(docker volume ls -q | grep -E '^a800-.*-docker$' || true)
  if [ -n "$volumes" ]; then
    echo "removing $(wc -w <<<"$volumes") inner Docker volume(s)"
    # shellcheck disable=SC2086
    docker volume rm -f $volumes >/dev/null
  fi
  test_images() {
    { docker images --filter label=testbed.inputs --format '{{.Repository}}:{{.Tag}}'
      docker images --format '{{.Repository}}:{{.Tag}}' 'a800-testbed/*'; } | { grep -v '<none>' || true; } | sort -u
  }
  images=$(test_images)
  if [ -n "$images" ]; then
    echo "removing $(wc -w <<<"$images") test-bed image(s)"
    # an image built FROM another (the double's patched image, the sim host on the base) goes first: a few passes
    for _ in 1 2 3 4; do
      for ref in $(test_images); do docker rmi "$ref" >/dev/null 2>&1 || true; done
    done
    left=$(test_images)
    if [ -n "$left" ]; then echo "could not remove: $left" >&2; exit 1; fi
  fi
  docker image prune -f >/dev/null
fi

for dir in /var/tmp/a800-*; do
  [ -e "$dir" ] || continue
  echo "removing $dir"
  rm -rf "$dir"
done
rm -rf .venv .venv-vllm .ansible-home reports .pytest_cache .ruff_cache
echo "fresh: no test-bed containers, images or work directories; no virtual environments in $(pwd)"
