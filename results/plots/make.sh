#!/usr/bin/env bash
# Redraws the PNGs in results/plots/ from the kept result records (launch/plot.py; Debian's python3-matplotlib).
#   results/plots/make.sh        # from anywhere; writes next to this script
set -euo pipefail
cd "$(dirname "$0")/../.."
P="/usr/bin/python3 launch/plot.py"
O=results/plots
S=results/h200/2026-11-30/sweep
M=results/h200/2026-12-02/v8_memory
D=results/h200x2/2026-11-30/v3/ddp

$P sweep "$S/*_w5.json" -o $O/sweep_h200.png \
  --title "H200, 2026-11-30 sweep: Table 1 sizes, ctx 512, batch 4, flash2 (10B: out of memory)"

ddp=($D/grouped_buckets/xl_1gpu.json $D/grouped_buckets/xl_2gpu_ddp_bucketed_100.json
     $D/grouped_buckets/xl_2gpu_ddp_bucketed_25.json $D/overlap_grouped/xl_2gpu_ddp_overlap.json
     $D/overlap_grouped/xl_2gpu_ddp_flat.json $D/zero1_bf16_gather/xl_2gpu_zero1.json)
ddp_labels="1 GPU,ddp_bucketed 100 MB,ddp_bucketed 25 MB,ddp_overlap (grouped),ddp_flat,zero1 (bf16 gather)"
$P comm "${ddp[@]}" --labels "$ddp_labels" -o $O/ddp_comm_h200x2.png \
  --title "H200x2 v3 final code: xl bf16, bs 4 per GPU, 2 GPUs over NCCL (three device calls)"
$P phases "${ddp[@]}" --labels "$ddp_labels" -o $O/ddp_phases_h200x2.png \
  --title "H200x2 v3 final code: xl bf16 step by phase (backward includes finish_backward)"

pol=()
for x in none selective full every_k2 every_k4 sqrt every_k8 every_k16 every_k32 nested; do pol+=($M/xl_c2048_$x.json); done
pol_labels="none,selective,full,every_k 2,every_k 4,sqrt (k 6),every_k 8,every_k 16,every_k 32,nested"
$P phases "${pol[@]}" --labels "$pol_labels" -o $O/xl_c2048_policies_phases.png \
  --title "H200 v8: xl bf16 ctx 2048, batch 4: step by phase per checkpointing policy"
$P memory "${pol[@]}" --labels "$pol_labels" -o $O/xl_c2048_policies_memory.png \
  --title "H200 v8: xl bf16 ctx 2048, batch 4: peak memory per checkpointing policy"

$P memory $M/xl_c512_none.json $M/xl_c512_selective.json $M/xl_c2048_none.json $M/xl_c2048_selective.json \
  $M/xl_c8192_selective.json $M/xl_c16384_full_blocks0-20.json $M/xl_c32768_full.json $M/xl_c32768_sqrt.json \
  $M/xl_c32768_nested.json $M/b8_4blocks_none.json $M/b8_4blocks_selective.json \
  --labels "xl ctx 512 none,xl ctx 512 selective,xl ctx 2048 none,xl ctx 2048 selective,xl ctx 8192 selective,xl ctx 16384 full on blocks 0-20,xl ctx 32768 full,xl ctx 32768 sqrt,xl ctx 32768 nested,8B 4 blocks ctx 32768 none,8B 4 blocks ctx 32768 selective" \
  -o $O/v8_memory_study.png --title "H200 v8 memory study: peak by category vs the planner (bf16, batch 4; 8B: batch 1)"

strategies="1gpu ddp_naive ddp_flat ddp_overlap ddp_bucketed zero1"
labels="1 GPU,ddp_naive,ddp_flat,ddp_overlap,ddp_bucketed,zero1"
$P loss $(for s in $strategies; do echo results/h200x2/2026-11-30/v3/small20/small20_bf16_$s.json; done) \
  --labels "$labels" -o $O/small20_loss_h200x2.png \
  --title "H200x2 v3: small bf16, 20 steps (warm-up 5 + cosine), global batch 8: 1 GPU vs 2 GPUs"
$P loss $(for s in $strategies; do echo results/h200x2/2026-11-30/small20/const_lr_bf16_$s.json; done) \
  --labels "$labels" -o $O/small20_const_lr_loss_h200x2.png \
  --title "H200x2: small bf16, constant lr 1e-3, global batch 8: 1 GPU vs 2 GPUs (apart after step 12)"

# Issue 19: the trainer's step over the PyTorch peer's measured beside it, by version (the records: peer_ratio.json).
$P ratio $O/peer_ratio.json -o $O/peer_ratio_h200.png \
  --title "Issue 19 on H200: trainer step / PyTorch's, same call (v0-v3: same session, 1 GPU of H200x2)"
$P ratio $O/peer_ratio_h100.json -o $O/peer_ratio_h100.png \
  --title "Issue 19 on an H100 80GB: trainer step / PyTorch's reduce-overhead, same call"
