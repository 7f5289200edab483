#!/usr/bin/env bash
# Before/after for the partition log: `cargo bench -p sluice-log --bench append` of two revisions,
# on this machine, in one run, alternating (base, head, base, head, ...) so that machine noise
# falls on both. Prints, per case, durable MiB/s min / median / max of each and the ratio of the
# medians, plus the allocations per append of each.
#
#   scripts/bench-log-before-after.sh BASE_REV                 # 3 rounds, 5 s per case
#   ROUNDS=5 SECONDS_PER_CASE=3 scripts/bench-log-before-after.sh 449ba2d
#
# BASE_REV is built in the same git worktree as scripts/bench-before-after.sh uses
# (target/bench-before-after/base, its own target directory); head is this work tree.
# Results: target/bench-log-before-after/<timestamp>/{base,head}-<round>.jsonl and summary.md.
# Environment: ROUNDS (3), SECONDS_PER_CASE (5), BENCH_ARGS (extra flags for both), OUT.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
base_rev="${1:?usage: scripts/bench-log-before-after.sh BASE_REV}"
rounds="${ROUNDS:-3}"
seconds="${SECONDS_PER_CASE:-5}"
out="${OUT:-$repo/target/bench-log-before-after/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out" "$repo/target/bench-tmp"

base_dir="$repo/target/bench-before-after/base"
if [ ! -d "$base_dir" ]; then
  git worktree add --detach "$base_dir" "$base_rev" >/dev/null
else
  git -C "$base_dir" checkout --quiet --detach "$base_rev"
fi
# Build both first, so that no build runs while the other side is measured.
cargo bench -p sluice-log --bench append --no-run
(cd "$base_dir" && CARGO_TARGET_DIR="$base_dir/target" cargo bench -p sluice-log --bench append --no-run)

{
  echo "base: $base_rev ($(git rev-parse --short "$base_rev")); head: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo '+dirty')"
  echo "machine: nproc=$(nproc); memory=$(free -g | awk '/^Mem:/{print $2}') GiB;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); kernel $(uname -r)"
  echo "filesystem: $(df -T "$repo/target" | awk 'NR==2{print $2" on "$1}'); rounds: $rounds; ${seconds} s per case; extra args: ${BENCH_ARGS:-none}"
} | tee "$out/machine.txt" >&2

for round in $(seq 1 "$rounds"); do
  for label in base head; do
    dir="$repo"; target="$repo/target"
    if [ "$label" = base ]; then dir="$base_dir"; target="$base_dir/target"; fi
    echo "==> round $round/$rounds: $label" >&2
    # shellcheck disable=SC2086
    (cd "$dir" && CARGO_TARGET_DIR="$target" cargo bench -q -p sluice-log --bench append -- \
      --seconds "$seconds" --dir "$repo/target/bench-tmp" --json "$out/$label-$round.jsonl" \
      ${BENCH_ARGS:-} >&2)
  done
done

python3 - "$out" "$rounds" <<'PY' | tee "$out/summary.md"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
cases, allocs = {}, {}
for label in ("base", "head"):
    for rnd in range(1, rounds + 1):
        for line in open(f"{out}/{label}-{rnd}.jsonl"):
            r = json.loads(line)
            if r["kind"] == "throughput":
                key = (r["record_bytes"], r["batch_bytes"], r["partitions"])
                cases.setdefault(key, {}).setdefault(label, []).append(r["mib_per_s"])
            else:
                allocs.setdefault(label, {})[r.get("batch_bytes")] = r
def mmm(xs):
    xs = sorted(xs)
    return " / ".join(f"{x:.0f}" for x in (xs[0], statistics.median(xs), xs[-1]))
print("Durable MiB/s, min / median / max of each; ratio of the medians (head / base):")
print()
print("| record B | batch B | partitions | base | head | head / base |")
print("|---:|---:|---:|---|---|---:|")
ratios = []
for key in sorted(cases):
    c = cases[key]
    if "base" not in c or "head" not in c:
        continue
    ratio = statistics.median(c["head"]) / statistics.median(c["base"])
    ratios.append(ratio)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {mmm(c['base'])} | {mmm(c['head'])} | {ratio:.3f} |")
if ratios:
    print()
    print(f"Ratios over the cases: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, max {max(ratios):.3f}")
for label in ("base", "head"):
    for batch, r in sorted(allocs.get(label, {}).items(), key=lambda kv: str(kv[0])):
        print(f"{label}: allocations per append, batch {batch} B: " + ", ".join(
            f"{k}={v}" for k, v in r.items() if k != "kind"))
PY
echo "results in $out" >&2
