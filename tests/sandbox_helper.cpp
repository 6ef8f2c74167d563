// A program that sandboxes itself, run under libferry.so: a loopback connection, then
// a strict system-call filter (what a TCP program needs, and nothing of ferry's), then
// the connection used again and an exit.
//   sandbox_helper prctl|syscall [IP]   installs the filter that way; the connection on
//                                       IP (loopback by default)
// With SANDBOX_STAT_CMD (`ferry stat`), waits until ferry counts the connection's two
// ends upgraded before the filter (20 s at most). Prints "sandboxed: N bytes back" and
// exits 0; a call the filter does not allow kills the process with SIGSYS.
#include <arpa/inet.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "upgraded_wait.h"

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (argc > 2 && inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) return 2;
  socklen_t len = sizeof a;
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(l, 1) ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len))
    return 3;
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a)) return 4;
  int s = accept(l, nullptr, nullptr);
  char b[16];
  if (send(c, "before", 6, 0) != 6 || recv(s, b, sizeof b, 0) != 6) return 5;
  if (send(s, "back", 4, 0) != 4 || recv(c, b, sizeof b, 0) != 4) return 5;
  if (const long up = wait_upgraded("SANDBOX_STAT_CMD", 2); up >= 0) printf("upgraded before the filter: %ld\n", up);

  static sock_filter insns[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      ALLOW(__NR_read), ALLOW(__NR_write), ALLOW(__NR_sendto), ALLOW(__NR_recvfrom), ALLOW(__NR_close),
      ALLOW(__NR_exit), ALLOW(__NR_exit_group), ALLOW(__NR_brk), ALLOW(__NR_mmap), ALLOW(__NR_munmap),
      ALLOW(__NR_futex), ALLOW(__NR_rt_sigreturn), ALLOW(__NR_clock_gettime), ALLOW(__NR_newfstatat),
      ALLOW(__NR_getrandom),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof insns / sizeof insns[0]), insns};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return 6;
  const bool by_syscall = strcmp(argv[1], "syscall") == 0;
  if (by_syscall ? syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) : prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
    return 7;

  if (send(s, "after", 5, 0) != 5) return 8;
  const long n = recv(c, b, sizeof b, 0);
  close(c);
  close(s);
  close(l);
  printf("sandboxed: %ld bytes back\n", n);
  fflush(stdout);
  return n == 5 ? 0 : 9;
}
