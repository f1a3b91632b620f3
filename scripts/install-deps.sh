#!/bin/sh
# Installs the Debian packages tessera needs to build and test, and only those that are missing.
# Safe to run again: when everything is present it does nothing but check.
set -eu

packages="cmake ninja-build g++ llvm-19-dev libzstd-dev libboost-dev libfmt-dev doctest-dev"
# The tests read the timelines tessera writes with nlohmann-json (tessera itself does not need it).
packages="$packages nlohmann-json3-dev"
# OpenBLAS is only a benchmark baseline; the library never links it.
packages="$packages libopenblas-dev"
# oneDNN is only a baseline of bench_gemm; without it that benchmark skips its columns.
packages="$packages libdnnl-dev"
# Open MPI: the MPI transport (meshes over processes, pl::distributed) and its mpiexec tests. Without
# it tessera builds with TESSERA_MPI off.
packages="$packages openmpi-bin libopenmpi-dev"

missing=""
for p in $packages; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done

if [ -z "$missing" ]; then
  echo "install-deps: all packages present"
  exit 0
fi

echo "install-deps: installing$missing"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $missing
