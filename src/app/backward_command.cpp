// linattn backward FORWARD_OUTPUT.h5... --grad GRAD.h5... -o OUTDIR: the batch backward.
#include "app/backward_batch.hpp"
#include "app/command.hpp"
#include "app/memory_size_option.hpp"
#include "pipeline/memory_budget.hpp"

#include <sys/resource.h>

#include <iostream>
#include <memory>
#include <stdexcept>

namespace linattn {

Command add_backward_command(CLI::App& parent) {
  struct Options {
    std::vector<std::string> forwards, grads;
    std::string outdir, variant = "fused", gemm = "auto", out_dtype = "input", memory_budget;
    bool recompute_h = false, force = false, skip_existing = false, allow_nonfinite = false, allow_external_data = false, no_fsync = false;
    double case_timeout = 1800;
    int readers = 3;
    int writers = 1;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "backward",
      "Run the backward of each forward output of `linattn run` (README.md, \"The backward\"): reads the forward's "
      "input case (input_file, input_group), its snapshots h, and do (and dht) from the matching --grad file; "
      "writes OUTDIR/<forward output stem>.grad.h5 (dq, dk, dv, dh0). A case larger than --memory-budget runs in "
      "windows along T, from the last to the first, with the same results; normalized forwards are refused. Exit "
      "code 1 if any case failed; the others still run.");
  cmd->add_option("forwards", o->forwards, "Forward output files written by linattn run")->required();
  cmd->add_option("--grad", o->grads,
                  "Gradient input for the forward output in the same position (repeat once per forward output): "
                  "do [B, T, H, DV] in the input dtype, optional dht [N, H, DK, DV] in the accumulation type, in the "
                  "group of the forward's input case if the file has it, else at the root")
      ->required();
  cmd->add_option("-o,--outdir", o->outdir, "Output directory (created if missing)")->required();
  cmd->add_option("--variant", o->variant,
                  "The backward's variant: fused, the chunked reverse scan (the only one; the forward's other "
                  "variants have no backward of their own)")
      ->capture_default_str();
  cmd->add_option("--gemm", o->gemm,
                  "Tile products: tensorcore (CUDA, fp16/bf16 inputs with dq, dk, dv in the input dtype, chunk 64, DK "
                  "in 1..256 and DV in 1..512), hosttile (host backends) or kokkoskernels; auto takes tensorcore where it can "
                  "run, else hosttile on host backends, else kokkoskernels")
      ->check(CLI::IsMember({"auto", "kokkoskernels", "hosttile", "tensorcore"}))
      ->capture_default_str();
  cmd->add_option("--out-dtype", o->out_dtype, "dq, dk, dv in the input dtype or in fp32 (dh0: the accumulation type)")
      ->check(CLI::IsMember({"input", "fp32"}))
      ->capture_default_str();
  cmd->add_flag("--recompute-h", o->recompute_h,
                "Recompute the snapshots (accumulation type) from the input case instead of reading h: needed for "
                "forwards run with --snapshots none");
  cmd->add_flag("--force", o->force, "Replace existing output files");
  cmd->add_flag("--skip-existing", o->skip_existing,
                "Keep outputs that are complete (an interrupted batch resumes) and run the other cases")
      ->excludes("--force");
  cmd->add_flag("--allow-nonfinite", o->allow_nonfinite, "Accept NaN and Inf in the inputs and gradients");
  cmd->add_flag("--allow-external-data", o->allow_external_data,
                "Read datasets (of the input case, the gradient input or the forward output) whose data are in other "
                "files (external raw storage, virtual datasets), looking those files up in the folder of the file "
                "that names them only (docs/HDF5.md, \"Data outside the file\"); refused by default");
  cmd->add_flag("--no-fsync", o->no_fsync, "Do not flush each output to disk before renaming it into place");
  cmd->add_option("--memory-budget", o->memory_budget,
                  "Memory for a case's working set, e.g. 512M or 8G (default: a quarter of physical memory): a "
                  "window's working set takes at most a third of it (the reads ahead and the writes behind take the "
                  "rest); a case larger than that runs in windows of whole chunks, from the last to the first, with "
                  "the same results")
      ->check(memory_size_validator());
  cmd->add_option("--case-timeout", o->case_timeout,
                  "Seconds the reader processes may spend on one case before they are killed and the case fails; a "
                  "hang inside a corrupt file costs only its own case")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--readers", o->readers,
                  "Reader processes reading the next windows side by side, each into a slot of half a window "
                  "(the backward reads twice the bytes of the forward: q, k, v, do and h)")
      ->check(CLI::Range(1, 3))
      ->capture_default_str();
  cmd->add_option("--writers", o->writers,
                  "Threads writing each gradient file: above 1, the file is mapped into memory and each window's "
                  "dq, dk, dv copied in by that many threads at once (a file takes one write(2) at a time); 1: one "
                  "thread through HDF5")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();

  return {cmd, [o] {
            if (o->variant != "fused")
              throw std::invalid_argument("--variant " + o->variant +
                                          ": the backward has one variant, fused (the chunked reverse scan, README.md "
                                          "\"The backward\"); to recompute the snapshots, use --recompute-h");
            BackwardOptions opt;
            opt.forwards = o->forwards;
            opt.grads = o->grads;
            opt.outdir = o->outdir;
            opt.backward.gemm = parse_gemm_path(o->gemm);
            opt.backward.output_fp32 = o->out_dtype == "fp32";
            opt.backward.recompute_h = o->recompute_h;
            opt.force = o->force;
            opt.skip_existing = o->skip_existing;
            opt.allow_nonfinite = o->allow_nonfinite;
            opt.allow_external_data = o->allow_external_data;
            opt.durable = !o->no_fsync;
            if (!o->memory_budget.empty()) opt.memory_budget = pipeline::parse_memory_size(o->memory_budget);
            opt.case_timeout = o->case_timeout;
            opt.readers = o->readers;
            opt.writers = o->writers;
            const std::vector<BackwardCaseResult> results = run_backward_batch(opt, std::cout, std::cerr);
            std::cout << '\n';
            print_backward_summary(std::cout, results);
            // Peak resident memory beside the budget, as run reports it.
            rusage self{};
            getrusage(RUSAGE_SELF, &self);
            std::cout << "peak RSS: " << self.ru_maxrss / 1024 << " MiB; memory budget "
                      << (opt.memory_budget > 0 ? opt.memory_budget : pipeline::default_memory_budget()) / (1 << 20)
                      << " MiB" << std::endl;
            for (const BackwardCaseResult& r : results)
              if (!r.ok) return 1;
            return 0;
          }};
}

}  // namespace linattn
