// Starts ferry's runtime as the preloaded library does in a freshly exec'd process and
// prints the TCP sockets it found: "fd N ROLE blocking|nonblocking".
#include "core/conn/fdtable.h"
#include "core/process/runtime.h"

#include <cstdio>

int main() {
  ferry::runtime::start();
  ferry::fd_table().for_each([](int fd, const ferry::SocketRef& s) {
    printf("fd %d %s %s\n", fd, ferry::to_string(s->role()), s->nonblocking.load() ? "nonblocking" : "blocking");
  });
  return 0;
}
