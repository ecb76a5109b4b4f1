#include "app/batch.hpp"

#include "app/case_result_message.hpp"
#include "app/report.hpp"
#include "app/text_table.hpp"
#include "core/ledger.hpp"
#include "core/printable.hpp"
#include "io/file_error.hpp"
#include "kernels/execution.hpp"
#include "pipeline/pinned_memory.hpp"
#include "pipeline/read_stage.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>

namespace linattn {

using namespace pipeline;

Batch::Batch(const RunOptions& opt, ProgressReporter& progress)
    : opt_(opt),
      progress_(progress),
      created_(Clock::now()),
      split_(split_budget(opt.memory_budget > 0 ? opt.memory_budget : default_memory_budget(), host_execution,
                          opt.window_cap)),
      // Several readers read windows side by side (window i: reader i mod n);
      // each is a process of its own, with its own copy of libhdf5.
      reads_(opt.reader_exe.empty() ? "/proc/self/exe" : opt.reader_exe, split_.input_slots,
             std::max(1, std::min(opt.readers, split_.input_slots)), split_.slot_bytes),
      outputs_(split_.output_slots, split_.slot_bytes, false),
      writer_(outputs_.pool(), progress, opt.writers) {
  buffers_ = std::chrono::duration<double>(Clock::now() - created_).count();
}

std::string Batch::stage_report(double wall) const {
  const WriteTimes w = writer_.times();
  auto s = [](double x) { return fixed(x, 2) + " s"; };
  return "pipeline: wall " + s(wall) + " (buffers " + s(buffers_) + ", warm-up " + s(startup_) + "); reader busy " +
         s(reads_.busy_seconds()) + " (" + std::to_string(reads_.size()) + " processes); compute: upload " +
         s(totals_.upload) + ", kernels " + s(totals_.kernel) + ", download " + s(totals_.download) +
         ", waiting for input " + s(wait_input_) + ", for output slots " + s(wait_output_) + "; writer busy " +
         s(w.writing) + mapped_writers_note(writer_.writers(), writer_.mapped_files()) +
         ", making files durable " + s(w.committing) + "; " + std::to_string(split_.input_slots) + "+" +
         std::to_string(split_.output_slots) + " slots of " +
         (split_.slot_bytes >= (1 << 20) ? std::to_string(split_.slot_bytes >> 20) + " MiB"
                                         : std::to_string(split_.slot_bytes >> 10) + " KiB") +
         (pinned() ? ", page-locked" : "");
}

Batch::Clock::time_point Batch::deadline() const {
  return Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(opt_.case_timeout * 1000));
}

void Batch::run_case(CaseResult& r, std::size_t index, std::size_t total) {
  if (hung_files_.count(r.input))
    throw FileError(r.input, "not read: the reader hung on an earlier case of this file (--case-timeout)");
  try {
    run_case_reading(r, index, total);
  } catch (const ReaderLost& e) {
    // A hang costs one timeout per file, not one per case.
    if (e.cause == ReaderLost::Cause::timed_out) hung_files_.insert(r.input);
    throw;
  }
}

std::int64_t Batch::input_bytes(const CaseResult& r) {
  if (hung_files_.count(r.input))
    throw FileError(r.input, "not read: the reader hung on an earlier case of this file (--case-timeout)");
  try {
    const CaseSchema schema =
        reads_.reader(0).open_case(r.input, r.group, opt_.allow_nonfinite, opt_.allow_external_data, deadline());
    reads_.reader(0).close_case(deadline());
    std::int64_t elements = 0;
    for (const hdf5::DatasetInfo* d : {&schema.q, &schema.k, &schema.v})
      elements += std::accumulate(d->shape.begin(), d->shape.end(), std::int64_t(1), std::multiplies<>());
    return elements * static_cast<std::int64_t>(dtype_size(schema.q.dtype));
  } catch (const ReaderLost& e) {
    if (e.cause == ReaderLost::Cause::timed_out) hung_files_.insert(r.input);
    throw;
  }
}

Batch::OpenCase Batch::open_case(CaseResult& r) {
  OpenCase c;
  c.started = Clock::now();
  c.until = deadline();
  c.schema = reads_.reader(0).open_case(r.input, r.group, opt_.allow_nonfinite, opt_.allow_external_data, c.until);
  for (std::size_t i = 1; i < reads_.size(); ++i)
    reads_.reader(i).open_case(r.input, r.group, opt_.allow_nonfinite, opt_.allow_external_data, c.until);
  c.p = case_problem(opt_, r, c.schema);
  r.problem = c.p;
  r.dtype = c.schema.q.dtype;
  r.gate = c.schema.gate;
  r.external_data = c.schema.external_data;
  c.s = case_storage(opt_, c.schema);
  c.layout = output_layout(c.p, c.s.output, c.s.snapshot, c.s.accumulation, c.s.snapshots, c.s.normalize,
                           opt_.compress);
  const DType snap = c.s.snapshot;
  r.min_bytes =
      count_bytes(c.p, c.s.input, c.s.output, c.s.snapshots ? &snap : nullptr, c.s.has_initial_state, r.gate).total();
  return c;
}

