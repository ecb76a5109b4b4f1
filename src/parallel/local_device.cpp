#include "parallel/local_device.hpp"

#include "parallel/communicator.hpp"

#include <Kokkos_Core.hpp>

#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

namespace linattn::parallel {
namespace {

int device_count() {
#ifdef KOKKOS_ENABLE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
#else
  return 0;  // host backends: no device to choose
#endif
}

}  // namespace

int local_device_id() {
  if (size() == 1) return -1;
  const int devices = device_count();
  return devices > 0 ? local_rank() % devices : -1;
}

}  // namespace linattn::parallel
