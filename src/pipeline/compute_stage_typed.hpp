// ComputeStage for fixed element types (compute_stage.hpp says what it does).
#pragma once

#include "kernels/forward_typed.hpp"
#include "pipeline/compute_stage.hpp"

#include <algorithm>
#include <cstring>

namespace linattn::pipeline {

template <class In, class Out, class Snap>
class TypedComputeStage final : public ComputeStage {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  using Bytes = Kokkos::View<unsigned char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using HostBytes = Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr bool zero_copy = std::is_same<MemSpace, Kokkos::HostSpace>::value;

 public:
  explicit TypedComputeStage(const ForwardConfig& config) : config_(config) {
    config_.segments = 1;  // see compute_stage.hpp
#if KOKKOS_VERSION >= 40000
    copies_ = Kokkos::Experimental::partition_space(ExecSpace(), 1)[0];
#endif
  }

  GemmPath gemm() const override { return gemm_; }

  double warm_up(const Problem& whole, const CaseStorage& storage) override {
    Kokkos::Timer timer;
    // The case's own kind of problem: a packed case runs the packed launch (its
    // work list, the stream-ordered allocator's first use, the packed kernels),
    // which the first window paid for before: 10 ms of a 14 ms case (H100,
    // BENCHMARKS.md "A packed case in `run`").
    Problem p = whole;
    p.B = 1;
    p.H = 1;
    p.T = 2 * p.chunk;
    p.cu_seqlens.clear();
    if (whole.varlen()) p.cu_seqlens = {0, p.chunk, 2 * p.chunk};
    Window w;
    w.t0 = 0;
    w.t1 = p.T;
    w.seq_end = whole.varlen() ? 2 : 1;
    w.chunks = 2;
    CaseStorage s = storage;
    s.has_initial_state = s.has_initial_z = false;
    const WindowLayout l = window_layout(p, s, w);
    std::vector<unsigned char> in(static_cast<std::size_t>(l.input_bytes)), out(static_cast<std::size_t>(l.output_bytes));
    const In half = from_acc<In>(Acc(0.5));
    for (std::size_t i = 0; i + sizeof(In) <= in.size(); i += sizeof(In)) std::memcpy(&in[i], &half, sizeof(In));
    std::memset(in.data() + l.gate, 0, static_cast<std::size_t>(l.input_bytes - l.gate));  // log-decays of 0: valid
    WindowJob job{&p, &s, &w, l, in.data(), out.data()};
    run(job);
    Kokkos::fence();
    return timer.seconds();
  }

