# Host code generation flags.
#
# LINATTN_NATIVE_ARCH adds -march=native: users and CI build linattn from
# source on the machine that runs it, and the host tile GEMM
# (src/kernels/host_tile_gemm.hpp) is only fast when the compiler may use the
# machine's vector units (AVX2/AVX-512 FMA instead of baseline SSE2). It
# defaults to OFF for CUDA builds (nvcc_wrapper; host binaries there are often
# built on one machine and run on another) and for compilers other than
# GCC/Clang. -fopenmp-simd makes the `#pragma omp simd` loops of that GEMM
# vectorize along the intended axis without linking OpenMP. No -ffast-math:
# the accuracy levels of DESIGN.md section 6 assume IEEE arithmetic.

set(_linattn_gnu_like FALSE)
if(CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang|AppleClang)$" AND NOT CMAKE_CXX_COMPILER MATCHES "nvcc_wrapper")
  set(_linattn_gnu_like TRUE)
endif()

set(_linattn_native_default OFF)
if(_linattn_gnu_like AND NOT Kokkos_ENABLE_CUDA)
  set(_linattn_native_default ON)
endif()
option(LINATTN_NATIVE_ARCH "Compile host code with -march=native" ${_linattn_native_default})

if(_linattn_gnu_like)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fopenmp-simd>)
  if(LINATTN_NATIVE_ARCH)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
elseif(LINATTN_NATIVE_ARCH)
  message(WARNING "LINATTN_NATIVE_ARCH is ON but ${CMAKE_CXX_COMPILER} is not GCC or Clang; no flag added")
endif()
message(STATUS "linattn: LINATTN_NATIVE_ARCH=${LINATTN_NATIVE_ARCH}")
