// The device Views of one forward run. Empty Views mean "absent": no initial
// state (start from zero) or no snapshots stored.
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
};

}  // namespace linattn
