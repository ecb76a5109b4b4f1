// verify's fp64 references, one (sequence, head) at a time: the values of
// reference::forward and reference::backward (every sequence and every head
// is independent in both, so each piece is the same loops on its own slice),
// with `done` called after each piece, so that verify on a large case shows
// its progress as run does.
#pragma once

#include "reference/backward.hpp"
#include "reference/gated.hpp"
#include "reference/references.hpp"

#include <cstdint>
#include <functional>

namespace linattn {

// Called after each piece with its share of the case's tokens (a sequence of
// L tokens gives L over its H heads; the shares add up to the tokens of every
// row) and the input elements it read (q, k, v; and do for the backward).
using PieceDone = std::function<void(std::int64_t tokens, std::int64_t elements)>;

// With a gate (levels 2 and 3), each piece runs reference::gated_chunked on
// its own tokens' log-decays (per key channel, GateKind::per_channel with gk
// [B, T, H, DK] in log_decay: reference::gla_chunked); gate none is level 1's
// reference::chunked.
reference::Result forward_reference_by_head(const Problem& p, const reference::Inputs& in, bool normalized,
                                            const PieceDone& done, const reference::Gate& gate = {});

// With a gate, each piece runs reference::gated_backward_chunked on its own
// log-decays (per key channel: reference::gla_backward_chunked), and dg (every
// gate; per key channel: dgk [B, T, H, DK]) and dg_gamma (per head: dg summed
// over the head's tokens of every sequence) are filled too.
reference::GatedGradients backward_reference_by_head(const Problem& p, const reference::Inputs& in,
                                                     const reference::GradInputs& g, const PieceDone& done,
                                                     const reference::Gate& gate = {});

}  // namespace linattn
