#!/usr/bin/env bash
# gsrq plan end to end on a real Slurm (tools/slurm/local-cluster.sh: slurmctld, slurmd and munged on
# this machine): a plan of 4 array tasks over the bundled sample, one task stopped mid-run with
# scancel --signal=TERM and requeued, the afterok merge job, the imported runs, and the merged
# codebooks byte-identical to one gsrq train of the same layers and seed.
#   tests/slurm/plan_on_slurm.sh GSRQ_BINARY
# Exit 77 (CTest's skip) where Slurm cannot start here (not root, slurm-wlm missing), unless
# GSRQ_REQUIRE_SLURM=1, where that is a failure.
set -euo pipefail
gsrq=$(realpath "$1")
repo=$(cd "$(dirname "$0")/../.." && pwd)
sample=$repo/resources/samples/stories260K-gpl3.safetensors

skip() {
  if [[ ${GSRQ_REQUIRE_SLURM:-0} == 1 ]]; then
    echo "FAIL: $1 (GSRQ_REQUIRE_SLURM=1)" >&2
    exit 1
  fi
  echo "SKIP: $1" >&2
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "Slurm's slurmd needs root; this is uid $(id -u)"
command -v sbatch > /dev/null || skip "slurm-wlm is not installed (tools/setup.sh --slurm)"

work=$(mktemp -d /tmp/gsrq-slurm-test.XXXXXX)
export GSRQ_SLURM_DIR=$work/slurm
# A port of this test's own, so that a cluster someone left running is not disturbed.
export GSRQ_SLURM_PORT=$((17000 + RANDOM % 2000 * 2))
cleanup() {
  "$repo/tools/slurm/local-cluster.sh" stop || true
  if [[ ${GSRQ_KEEP_TEST_DIR:-0} == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/plan/logs/*; do
    echo "--- $f" >&2
    cat "$f" >&2
  done
  squeue >&2 || true
  [[ -f $work/user.db ]] && "$gsrq" --db "$work/user.db" runs list >&2
  exit 1
}

start=$("$repo/tools/slurm/local-cluster.sh" start) || {
  rc=$?
  ((rc == 3)) && skip "Slurm cannot start here"
  exit "$rc"
}
eval "$start"

# Settings that keep a layer busy for a few seconds, so that a task can be stopped mid-layer.
train=(--dim 4 --stages 4 --k 1024 --iters 30 --beam 4 --seed 11 --backend cpu --threads 1)
"$gsrq" --db "$work/user.db" plan "$sample" --jobs 4 --gpus-per-job 1 --out "$work/plan" -- "${train[@]}" \
  > "$work/plan.txt"
cat "$work/plan.txt"
plan_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/plan/plan.json")
# The sample has 5 layers of equal size: one task gets two of them, the others one each.
task_layers=$(python3 -c 'import json,sys; print(*[len(t["layers"]) for t in json.load(open(sys.argv[1]))["tasks"]])' \
  "$work/plan/plan.json")
[[ $task_layers == "2 1 1 1" ]] || fail "expected the 5 layers spread 2 1 1 1 over 4 tasks, got $task_layers"

array=$(sbatch --parsable "$work/plan/array.sbatch")
echo "array job $array"

# Stop task 0 (layers 0 and 4) once its first layer is written and its second is under way: the
# gsrq training layer 4 has run for a second (it has recorded its run; a layer takes several).
layer4() { pgrep -f -- "--group $plan_id train .* --layers 4 " > /dev/null; }
for _ in $(seq 1200); do
  [[ -f $work/plan/codebooks/layer-0.safetensors ]] && layer4 && break
  sleep 0.1
done
[[ -f $work/plan/codebooks/layer-0.safetensors ]] || fail "task 0 wrote no codebooks for layer 0 in 120 s"
layer4 || fail "task 0 did not start layer 4 in 120 s"
sleep 1
[[ ! -f $work/plan/codebooks/layer-4.safetensors ]] || fail "task 0 finished layer 4 before it could be stopped"
scancel --signal=TERM --full "${array}_0"
# The task requeues itself; Slurm holds a requeued job for a while before it may start again.
for _ in $(seq 300); do
  state=$(squeue -h -j "${array}_0" -o '%T %r' 2> /dev/null || true)
  [[ $state == "PENDING BeginTime" ]] && break
  sleep 0.1
done
[[ $state == "PENDING BeginTime" ]] || fail "task 0 was not requeued after SIGTERM (state '$state')"
scontrol update JobId="${array}_0" StartTime=now

# Everything ends: the tasks, then the merge job (afterok).
for _ in $(seq 1800); do
  [[ -z $(squeue -h 2> /dev/null) ]] && break
  sleep 0.2
done
[[ -z $(squeue -h) ]] || fail "jobs still queued after 6 minutes"
[[ -f $work/plan/codebooks.safetensors ]] || fail "the merge job wrote no codebooks.safetensors"

grep -q "task 0 stopped: requeued" "$work/plan/logs/task-0.out" || fail "task 0's log does not show the requeue"
grep -q "(restart 1)" "$work/plan/logs/task-0.out" || fail "task 0 did not run a second time"
grep -q "layer 0: trained earlier" "$work/plan/logs/task-0.out" || fail "the requeued task trained layer 0 again"
grep -q "5 layers, 10 tensors, same settings" "$work/plan/logs/merge.out" || fail "the merge did not check all layers"

# The merged codebooks are those of one process training every layer with the same settings.
"$gsrq" --no-db train "$sample" "${train[@]}" --out "$work/single.safetensors" --quiet > /dev/null
python3 - "$work/single.safetensors" "$work/plan/codebooks.safetensors" << 'EOF' || fail "merged codebooks differ"
import json, struct, sys

def tensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}

single, merged = tensors(sys.argv[1]), tensors(sys.argv[2])
assert sorted(single) == sorted(merged), (sorted(single), sorted(merged))
for name in single:
    assert single[name] == merged[name], f"{name} differs"
print(f"merged codebooks: {len(merged)} tensors, byte-identical to one gsrq train")
EOF

# The runs: every layer done once, the stopped one recorded as cancelled, all under the plan.
runs=$("$gsrq" --db "$work/user.db" runs list --group "$plan_id" --json)
count() { python3 -c 'import json,sys; print(sum(r["status"] == sys.argv[1] for r in json.load(sys.stdin)["runs"]))' "$1" <<< "$runs"; }
[[ $(count done) == 5 ]] || fail "expected 5 done runs in the user's store, got $(count done)"
[[ $(count cancelled) == 1 ]] || fail "expected the stopped layer's run as cancelled, got $(count cancelled)"

# Importing again adds nothing.
again=$("$gsrq" --db "$work/user.db" runs import "$work"/plan/stores/*.sqlite --json)
added=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["added"])' <<< "$again")
[[ $added == 0 ]] || fail "importing the task stores a second time added $added runs"
echo "PASS: plan $plan_id on Slurm: 4 tasks, one stopped and requeued, merged codebooks identical, runs imported once"
