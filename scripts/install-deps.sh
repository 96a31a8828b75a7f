#!/usr/bin/env bash
# Installs the Debian packages cformers needs to build, test and benchmark.
# Idempotent: packages already present are left alone, and apt is not touched
# at all when nothing is missing.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config clang
  # engine libraries
  libyaml-dev libjansson-dev libzstd-dev zstd libopenmpi-dev openmpi-bin
  # the dashboard: an HTTP server library and Chart.js (served from where the package puts it)
  libmicrohttpd-dev libjs-chart.js
  # reference fixtures (tools/) and peers for benchmarks (bench/)
  python3 python3-numpy python3-torch python3-sentencepiece
  # the Python package's tests (python/tests, run by CTest) and `pip install --no-build-isolation ./python`
  python3-pytest python3-setuptools python3-wheel python3-venv
  libopenblas-dev libblis-dev libdnnl-dev
  # the demo's corpus on a machine without the shared assets (scripts/demo.sh)
  fortunes
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
