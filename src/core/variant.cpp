#include "core/variant.hpp"

#include <stdexcept>

namespace linattn {

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::fused: return "fused";
    case Variant::materialized: return "materialized";
    case Variant::recompute: return "recompute";
    case Variant::recurrent: return "recurrent";
  }
  return "?";
}

Variant parse_variant(const std::string& s) {
  if (s == "fused") return Variant::fused;
  if (s == "materialized") return Variant::materialized;
  if (s == "recompute") return Variant::recompute;
  if (s == "recurrent") return Variant::recurrent;
  throw std::invalid_argument("unknown variant '" + s + "' (expected fused, materialized, recompute or recurrent)");
}

}  // namespace linattn
