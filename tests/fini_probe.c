// A library whose exit-time destructors say that they ran: its destructor-array entry
// writes 'a' and its DT_FINI function 'f' to fini_probe_fd (quiet_exit_test).
#include <unistd.h>

int fini_probe_fd = -1;

__attribute__((destructor)) static void probe_destructor(void) {
  if (fini_probe_fd >= 0 && write(fini_probe_fd, "a", 1) != 1) _exit(3);
}

void fini_probe_fini(void) {
  if (fini_probe_fd >= 0 && write(fini_probe_fd, "f", 1) != 1) _exit(3);
}
