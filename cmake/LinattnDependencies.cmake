# Finds Kokkos, Kokkos Kernels, HDF5, CLI11, nlohmann_json and GoogleTest and
# exposes one target for the Kokkos pair: linattn::kokkos.
#
# An upstream install (-DKokkos_ROOT=... -DKokkosKernels_ROOT=...) provides
# working Kokkos::kokkos and Kokkos::kokkoskernels targets and is used as is.
# Debian 12's Trilinos packaging (Kokkos 3.4) has rough edges, mended here only
# when they are present: Kokkos::kokkos names /usr/lib/include (the headers are
# in /usr/include/trilinos) and there is no Kokkos::kokkoskernels target, only
# trilinos_kokkoskernels without include directories.

find_package(Kokkos REQUIRED)
find_package(KokkosKernels REQUIRED)

# LINATTN_CUDA_SASS_ONLY (CUDA builds): Kokkos compiles for -arch=sm_XX, which
# embeds PTX beside the machine code; this keeps the machine code only
# (-arch=compute_XX -code=sm_XX), for binaries carried to a known GPU
# (bench/make_gpu_bundle.sh: with PTX the bundle outgrew what can be carried).
option(LINATTN_CUDA_SASS_ONLY "CUDA: machine code only, no PTX" OFF)
if(LINATTN_CUDA_SASS_ONLY AND TARGET Kokkos::kokkoscore)
  get_target_property(_linattn_opts Kokkos::kokkoscore INTERFACE_COMPILE_OPTIONS)
  if(_linattn_opts)
    string(REGEX REPLACE "-arch=sm_([0-9]+a?)" "-arch=compute_\\1;-code=sm_\\1" _linattn_opts "${_linattn_opts}")
    set_target_properties(Kokkos::kokkoscore PROPERTIES INTERFACE_COMPILE_OPTIONS "${_linattn_opts}")
    message(STATUS "linattn: Kokkos compile options -> ${_linattn_opts}")
  endif()
endif()

add_library(linattn_kokkos INTERFACE)
add_library(linattn::kokkos ALIAS linattn_kokkos)
target_link_libraries(linattn_kokkos INTERFACE Kokkos::kokkos)

if(TARGET Kokkos::kokkoskernels)
  target_link_libraries(linattn_kokkos INTERFACE Kokkos::kokkoskernels)
elseif(TARGET trilinos_kokkoskernels)
  target_link_libraries(linattn_kokkos INTERFACE trilinos_kokkoskernels)
else()
  message(FATAL_ERROR "KokkosKernels was found but exposes neither Kokkos::kokkoskernels nor trilinos_kokkoskernels")
endif()

# Debian: the include directory recorded on Kokkos::kokkos does not exist.
get_target_property(_linattn_kokkos_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
set(_linattn_need_inc FALSE)
foreach(_dir IN LISTS _linattn_kokkos_inc)
  if(NOT _dir MATCHES "^\\$<" AND NOT EXISTS "${_dir}/Kokkos_Core.hpp")
    set(_linattn_need_inc TRUE)
  endif()
endforeach()
if(_linattn_need_inc OR NOT TARGET Kokkos::kokkoskernels)
  find_path(LINATTN_KOKKOS_INCLUDE_DIR Kokkos_Core.hpp PATHS ${KokkosKernels_INCLUDE_DIRS} /usr/include/trilinos
            NO_DEFAULT_PATH)
  if(NOT LINATTN_KOKKOS_INCLUDE_DIR)
    message(FATAL_ERROR "Kokkos_Core.hpp not found next to the Kokkos CMake package")
  endif()
  message(STATUS "linattn: mending Kokkos include directory -> ${LINATTN_KOKKOS_INCLUDE_DIR}")
  target_include_directories(linattn_kokkos SYSTEM INTERFACE ${LINATTN_KOKKOS_INCLUDE_DIR})
endif()

include(LinattnMPI)  # finds HDF5: the parallel build when MPI is used
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json REQUIRED)
