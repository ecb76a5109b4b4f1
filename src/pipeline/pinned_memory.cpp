#include "pipeline/pinned_memory.hpp"

#include <Kokkos_Core.hpp>

#include <unistd.h>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace linattn::pipeline {

bool pin_host_memory(void* data, std::size_t bytes) {
#if defined(KOKKOS_ENABLE_CUDA)
  if (cudaHostRegister(data, bytes, cudaHostRegisterDefault) == cudaSuccess) return true;
  cudaGetLastError();  // pageable copies still work, only slower
  return false;
#else
  (void)data;
  (void)bytes;
  return false;
#endif
}

void unpin_host_memory(void* data) {
#if defined(KOKKOS_ENABLE_CUDA)
  cudaHostUnregister(data);
#else
  (void)data;
#endif
}

void device_memory(std::size_t& free_bytes, std::size_t& total_bytes) {
#if defined(KOKKOS_ENABLE_CUDA)
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) return;
  cudaGetLastError();
#endif
  const long pages = ::sysconf(_SC_PHYS_PAGES), available = ::sysconf(_SC_AVPHYS_PAGES), size = ::sysconf(_SC_PAGESIZE);
  total_bytes = static_cast<std::size_t>(pages) * static_cast<std::size_t>(size);
  free_bytes = static_cast<std::size_t>(available) * static_cast<std::size_t>(size);
}

int device_multiprocessors() {
#if defined(KOKKOS_ENABLE_CUDA)
  int device = 0, count = 0;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) == cudaSuccess)
    return count;
  cudaGetLastError();
#endif
  return 0;
}

}  // namespace linattn::pipeline
