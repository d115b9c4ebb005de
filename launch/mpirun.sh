#!/usr/bin/env bash
# mpirun wrapper for trainer: N ranks on this host, one per GPU, with the flags that matter.
#
#   launch/mpirun.sh N build/trainer configs/small.json --set parallel.strategy=ddp_bucketed
#   TRAINER_BIND=none launch/mpirun.sh 4 build/trainer ...        (no binding)
#   TRAINER_MPIRUN_ARGS="--report-bindings" launch/mpirun.sh 2 ...  (extra mpirun flags)
#
# What it sets (Open MPI 4/5):
#   -np N, --map-by slot      ranks 0..N-1 in order; the trainer picks GPU = local rank (MPI_COMM_TYPE_SHARED)
#   --bind-to ${TRAINER_BIND:-numa}
#                             keeps each rank's host threads (data, MPI staging, OpenBLAS) on one NUMA node;
#                             when N exceeds the cores (CI, several ranks sharing a GPU) it falls back to
#                             --oversubscribe --bind-to none, since binding more ranks than cores is an error
#   -x NCCL_NVLS_ENABLE=0     NVLink SHARP / multicast stays off (the trainer forces it too): on shared H200 hosts
#                             a program using multicast can take the GPUs out of service
#   -x OMP_NUM_THREADS, -x OPENBLAS_NUM_THREADS
#                             host threads per rank: cores / N by default, so ranks do not fight over cores
#   --allow-run-as-root       only when running as root (containers)
#   odls_base_sigkill_timeout 10 (Open MPI 4)
#                             Ctrl-C / SIGTERM on mpirun reaches the ranks as SIGCONT at once, SIGTERM after this
#                             many seconds (default 1) and SIGKILL as long again after that: 10 s lets them finish the
#                             step, write a small model's checkpoint and the record with status "interrupted" (a
#                             Ctrl-C takes the same 10 s to reach them). The price: whenever a rank exits non-zero
#                             (bad input 2, error 1, interrupted 4), mpirun waits up to twice this long before it
#                             returns (rank 0 logs how long). For a large model's checkpoint, stop with
#                             `kill -USR1 <mpirun pid>` (forwarded as SIGUSR1, no SIGKILL; mpirun exits with the
#                             ranks' code 4) or export a larger OMPI_MCA_odls_base_sigkill_timeout
set -euo pipefail

if [[ $# -lt 2 || ! "$1" =~ ^[0-9]+$ || "$1" -lt 1 ]]; then
  echo "usage: $0 N PROGRAM [ARGS...]   (N ranks of PROGRAM on this host)" >&2
  exit 2
fi
np=$1
shift

cores=$(nproc)
threads=$(( cores / np > 0 ? cores / np : 1 ))
export NCCL_NVLS_ENABLE=0
export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-10}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$threads}

args=(-np "$np" --map-by slot)
if (( np > cores )); then
  args+=(--oversubscribe --bind-to none)
  export OMPI_MCA_rmaps_base_oversubscribe=1
else
  args+=(--bind-to "${TRAINER_BIND:-numa}")
fi
[[ $(id -u) -eq 0 ]] && args+=(--allow-run-as-root)
args+=(-x NCCL_NVLS_ENABLE -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS)
# shellcheck disable=SC2206  # word splitting of the extra arguments is intended
extra=(${TRAINER_MPIRUN_ARGS:-})

exec "${MPIRUN:-mpirun}" "${args[@]}" "${extra[@]}" "$@"
