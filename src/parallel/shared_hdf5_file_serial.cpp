// shared_hdf5_file.hpp without MPI: default file access and transfers.
#include "parallel/shared_hdf5_file.hpp"

namespace linattn::parallel {

hdf5::PropertyList shared_file_access() { return hdf5::PropertyList(H5Pcreate(H5P_FILE_ACCESS)); }
hdf5::PropertyList collective_transfer() { return hdf5::PropertyList(H5Pcreate(H5P_DATASET_XFER)); }

}  // namespace linattn::parallel
