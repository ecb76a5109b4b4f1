# MPI and parallel HDF5 (issue 16; docs/PARALLEL.md). LINATTN_MPI:
#   AUTO (default): use them when both are found, else build as without MPI;
#   ON:  require them (a configure error says what to install);
#   OFF: never look for them.
# Debian 12 installs Open MPI's HDF5 beside the serial one
# (/usr/lib/x86_64-linux-gnu/hdf5/openmpi, wrapper h5pcc); HDF5_PREFER_PARALLEL
# makes FindHDF5 take it, and HDF5_IS_PARALLEL says whether it did. Sets
# LINATTN_HAVE_MPI and finds HDF5 (the caller's find_package(HDF5) is this).

set(LINATTN_MPI AUTO CACHE STRING "Build with MPI and parallel HDF5: AUTO, ON or OFF")
set_property(CACHE LINATTN_MPI PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${LINATTN_MPI}" _linattn_mpi)
if(NOT _linattn_mpi MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "LINATTN_MPI must be AUTO, ON or OFF (got '${LINATTN_MPI}')")
endif()

set(_linattn_mpi_install "install them on Debian 12 with: apt-get install libopenmpi-dev openmpi-bin libhdf5-openmpi-dev")
set(LINATTN_HAVE_MPI OFF)
if(NOT _linattn_mpi STREQUAL "OFF")
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(HDF5_PREFER_PARALLEL TRUE)
  elseif(_linattn_mpi STREQUAL "ON")
    message(FATAL_ERROR "LINATTN_MPI=ON but no MPI C++ library was found; ${_linattn_mpi_install}")
  endif()
endif()

# FindHDF5 caches what it found. A build folder configured for the other
# flavour (serial before MPI was wanted; folders from before this file are
# serial) looks again: forget its HDF5 entries.
set(_linattn_hdf5_flavour serial)
if(HDF5_PREFER_PARALLEL)
  set(_linattn_hdf5_flavour parallel)
endif()
set(_linattn_cached_flavour serial)
if(LINATTN_HDF5_FLAVOUR)
  set(_linattn_cached_flavour ${LINATTN_HDF5_FLAVOUR})
endif()
if(DEFINED CACHE{HDF5_C_COMPILER_EXECUTABLE} AND NOT _linattn_cached_flavour STREQUAL _linattn_hdf5_flavour)
  get_cmake_property(_linattn_cache CACHE_VARIABLES)
  foreach(_var IN LISTS _linattn_cache)
    if(_var MATCHES "^HDF5_")
      unset(${_var} CACHE)
    endif()
  endforeach()
  message(STATUS "linattn: looking for the ${_linattn_hdf5_flavour} HDF5 again")
endif()
set(LINATTN_HDF5_FLAVOUR ${_linattn_hdf5_flavour} CACHE INTERNAL "the HDF5 flavour FindHDF5 looked for")

find_package(HDF5 REQUIRED COMPONENTS C)

if(MPI_CXX_FOUND AND NOT _linattn_mpi STREQUAL "OFF")
  if(HDF5_IS_PARALLEL)
    set(LINATTN_HAVE_MPI ON)
  elseif(_linattn_mpi STREQUAL "ON")
    message(FATAL_ERROR "LINATTN_MPI=ON but the HDF5 found (${HDF5_C_LIBRARIES}) is not built for MPI; "
                        "${_linattn_mpi_install}")
  else()
    message(STATUS "linattn: MPI found, but HDF5 (${HDF5_C_LIBRARIES}) is serial: building without MPI "
                   "(libhdf5-openmpi-dev enables it)")
  endif()
endif()
message(STATUS "linattn: LINATTN_MPI=${LINATTN_MPI} -> MPI ${LINATTN_HAVE_MPI}")
