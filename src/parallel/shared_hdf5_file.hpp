// HDF5 property lists for one output file that every rank writes together
// (context parallel, docs/PARALLEL.md): the MPI-IO file driver over the world
// communicator and collective transfers. In builds without MPI
// (shared_hdf5_file_serial.cpp) they are plain property lists, so the file is
// an ordinary one written by the one rank.
#pragma once

#include "io/hdf5_handles.hpp"

namespace linattn::parallel {

hdf5::PropertyList shared_file_access();  // for H5Fcreate
hdf5::PropertyList collective_transfer();  // for H5Dwrite

}  // namespace linattn::parallel
