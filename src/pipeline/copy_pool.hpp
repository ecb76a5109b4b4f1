// Threads that share out one batch of tasks at a time: the pieces of a
// window's runs copied into a mapped output file (write_stage.hpp). run()
// returns when every task is done and rethrows the exception of the first
// task in the list that threw (not the first to throw in time: a full disk
// names the first dataset it stopped, whatever the threads' timing).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace linattn::pipeline {

class CopyPool {
 public:
  explicit CopyPool(int threads);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  // One caller at a time (the writer thread).
  void run(const std::vector<std::function<void()>>& tasks);

 private:
  void work();

  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::vector<std::function<void()>>* tasks_ = nullptr;
  std::size_t next_ = 0, finished_ = 0;
  std::exception_ptr error_;
  std::size_t error_task_ = 0;  // the index of error_'s task
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace linattn::pipeline