std::vector<Window> Batch::plan(const CaseResult& r, const OpenCase& c, const Window& part) {
  // Plain windows cover whole chunks of o and h (a multiple of both extents).
  const std::int64_t granule = std::lcm(c.layout.o_tokens / c.p.chunk, c.layout.h_chunks);
  WindowLimits limits;
  limits.input = limits.output = split_.slot_bytes - 4096;  // the layout's alignment padding
  limits.device_extra = device_extra_limit();
  try {
    return plan_part_windows(c.p, part, c.s, limits, granule);
  } catch (const BudgetError& e) {
    throw case_error(r, e.what());
  }
}

WindowTimes Batch::stream(CaseResult& r, const OpenCase& c, const std::vector<Window>& windows,
                          const std::shared_ptr<CaseWrite>& out, const std::function<StartState()>& before_compute) {
  const Problem& p = c.p;
  const CaseStorage& s = c.s;
  r.windows = static_cast<std::int64_t>(windows.size());
  const std::vector<WindowGroup> groups = group_windows(p, s, windows, group_limits(p));
  r.device_windows = static_cast<std::int64_t>(groups.size());
  ComputeStage& stage = stage_for(p, s);
  std::vector<WindowLayout> layouts;
  for (const Window& w : windows) layouts.push_back(window_layout(p, s, w));
  WindowTimes times;
  std::size_t next_read = 0;
  auto send_reads = [&](std::size_t computed) {
    // Window i reads into input slot i mod n: at most n reads ahead.
    while (next_read < windows.size() && next_read < computed + static_cast<std::size_t>(split_.input_slots)) {
      const Window& w = windows[next_read];
      const WindowLayout& l = layouts[next_read];
      const std::int64_t base = reads_.slots().offset(static_cast<int>(next_read % split_.input_slots));
      WindowRead read;
      read.t0 = w.t0;
      read.t1 = w.t1;
      read.q_offset = base + l.q;
      read.k_offset = base + l.k;
      read.v_offset = base + l.v;
      read.state_row0 = read.z_row0 = l.fresh_row0;
      read.state_rows = s.has_initial_state ? l.fresh_rows : 0;
      read.z_rows = s.has_initial_z ? l.fresh_rows : 0;
      read.state_offset = base + l.initial_state;
      read.z_offset = base + l.initial_z;
      read.accumulation_dtype = static_cast<std::int64_t>(s.accumulation);
      read.gate = static_cast<std::int64_t>(s.gate);
      read.gate_offset = base + l.gate;
      reads_.reader(next_read).send_read(read);
      ++next_read;
    }
  };
  auto add = [&](const WindowTimes& t) {
    times += t;
    totals_ += t;
  };
  auto wait_read = [&](std::size_t i) {
    const Clock::time_point waited = Clock::now();
    reads_.reader(i).wait_read(c.until);
    wait_input_ += std::chrono::duration<double>(Clock::now() - waited).count();
  };
  auto output_slot = [&] {
    const Clock::time_point waited = Clock::now();
    const int slot = outputs_.pool().acquire();
    wait_output_ += std::chrono::duration<double>(Clock::now() - waited).count();
    return slot;
  };
  auto input_slot = [&](std::size_t i) { return reads_.slots().data(static_cast<int>(i % split_.input_slots)); };
  auto write = [&](std::size_t i, int out_slot) {
    writer_.write(out, windows[i], layouts[i], out_slot, layouts[i].input_bytes + layouts[i].output_bytes);
  };
  try {
    send_reads(0);
    const StartState start = before_compute ? before_compute() : StartState();
    if (start.state) stage.carry_in(p, start.state, start.z);
    for (const WindowGroup& g : groups) {
      if (g.parts() == 1) {  // one window: its output slot is where host backends' kernels write
        const std::size_t i = g.first;
        wait_read(i);
        if (out->failed.load()) break;
        const int out_slot = output_slot();
        WindowJob job{&p, &s, &windows[i], layouts[i], input_slot(i), outputs_.pool().data(out_slot)};
        try {
          add(stage.run(job));
        } catch (...) {
          outputs_.pool().release(out_slot);
          throw;
        }
        send_reads(i + 1);
        write(i, out_slot);
        continue;
      }
      // A device window: its parts uploaded as they arrive (each input slot
      // free for the next read at once), one launch, then each part
      // downloaded into an output slot and written.
      stage.begin(WindowJob{&p, &s, &g.window, window_layout(p, s, g.window), nullptr, nullptr}, true);
      for (std::size_t i = g.first; i < g.last && !out->failed.load(); ++i) {
        wait_read(i);
        add(stage.upload_part(WindowJob{&p, &s, &windows[i], layouts[i], input_slot(i), nullptr}));
        send_reads(i + 1);
      }
      if (out->failed.load()) break;
      add(stage.compute());
      for (std::size_t i = g.first; i < g.last; ++i) {
        const int out_slot = output_slot();
        try {
          add(stage.download_part(
              WindowJob{&p, &s, &windows[i], layouts[i], nullptr, outputs_.pool().data(out_slot)}));
        } catch (...) {
          outputs_.pool().release(out_slot);
          throw;
        }
        write(i, out_slot);
      }
    }
    close_case(c);
  } catch (...) {
    for (ReaderProcess* reader : reads_.processes()) reader->drain(c.until);
    throw;
  }
  r.tile_path = gemm_path_name(stage.gemm());
  return times;
}

