#!/usr/bin/env bash
# The Debian 12 packages linattn needs to build, run and test, named in one
# place. Installs only what is missing, so a rerun on a ready machine is quick
# and touches nothing.
set -euo pipefail

packages=(
  cmake g++ make                                           # toolchain
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev    # Kokkos and Kokkos Kernels (Serial)
  libblas-dev liblapack-dev                                # Kokkos Kernels' CMake package links libblas.so and
                                                           # liblapack.so but its package does not depend on them
  libhdf5-dev                                              # HDF5 C library
  libopenmpi-dev openmpi-bin libhdf5-openmpi-dev           # MPI runs (docs/PARALLEL.md): Open MPI, mpirun and
                                                           # parallel HDF5; the build uses them when found
  libcli11-dev nlohmann-json3-dev                          # command line, JSON reports
  libgtest-dev                                             # GoogleTest
  python3-h5py python3-numpy                               # h5py read-back test, inputs/README.md snippets
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "Debian packages: all present"
  exit 0
fi

echo "Debian packages: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
