#include "core/process/crash.h"

#include "core/base/log.h"

#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <libunwind.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cstdlib>
#include <cxxabi.h>

namespace ferry::crash {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
alignas(16) char g_altstack[64 * 1024];

// libunwind, loaded by install() (FERRY_BACKTRACE=1) rather than linked: every process
// under ferry would otherwise map it and liblzma, and each forked child that exits
// would pay for them. Resolved by the names the header's macros stand for.
#define FERRY_NAME(x) FERRY_NAME2(x)
#define FERRY_NAME2(x) #x
struct Unwind {
  int (*getcontext)(unw_context_t*);
  int (*init_local)(unw_cursor_t*, unw_context_t*);
  int (*step)(unw_cursor_t*);
  int (*is_signal_frame)(unw_cursor_t*);
  int (*get_reg)(unw_cursor_t*, int, unw_word_t*);
  int (*get_proc_name)(unw_cursor_t*, char*, size_t, unw_word_t*);
};
Unwind g_unw{};

bool load_unwind() {
  void* h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (!h) return false;
  Unwind u{};
  u.getcontext = reinterpret_cast<decltype(u.getcontext)>(dlsym(h, FERRY_NAME(unw_tdep_getcontext)));
  u.init_local = reinterpret_cast<decltype(u.init_local)>(dlsym(h, FERRY_NAME(unw_init_local)));
  u.step = reinterpret_cast<decltype(u.step)>(dlsym(h, FERRY_NAME(unw_step)));
  u.is_signal_frame = reinterpret_cast<decltype(u.is_signal_frame)>(dlsym(h, FERRY_NAME(unw_is_signal_frame)));
  u.get_reg = reinterpret_cast<decltype(u.get_reg)>(dlsym(h, FERRY_NAME(unw_get_reg)));
  u.get_proc_name = reinterpret_cast<decltype(u.get_proc_name)>(dlsym(h, FERRY_NAME(unw_get_proc_name)));
  if (!u.getcontext || !u.init_local || !u.step || !u.is_signal_frame || !u.get_reg || !u.get_proc_name) return false;
  g_unw = u;
  return true;
}
// Allocated at install time so that demangling a dying process's frames does not need
// the allocator (which may be what crashed).
char* g_demangled = nullptr;
size_t g_demangled_size = 0;

const char* demangle(const char* name) {
  if (!g_demangled) return name;
  int status = -1;
  size_t size = g_demangled_size;
  char* out = abi::__cxa_demangle(name, g_demangled, &size, &status);
  if (status != 0 || !out) return name;
  g_demangled = out;
  g_demangled_size = size > g_demangled_size ? size : g_demangled_size;
  return out;
}

void on_fatal(int sig, siginfo_t* info, void*) {
  char line[256];
  int n = snprintf(line, sizeof line, "ferry[%ld] fatal signal %d (%s) at address %p; backtrace:\n",
                   static_cast<long>(getpid()), sig, strsignal(sig), info ? info->si_addr : nullptr);
  log::write_raw(line, static_cast<size_t>(n));
  print_backtrace();
  // SA_RESETHAND restored the default action; deliver the signal again now.
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, sig);
  sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
  raise(sig);
}

}  // namespace

void print_backtrace() noexcept {
  if (!g_unw.getcontext) return;  // libunwind not loaded
  unw_context_t ctx;
  unw_cursor_t cursor;
  if (g_unw.getcontext(&ctx) != 0 || g_unw.init_local(&cursor, &ctx) != 0) return;
  // Inside a signal handler, start at the frame that received the signal (libunwind
  // positions a cursor past the trampoline when it reports the signal frame).
  unw_cursor_t probe = cursor;
  for (int i = 0; i < 8 && g_unw.step(&probe) > 0;) {
    ++i;
    if (g_unw.is_signal_frame(&probe) > 0) {
      cursor = probe;
      break;
    }
  }
  for (int frame = 0; frame < 64; ++frame) {
    unw_word_t ip = 0, off = 0;
    g_unw.get_reg(&cursor, UNW_REG_IP, &ip);
    char name[160] = "??";
    g_unw.get_proc_name(&cursor, name, sizeof name, &off);
    Dl_info dl{};
    const char* module = dladdr(reinterpret_cast<void*>(ip), &dl) && dl.dli_fname ? dl.dli_fname : "?";
    char line[512];
    int n = snprintf(line, sizeof line, "  #%-2d 0x%016lx %s+0x%lx (%s)\n", frame, static_cast<unsigned long>(ip),
                     demangle(name), static_cast<unsigned long>(off), module);
    log::write_raw(line, static_cast<size_t>(n < static_cast<int>(sizeof line) ? n : sizeof line - 1));
    if (g_unw.step(&cursor) <= 0) break;
  }
}

void install() noexcept {
  if (!load_unwind()) {
    FERRY_LOG(warn, "crash", "FERRY_BACKTRACE: libunwind.so.8 cannot be loaded; no backtraces");
    return;
  }
  g_demangled_size = 4096;
  g_demangled = static_cast<char*>(malloc(g_demangled_size));
  stack_t ss{};
  ss.ss_sp = g_altstack;
  ss.ss_size = sizeof g_altstack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : kSignals) {
    struct sigaction old {};
    // A handler the program installed before ferry started stays in charge.
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_DFL) continue;
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace ferry::crash
