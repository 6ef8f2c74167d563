// Code that runs at every fork, gathered in one place of libferry's text.
//
// A forked child does not inherit the parent's page-table entries for file-backed
// code: the first call into each 64 KiB window of ferry's text is a page fault, in
// every child (and, under a hypervisor that shadows page tables, an expensive one).
// Every function ferry's fork handlers call is marked FERRY_FORK_PATH, and so is what a
// forked child of a server runs at exit and to close the descriptors it inherited (the
// listener, the parent's other connections), so that the child faults once for the
// code, not once per module.
//
// The sections are `.text.sorted.*`, which core/base/fork_page.ld gathers at the start of
// the library's text (and GNU ld's default script would sort by name anyway), so each
// group is one run of text whatever the order of the objects that hold its parts
// (core/base/io_path.h's group is the other, right after this one).
#pragma once

#define FERRY_FORK_PATH __attribute__((section(".text.sorted.ferry_fork")))

// Likewise for data: a variable a forked process writes (the first write to a page
// shared with the parent or a child copies it), or that the fork handlers and a forked
// child's close and exit read (each page a new process first touches costs it, under a
// hypervisor that shadows page tables), lives in this one section, next to the others. core/base/fork_page.ld makes the section one page of its own, the counters first
// (FERRY_FORK_COUNTERS), and the link fails if it outgrows the page.
#define FERRY_FORK_DATA __attribute__((section("ferry_fork_data")))
#define FERRY_FORK_COUNTERS __attribute__((section("ferry_fork_data.counters")))
inline constexpr unsigned long kForkPage = 4096;
