// The forward forms linattn computes. Its own header so that code naming a
// variant does not take the FLOP ledger along (docs/ARCHITECTURE.md, "Layers").
#pragma once

#include <string>

namespace linattn {

// recurrent is not a chunked form: token by token, S += k v^T then o = scale S^T q,
// for decode-style workloads and short sequences.
enum class Variant { fused, materialized, recompute, recurrent };
const char* variant_name(Variant v);
Variant parse_variant(const std::string& s);  // the names variant_name gives; std::invalid_argument otherwise

}  // namespace linattn
