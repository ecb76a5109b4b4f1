// run_forward for fixed element types: upload, run the variant, download.
#pragma once

#include "core/half_types.hpp"
#include "core/tensor_span.hpp"
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
DeviceView4<T> upload4(const char* label, const TensorSpan& t) {
  DeviceView4<T> d(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing), t.shape[0], t.shape[1],
                   t.shape[2], t.shape[3]);
  HostView4<const T> hv(t.data<T>(), t.shape[0], t.shape[1], t.shape[2], t.shape[3]);
  Kokkos::deep_copy(d, hv);
  return d;
}

template <class T>
DeviceView1<T> upload1(const char* label, const TensorSpan& t) {
  DeviceView1<T> d(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing), t.shape[0]);
  Kokkos::View<const T*, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> hv(
      t.data<T>(), t.shape[0]);
  Kokkos::deep_copy(d, hv);
  return d;
}

template <class T>
DeviceView3<T> upload3(const char* label, const TensorSpan& t) {
  DeviceView3<T> d(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing), t.shape[0], t.shape[1],
                   t.shape[2]);
  HostView3<const T> hv(t.data<T>(), t.shape[0], t.shape[1], t.shape[2]);
  Kokkos::deep_copy(d, hv);
  return d;
}

template <class T>
DeviceView5<T> upload5(const char* label, const TensorSpan& t) {
  DeviceView5<T> d(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing), t.shape[0], t.shape[1],
                   t.shape[2], t.shape[3], t.shape[4]);
  HostView5<const T> hv(t.data<T>(), t.shape[0], t.shape[1], t.shape[2], t.shape[3], t.shape[4]);
  Kokkos::deep_copy(d, hv);
  return d;
}

// Kernels on a host backend read and write host memory: there the views are
// the tensors' own bytes (no copy, no second allocation, no second set of
// fresh pages); on a device, copies. docs/PARALLEL.md, "A CPU node".
constexpr bool kernels_use_host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

template <class View, std::size_t... I>
View view_of_bytes(const TensorSpan& t, std::index_sequence<I...>) {
  return View(t.data<typename View::value_type>(), static_cast<std::size_t>(t.shape[I])...);
}
template <class View, std::size_t... I>
View new_view(const char* label, const std::vector<std::int64_t>& shape, std::index_sequence<I...>) {
  return View(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing),
              static_cast<std::size_t>(shape[I])...);
}
template <class View>
using ViewRank = std::make_index_sequence<static_cast<std::size_t>(View::rank)>;

// The view the kernels read of input t, whose bytes outlive them (the
// caller's tensor or slot, never a temporary: see the deleted overload).
template <class View>
View input_view(const char* label, const TensorSpan& t) {
  if constexpr (kernels_use_host_memory) {
    return view_of_bytes<View>(t, ViewRank<View>{});
  } else {
    View d = new_view<View>(label, t.shape, ViewRank<View>{});
    Kokkos::deep_copy(d, view_of_bytes<typename View::HostMirror>(t, ViewRank<View>{}));
    return d;
  }
}
template <class View>
View input_view(const char* label, Tensor&& t) = delete;

// The view a kernel writes and t, the bytes that receive it (a tensor or a
// slot, allocated, uninitialized): on the host the same bytes, on a device a
// view that output_to copies back.
template <class View>
View output_view(const char* label, const TensorSpan& t) {
  if constexpr (kernels_use_host_memory) return view_of_bytes<View>(t, ViewRank<View>{});
  else return new_view<View>(label, t.shape, ViewRank<View>{});
}
template <class View>
void output_to(const TensorSpan& t, const View& d) {
  if constexpr (!kernels_use_host_memory)
    Kokkos::deep_copy(view_of_bytes<typename View::HostMirror>(t, ViewRank<View>{}), d);
}

// t as dtype: t's own bytes when it has that type, else a converted copy
// that this object holds (so use it within the expression that made it).
class Converted {
 public:
  Converted(const TensorSpan& t, DType dtype) {
    if (t.dtype == dtype) {
      span_ = t;
    } else {
      copy_ = Tensor::from_double(dtype, t.shape, t.to_double());
      span_ = copy_;
    }
  }
  Converted(const Converted&) = delete;  // span_ may point into copy_
  Converted& operator=(const Converted&) = delete;
  operator const TensorSpan&() const { return span_; }

 private:
  Tensor copy_;
  TensorSpan span_;
};
inline Converted converted(const TensorSpan& t, DType dtype) { return Converted(t, dtype); }

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

// A gate's log-decays (g [B, T, H], g_gamma [H] or gk [B, T, H, DK], any float
// dtype) into the views' g, g_gamma or gk, in the accumulation type: the
// forward's and backward's views alike.
template <class Acc, class Views>
void upload_gate(Views& views, GateKind kind, const TensorSpan& gate, DType acc_dtype) {
  if (kind == GateKind::per_token) views.g = upload3<Acc>("linattn::g", converted(gate, acc_dtype));
  if (kind == GateKind::per_head) views.g_gamma = upload1<Acc>("linattn::g_gamma", converted(gate, acc_dtype));
  if (kind == GateKind::per_channel) views.gk = upload4<Acc>("linattn::gk", converted(gate, acc_dtype));
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
  views.q = input_view<DeviceView4<In>>("linattn::q", q);
  views.k = input_view<DeviceView4<In>>("linattn::k", k);
  views.v = input_view<DeviceView4<In>>("linattn::v", v);
  if (initial_state) views.initial_state = upload4<Acc>("linattn::initial_state", converted(*initial_state, acc_dtype));
  DeviceView3<Acc> z0, z_state;
  if (initial_z) z0 = upload3<Acc>("linattn::initial_z", converted(*initial_z, acc_dtype));
  if (gate) upload_gate<Acc>(views, config.gate, *gate, acc_dtype);
  out.o = Tensor::uninitialized(out_dtype, p.o_shape());
  out.final_state = Tensor::uninitialized(acc_dtype, p.state_shape());
  DeviceView4<Out> o = output_view<DeviceView4<Out>>("linattn::o", out.o);
  DeviceView4<Acc> fs = output_view<DeviceView4<Acc>>("linattn::final_state", out.final_state);
  DeviceView5<Snap> h;
  if (config.snapshots != SnapshotMode::none) {
    out.h = Tensor::uninitialized(snap_dtype, p.h_shape());
    h = output_view<DeviceView5<Snap>>("linattn::h", out.h);
  }
  // Normalization divides o after the variant ran, so the variant writes o in
  // the accumulation type (a separate buffer unless Out is that type), except
  // on the tensor-core kernel, which divides in its own pass.
  DeviceView4<Acc> o_raw;
  if (config.normalize) {
    if constexpr (std::is_same<Out, Acc>::value) o_raw = o;
    else if (normalize_writes_raw_o(choose_path_here<In>(p, config)))
      o_raw = DeviceView4<Acc>(Kokkos::view_alloc(std::string("linattn::o_unnormalized"), Kokkos::WithoutInitializing),
                               p.B, p.T, p.H, p.DV);
    out.z_state = Tensor::uninitialized(acc_dtype, p.z_shape());
    z_state = output_view<DeviceView3<Acc>>("linattn::z_state", out.z_state);
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
  output_to(out.o, o);
  output_to(out.final_state, fs);
  if (h.extent(0) > 0) output_to(out.h, h);
  if (config.normalize) output_to(out.z_state, z_state);
  out.download_seconds = timer.seconds();
  return out;
}

}  // namespace linattn
