#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs the packages linattn
# needs (if missing), builds it, runs it on inputs/example.h5 into outputs/ and
# checks every output against the fp64 reference.
set -euo pipefail
cd "$(dirname "$0")"

scripts/install-debian-deps.sh
scripts/build.sh linattn
./build/linattn run inputs/example.h5 -o outputs/ --force
for output in outputs/example.*.h5; do
  ./build/linattn verify "$output"
done