  WindowTimes run(const WindowJob& job) override {
    const Problem& whole = *job.whole;
    const CaseStorage& s = *job.storage;
    const Window& w = *job.window;
    const WindowLayout& l = job.layout;
    const Problem p = window_problem(whole, w);
    const bool first = w.t0 == 0;  // the case's first window: its carry buffers are set up
    WindowTimes times;
    Kokkos::Timer timer;

    // Device memory of this window, carved from one arena that grows as needed.
    const std::int64_t R = l.rows, N = l.states, H = p.H, DK = p.DK, DV = p.DV, Tw = p.T;
    const std::int64_t state = H * DK * DV, zrow = H * DK;
    const bool carried = w.continues;  // the state before the window comes from the one before
    const bool with_s0 = s.has_initial_state || carried;
    const bool with_z0 = s.normalize && (s.has_initial_z || carried);
    arena_.reset();
    const std::int64_t aq = zero_copy ? -1 : arena_.template take<In>(R * Tw * H * DK);
    const std::int64_t ak = zero_copy ? -1 : arena_.template take<In>(R * Tw * H * DK);
    const std::int64_t av = zero_copy ? -1 : arena_.template take<In>(R * Tw * H * DV);
    const std::int64_t ao = zero_copy ? -1 : arena_.template take<Out>(R * Tw * H * DV);
    const std::int64_t ah = zero_copy || !s.snapshots ? -1 : arena_.template take<Snap>(R * w.chunks * state);
    const std::int64_t afs = arena_.template take<Acc>(N * state);
    const std::int64_t as0 = with_s0 ? arena_.template take<Acc>(N * state) : -1;
    const std::int64_t az0 = with_z0 ? arena_.template take<Acc>(N * zrow) : -1;
    const std::int64_t azs = s.normalize ? arena_.template take<Acc>(N * zrow) : -1;
    const bool raw_o = s.normalize && !std::is_same<Out, Acc>::value && normalize_writes_raw_o(choose_path_here<In>(p, config_));
    const std::int64_t araw = raw_o ? arena_.template take<Acc>(R * Tw * H * DV) : -1;
    const std::int64_t gate_count = s.gate == GateKind::per_token     ? R * Tw * H
                                   : s.gate == GateKind::per_channel ? R * Tw * H * DK
                                   : s.gate == GateKind::per_head    ? H
                                                                     : 0;
    const std::int64_t ag = zero_copy || gate_count == 0 ? -1 : arena_.template take<Acc>(gate_count);
    arena_.grow();
    In* q = zero_copy ? host_ptr<In>(job.input, l.q) : arena_.template at<In>(aq);
    In* k = zero_copy ? host_ptr<In>(job.input, l.k) : arena_.template at<In>(ak);
    In* v = zero_copy ? host_ptr<In>(job.input, l.v) : arena_.template at<In>(av);
    Out* o = zero_copy ? host_ptr<Out>(job.output, l.o) : arena_.template at<Out>(ao);
    Snap* h = !s.snapshots ? nullptr : zero_copy ? host_ptr<Snap>(job.output, l.h) : arena_.template at<Snap>(ah);
    Acc* fs = arena_.template at<Acc>(afs);
    Acc* s0 = arena_.template at<Acc>(as0);
    Acc* z0 = arena_.template at<Acc>(az0);
    Acc* zs = arena_.template at<Acc>(azs);
    Acc* o_raw = arena_.template at<Acc>(araw);
    Acc* g = gate_count == 0 ? nullptr : zero_copy ? host_ptr<Acc>(job.input, l.gate) : arena_.template at<Acc>(ag);
    if (first) {
      carry_.reset();
      const std::int64_t carry_rows = whole.varlen() ? 1 : whole.B;
      const std::int64_t acs = carry_.template take<Acc>(carry_rows * state), acz = carry_.template take<Acc>(carry_rows * zrow);
      carry_.grow();
      carry_state_ = carry_.template at<Acc>(acs);
      carry_z_ = carry_.template at<Acc>(acz);
    }

    // Upload: q, k, v, then the starting state: the carried rows, the file's
    // rows for sequences that start here, zeros for the others.
    if (!zero_copy) {
      upload(q, job.input + l.q, R * Tw * H * DK * sizeof(In));
      upload(k, job.input + l.k, R * Tw * H * DK * sizeof(In));
      upload(v, job.input + l.v, R * Tw * H * DV * sizeof(In));
      if (g) upload(g, job.input + l.gate, gate_count * sizeof(Acc));
    }
    const std::int64_t fresh_slot = N - l.fresh_rows;  // the first state row that starts here
    if (s0) {
      if (carried) device_copy(s0, carry_state_, (whole.varlen() ? 1 : N) * state);
      if (l.fresh_rows > 0) {
        if (s.has_initial_state) upload(s0 + fresh_slot * state, job.input + l.initial_state, l.fresh_rows * state * sizeof(Acc));
        else fill(s0 + fresh_slot * state, l.fresh_rows * state, Acc(0));
      }
    }
    if (z0) {
      if (carried) device_copy(z0, carry_z_, (whole.varlen() ? 1 : N) * zrow);
      if (l.fresh_rows > 0) {
        if (s.has_initial_z) upload(z0 + fresh_slot * zrow, job.input + l.initial_z, l.fresh_rows * zrow * sizeof(Acc));
        else fill(z0 + fresh_slot * zrow, l.fresh_rows * zrow, Acc(0));
      }
    }
    copies_.fence();
    if (config_.poison_outputs) {
      fill(o, R * Tw * H * DV, quiet_nan<Out>());
      if (h) fill(h, R * w.chunks * state, quiet_nan<Snap>());
      fill(fs, N * state, quiet_nan<Acc>());
      if (zs) fill(zs, N * zrow, quiet_nan<Acc>());
      if (o_raw) fill(o_raw, R * Tw * H * DV, quiet_nan<Acc>());
      copies_.fence();
    }
    times.upload = timer.seconds();

    // The variant (and normalization) on the default execution space.
    timer.reset();
    const std::vector<std::int64_t> hs = p.h_shape();
    ForwardViews<In, Out, Snap, Acc> views;
    views.q = DeviceView4<const In>(q, R, Tw, H, DK);
    views.k = DeviceView4<const In>(k, R, Tw, H, DK);
    views.v = DeviceView4<const In>(v, R, Tw, H, DV);
    if (s0) views.initial_state = DeviceView4<const Acc>(s0, N, H, DK, DV);
    if (h) views.h = DeviceView5<Snap>(h, hs[0], hs[1], hs[2], hs[3], hs[4]);
    views.final_state = DeviceView4<Acc>(fs, N, H, DK, DV);
    views.o = DeviceView4<Out>(o, R, Tw, H, DV);
    if (s.gate == GateKind::per_token) views.g = DeviceView3<const Acc>(g, R, Tw, H);
    if (s.gate == GateKind::per_head) views.g_gamma = DeviceView1<const Acc>(g, H);
    if (s.gate == GateKind::per_channel) views.gk = DeviceView4<const Acc>(g, R, Tw, H, DK);
    ForwardConfig config = config_;
    config.gate = s.gate;  // the case's own (one stage serves every case of its input type)
    VariantRun ran;
    if (s.normalize) {
      NormalizeViews<Acc> norm;
      if constexpr (std::is_same<Out, Acc>::value) norm.o_raw = views.o;
      else if (o_raw) norm.o_raw = DeviceView4<Acc>(o_raw, R, Tw, H, DV);
      if (z0) norm.z0 = DeviceView3<const Acc>(z0, N, H, DK);
      norm.z_state = DeviceView3<Acc>(zs, N, H, DK);
      ran = run_variant_normalized(p, config, views, norm);
    } else {
      ran = run_variant(p, config, views);
    }
    Kokkos::fence();
    times.kernel = timer.seconds();
    gemm_ = ran.gemm;

    // Carry the state (and z) of the sequences that go on, then download.
    timer.reset();
    if (w.carries) {
      const std::int64_t row = whole.varlen() ? N - 1 : 0, rows = whole.varlen() ? 1 : N;
      device_copy(carry_state_, fs + row * state, rows * state);
      if (zs) device_copy(carry_z_, zs + row * zrow, rows * zrow);
    }
    if (!zero_copy) {
      download(job.output + l.o, o, R * Tw * H * DV * sizeof(Out));
      if (h) download(job.output + l.h, h, R * w.chunks * state * sizeof(Snap));
    }
    const std::int64_t finished_slot = whole.varlen() ? l.finished_row0 - w.seq_begin : 0;
    if (l.finished_rows > 0) {
      download(job.output + l.final_state, fs + finished_slot * state, l.finished_rows * state * sizeof(Acc));
      if (zs) download(job.output + l.final_z, zs + finished_slot * zrow, l.finished_rows * zrow * sizeof(Acc));
    }
    copies_.fence();
    times.download = timer.seconds();
    return times;
  }

