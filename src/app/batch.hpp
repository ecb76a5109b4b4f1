// Everything one batch of `linattn run` shares: the buffers, the reader
// processes, the writer thread, the compute stages (one per type combination,
// warmed up once). run_case takes one case through the pipeline
// (docs/ARCHITECTURE.md, "One case through `linattn run`"); its steps are
// public so that context parallel (context_parallel_run.hpp) streams each
// rank's segment of a case through the same stages.
#pragma once

#include "app/batch_run.hpp"
#include "io/input_file.hpp"
#include "io/output_stream.hpp"
#include "pipeline/compute_stage.hpp"
#include "pipeline/host_buffers.hpp"
#include "pipeline/memory_budget.hpp"
#include "pipeline/progress_reporter.hpp"
#include "pipeline/read_protocol.hpp"
#include "pipeline/reader_group.hpp"
#include "pipeline/window_groups.hpp"
#include "pipeline/write_stage.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace linattn {

class Batch {
 public:
  using Clock = pipeline::Clock;

  Batch(const RunOptions& opt, ProgressReporter& progress);

  void drain() { writer_.drain(); }
  // Stops the readers; returns their largest peak RSS.
  std::int64_t stop_readers() { return reads_.stop(); }
  // Where the run's time went, one line: each stage's busy time beside the wall time.
  std::string stage_report(double wall) const;
  bool pinned() const { return reads_.pinned() && outputs_.region().pinned(); }
  Clock::time_point deadline() const;
  std::vector<std::string> list(const std::string& file) { return reads_.reader(0).list_cases(file, deadline()); }

  // One case, start to finish; throws on the first problem (the writer's
  // problems reach r through finish's callback).
  void run_case(CaseResult& r, std::size_t index, std::size_t total);
  // The bytes of a case's q, k and v, from its metadata (its weight when
  // ranks share the batch); fails as run_case would on a case that cannot be opened.
  std::int64_t input_bytes(const CaseResult& r);

  // The steps of run_case. A case open in every reader process, checked
  // (case_problem), with its output's types and layout and its deadline.
  struct OpenCase {
    CaseSchema schema;
    Problem p;
    CaseStorage s;
    OutputLayout layout;
    Clock::time_point started, until;
  };
  // Sets r's problem, types, gate and the bytes its run must move.
  OpenCase open_case(CaseResult& r);
  // The windows of `part` of the case (context parallel: a rank's segment;
  // else the whole case), placed in the case's tokens, chunks and sequences.
  std::vector<Window> plan(const CaseResult& r, const OpenCase& c, const Window& part);
  // Streams the windows: reads go out at once; then `before_compute` runs (a
  // context-parallel rank gets its start state there, while its first windows
  // are read) and may return the state the first window starts from
  // (carried rows; null: its own); then every window is computed and queued
  // for `out`. Sets r's windows, device windows and tile path; returns the
  // case's times. On an error the readers are drained and the error thrown
  // (the caller aborts `out`).
  struct StartState {
    const void* state = nullptr;  // carried rows, accumulation type (ComputeStage::carry_in)
    const void* z = nullptr;
  };
  pipeline::WindowTimes stream(CaseResult& r, const OpenCase& c, const std::vector<Window>& windows,
                               const std::shared_ptr<pipeline::CaseWrite>& out,
                               const std::function<StartState()>& before_compute);
  // The progress bar's case: the tokens (of every batch row) and bytes of these windows.
  void start_progress(const std::string& label, const OpenCase& c, const std::vector<Window>& windows);
  // Every reader done with the case (reads left after a write failure drained).
  void close_case(const OpenCase& c);
  pipeline::WriteStage& writer() { return writer_; }
  std::int64_t slot_bytes() const { return split_.slot_bytes; }  // each input and output slot
  pipeline::ComputeStage& stage_for(const Problem& p, const CaseStorage& s);

 private:
  void run_case_reading(CaseResult& r, std::size_t index, std::size_t total);
  std::int64_t device_extra_limit() const;
  GroupLimits group_limits(const Problem& p) const;

  const RunOptions& opt_;
  ProgressReporter& progress_;
  Clock::time_point created_;
  double buffers_ = 0, wait_input_ = 0, wait_output_ = 0;
  pipeline::WindowTimes totals_;
  pipeline::BudgetSplit split_;
  pipeline::ReaderGroup reads_;
  pipeline::SlotRegion outputs_;  // output slots: outputs_.pool()
  pipeline::WriteStage writer_;
  std::map<int, std::unique_ptr<pipeline::ComputeStage>> stages_;
  std::set<std::string> hung_files_;
  std::set<std::string> warmed_;
  double startup_ = 0;
};

}  // namespace linattn
