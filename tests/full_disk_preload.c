/* Test only: a file system that fills up. Preloaded into linattn (LD_PRELOAD),
 * it lets pwrite write the bytes of a "*.partial" file (an output being
 * written) up to byte LINATTN_TEST_DISK_BYTES of that file and fails the rest
 * with ENOSPC, as a full disk does: the part that fits is written, then errno
 * 28. A mapped output (--writers above 1) is grown with ftruncate and written
 * through memory: ftruncate stops the file at that byte instead, so that a
 * page past it raises SIGBUS, as a page a full disk cannot back does. Other
 * files, and every file without the variable, are written as usual. Needs no
 * privileges, unlike a small file system mounted for the test. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int is_partial(int fd) {
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n < 8) return 0;
  path[n] = '\0';
  return strcmp(path + n - 8, ".partial") == 0;
}

/* How many of `count` bytes at `offset` fit; -1 (errno ENOSPC) when none do. */
static ssize_t fitting(int fd, size_t count, off_t offset) {
  const char* limit_text = getenv("LINATTN_TEST_DISK_BYTES");
  if (!limit_text || !is_partial(fd)) return (ssize_t)count;
  const off_t limit = (off_t)atoll(limit_text);
  if (offset >= limit) {
    errno = ENOSPC;
    return -1;
  }
  return (ssize_t)(offset + (off_t)count > limit ? (size_t)(limit - offset) : count);
}

typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);

static ssize_t limited_pwrite(const char* name, int fd, const void* buf, size_t count, off_t offset) {
  const pwrite_fn real = (pwrite_fn)dlsym(RTLD_NEXT, name);
  const ssize_t fit = fitting(fd, count, offset);
  if (fit < 0) return -1;
  return real(fd, buf, (size_t)fit, offset);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset) {
  return limited_pwrite("pwrite", fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off_t offset) {
  return limited_pwrite("pwrite64", fd, buf, count, offset);
}

typedef int (*ftruncate_fn)(int, off_t);

static int limited_ftruncate(const char* name, int fd, off_t length) {
  const ftruncate_fn real = (ftruncate_fn)dlsym(RTLD_NEXT, name);
  const char* limit_text = getenv("LINATTN_TEST_DISK_BYTES");
  if (limit_text && is_partial(fd) && length > (off_t)atoll(limit_text)) length = (off_t)atoll(limit_text);
  return real(fd, length);
}

int ftruncate(int fd, off_t length) { return limited_ftruncate("ftruncate", fd, length); }

int ftruncate64(int fd, off_t length) { return limited_ftruncate("ftruncate64", fd, length); }