 private:
  // Device memory in one allocation that grows (without initializing) when
  // the pieces of a window do not fit: take() reserves aligned pieces in
  // order, grow() makes room, at() gives a piece's address (nullptr for -1).
  class Arena {
   public:
    void reset() { used_ = 0; }
    template <class T>
    std::int64_t take(std::int64_t count) {
      const std::int64_t at = used_;
      used_ += (count * static_cast<std::int64_t>(sizeof(T)) + 255) / 256 * 256;
      return at;
    }
    void grow() {
      if (static_cast<std::int64_t>(memory_.extent(0)) >= used_) return;
      memory_ = Kokkos::View<unsigned char*, MemSpace>();  // free first: the peak is the new size alone
      memory_ = Kokkos::View<unsigned char*, MemSpace>(
          Kokkos::view_alloc(std::string("linattn::pipeline_window"), Kokkos::WithoutInitializing),
          static_cast<std::size_t>(used_));
    }
    template <class T>
    T* at(std::int64_t offset) const {
      return offset < 0 ? nullptr : reinterpret_cast<T*>(memory_.data() + offset);
    }

   private:
    Kokkos::View<unsigned char*, MemSpace> memory_;
    std::int64_t used_ = 0;
  };

  template <class T>
  static T* host_ptr(const unsigned char* base, std::int64_t offset) {
    return reinterpret_cast<T*>(const_cast<unsigned char*>(base) + offset);
  }
  void upload(void* device, const unsigned char* host, std::int64_t bytes) {
    if (bytes <= 0) return;
    Kokkos::deep_copy(copies_, Bytes(static_cast<unsigned char*>(device), static_cast<std::size_t>(bytes)),
                      HostBytes(const_cast<unsigned char*>(host), static_cast<std::size_t>(bytes)));
  }
  void download(unsigned char* host, const void* device, std::int64_t bytes) {
    if (bytes <= 0) return;
    Kokkos::deep_copy(copies_, HostBytes(host, static_cast<std::size_t>(bytes)),
                      Bytes(static_cast<unsigned char*>(const_cast<void*>(device)), static_cast<std::size_t>(bytes)));
  }
  template <class T>
  void device_copy(T* dst, const T* src, std::int64_t count) {
    using V = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(copies_, V(dst, static_cast<std::size_t>(count)), V(const_cast<T*>(src), static_cast<std::size_t>(count)));
  }
  template <class T>
  void fill(T* dst, std::int64_t count, T value) {
    using V = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(copies_, V(dst, static_cast<std::size_t>(count)), value);
  }

  ForwardConfig config_;
  ExecSpace copies_;
  Arena arena_, carry_;
  Acc* carry_state_ = nullptr;
  Acc* carry_z_ = nullptr;
  GemmPath gemm_ = GemmPath::kokkos_kernels;
};

}  // namespace linattn::pipeline
