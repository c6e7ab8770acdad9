#!/usr/bin/env bash
# Quick start, first command: installs what is missing, builds the main
# example in build/release and runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
source scripts/env.sh
configure_build release -DCMAKE_BUILD_TYPE=Release -DCOSESSION_NATIVE=ON
cmake --build build/release --target hello
./build/release/examples/hello "$@"
