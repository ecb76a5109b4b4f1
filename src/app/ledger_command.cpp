// linattn ledger: the FLOP and byte ledger (src/core/ledger.hpp) per sequence length.
#include "app/command.hpp"
#include "app/text_table.hpp"
#include "core/ledger.hpp"

#include <iostream>
#include <memory>

namespace linattn {

Command add_ledger_command(CLI::App& parent) {
  struct Options {
    std::int64_t dk = 64, dv = 64, chunk = 64, batch = 1, heads = 1;
    std::vector<std::int64_t> seq = {512, 2048, 8192, 16384, 65536};
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "ledger",
      "Print the FLOP/byte ledger per sequence length N: the redundant prefix "
      "rebuild of the recompute form, the ideal chunked form and causal FlashAttention, in GFLOP; the "
      "sequential state pass; the minimum bytes for bf16 inputs and outputs with fp32 snapshots.");
  cmd->add_option("--dk", o->dk, "Key dimension DK")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--dv", o->dv, "Value dimension DV")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--chunk", o->chunk, "Chunk length C")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--batch", o->batch, "Batch size B")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--heads", o->heads, "Head count H")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--seq", o->seq, "Sequence lengths N, comma-separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  return {cmd, [o] {
            TextTable table{{"N", "NC", "redundancy", "recompute GFLOP", "ideal GFLOP", "causal FA GFLOP",
                             "recompute/FA", "ideal/FA", "sequential state GFLOP", "min MB (bf16, h fp32)"},
                            std::vector<bool>(10, true),
                            {}};
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
                                    fixed(b.total() / 1e6, 3)});
            }
            std::cout << "B=" << o->batch << " H=" << o->heads << " DK=" << o->dk << " DV=" << o->dv
                      << " C=" << o->chunk << "\n"
                      << table.str();
            return 0;
          }};
}

}  // namespace linattn
