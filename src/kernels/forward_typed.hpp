// run_forward for fixed element types: upload, run the variant, download.
#pragma once

#include "core/half_types.hpp"
#include "kernels/forward.hpp"
#include "kernels/normalize_output.hpp"
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
using HostView3 = Kokkos::View<T***, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
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
DeviceView1<T> upload1(const char* label, const Tensor& t) {
  DeviceView1<T> d(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing), t.shape[0]);
  Kokkos::View<const T*, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> hv(
      t.data<T>(), t.shape[0]);
  Kokkos::deep_copy(d, hv);
  return d;
}

template <class T>
DeviceView3<T> upload3(const char* label, const Tensor& t) {
  DeviceView3<T> d(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing), t.shape[0], t.shape[1],
                   t.shape[2]);
  HostView3<const T> hv(t.data<T>(), t.shape[0], t.shape[1], t.shape[2]);
  Kokkos::deep_copy(d, hv);
  return d;
}

template <class T>
DeviceView5<T> upload5(const char* label, const Tensor& t) {
  DeviceView5<T> d(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing), t.shape[0], t.shape[1],
                   t.shape[2], t.shape[3], t.shape[4]);
  HostView5<const T> hv(t.data<T>(), t.shape[0], t.shape[1], t.shape[2], t.shape[3], t.shape[4]);
  Kokkos::deep_copy(d, hv);
  return d;
}

// t converted to dtype (a copy only when it differs).
inline Tensor converted(const Tensor& t, DType dtype) {
  return t.dtype == dtype ? t : Tensor::from_double(dtype, t.shape, t.to_double());
}

template <class T>
void download(Tensor& t, const DeviceView3<T>& d) {
  HostView3<T> hv(t.data<T>(), t.shape[0], t.shape[1], t.shape[2]);
  Kokkos::deep_copy(hv, d);
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

// A gate's log-decays (g [B, T, H] or g_gamma [H], any float dtype) into the
// views' g or g_gamma, in the accumulation type: the forward's and backward's views alike.
template <class Acc, class Views>
void upload_gate(Views& views, GateKind kind, const Tensor& gate, DType acc_dtype) {
  if (kind == GateKind::per_token) views.g = upload3<Acc>("linattn::g", converted(gate, acc_dtype));
  if (kind == GateKind::per_head) views.g_gamma = upload1<Acc>("linattn::g_gamma", converted(gate, acc_dtype));
}

template <class In, class Out, class Snap>
ForwardOutput run_forward_typed(const Problem& p, const ForwardConfig& config, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor* initial_state, const Tensor* initial_z,
                                const Tensor* gate, DType out_dtype, DType snap_dtype) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const DType acc_dtype = accumulation_dtype(q.dtype);
  ForwardOutput out;
  Kokkos::Timer timer;

  ForwardViews<In, Out, Snap, Acc> views;
  views.q = upload4<In>("linattn::q", q);
  views.k = upload4<In>("linattn::k", k);
  views.v = upload4<In>("linattn::v", v);
  if (initial_state) views.initial_state = upload4<Acc>("linattn::initial_state", converted(*initial_state, acc_dtype));
  DeviceView3<Acc> z0, z_state;
  if (initial_z) z0 = upload3<Acc>("linattn::initial_z", converted(*initial_z, acc_dtype));
  if (gate) upload_gate<Acc>(views, config.gate, *gate, acc_dtype);
  const auto N = p.num_sequences();
  DeviceView4<Out> o(Kokkos::view_alloc(std::string("linattn::o"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DV);
  DeviceView4<Acc> fs(Kokkos::view_alloc(std::string("linattn::final_state"), Kokkos::WithoutInitializing), N, p.H,
                      p.DK, p.DV);
  DeviceView5<Snap> h;
  const std::vector<std::int64_t> hs = p.h_shape();
  if (config.snapshots != SnapshotMode::none)
    h = DeviceView5<Snap>(Kokkos::view_alloc(std::string("linattn::h"), Kokkos::WithoutInitializing), hs[0], hs[1],
                          hs[2], hs[3], hs[4]);
  // Normalization divides o after the variant ran, so the variant writes o in
  // the accumulation type (a separate buffer unless Out is that type), except
  // on the tensor-core kernel, which divides in its own pass.
  DeviceView4<Acc> o_raw;
  if (config.normalize) {
    if constexpr (std::is_same<Out, Acc>::value) o_raw = o;
    else if (normalize_writes_raw_o(choose_path_here<In>(p, config)))
      o_raw = DeviceView4<Acc>(Kokkos::view_alloc(std::string("linattn::o_unnormalized"), Kokkos::WithoutInitializing),
                               p.B, p.T, p.H, p.DV);
    z_state = DeviceView3<Acc>(Kokkos::view_alloc(std::string("linattn::z_state"), Kokkos::WithoutInitializing), N,
                               p.H, p.DK);
  }
  if (config.poison_outputs) {
    Kokkos::deep_copy(o, quiet_nan<Out>());
    Kokkos::deep_copy(fs, quiet_nan<Acc>());
    if (h.extent(0) > 0) Kokkos::deep_copy(h, quiet_nan<Snap>());
    if (config.normalize) {
      if (o_raw.extent(0) > 0) Kokkos::deep_copy(o_raw, quiet_nan<Acc>());
      Kokkos::deep_copy(z_state, quiet_nan<Acc>());
    }
  }
  views.o = o;
  views.final_state = fs;
  views.h = h;
  Kokkos::fence();
  out.upload_seconds = timer.seconds();

  timer.reset();
  VariantRun run;
  if (config.normalize) {
    run = run_variant_normalized(p, config, views, NormalizeViews<Acc>{o_raw, z0, z_state});
  } else {
    run = run_variant(p, config, views);
  }
  Kokkos::fence();
  out.kernel_seconds = timer.seconds();
  out.block_dv = run.plan.block_dv;
  out.segments = run.segments;
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
  if (config.normalize) {
    out.z_state = Tensor(acc_dtype, p.z_shape());
    download(out.z_state, z_state);
  }
  out.download_seconds = timer.seconds();
  return out;
}

}  // namespace linattn
