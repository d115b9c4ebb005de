#!/usr/bin/env bash
# The memory study of issue 15 / CS336 a2 section 3 on one GPU: checkpointing policies, the every_k table, long
# contexts, the 8B 4-block proxy, memory timelines and the PyTorch peer with per-block checkpointing. Each run writes
# its record (with the planner's prediction) under OUT; a table is printed at the end (launch/memory_table.py).
#
#   launch/memory_study.sh TRAINER OUT STAGE...
#   stages: regress   xl bf16 ctx 512 with selective (the default) and none: the step against earlier versions
#           policies  xl bf16 ctx 2048: none, selective, full (overheads against none)
#           everyk    xl bf16 ctx 2048: every_k with k = 1, 2, 4, 8, 16, 32 (handout 3.2 b), plus sqrt and nested
#           long      xl bf16 at ctx 8192 (selective), 16384 (full on blocks 0-20), 32768 (full, sqrt, nested)
#           long_full xl bf16 at ctx 8192 and 16384 with full
#           b8        the 8B shape with 4 blocks, batch 1, ctx 32768 (head category, step time)
#           timeline  memory timelines of xl ctx 2048: forward only, a train step with none and with full (+ PNGs)
#           peer      PyTorch compiled, per-block checkpointing, xl bf16 ctx 8192 and 16384 (launch/torch_bench.py)
#           small     small bf16 ctx 512 under every policy (planner check)
#           planner   xl bf16 at ctx 512 and 8192 under every policy, one step each (the planner's peak vs measured)
#           planner_long  the recomputing policies of `planner` at ctx 8192 only
#           b8_head   the 8B 4-block proxy: the head chunked (auto) and whole (as v7), and optimizer.in_backward
# Environment: PY (python with torch for the peer; default python3), PYTHON (python with matplotlib and numpy for the
# timeline PNGs; default /usr/bin/python3, else python3).
# Only the records this invocation writes are tabulated (one left in OUT by an earlier run is not); exit status 1 when
# a run failed (an out-of-memory record is a finding, not a failure), 2 for bad arguments.
set -uo pipefail
usage="usage: memory_study.sh TRAINER OUT STAGE... (stages: see the top of launch/memory_study.sh)"
stages="regress policies everyk long long_full b8 timeline peer small planner planner_long b8_head"
[[ $# -ge 3 ]] || { echo "memory_study.sh: $usage" >&2; exit 2; }
trainer=$1 out=$2
shift 2
for stage in "$@"; do  # every stage known before anything runs
  [[ " $stages " == *" $stage "* ]] || { echo "memory_study.sh: unknown stage '$stage' (one of: $stages)" >&2; exit 2; }
done
[[ -x "$trainer" && ! -d "$trainer" ]] || { echo "memory_study.sh: TRAINER '$trainer' is not an executable" >&2; exit 2; }
[[ ! -e "$out" || -d "$out" ]] || { echo "memory_study.sh: OUT '$out' exists and is not a directory" >&2; exit 2; }
mkdir -p "$out" || exit 2
records=()  # the records this invocation writes (OUT may hold older ones: they are not tabulated)
runs=0 failed=0
py=${PY:-python3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
plot_py=  # a python with matplotlib and numpy for plot_memory.py (the first python3 on PATH may have neither)
if [[ " $* " == *" timeline "* ]]; then
  pythons=(/usr/bin/python3 python3)
  [[ -n ${PYTHON:-} ]] && pythons=("$PYTHON")
  for c in "${pythons[@]}"; do
    command -v "$c" > /dev/null && "$c" -c "import matplotlib, numpy" 2> /dev/null && { plot_py=$c; break; }
  done
  [[ -n $plot_py ]] || echo "memory_study.sh: no python with matplotlib and numpy (tried ${pythons[*]}; set PYTHON):" \
    "the timelines are written, not plotted" >&2
fi

# stamp FILE: its inode and mtime, or nothing (the trainer replaces its record atomically: a new one differs)
stamp() { stat -c '%i %y' "$1" 2> /dev/null; }

# run NAME CONFIG WARMUP STEPS [--set k=v ...]
run() {
  local name=$1 config=$2 warm=$3 steps=$4
  shift 4
  local sets=()
  for kv in "$@"; do sets+=(--set "$kv"); done
  echo "== $name" >&2
  local before; before=$(stamp "$out/$name.json")
  "$trainer" "$root/configs/$config" --set device=cuda --set precision=bf16 --set bench.warmup_steps="$warm" \
    --set bench.measure_steps="$steps" --set bench.log_every=1 --set output.results="$out/$name.json" \
    --set name="$name" "${sets[@]}" > "$out/$name.log" 2>&1
  local rc=$?
  if [[ $rc -eq 0 ]]; then
    echo "   exit 0 $(grep -o 'done: .*' "$out/$name.log" | head -1)" >&2
  else  # the trainer's own error line (a refused config writes no record)
    echo "   exit $rc: $(grep -E 'error|critical' "$out/$name.log" | tail -1)" >&2
  fi
  runs=$((runs + 1))
  [[ $rc -eq 0 || $rc -eq 3 ]] || failed=$((failed + 1))  # 3: out of memory, with its record
  [[ -f "$out/$name.json" && $(stamp "$out/$name.json") != "$before" ]] && records+=("$out/$name.json")
}

for stage in "$@"; do
  case $stage in
    regress)
      run xl_c512_selective xl.json 3 10
      run xl_c512_none xl.json 3 10 checkpointing.policy=none ;;
    policies)
      for p in none selective full; do run "xl_c2048_$p" xl.json 2 5 model.context_length=2048 checkpointing.policy=$p; done ;;
    everyk)
      for k in 1 2 4 8 16 32; do
        run "xl_c2048_every_k$k" xl.json 1 3 model.context_length=2048 checkpointing.policy=every_k checkpointing.k=$k
      done
      run xl_c2048_sqrt xl.json 1 3 model.context_length=2048 checkpointing.policy=sqrt
      run xl_c2048_nested xl.json 1 3 model.context_length=2048 checkpointing.policy=nested ;;
    long)
      run xl_c8192_selective xl.json 1 2 model.context_length=8192
      # as few recomputed blocks as fit (the planner's choice): blocks 0-20 recomputed, the last 11 stored
      run xl_c16384_full_blocks0-20 xl.json 1 2 model.context_length=16384 checkpointing.policy=full \
        "checkpointing.blocks=[$(seq -s, 0 20)]"
      for p in full sqrt nested; do
        run "xl_c32768_$p" xl.json 1 1 model.context_length=32768 checkpointing.policy=$p
      done ;;
    long_full)
      run xl_c8192_full xl.json 1 2 model.context_length=8192 checkpointing.policy=full
      run xl_c16384_full xl.json 1 2 model.context_length=16384 checkpointing.policy=full ;;
    b8)
      run b8_4blocks_selective leaderboard_8b.json 2 5 model.num_layers=4 data.batch_size=1
      run b8_4blocks_none leaderboard_8b.json 2 5 model.num_layers=4 data.batch_size=1 checkpointing.policy=none ;;
    timeline)
      for v in "forward selective" "train_step none" "train_step full"; do
        set -- $v
        tl="$out/xl_c2048_timeline_$1_$2"
        before=$(stamp "$tl.memory.json")
        run "xl_c2048_timeline_$1_$2" xl.json 0 1 model.context_length=2048 bench.phase=$1 checkpointing.policy=$2 \
          profile.memory_timeline="$tl.memory.json"
        # plotted when this run wrote its timeline (not one an earlier run left)
        [[ -n $plot_py && -f "$tl.memory.json" && $(stamp "$tl.memory.json") != "$before" ]] || continue
        "$plot_py" "$here/plot_memory.py" "$tl.memory.json" -o "$tl.png" \
          --title "xl bf16 batch 4 ctx 2048: $1, checkpointing $2" > "$tl.top.txt" 2>&1 || echo "   plot failed" >&2
      done ;;
    peer)
      for c in 8192 16384; do
        echo "== torch_xl_c${c}_compiled_ckpt" >&2
        before=$(stamp "$out/torch_xl_c${c}_compiled_ckpt.json")  # the record as an earlier run left it, if any
        PYTHONUNBUFFERED=1 $py "$here/torch_bench.py" --preset xl --mode compiled --batch 4 --ctx $c --checkpoint block \
          --warmup 1 --steps 2 --json "$out/torch_xl_c${c}_compiled_ckpt.json" > "$out/torch_xl_c${c}.log" 2>&1
        rc=$?
        echo "   exit $rc" >&2
        runs=$((runs + 1))
        [[ $rc -eq 0 ]] || failed=$((failed + 1))  # an out-of-memory record exits 0
        rec="$out/torch_xl_c${c}_compiled_ckpt.json"
        [[ -f "$rec" && $(stamp "$rec") != "$before" ]] && records+=("$rec")
      done ;;
    small)
      for p in none selective full every_k sqrt nested; do
        run "small_c512_$p" small.json 2 5 checkpointing.policy=$p checkpointing.k=3
      done ;;
    planner)
      for c in 512 8192; do
        for p in none selective full every_k sqrt nested; do
          run "xl_c${c}_plan_$p" xl.json 0 1 model.context_length=$c checkpointing.policy=$p
        done
      done ;;
    planner_long)  # the policies of `planner` at ctx 8192 that recompute (the others: stage planner)
      for p in every_k sqrt nested; do run "xl_c8192_plan_$p" xl.json 0 1 model.context_length=8192 checkpointing.policy=$p; done ;;
    b8_head)
      run b8_4blocks_sel_chunked leaderboard_8b.json 2 5 model.num_layers=4 data.batch_size=1
      run b8_4blocks_sel_whole leaderboard_8b.json 2 5 model.num_layers=4 data.batch_size=1 \
        checkpointing.lm_head_chunk_tokens=32768
      run b8_4blocks_sel_inbwd leaderboard_8b.json 2 5 model.num_layers=4 data.batch_size=1 optimizer.in_backward=true ;;
  esac
done
if [[ ${#records[@]} -eq 0 ]]; then
  echo "memory_study.sh: no run wrote a record; $failed of $runs runs failed (the errors are above and in" \
    "$out/*.log)" >&2
  exit 1
fi
/usr/bin/env python3 "$here/memory_table.py" "${records[@]}" | tee "$out/table.txt"
rc=$?
if [[ $failed -gt 0 ]]; then
  echo "memory_study.sh: $failed of $runs runs failed (the errors are above and in $out/*.log)" >&2
  exit 1
fi
exit $rc
