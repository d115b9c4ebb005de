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
#   stdin from /dev/null      mpirun runs in a process group of its own (below), where reading the terminal would
#                             stop it; the trainer reads no stdin
#
# Signals: mpirun runs in its own process group, so a Ctrl-C (SIGINT) or SIGTERM reaches this script alone, which
# passes the first one on to mpirun as SIGUSR1. mpirun forwards SIGUSR1 to every rank with no SIGKILL after it: the
# train job finishes its step, writes its checkpoint and the record with status "interrupted", and exits 4, which
# mpirun and this script return. A second signal (0.5 s or more after the first: one Ctrl-C can arrive twice, from
# the terminal and from `timeout`) goes to the ranks as SIGTERM, which stops them at once (exit 128 + 15; the record
# then says "running" unless it was already written). A signal before any rank has started stops mpirun; one while
# the ranks start is held by the trainer until its job is known (a train run then stops after its first step, with
# its record; the benchmark jobs end). Only the few milliseconds between a rank's exec and its main() are uncovered
# (SIGUSR1's default action ends it with no record). Started with `&` from a script, this script begins with
# SIGINT ignored, which bash cannot trap: use SIGTERM (`kill`) there. Open MPI's
# kill timeout (odls_base_sigkill_timeout) stays at its default 1 s, so a rank's non-zero exit (bad input 2, error 1,
# interrupted 4) returns within about 2 s. (Until v40 this script raised it to 10 s for a graceful Ctrl-C, and then
# every non-zero exit took about 20 s to return.)
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

set -m  # job control: the background job below gets a process group of its own
"${MPIRUN:-mpirun}" "${args[@]}" "${extra[@]}" "$@" < /dev/null &
pid=$!
first_at=""  # when the first signal came (EPOCHREALTIME, microseconds)
# shellcheck disable=SC2317  # called from pass_on
now_us() { local t=${EPOCHREALTIME/./}; echo "${t/,/}"; }
# shellcheck disable=SC2317  # pass_on runs from the traps below
pass_on() {  # SIGNAL: the first signal as SIGUSR1 (a graceful stop), a later one as SIGTERM to the ranks
  if [[ -z $first_at ]]; then
    first_at=$(now_us)
    if ! pgrep -P "$pid" > /dev/null 2>&1; then  # no rank started yet: nothing to finish, stop mpirun
      echo "mpirun.sh: SIG$1 before the ranks started: stopping mpirun" >&2
      kill -TERM "$pid" 2>/dev/null || true
      return 0
    fi
    echo "mpirun.sh: SIG$1: asking the ranks to stop after their step (SIGUSR1); again to stop them at once" >&2
    kill -USR1 "$pid" 2>/dev/null || true
  elif (( $(now_us) - first_at < 500000 )); then
    return 0  # the same Ctrl-C twice (e.g. from the terminal and from `timeout`): not a second request
  else  # to the ranks (mpirun's children), not to mpirun: Open MPI 4.1's mpirun can crash on a signal while it
    # tears the job down after the ranks' exit (SIGSEGV, v40); without pkill, to mpirun
    echo "mpirun.sh: SIG$1 again: stopping the ranks at once (SIGTERM)" >&2
    local r=0
    pkill -TERM -P "$pid" 2>/dev/null || r=$?
    if (( r > 1 )); then kill -TERM "$pid" 2>/dev/null || true; fi
  fi
}
trap 'pass_on INT || true' INT
trap 'pass_on TERM || true' TERM
trap 'pass_on HUP || true' HUP
# mpirun's exit status. A trapped signal interrupts wait (128 + signal): wait again while mpirun runs; if it ended
# meanwhile, one more wait gives its own status (127 where that wait had already collected it).
while :; do
  rc=0
  wait "$pid" || rc=$?
  (( rc > 128 )) || break
  kill -0 "$pid" 2>/dev/null && continue
  again=0
  wait "$pid" || again=$?
  if (( again != 127 )); then rc=$again; fi
  break
done
exit "$rc"
