// The socket-call implementations behind every export in preload/. Each returns what
// the libc function returns on success, or -errno on failure; only preload/ turns
// that into -1 + errno. Nothing here throws.
#pragma once

#include "core/base/fork_path.h"
#include "core/base/io_path.h"
#include "core/base/libc.h"

#include <errno.h>
#include <sys/types.h>

struct mmsghdr;

namespace ferry {

// This thread's errno, found through libc's __errno_location once per thread and then
// kept in ferry's own (initial-exec) thread-local data. A forked child's thread has
// its parent's address, and its first call does not fault in the page of libc's code
// that holds __errno_location, which nothing else a forked server's child runs touches.
inline int& err() noexcept {
  static thread_local constinit int* t = nullptr;
  int* p = t;
  if (__builtin_expect(p == nullptr, 0)) t = p = &errno;
  return *p;
}

}  // namespace ferry

namespace ferry::api {

// The result of a real libc call in this file's convention.
inline long sys(long r) noexcept { return r < 0 ? -err() : r; }

// sockets and connections (api_socket.cpp)
long socket(int domain, int type, int protocol) noexcept;
long bind(int fd, const sockaddr* addr, socklen_t len) noexcept;
long listen(int fd, int backlog) noexcept;
long accept(int fd, sockaddr* addr, socklen_t* len) noexcept;
long accept4(int fd, sockaddr* addr, socklen_t* len, int flags) noexcept;
long connect(int fd, const sockaddr* addr, socklen_t len) noexcept;
// A non-blocking connect on fd turned out finished (the program sent on it): the
// connection is set up as a connect() that returned 0 would have done.
FERRY_IO_PATH void settle_connect(int fd) noexcept;
long shutdown(int fd, int how) noexcept;
long getsockopt(int fd, int level, int name, void* val, socklen_t* len) noexcept;
long setsockopt(int fd, int level, int name, const void* val, socklen_t len) noexcept;
long getsockname(int fd, sockaddr* addr, socklen_t* len) noexcept;
long getpeername(int fd, sockaddr* addr, socklen_t* len) noexcept;

// byte stream (api_io.cpp)
long read(int fd, void* buf, size_t n) noexcept;
long readv(int fd, const iovec* iov, int iovcnt) noexcept;
long recv(int fd, void* buf, size_t n, int flags) noexcept;
long recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* fromlen) noexcept;
long recvmsg(int fd, msghdr* msg, int flags) noexcept;
long recvmmsg(int fd, mmsghdr* vec, unsigned n, int flags, timespec* timeout) noexcept;
long write(int fd, const void* buf, size_t n) noexcept;
long writev(int fd, const iovec* iov, int iovcnt) noexcept;
long send(int fd, const void* buf, size_t n, int flags) noexcept;
long sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to, socklen_t tolen) noexcept;
long sendmsg(int fd, const msghdr* msg, int flags) noexcept;
long sendmmsg(int fd, mmsghdr* vec, unsigned n, int flags) noexcept;
long sendfile(int out_fd, int in_fd, off_t* offset, size_t count) noexcept;
long splice(int in, loff_t* off_in, int out, loff_t* off_out, size_t len, unsigned flags) noexcept;

// descriptors (api_fd.cpp)
FERRY_FORK_PATH long close(int fd) noexcept;
long dup(int fd) noexcept;
long dup2(int fd, int newfd) noexcept;
long dup3(int fd, int newfd, int flags) noexcept;
long close_range(unsigned first, unsigned last, int flags) noexcept;
void closefrom(int lowfd) noexcept;
long fcntl(int fd, int cmd, void* arg) noexcept;
long ioctl(int fd, unsigned long request, void* arg) noexcept;

// readiness (api_wait.cpp)
long poll(pollfd* fds, nfds_t n, int timeout_ms) noexcept;
long ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) noexcept;
long select(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) noexcept;
long pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout, const sigset_t* mask) noexcept;
long epoll_create(int size) noexcept;
long epoll_create1(int flags) noexcept;
long epoll_ctl(int epfd, int op, int fd, epoll_event* ev) noexcept;
long epoll_wait(int epfd, epoll_event* evs, int max, int timeout_ms) noexcept;
long epoll_pwait(int epfd, epoll_event* evs, int max, int timeout_ms, const sigset_t* mask) noexcept;
long epoll_pwait2(int epfd, epoll_event* evs, int max, const timespec* timeout, const sigset_t* mask) noexcept;

// processes (api_process.cpp)
FERRY_FORK_PATH long fork() noexcept;
long execve(const char* path, char* const argv[], char* const envp[]) noexcept;
long execv(const char* path, char* const argv[]) noexcept;
long execvp(const char* file, char* const argv[]) noexcept;
long execvpe(const char* file, char* const argv[], char* const envp[]) noexcept;
long execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) noexcept;
long fexecve(int fd, char* const argv[], char* const envp[]) noexcept;
// A system-call filter is about to be installed in this process (core/base/sandbox.h):
// prctl(PR_SET_SECCOMP, ...) and the seccomp system call (operation op).
long prctl(int option, unsigned long a2, unsigned long a3, unsigned long a4, unsigned long a5) noexcept;
void before_seccomp(long op) noexcept;
// An io_uring instance is about to be created in this process, or its credentials to
// change (core/base/tcp_only.h).
void before_io_uring() noexcept;
void before_credentials() noexcept;

}  // namespace ferry::api