void Batch::start_progress(const std::string& label, const OpenCase& c, const std::vector<Window>& windows) {
  std::int64_t tokens = 0, bytes = 0;
  for (const Window& w : windows) {
    const WindowLayout l = window_layout(c.p, c.s, w);
    tokens += window_tokens(c.p, w);
    bytes += l.input_bytes + l.output_bytes;
  }
  progress_.start_case(label, tokens, bytes);
}

void Batch::close_case(const OpenCase& c) {
  for (ReaderProcess* reader : reads_.processes()) {
    reader->drain(c.until);  // reads left after a write failure
    reader->close_case(c.until);
  }
}

void Batch::run_case_reading(CaseResult& r, std::size_t index, std::size_t total) {
  const OpenCase c = open_case(r);
  const std::vector<Window> windows = plan(r, c, whole_case_window(c.p));
  const std::shared_ptr<CaseWrite> out = writer_.open(r.output, c.p, c.layout, opt_.durable);
  start_progress(case_counter(index, total) + " " + printable(r.label()), c, windows);
  WindowTimes times;
  try {
    times = stream(r, c, windows, out, nullptr);
  } catch (...) {
    progress_.end_case();
    writer_.abort(out);
    throw;
  }
  r.kernel_seconds = times.kernel;
  const RunRecord record = make_record(opt_, r, c.p, c.s, parse_gemm_path(r.tile_path), times);
  const Clock::time_point started = c.started;
  writer_.finish(out, record, [this, &r, index, total, started](const std::string& error) {
    r.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();
    progress_.end_case();
    if (error.empty()) {
      r.ok = true;
      progress_.line(progress_line(index, total, r, opt_.forward.variant));
    } else {
      r.error = error;
      progress_.line(failure_line(index, total, r), true);
    }
  });
}

// Device bytes a window may take beside its q, k, v, o and h: on host
// backends a share of the budget; on a GPU, what free device memory leaves
// after those (about half of it: the window's own copies of the slots).
std::int64_t Batch::device_extra_limit() const {
  if (host_execution) return split_.device_extra;
  std::size_t free_bytes = 0, total = 0;
  device_memory(free_bytes, total);
  const std::int64_t usable = static_cast<std::int64_t>(free_bytes) * 8 / 10 - 2 * split_.slot_bytes;
  return std::max<std::int64_t>(usable, 0);
}

// How far a packed case's windows are gathered on the device
// (pipeline/window_groups.hpp): within half of the device's free memory,
// until every multiprocessor has 8 (sequence, head) walks, where a launch
// no longer leaves the GPU idle while it walks long sequences; the middle
// of a long sequence only while that shortens the launches.
GroupLimits Batch::group_limits(const Problem& p) const {
  GroupLimits g;
  g.max_parts = opt_.device_window_parts;
  g.enabled = p.varlen() && (host_execution ? opt_.device_window_parts > 1 : opt_.device_window_parts != 1);
  if (!g.enabled) return g;
  std::size_t free_bytes = 0, total = 0;
  device_memory(free_bytes, total);
  g.device_bytes =
      host_execution ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(free_bytes / 2);
  const int sms = device_multiprocessors();
  g.walks = sms > 0 ? 8 * std::int64_t(sms) : std::numeric_limits<std::int64_t>::max();
  // About one walk per multiprocessor (a DK-128 block fills one); host backends
  // gather only when asked (--device-windows N), and then as if all walks ran at once.
  g.parallel_walks = host_execution ? 0 : std::max<std::int64_t>(sms, 1);
  return g;
}

ComputeStage& Batch::stage_for(const Problem& p, const CaseStorage& s) {
  const int key = static_cast<int>(s.input);
  auto it = stages_.find(key);
  if (it == stages_.end()) it = stages_.emplace(key, make_compute_stage(s.input, opt_.forward)).first;
  // Warm up each kernel configuration once, outside the case's timings.
  const std::string shape = std::to_string(key) + ":" + std::to_string(p.DK) + "x" + std::to_string(p.DV) + "/" +
                            std::to_string(p.chunk) + (p.varlen() ? "p" : "") + ":" + gate_dataset_name(s.gate);
  if (warmed_.insert(shape).second) startup_ += it->second->warm_up(p, s);
  return *it->second;
}

}  // namespace linattn
