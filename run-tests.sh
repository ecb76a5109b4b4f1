#!/usr/bin/env bash
# The test suite, from a fresh Debian 12 machine: installs the packages (if
# missing), builds linattn and its tests, and runs every test through CTest.
set -euo pipefail
cd "$(dirname "$0")"

scripts/install-debian-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "${LINATTN_JOBS:-2}"
