#!/usr/bin/env bash
# Quick start, second command: installs what is missing, then builds and runs
# the whole test suite in each configuration given (default: all three, as
# CI does):
#   release  -O3, plus the benchmarks (smoke-run) and examples
#   asan     AddressSanitizer + UndefinedBehaviorSanitizer
#   tsan     ThreadSanitizer
#   fuzz     the libFuzzer targets (clang-19, ASan+UBSan), each run for
#            FUZZ_SECONDS (default 60) from its seed corpus
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
source scripts/env.sh
# What the build cannot see of the layering (graph/ without Asio, ...).
bash scripts/check_layers.sh

configs=("$@")
if ((${#configs[@]} == 0)); then configs=(release asan tsan fuzz); fi

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_init_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp"

# -g1 (line tables): the sanitizers' reports name files and lines, and the
# builds are faster and their objects smaller than with full debug info.
sanitizer_flags=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1"
                 -DCOSESSION_BUILD_BENCHMARKS=OFF -DCOSESSION_BUILD_EXAMPLES=OFF)
passed=0
fuzzed=0
for config in "${configs[@]}"; do
  echo "=== $config ==="
  case "$config" in
    release) configure_build release -DCMAKE_BUILD_TYPE=Release -DCOSESSION_NATIVE=ON ;;
    asan) configure_build asan "${sanitizer_flags[@]}" -DCOSESSION_SANITIZE=address ;;
    tsan) configure_build tsan "${sanitizer_flags[@]}" -DCOSESSION_SANITIZE=thread ;;
    fuzz) CXX=clang++-19 configure_build fuzz "${sanitizer_flags[@]}" \
            -DCOSESSION_SANITIZE=address -DCOSESSION_BUILD_FUZZERS=ON \
            -DCOSESSION_BUILD_TESTS=OFF ;;
    *) echo "unknown configuration '$config' (release, asan, tsan)" >&2; exit 2 ;;
  esac
  start=$SECONDS
  if [ "$config" = fuzz ]; then
    cmake --build build/fuzz --target cosession_fuzzers  # only the fuzzed readers
  else
    cmake --build "build/$config"
  fi
  echo "built $config in $((SECONDS - start)) s"
  if [ "$config" = fuzz ]; then
    shopt -s nullglob
    for fuzzer in build/fuzz/fuzz/*_fuzzer; do
      name=$(basename "$fuzzer" _fuzzer)
      corpus="build/fuzz/corpus/$name"
      mkdir -p "$corpus"
      echo "fuzzing $name for ${FUZZ_SECONDS:-60} s"
      if ! "$fuzzer" -max_total_time="${FUZZ_SECONDS:-60}" \
          "$corpus" "fuzz/corpus/$name" > "build/fuzz/$name.log" 2>&1; then
        cat "build/fuzz/$name.log" >&2
        echo "fuzzer $name failed" >&2
        exit 1
      fi
      tail -n 1 "build/fuzz/$name.log"
      fuzzed=$((fuzzed + 1))
    done
    continue
  fi
  if [ "$config" = release ]; then
    # The benchmarks must at least run; timings come from a quiet machine.
    ./build/release/bench/cosession_bench --benchmark_min_time=0.001 >/dev/null
    ./build/release/examples/cosession_hello >/dev/null
    fit_dir=$(mktemp -d)
    ./build/release/examples/cosession_fit_line "$fit_dir" 200 >/dev/null 2>&1
    rm -rf "$fit_dir"
    # The Quick start's program: trains to >= 0.95 held-out accuracy on its
    # defaults, and a second run resumes from the saved step.
    train_dir=$(mktemp -d)
    ./build/release/examples/cosession_train --checkpoint_dir="$train_dir" \
      | tee build/release/train.log
    accuracy=$(sed -n 's/^test_accuracy=//p' build/release/train.log)
    if ! awk -v a="${accuracy:-0}" 'BEGIN { exit !(a >= 0.95) }'; then
      echo "cosession_train: test_accuracy=${accuracy:-missing}, want >= 0.95" >&2
      exit 1
    fi
    ./build/release/examples/cosession_train --checkpoint_dir="$train_dir" \
      --max_steps=2100 > build/release/train_resumed.log
    if ! grep -q 'starting at batch 2000$' build/release/train_resumed.log; then
      cat build/release/train_resumed.log >&2
      echo "cosession_train did not resume from its checkpoint" >&2
      exit 1
    fi
    rm -rf "$train_dir"
    # The README's C++ examples build with g++ in cosession_readme_snippets
    # (tests/CMakeLists.txt); clang 19 must accept them too.
    layer_includes=()
    for layer in build/release/layers/*; do layer_includes+=(-I "$layer"); done
    clang++-19 -std=c++20 -fsyntax-only -Wall -Wextra -Werror \
      "${layer_includes[@]}" -isystem /usr/include/eigen3 \
      build/release/tests/readme_snippets.cc
    # The library as another project uses it (tests/consumer): installed
    # and found with find_package, then as a subdirectory of its sources
    # (built at -O0: only whether it builds and runs matters here).
    rm -rf build/release/install
    cmake --install build/release --prefix build/release/install >/dev/null
    cmake -S tests/consumer -B build/consumer-package -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PWD/build/release/install" >/dev/null
    cmake --build build/consumer-package
    ./build/consumer-package/consumer
    cmake -S tests/consumer -B build/consumer-subdir -G Ninja \
      -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DCOSESSION_CONSUMER_VIA=subdirectory -DCOSESSION_SOURCE_DIR="$PWD" \
      >/dev/null
    cmake --build build/consumer-subdir
    ./build/consumer-subdir/consumer
  fi
  # One process runs every suite (ctest, which starts one process per test,
  # spends minutes on start-ups under the sanitizers); each concurrent test
  # bounds itself in time (tests/co_test.h), and `timeout` bounds the rest.
  timeout 1200 "./build/$config/tests/cosession_tests" --gtest_brief=1 \
    | tee "build/$config/tests.log"
  ran=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "build/$config/tests.log")
  if [ -z "$ran" ]; then echo "no test result in build/$config/tests.log" >&2; exit 1; fi
  passed=$((passed + ran))
done
echo "all configurations passed: ${configs[*]}"
if ((fuzzed > 0)); then echo "fuzzers: ${fuzzed} ran clean"; fi
echo "tests: ${passed} passed, 0 failed"
