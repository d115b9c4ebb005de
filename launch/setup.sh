#!/usr/bin/env bash
# Installs what is missing (Debian/Ubuntu packages), builds trainer into build/, and prepares the default data set.
#   launch/setup.sh                 # install + build + data
#   TRAINER_BUILD_DIR=build-x launch/setup.sh
#   TRAINER_SKIP_INSTALL=1 launch/setup.sh   # build only (machines without apt, e.g. the GPU machine)
# Environment: TRAINER_CMAKE_ARGS (extra cmake arguments), TRAINER_JOBS (parallel build jobs).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TRAINER_BUILD_DIR:-build}

packages=(build-essential cmake ninja-build git pkg-config libopenmpi-dev openmpi-bin nlohmann-json3-dev
          libspdlog-dev libfmt-dev catch2 libopenblas-dev zlib1g-dev python3 python3-torch python3-numpy
          python3-pytest python3-matplotlib fortunes)

if [[ -z "${TRAINER_SKIP_INSTALL:-}" ]] && command -v dpkg-query >/dev/null; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release ${TRAINER_CMAKE_ARGS:-}
fi
cmake --build "$build" -j "${TRAINER_JOBS:-$(nproc)}"

# NCCL comes from NVIDIA's CUDA repository, which setup does not add: it never installs NCCL. Without it a GPU build runs multi-GPU jobs over MPI
# (parallel.comm auto resolves to mpi); say so here rather than only in CMake's log. A build without CUDA (no nvcc,
# -DTRAINER_CUDA=OFF) has no use for NCCL: no advice there.
version=$("$build/trainer" --version 2>/dev/null || true)
if [[ "$version" == *"CUDA: built in"* && "$version" == *"NCCL: absent"* ]]; then
  echo "setup: NCCL absent: built without NCCL, so runs on several GPUs use MPI (parallel.comm auto -> mpi; slower)."
  echo "       For NCCL: install NVIDIA's libnccl2 and libnccl-dev (CUDA apt repository), or set NCCL_HOME to an"
  echo "       NCCL install, then: rm $build/CMakeCache.txt && launch/setup.sh   ($build/trainer --version says which)"
fi

# The default job's data: the English fortune-cookie corpus as byte-level tokens (vocab 256).
data="$build/data/fortunes.u16"
if [[ ! -f "$data" && -d /usr/share/games/fortunes ]]; then
  mkdir -p "$build/data"
  python3 launch/text_to_tokens.py "$data" /usr/share/games/fortunes
fi
echo "setup: ok ($build/trainer)"
