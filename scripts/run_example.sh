#!/usr/bin/env bash
# Quick start, first command: installs what is missing, builds the main
# program, cosession_train, in build/release and runs it (arguments are
# passed on, e.g. --max_steps=4000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
source scripts/env.sh
configure_build release -DCMAKE_BUILD_TYPE=Release -DCOSESSION_NATIVE=ON
cmake --build build/release --target cosession_train
./build/release/examples/cosession_train "$@"
