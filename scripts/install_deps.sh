#!/usr/bin/env bash
# Installs the Debian 12 packages cosession builds with; does nothing when
# they are all present. Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  g++ cmake ninja-build ccache      # toolchain; ccache makes rebuilds cheap
  libboost1.81-dev                  # Asio with per-operation cancellation
  libeigen3-dev                     # kernels' linear algebra
  libabsl-dev                       # Status, containers, synchronisation
  libgtest-dev libgmock-dev         # tests
  libbenchmark-dev                  # cosession_bench
  nlohmann-json3-dev                # safetensors headers, Chrome traces
  libisal-dev                       # gunzip of CSV input (ISA-L: 6x zlib's speed)
  zlib1g-dev                        # tests write gzip files with zlib
  libtcmalloc-minimal4              # the programs' malloc (CMakeLists.txt says why)
  clang-19 libclang-rt-19-dev       # libFuzzer targets (fuzz/)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "Installing: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
  --no-install-recommends "${missing[@]}"
