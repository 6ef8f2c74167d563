// An LD_PRELOAD library that interposes nothing and allocates once as it loads, as any
// library that keeps state does: bench-passthrough's second floor for fork_rate. In a
// program with no heap of its own (fork_rate allocates nothing) that allocation makes
// the heap, a mapping with a private page, which every fork then copies.
#include <stdlib.h>

static void* g_state;

__attribute__((constructor)) static void keep_state(void) {
  g_state = malloc(64);
  if (g_state) *(volatile char*)g_state = 1;
}

int ferry_alloc_preload(void) { return g_state != 0; }
