// What writing one file costs from several threads (issue 29, "writes in
// parallel"): MiB of 8 MiB pieces written into one new file by T threads,
// with pwrite (the file's lock takes one write at a time) or memcpy into a
// shared mapping of the file grown with ftruncate (page faults in parallel),
// as linattn's mapped writers do. Prints GB/s for each of 3 repetitions.
//   g++ -O2 -pthread bench/mapped_write_bandwidth.cpp -o mwb && ./mwb pwrite|mapped THREADS MIB PATH
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s pwrite|mapped THREADS MIB PATH\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const int threads = std::atoi(argv[2]);
  const long total = std::atol(argv[3]) << 20, piece = 8 << 20;
  const char* path = argv[4];
  std::vector<char> source(piece, 1);
  for (int rep = 0; rep < 3; ++rep) {
    ::unlink(path);
    const int fd = ::open(path, O_RDWR | O_CREAT, 0644);
    const auto start = std::chrono::steady_clock::now();
    char* map = nullptr;
    if (mode == "mapped") {
      if (::ftruncate(fd, total) != 0) return 1;
      map = static_cast<char*>(::mmap(nullptr, total, PROT_WRITE, MAP_SHARED, fd, 0));
      if (map == MAP_FAILED) return 1;
    }
    std::atomic<long> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        for (long i; (i = next.fetch_add(1)) * piece < total;) {
          if (map) std::memcpy(map + i * piece, source.data(), piece);
          else if (::pwrite(fd, source.data(), piece, i * piece) != piece) std::abort();
        }
      });
    for (std::thread& t : pool) t.join();
    if (map) ::munmap(map, total);
    ::close(fd);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s, %d thread(s), %ld MiB into one file: %.2f GB/s\n", mode.c_str(), threads, total >> 20, total / s / 1e9);
  }
  ::unlink(path);
}
