// An LD_PRELOAD library that interposes nothing: bench-passthrough's floor for
// fork_rate, what preloading any library costs a fork on the host (its mappings, its
// place in every symbol lookup, its finalizers at exit).
int ferry_empty_preload(void) { return 0; }
