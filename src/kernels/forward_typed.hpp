// run_forward for fixed element types: upload, run the variant, download.
#pragma once

#include "core/half_types.hpp"
#include "kernels/forward.hpp"
#include "kernels/run_variant.hpp"

#include <limits>
#include <type_traits>

namespace linattn {

template <class T>
T quiet_nan();
template <>
inline float quiet_nan<float>() { return std::numeric_limits<float>::quiet_NaN(); }
template <>
inline double quiet_nan<double>() { return std::numeric_limits<double>::quiet_NaN(); }
template <>
inline fp16_t quiet_nan<fp16_t>() { return fp16_t{0x7e00}; }
template <>
inline bf16_t quiet_nan<bf16_t>() { return bf16_t{0x7fc0}; }

template <class T>
using HostView4 = Kokkos::View<T****, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T>
using HostView5 = Kokkos::View<T*****, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class T>
DeviceView4<T> upload4(const char* label, const Tensor& t) {
  DeviceView4<T> d(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing), t.shape[0], t.shape[1],
                   t.shape[2], t.shape[3]);
  HostView4<const T> hv(t.data<T>(), t.shape[0], t.shape[1], t.shape[2], t.shape[3]);
  Kokkos::deep_copy(d, hv);
  return d;
}

template <class T>
void download(Tensor& t, const DeviceView4<T>& d) {
  HostView4<T> hv(t.data<T>(), t.shape[0], t.shape[1], t.shape[2], t.shape[3]);
  Kokkos::deep_copy(hv, d);
}
template <class T>
void download(Tensor& t, const DeviceView5<T>& d) {
  HostView5<T> hv(t.data<T>(), t.shape[0], t.shape[1], t.shape[2], t.shape[3], t.shape[4]);
  Kokkos::deep_copy(hv, d);
}

template <class In, class Out, class Snap>
ForwardOutput run_forward_typed(const Problem& p, const ForwardConfig& config, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor* initial_state, DType out_dtype, DType snap_dtype) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const DType acc_dtype = accumulation_dtype(q.dtype);
  ForwardOutput out;
  Kokkos::Timer timer;

  ForwardViews<In, Out, Snap, Acc> views;
  views.q = upload4<In>("linattn::q", q);
  views.k = upload4<In>("linattn::k", k);
  views.v = upload4<In>("linattn::v", v);
  if (initial_state) {
    Tensor s0 = initial_state->dtype == acc_dtype
                    ? *initial_state
                    : Tensor::from_double(acc_dtype, initial_state->shape, initial_state->to_double());
    views.initial_state = upload4<Acc>("linattn::initial_state", s0);
  }
  DeviceView4<Out> o(Kokkos::view_alloc(std::string("linattn::o"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DV);
  DeviceView4<Acc> fs(Kokkos::view_alloc(std::string("linattn::final_state"), Kokkos::WithoutInitializing), p.B, p.H,
                      p.DK, p.DV);
  DeviceView5<Snap> h;
  if (config.snapshots != SnapshotMode::none)
    h = DeviceView5<Snap>(Kokkos::view_alloc(std::string("linattn::h"), Kokkos::WithoutInitializing), p.B,
                          p.num_chunks(), p.H, p.DK, p.DV);
  if (config.poison_outputs) {
    Kokkos::deep_copy(o, quiet_nan<Out>());
    Kokkos::deep_copy(fs, quiet_nan<Acc>());
    if (h.extent(0) > 0) Kokkos::deep_copy(h, quiet_nan<Snap>());
  }
  views.o = o;
  views.final_state = fs;
  views.h = h;
  Kokkos::fence();
  out.upload_seconds = timer.seconds();

  timer.reset();
  const VariantRun run = run_variant(p, config, views);
  Kokkos::fence();
  out.kernel_seconds = timer.seconds();
  out.block_dv = run.plan.block_dv;
  out.scratch_level = run.plan.level;
  out.gemm = run.gemm;

  timer.reset();
  out.o = Tensor(out_dtype, p.o_shape());
  download(out.o, o);
  out.final_state = Tensor(acc_dtype, p.state_shape());
  download(out.final_state, fs);
  if (h.extent(0) > 0) {
    out.h = Tensor(snap_dtype, p.h_shape());
    download(out.h, h);
  }
  out.download_seconds = timer.seconds();
  return out;
}

}  // namespace linattn
