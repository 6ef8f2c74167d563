// The exec family (core/process/api_process.cpp). glibc's own exec functions call an internal
// execve that no wrapper sees, so each is wrapped; the l-forms gather their arguments
// and go to the v-forms.
#include "preload/export.h"

#include <stdarg.h>
#include <unistd.h>

#include <vector>

namespace {

// The arguments after `first`, up to and including the null pointer that ends them.
std::vector<char*> gather(const char* first, va_list ap) {
  std::vector<char*> argv{const_cast<char*>(first)};
  while (argv.back()) argv.push_back(va_arg(ap, char*));
  return argv;
}

}  // namespace

FERRY_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  return FERRY_RESULT(int, execve(path, argv, envp));
}

FERRY_EXPORT int execv(const char* path, char* const argv[]) {
  return FERRY_RESULT(int, execv(path, argv));
}

FERRY_EXPORT int execvp(const char* file, char* const argv[]) {
  return FERRY_RESULT(int, execvp(file, argv));
}

FERRY_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  return FERRY_RESULT(int, execvpe(file, argv, envp));
}

FERRY_EXPORT int execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) {
  return FERRY_RESULT(int, execveat(dirfd, path, argv, envp, flags));
}

FERRY_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  return FERRY_RESULT(int, fexecve(fd, argv, envp));
}

FERRY_EXPORT int execl(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  std::vector<char*> argv = gather(arg, ap);
  va_end(ap);
  return execv(path, argv.data());
}

FERRY_EXPORT int execlp(const char* file, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  std::vector<char*> argv = gather(arg, ap);
  va_end(ap);
  return execvp(file, argv.data());
}

FERRY_EXPORT int execle(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  std::vector<char*> argv = gather(arg, ap);
  char* const* envp = va_arg(ap, char* const*);
  va_end(ap);
  return execve(path, argv.data(), envp);
}
