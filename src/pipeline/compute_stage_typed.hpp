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

  void begin(const WindowJob& group, bool staged) override {
    whole_ = group.whole;
    s_ = group.storage;
    gw_ = *group.window;
    gl_ = group.layout;
    p_ = window_problem(*whole_, gw_);
    staged_ = !zero_copy || staged;
    const CaseStorage& s = *s_;
    const bool first = gw_.t0 == 0;  // the case's first window: its carry buffers are set up

    // Device memory of this window, carved from one arena that grows as needed.
    const std::int64_t R = gl_.rows, N = gl_.states, H = p_.H, DK = p_.DK, DV = p_.DV, Tw = p_.T;
    const std::int64_t state = H * DK * DV, zrow = H * DK;
    const bool carried = gw_.continues;  // the state before the window comes from the one before
    const bool with_s0 = s.has_initial_state || carried;
    const bool with_z0 = s.normalize && (s.has_initial_z || carried);
    arena_.reset();
    const std::int64_t aq = staged_ ? arena_.template take<In>(R * Tw * H * DK) : -1;
    const std::int64_t ak = staged_ ? arena_.template take<In>(R * Tw * H * DK) : -1;
    const std::int64_t av = staged_ ? arena_.template take<In>(R * Tw * H * DV) : -1;
    const std::int64_t ao = staged_ ? arena_.template take<Out>(R * Tw * H * DV) : -1;
    const std::int64_t ah = staged_ && s.snapshots ? arena_.template take<Snap>(R * gw_.chunks * state) : -1;
    const std::int64_t afs = arena_.template take<Acc>(N * state);
    const std::int64_t as0 = with_s0 ? arena_.template take<Acc>(N * state) : -1;
    const std::int64_t az0 = with_z0 ? arena_.template take<Acc>(N * zrow) : -1;
    const std::int64_t azs = s.normalize ? arena_.template take<Acc>(N * zrow) : -1;
    const bool raw_o = s.normalize && !std::is_same<Out, Acc>::value && normalize_writes_raw_o(choose_path_here<In>(p_, config_));
    const std::int64_t araw = raw_o ? arena_.template take<Acc>(R * Tw * H * DV) : -1;
    gate_count_ = s.gate == GateKind::per_token     ? R * Tw * H
                 : s.gate == GateKind::per_channel ? R * Tw * H * DK
                 : s.gate == GateKind::per_head    ? H
                                                   : 0;
    const std::int64_t ag = staged_ && gate_count_ > 0 ? arena_.template take<Acc>(gate_count_) : -1;
    arena_.grow();
    // Unstaged (a host backend's single window), q, k, v, g, o and h are the slots' own (upload_part).
    q_ = arena_.template at<In>(aq);
    k_ = arena_.template at<In>(ak);
    v_ = arena_.template at<In>(av);
    o_ = arena_.template at<Out>(ao);
    h_ = arena_.template at<Snap>(ah);
    g_ = arena_.template at<Acc>(ag);
    fs_ = arena_.template at<Acc>(afs);
    s0_ = arena_.template at<Acc>(as0);
    z0_ = arena_.template at<Acc>(az0);
    zs_ = arena_.template at<Acc>(azs);
    o_raw_ = arena_.template at<Acc>(araw);
    if (first) make_carry(*whole_);

    // The starting state: the carried rows, then the rows of the sequences
    // that start here (each part uploads the file's; zeros without them).
    const std::int64_t fresh_slot = N - gl_.fresh_rows;  // the first state row that starts here
    if (s0_) {
      if (carried) device_copy(s0_, carry_state_, (whole_->varlen() ? 1 : N) * state);
      if (gl_.fresh_rows > 0 && !s.has_initial_state) fill(s0_ + fresh_slot * state, gl_.fresh_rows * state, Acc(0));
    }
    if (z0_) {
      if (carried) device_copy(z0_, carry_z_, (whole_->varlen() ? 1 : N) * zrow);
      if (gl_.fresh_rows > 0 && !s.has_initial_z) fill(z0_ + fresh_slot * zrow, gl_.fresh_rows * zrow, Acc(0));
    }
  }

  void carry_in(const Problem& whole, const void* state, const void* z) override {
    const std::int64_t rows = whole.varlen() ? 1 : whole.B;
    make_carry(whole);
    upload(carry_state_, static_cast<const unsigned char*>(state), rows * whole.H * whole.DK * whole.DV * sizeof(Acc));
    if (z) upload(carry_z_, static_cast<const unsigned char*>(z), rows * whole.H * whole.DK * sizeof(Acc));
    copies_.fence();
  }

  WindowTimes upload_part(const WindowJob& part) override {
    const CaseStorage& s = *s_;
    const WindowLayout& l = part.layout;
    const PartShape ps = part_shape(part);
    const std::int64_t R = ps.R, H = ps.H, DK = ps.DK, DV = ps.DV, Tw = ps.Tw, state = ps.state, zrow = ps.zrow;
    WindowTimes times;
    Kokkos::Timer timer;
    if (!staged_) {  // the window itself, in its slots
      q_ = host_ptr<In>(part.input, l.q);
      k_ = host_ptr<In>(part.input, l.k);
      v_ = host_ptr<In>(part.input, l.v);
      o_ = host_ptr<Out>(part.output, l.o);
      h_ = s.snapshots ? host_ptr<Snap>(part.output, l.h) : nullptr;
      g_ = gate_count_ > 0 ? host_ptr<Acc>(part.input, l.gate) : nullptr;
    } else {
      const std::int64_t dt = ps.dt;
      if (dt != 0 && R != 1) throw std::logic_error("compute stage: a device window of several parts with several rows");
      upload(q_ + dt * H * DK, part.input + l.q, R * Tw * H * DK * sizeof(In));
      upload(k_ + dt * H * DK, part.input + l.k, R * Tw * H * DK * sizeof(In));
      upload(v_ + dt * H * DV, part.input + l.v, R * Tw * H * DV * sizeof(In));
      if (s.gate == GateKind::per_token) upload(g_ + dt * H, part.input + l.gate, R * Tw * H * sizeof(Acc));
      if (s.gate == GateKind::per_channel) upload(g_ + dt * H * DK, part.input + l.gate, R * Tw * H * DK * sizeof(Acc));
      if (s.gate == GateKind::per_head) upload(g_, part.input + l.gate, H * sizeof(Acc));
    }
    // The file's rows of the sequences that start in this part, at their rows of the device window's.
    const std::int64_t fresh_slot = (gl_.states - gl_.fresh_rows) + (l.fresh_row0 - gl_.fresh_row0);
    if (l.fresh_rows > 0) {
      if (s0_ && s.has_initial_state)
        upload(s0_ + fresh_slot * state, part.input + l.initial_state, l.fresh_rows * state * sizeof(Acc));
      if (z0_ && s.has_initial_z)
        upload(z0_ + fresh_slot * zrow, part.input + l.initial_z, l.fresh_rows * zrow * sizeof(Acc));
    }
    copies_.fence();
    times.upload = timer.seconds();
    return times;
  }

  WindowTimes compute() override {
    const CaseStorage& s = *s_;
    const std::int64_t R = gl_.rows, N = gl_.states, H = p_.H, DK = p_.DK, DV = p_.DV, Tw = p_.T;
    const std::int64_t state = H * DK * DV, zrow = H * DK;
    WindowTimes times;
    Kokkos::Timer timer;
    if (config_.poison_outputs) {
      fill(o_, R * Tw * H * DV, quiet_nan<Out>());
      if (h_) fill(h_, R * gw_.chunks * state, quiet_nan<Snap>());
      fill(fs_, N * state, quiet_nan<Acc>());
      if (zs_) fill(zs_, N * zrow, quiet_nan<Acc>());
      if (o_raw_) fill(o_raw_, R * Tw * H * DV, quiet_nan<Acc>());
      copies_.fence();
      timer.reset();
    }

    // The variant (and normalization) on the default execution space.
    const std::vector<std::int64_t> hs = p_.h_shape();
    ForwardViews<In, Out, Snap, Acc> views;
    views.q = DeviceView4<const In>(q_, R, Tw, H, DK);
    views.k = DeviceView4<const In>(k_, R, Tw, H, DK);
    views.v = DeviceView4<const In>(v_, R, Tw, H, DV);
    if (s0_) views.initial_state = DeviceView4<const Acc>(s0_, N, H, DK, DV);
    if (h_) views.h = DeviceView5<Snap>(h_, hs[0], hs[1], hs[2], hs[3], hs[4]);
    views.final_state = DeviceView4<Acc>(fs_, N, H, DK, DV);
    views.o = DeviceView4<Out>(o_, R, Tw, H, DV);
    if (s.gate == GateKind::per_token) views.g = DeviceView3<const Acc>(g_, R, Tw, H);
    if (s.gate == GateKind::per_head) views.g_gamma = DeviceView1<const Acc>(g_, H);
    if (s.gate == GateKind::per_channel) views.gk = DeviceView4<const Acc>(g_, R, Tw, H, DK);
    ForwardConfig config = config_;
    config.gate = s.gate;  // the case's own (one stage serves every case of its input type)
    VariantRun ran;
    if (s.normalize) {
      NormalizeViews<Acc> norm;
      if constexpr (std::is_same<Out, Acc>::value) norm.o_raw = views.o;
      else if (o_raw_) norm.o_raw = DeviceView4<Acc>(o_raw_, R, Tw, H, DV);
      if (z0_) norm.z0 = DeviceView3<const Acc>(z0_, N, H, DK);
      norm.z_state = DeviceView3<Acc>(zs_, N, H, DK);
      ran = run_variant_normalized(p_, config, views, norm);
    } else {
      ran = run_variant(p_, config, views);
    }
    Kokkos::fence();
    times.kernel = timer.seconds();
    gemm_ = ran.gemm;

    // Carry the state (and z) of the sequence(s) that go on into the next window.
    timer.reset();
    if (gw_.carries) {
      const std::int64_t row = whole_->varlen() ? N - 1 : 0, rows = whole_->varlen() ? 1 : N;
      device_copy(carry_state_, fs_ + row * state, rows * state);
      if (zs_) device_copy(carry_z_, zs_ + row * zrow, rows * zrow);
    }
    copies_.fence();
    times.download = timer.seconds();
    return times;
  }

  WindowTimes download_part(const WindowJob& part) override {
    const WindowLayout& l = part.layout;
    const PartShape ps = part_shape(part);
    const std::int64_t R = ps.R, H = ps.H, DV = ps.DV, Tw = ps.Tw, state = ps.state, zrow = ps.zrow;
    WindowTimes times;
    Kokkos::Timer timer;
    if (staged_) {  // this part's tokens and chunks of the device window's
      download(part.output + l.o, o_ + ps.dt * H * DV, R * Tw * H * DV * sizeof(Out));
      if (h_) download(part.output + l.h, h_ + ps.dc * state, R * part.window->chunks * state * sizeof(Snap));
    }
    const std::int64_t finished_slot = whole_->varlen() ? l.finished_row0 - gw_.seq_begin : 0;
    if (l.finished_rows > 0) {
      download(part.output + l.final_state, fs_ + finished_slot * state, l.finished_rows * state * sizeof(Acc));
      if (zs_) download(part.output + l.final_z, zs_ + finished_slot * zrow, l.finished_rows * zrow * sizeof(Acc));
    }
    copies_.fence();
    times.download = timer.seconds();
    return times;
  }

 private:
  // A part of the device window: its rows, sizes, and where its tokens (dt)
  // and chunks (dc) start in the window's (a packed case has one row, so its
  // parts follow each other; other cases have one part, at 0).
  struct PartShape {
    std::int64_t R, H, DK, DV, Tw, state, zrow, dt, dc;
  };
  PartShape part_shape(const WindowJob& part) const {
    const Window& w = *part.window;
    const std::int64_t H = p_.H, DK = p_.DK, DV = p_.DV;
    return {part.layout.rows, H, DK, DV, w.tokens(), H * DK * DV, H * DK, w.t0 - gw_.t0, w.chunk0 - gw_.chunk0};
  }

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

  // The state (and z) rows carried from one window to the next: every batch
  // row, or the one sequence a packed case's window cut.
  void make_carry(const Problem& whole) {
    carry_.reset();
    const std::int64_t carry_rows = whole.varlen() ? 1 : whole.B;
    const std::int64_t acs = carry_.template take<Acc>(carry_rows * whole.H * whole.DK * whole.DV);
    const std::int64_t acz = carry_.template take<Acc>(carry_rows * whole.H * whole.DK);
    carry_.grow();
    carry_state_ = carry_.template at<Acc>(acs);
    carry_z_ = carry_.template at<Acc>(acz);
  }

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
  // The device window begin() set up: its case, merged window and layout, and
  // its buffers (q_ .. g_ the slots' own when not staged).
  const Problem* whole_ = nullptr;
  const CaseStorage* s_ = nullptr;
  Window gw_;
  WindowLayout gl_;
  Problem p_;
  bool staged_ = true;
  std::int64_t gate_count_ = 0;
  In *q_ = nullptr, *k_ = nullptr, *v_ = nullptr;
  Out* o_ = nullptr;
  Snap* h_ = nullptr;
  Acc *g_ = nullptr, *fs_ = nullptr, *s0_ = nullptr, *z0_ = nullptr, *zs_ = nullptr, *o_raw_ = nullptr;
  Arena arena_, carry_;
  Acc* carry_state_ = nullptr;
  Acc* carry_z_ = nullptr;
  GemmPath gemm_ = GemmPath::kokkos_kernels;
};

}  // namespace linattn::pipeline
