// The packed driver of the per-channel gated forms (channel_gated.hpp): each
// sequence of a packed batch as its own B = 1 problem with its rows of gk; a
// plain batch goes to the form whole. Both check the gate first.
#pragma once

#include "reference/channel_gated.hpp"

#include <functional>

namespace linattn::reference {

using GlaForm = std::function<Result(const Problem&, const Inputs&, const ChannelGate&)>;
using GlaBackwardForm =
    std::function<ChannelGatedGradients(const Problem&, const Inputs&, const ChannelGate&, const GradInputs&)>;

Result gla_per_sequence(const Problem& p, const Inputs& in, const ChannelGate& gate, const GlaForm& form);
ChannelGatedGradients gla_backward_per_sequence(const Problem& p, const Inputs& in, const ChannelGate& gate,
                                                const GradInputs& g, const GlaBackwardForm& form);

}  // namespace linattn::reference
