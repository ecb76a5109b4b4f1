// Context parallel with a gate (docs/PARALLEL.md "Context parallel", README.md
// "Gated levels"). A carry C_j is the state of segment j's tokens alone (its
// state pass from zero), so when a rank's start state adds the carries of
// several segments, each reaches it decayed by every token after it:
//   start(r) = exp(G_(r-1)) * start(r-1) + C_(r-1),
// G_j the sum of the log-decays of segment j's carried tokens, per row and head
// (g_gamma: tokens * g_gamma[h]; gk: per key channel, the state's row d by
// its own sum). Unrolled, C_j is scaled by the total decay of
// the segments after it, as the one-rank chain decays it chunk by chunk.
#pragma once

#include "core/gate.hpp"
#include "core/tensor.hpp"

#include <cstdint>
#include <vector>

namespace linattn::parallel {

// The total log-decay of `tokens` tokens per (row, head), [rows, H] in fp64:
// the sum over T of g [rows, tokens, H], or tokens * g_gamma[h] for every row;
// per key channel for gk [rows, tokens, H, DK]: [rows, H, DK]. Empty for GateKind::none.
std::vector<double> total_log_decay(GateKind kind, const Tensor& gate, std::int64_t rows, std::int64_t tokens,
                                    std::int64_t H);

// state [rows, H, DK, DV] (fp32 or fp64) times exp(log_decay[row, h]) (or row d
// of each head's block times exp(log_decay[row, h, d])), each
// element rounded once to its type (the factor is <= 1: nothing overflows;
// a strong decay underflows to 0, the state forgotten).
void decay_state(Tensor& state, const std::vector<double>& log_decay);

}  // namespace linattn::parallel
