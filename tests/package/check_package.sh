#!/bin/sh
# Installs the build tree into a scratch prefix, then configures, builds and runs a project that
# uses find_package(tessera). Usage: check_package.sh <tessera build dir> <this folder> <scratch dir>
set -eu
build="$1"; src="$2"; scratch="$3"
rm -rf "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" > /dev/null
cmake -S "$src" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$scratch/prefix" > /dev/null
cmake --build "$scratch/build" > /dev/null
"$scratch/build/consumer"
