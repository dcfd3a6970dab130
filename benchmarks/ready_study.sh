#!/usr/bin/env bash
# The ready study (scenarios/studies/all_methods_mnist.yaml, every method x 3 seeds on MNIST): run it, then
# copy its tables, figures and HTML report into benchmarks/ready_study/.
#   IOTFL_DATA=../shared/datasets bash benchmarks/ready_study.sh        # OUT=studies by default
# A sweep into a folder that already holds finished runs skips them, so the wall time printed is the
# time of this invocation; the runs' own host seconds are summed from the index in timing.txt either way.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-studies}
STUDY="$OUT/all_methods_mnist"
DEST=benchmarks/ready_study
IOTFL=(iotfl-sim)
command -v iotfl-sim >/dev/null || IOTFL=(bash scripts/in-venv iotfl-sim)
export IOTFL_DATA=${IOTFL_DATA:-../shared/datasets}

start=$(date +%s)
"${IOTFL[@]}" sweep scenarios/studies/all_methods_mnist.yaml --out "$OUT"
wall=$(( $(date +%s) - start ))
"${IOTFL[@]}" compare "$STUDY" >/dev/null
"${IOTFL[@]}" plot "$STUDY" >/dev/null
"${IOTFL[@]}" report "$STUDY" >/dev/null

mkdir -p "$DEST"
rm -rf "$DEST/compare" "$DEST/plots"
cp -r "$STUDY/compare" "$STUDY/plots" "$DEST/"
cp "$STUDY/report.html" "$STUDY/index.csv" "$STUDY/study.resolved.yaml" "$DEST/"
python3 - "$STUDY/study.json" "$wall" "$(nproc)" > "$DEST/timing.txt" <<'PY'
import collections, json, sys
runs = json.load(open(sys.argv[1]))["runs"]
per = collections.defaultdict(list)
for r in runs:
    per[r["overrides"]["algorithm"]["name"]].append(r["host_s"] or 0.0)
print(f"sweep wall time of this invocation: {sys.argv[2]} s on {sys.argv[3]} cores")
print(f"runs: {len(runs)} ({sum(r['status'] == 'done' for r in runs)} done); host seconds, all runs: {sum(sum(v) for v in per.values()):.0f}")
print("mean host seconds per run, by method:")
for name, v in per.items():
    print(f"  {name:14s} {sum(v) / len(v):6.1f}")
PY
cat "$DEST/timing.txt"
echo "copied tables, figures and report into $DEST/"
