// Helpers for the crash and log tests, run under libferry.so.
//   crash_helper segv      dereferences a null pointer in crash_here()
//   crash_helper closeall  closes every descriptor from 3 up (one by one and with
//                          close_range), then dup2()s stdout over 3..1100, then exits
//   crash_helper _exit     ends with _exit(7): no destructor runs
//   crash_helper maps      prints /proc/self/maps
#include <stdio.h>
#include <string.h>
#include <unistd.h>

extern "C" int close_range(unsigned, unsigned, int);

__attribute__((noinline)) void crash_here(volatile int* p) { *p = 1; }

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "segv")) {
    crash_here(nullptr);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "closeall")) {
    for (int fd = 3; fd < 4096; ++fd) close(fd);
    close_range(3, ~0u, 0);
    for (int fd = 3; fd <= 1100; ++fd) {
      if (dup2(1, fd) != fd) {
        perror("dup2");
        return 1;
      }
    }
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "_exit")) _exit(7);
  if (argc > 1 && !strcmp(argv[1], "maps")) {
    FILE* f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) fputs(line, stdout);
    if (f) fclose(f);
    return f ? 0 : 1;
  }
  return 2;
}
