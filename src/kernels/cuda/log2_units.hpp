// The gated tensor-core kernels keep their cumulative log-decays in log2
// units, so that every decay factor is one exp2 of a difference (one MUFU
// instruction): b log2(e) for the log-decays b of the files.
#pragma once

namespace linattn::cuda::detail {

constexpr float kLog2e = 1.4426950408889634f;

}  // namespace linattn::cuda::detail
