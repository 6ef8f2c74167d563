// Lets a forked child start with the part of libferry it runs already mapped.
//
// fork() copies the parent's page-table entries only for mappings that hold private
// anonymous pages. libferry's code and read-only data hold none, so every child
// faults on them afresh: one fault per 64 KiB window it touches (the fork handler, the
// per-request calls, the allocator, the constants), each costly under a hypervisor.
// Rewriting one byte of such a mapping with its own value through /proc/self/mem (as a
// debugger sets a breakpoint: the protection stays as it is) gives the mapping one
// private page, after which fork() copies its entries too.
//
// Copying costs each fork about as much per entry as a child's fault-around costs per
// page it maps, so only what a child touches is worth it: the hot text
// (core/fork_path.h, core/io_path.h, gathered at the text's start by
// core/fork_page.ld), the constants, and the headers and symbol tables (a child that
// binds its own calls lazily, a program's first call of exit or close, looks through
// libferry's hash table). The rest of the text (400 KiB, most of it resident in a busy
// parent) and the unwind tables are split off into mappings of their own first, by
// marking them MADV_NOHUGEPAGE (which changes nothing else for mappings this small: no
// huge page fits them), and stay uncopied.
//
// Where the kernel refuses the write (one that forbids forced writes to /proc/PID/mem),
// nothing changes but the faults; where it refuses the split (no transparent huge
// pages), the whole mapping is shared.
#pragma once

#include <cstdint>

namespace ferry::shared_text {

// One read-only segment's share: [start, split) gets the private page, [split, end)
// is split off first (nothing to split when split == end).
struct Part {
  uintptr_t start = 0;
  uintptr_t split = 0;
  uintptr_t end = 0;
};

// A read-only PT_LOAD segment, page-aligned: [start, end).
struct Segment {
  uintptr_t start = 0;
  uintptr_t end = 0;
};

// Pure: which part of `seg` to share. The segment holding the hot text's end shares up
// to it; the one holding the unwind tables' start (`unwind`, PT_GNU_EH_FRAME) shares
// the constants before them (nothing when they start it); any other (headers, symbol
// tables) all of it. Ends round up to `page`. False when nothing of `seg` is shared.
bool part_of(Segment seg, uintptr_t hot_end, uintptr_t unwind, uintptr_t page, Part& out) noexcept;

// At start, before the program forks. True when every part of libferry worth sharing
// now holds a private page and the rest was split off.
bool prepare() noexcept;

}  // namespace ferry::shared_text
