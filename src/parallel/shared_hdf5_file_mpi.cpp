// shared_hdf5_file.hpp over parallel HDF5 (H5Pset_fapl_mpio, H5Pset_dxpl_mpio).
#include "parallel/shared_hdf5_file.hpp"

#include "parallel/communicator.hpp"

#include <mpi.h>

namespace linattn::parallel {

// One rank (run by hand, where MPI was never started, or mpirun -np 1) writes
// alone: plain property lists, as in a build without MPI.
hdf5::PropertyList shared_file_access() {
  hdf5::PropertyList fapl(H5Pcreate(H5P_FILE_ACCESS));
  if (size() == 1) return fapl;
  H5Pset_fapl_mpio(fapl.get(), MPI_COMM_WORLD, MPI_INFO_NULL);
  // Every rank makes the same metadata calls (datasets, attributes): write it collectively.
  H5Pset_coll_metadata_write(fapl.get(), 1);
  return fapl;
}

hdf5::PropertyList collective_transfer() {
  hdf5::PropertyList dxpl(H5Pcreate(H5P_DATASET_XFER));
  if (size() == 1) return dxpl;
  H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE);
  return dxpl;
}

}  // namespace linattn::parallel
