#!/usr/bin/env bash
# Checks the library's layering that the build alone cannot see:
#   * a layer's files include only its own headers and those of the layers
#     below it, as "cosession/<layer>/..." (the build enforces this for files it compiles; this also
#     covers headers that no file of their layer includes);
#   * graph/ includes no Boost (Asio lives in async/ and above; Boost's
#     headers sit on the system include path, so the build cannot stop it);
#   * only async/ includes async/detail/ headers.
# Layers, bottom up: graph, async, io, then pipeline and hooks (siblings),
# then training; serving sits on io. Prints each offending line; exit 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A below=(
  [graph]="graph"
  [async]="graph async"
  [io]="graph async io"
  [pipeline]="graph async io pipeline"
  [hooks]="graph async io hooks"
  [training]="graph async io pipeline hooks training"
  [serving]="graph async io serving"
)
failed=0
for layer in "${!below[@]}"; do
  allowed=$(echo "${below[$layer]}" | tr ' ' '|')
  # Project includes are the quoted ones naming a layer folder.
  while IFS= read -r hit; do
    echo "layering: $hit (a $layer/ file may include only: ${below[$layer]})"
    failed=1
  done < <(git grep -n -E '#include "(cosession/)?(graph|async|io|pipeline|hooks|training|serving|examples|tests|bench)/' \
             -- "$layer/*.h" "$layer/*.cc" | grep -v -E "#include \"cosession/($allowed)/" || true)
done
while IFS= read -r hit; do
  echo "layering: $hit (graph/ includes no Boost)"
  failed=1
done < <(git grep -n -E '#include [<"]boost/' -- 'graph/*.h' 'graph/*.cc' || true)
while IFS= read -r hit; do
  echo "layering: $hit (async/detail/ is internal to async/)"
  failed=1
done < <(git grep -n -E '#include "(cosession/)?async/detail/' -- '*.h' '*.cc' ':!async/' || true)
exit $failed
