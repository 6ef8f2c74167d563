// Lets a forked child start with libferry's code and constants already mapped.
//
// fork() copies the parent's page-table entries only for mappings that hold private
// anonymous pages. libferry's code and read-only data hold none, so every child
// faults on them afresh: one fault per 64 KiB window it touches (the fork handler, the
// per-request calls, the allocator, the constants, the dynamic linker's look at the
// symbol table), about 4-6 per child of a forking server, each costly under a
// hypervisor. Rewriting one byte of each such mapping with its own value through
// /proc/self/mem (as a debugger sets a breakpoint: the protection stays as it is)
// gives the mapping one private page, after which fork() copies its entries too.
//
// It costs one private page per mapping. Where the kernel refuses the write (a kernel
// that forbids forced writes to /proc/PID/mem), nothing changes but the faults.
#pragma once

namespace ferry::shared_text {

// At start, before the program forks. True when every read-only mapping of libferry
// now holds a private page.
bool prepare() noexcept;

}  // namespace ferry::shared_text
