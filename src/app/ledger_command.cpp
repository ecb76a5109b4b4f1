// linattn ledger: the FLOP and byte ledger (src/core/ledger.hpp) per sequence length.
#include "app/command.hpp"
#include "app/text_table.hpp"
#include "core/ledger.hpp"
#include "core/variant.hpp"

#include <iostream>
#include <memory>

namespace linattn {

Command add_ledger_command(CLI::App& parent) {
  struct Options {
    std::int64_t dk = 64, dv = 64, chunk = 64, batch = 1, heads = 1;
    std::vector<std::int64_t> seq = {512, 2048, 8192, 16384, 65536};
    std::string gate;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "ledger",
      "Print the FLOP/byte ledger per sequence length N: the prefix states the recompute form rebuilds, the "
      "whole chunked forward (ideal) and causal FlashAttention, in GFLOP; the sequential state pass; the minimum "
      "bytes for bf16 inputs and outputs with fp32 snapshots; the recompute form's whole forward. A legend under "
      "the table says what each column counts.");
  cmd->add_option("--dk", o->dk, "Key dimension DK")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--dv", o->dv, "Value dimension DV")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--chunk", o->chunk, "Chunk length C")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--batch", o->batch, "Batch size B")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--heads", o->heads, "Head count H")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--seq", o->seq, "Sequence lengths N, comma-separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--gate", o->gate,
                  "Also count a decay gate's extra work (README.md, \"Gated levels\"): g (per token), gamma (per head) or gk "
                  "(per token and key channel)")
      ->check(CLI::IsMember({"g", "gamma", "gk"}));

  return {cmd, [o] {
            // The columns of the specification's cost table, in its order, then the recompute form's whole forward.
            TextTable table{{"N", "NC", "redundancy", "recompute state GFLOP", "ideal forward GFLOP", "causal FA GFLOP",
                             "recompute state/FA", "ideal/FA", "sequential state GFLOP", "min MB (bf16, h fp32)",
                             "recompute forward GFLOP"},
                            std::vector<bool>(11, true),
                            {}};
            const GateKind gate = o->gate == "g"       ? GateKind::per_token
                                  : o->gate == "gamma" ? GateKind::per_head
                                  : o->gate == "gk"    ? GateKind::per_channel
                                                       : GateKind::none;
            if (gate != GateKind::none) {
              for (const char* column : {"gate Mmul", "gate Mexp", "gate/ideal", "gate MB"}) table.header.push_back(column);
              table.right_aligned.resize(table.header.size(), true);
            }
            const DType f32 = DType::f32;
            for (std::int64_t n : o->seq) {
              Problem p;
              p.B = o->batch; p.T = n; p.H = o->heads; p.DK = o->dk; p.DV = o->dv; p.chunk = o->chunk;
              validate_shapes(p);
              const FlopCounts f = count_flops(p);
              const ByteCounts b = count_bytes(p, DType::bf16, DType::bf16, &f32, false);
              table.rows.push_back({std::to_string(n), std::to_string(p.num_chunks()), fixed(f.redundancy, 1) + "x",
                                    fixed(f.state_recompute / 1e9, 3), fixed(f.ideal / 1e9, 3),
                                    fixed(f.causal_flash_attention / 1e9, 3),
                                    fixed(f.state_recompute / f.causal_flash_attention, 3),
                                    fixed(f.ideal / f.causal_flash_attention, 3), fixed(f.state_sequential / 1e9, 3),
                                    fixed(b.total() / 1e6, 3), fixed(variant_flops(p, Variant::recompute) / 1e9, 3)});
              if (gate != GateKind::none) {
                const GateCounts g = count_gate(p, gate);
                table.rows.back().insert(table.rows.back().end(),
                                         {fixed(g.multiplies / 1e6, 3), fixed(g.exponentials / 1e6, 3),
                                          fixed((g.multiplies + g.exponentials + g.additions) / f.ideal, 4),
                                          fixed(g.bytes / 1e6, 3)});
              }
            }
            std::cout << "B=" << o->batch << " H=" << o->heads << " DK=" << o->dk << " DV=" << o->dv
                      << " C=" << o->chunk << "\n"
                      << table.str()
                      << "\nWhat each column counts (src/core/ledger.hpp), summed over B and H; X/FA columns are ratios:\n"
                         "  recompute state    the prefix states alone: every chunk sums K^T V of all tokens before it\n"
                         "                     (the step the recompute form repeats); without the output terms\n"
                         "  sequential state   the same states from one pass, K_c^T V_c once per chunk: 2 T DK DV\n"
                         "  redundancy         recompute state / sequential state = (NC - 1) / 2\n"
                         "  ideal forward      the whole chunked forward (fused, materialized): sequential state +\n"
                         "                     Q_c S_c (2 T DK DV) + tril(Q_c K_c^T) V_c on C x C tiles (2 T C (DK + DV))\n"
                         "  causal FA          causal FlashAttention on the same shape: T^2 (DK + DV)\n"
                         "  recompute forward  the recompute variant's whole forward: recompute state + the output terms;\n"
                         "                     compare it with ideal forward (recompute state alone can be smaller when\n"
                         "                     NC is small: it leaves the output terms out)\n"
                         "  min MB             q, k, v read once (bf16) and o (bf16), h (fp32), final_state written once\n"
                      << (gate == GateKind::none
                              ? ""
                              : "  gate Mmul, Mexp    the gate's elementwise work beside the ideal forward: per token the\n"
                                "                     score row's C decays, the output and key rows (DV + DK), per chunk the\n"
                                "                     state (DK DV) in multiplies; C + 2 exponentials per token\n"
                                "  gate/ideal         (multiplies + exponentials + the cumulative sum's additions) / ideal\n"
                                "  gate MB            the gate read once in fp32 (g: B T H values; gamma: H)\n");
            return 0;
          }};
}

}  // namespace linattn
