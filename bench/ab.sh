#!/usr/bin/env bash
# A/B of the hot path: a commit (A, checked out into a worktree) against the working tree (B),
# `bench/compare.sh --quick` (workload a, 16 clients, jobq and the baseline, 3 runs of 5 s)
# alternately, ROUNDS times each, so that both sides see the same drift of this machine. Each
# side builds and installs its own release build. Prints each run's line and writes
# bench/results/ab.md.
#   bench/ab.sh [REF (default HEAD)] [ROUNDS (default 2)]
set -euo pipefail
cd "$(dirname "$0")/.."
REF=${1:-HEAD}; ROUNDS=${2:-2}
# Outside the repository: cargo would take a worktree under it for a member of this workspace.
WT=${TMPDIR:-/tmp}/jobq-ab-worktree
git worktree remove --force "$WT" 2>/dev/null || rm -rf "$WT"
git worktree add --detach "$WT" "$REF" >/dev/null
trap 'git worktree remove --force "$WT" 2>/dev/null || true' EXIT
out=bench/results/ab.md
{ echo "# bench/ab.sh $REF $ROUNDS: A = $(git rev-parse --short "$REF"), B = the working tree of $(git rev-parse --short HEAD)"
  echo; echo "Each line: clients, jobq jobs/s, baseline jobs/s, jobq / baseline (checkout+complete, medians of 3 runs of 5 s)."; echo; } >"$out"
for round in $(seq "$ROUNDS"); do
  for side in A B; do
    dir=.; [ $side = A ] && dir=$WT
    (cd "$dir" && bench/compare.sh --quick >/dev/null)
    line="$side, round $round: $(grep -h '^| 16 |' "$dir/target/bench-quick.md" | head -1)"
    echo "$line"; echo "- $line" >>"$out"
  done
done
