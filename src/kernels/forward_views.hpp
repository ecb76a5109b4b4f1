// The device Views of one forward run. Empty Views mean "absent": no initial
// state (start from zero), no snapshots stored, no gate (level 1).
#pragma once

#include "kernels/execution.hpp"

namespace linattn {

template <class In, class Out, class Snap, class Acc>
struct ForwardViews {
  using input_type = In;
  using output_type = Out;
  using snapshot_type = Snap;
  using acc_type = Acc;

  DeviceView4<const In> q, k, v;              // [B, T, H, DK|DV]
  DeviceView4<const Acc> initial_state;       // [B, H, DK, DV] or empty
  DeviceView4<Out> o;                         // [B, T, H, DV]
  DeviceView5<Snap> h;                        // [B, NT, H, DK, DV] or empty
  DeviceView4<Acc> final_state;               // [B, H, DK, DV]
  // The gate (core/gate.hpp), at most one of them, in Acc: log-decays g <= 0.
  DeviceView3<const Acc> g;                   // [B, T, H] (per token) or empty
  DeviceView1<const Acc> g_gamma;             // [H] (per head) or empty
  DeviceView4<const Acc> gk;                  // [B, T, H, DK] (per key channel, GLA) or empty

  KOKKOS_INLINE_FUNCTION bool gated() const { return g.extent(0) > 0 || g_gamma.extent(0) > 0 || gk.extent(0) > 0; }
  KOKKOS_INLINE_FUNCTION bool channel_gated() const { return gk.extent(0) > 0; }
};

}  // namespace linattn
