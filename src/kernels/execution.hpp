// Where kernels run and the View types they take: one place to change the
// execution space, and the compatibility shims between Kokkos 3.4 (Debian) and 4.x.
#pragma once

#include <Kokkos_Core.hpp>

#include <string>
#include <type_traits>

namespace linattn {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using Member = TeamPolicy::member_type;
using ScratchSpace = ExecSpace::scratch_memory_space;

// Whether kernels run on the host (team scratch of both levels is then
// ordinary memory, and the host tile GEMM can run).
constexpr bool host_execution = std::is_same<ExecSpace, Kokkos::DefaultHostExecutionSpace>::value;

template <class T>
using Tile = Kokkos::View<T**, Kokkos::LayoutRight, ScratchSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class T>
using DeviceView1 = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace>;
template <class T>
using DeviceView2 = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace>;
template <class T>
using DeviceView3 = Kokkos::View<T***, Kokkos::LayoutRight, MemSpace>;
template <class T>
using DeviceView4 = Kokkos::View<T****, Kokkos::LayoutRight, MemSpace>;
template <class T>
using DeviceView5 = Kokkos::View<T*****, Kokkos::LayoutRight, MemSpace>;

// exp on every backend (Kokkos 3.4 keeps its math functions in Experimental).
template <class T>
KOKKOS_INLINE_FUNCTION T kernel_exp(T x) {
#if KOKKOS_VERSION >= 30700
  return Kokkos::exp(x);
#else
  return Kokkos::Experimental::exp(x);
#endif
}

// Pushes a named profiling region for the lifetime of the object (Kokkos 3.4
// has no ScopedRegion; this works on every version).
class ScopedRegion {
 public:
  explicit ScopedRegion(const std::string& name) { Kokkos::Profiling::pushRegion(name); }
  ~ScopedRegion() { Kokkos::Profiling::popRegion(); }
  ScopedRegion(const ScopedRegion&) = delete;
  ScopedRegion& operator=(const ScopedRegion&) = delete;
};

// "Serial", "Cuda", ... and the Kokkos version as "4.6.99".
std::string kokkos_backend_name();
std::string kokkos_version_string();

}  // namespace linattn
