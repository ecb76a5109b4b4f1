#include "pipeline/copy_pool.hpp"

namespace linattn::pipeline {

CopyPool::CopyPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

CopyPool::~CopyPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void CopyPool::run(const std::vector<std::function<void()>>& tasks) {
  if (tasks.empty()) return;
  std::unique_lock<std::mutex> lock(mutex_);
  tasks_ = &tasks;
  next_ = finished_ = 0;
  error_ = nullptr;
  start_.notify_all();
  done_.wait(lock, [&] { return finished_ == tasks.size(); });
  tasks_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void CopyPool::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    start_.wait(lock, [&] { return stopping_ || (tasks_ && next_ < tasks_->size()); });
    if (stopping_) return;
    const std::size_t index = next_++;
    const std::function<void()>& task = (*tasks_)[index];
    const std::size_t total = tasks_->size();
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && (!error_ || index < error_task_)) {
      error_ = error;
      error_task_ = index;
    }
    if (++finished_ == total) done_.notify_all();
  }
}

}  // namespace linattn::pipeline
