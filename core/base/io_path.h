// The calls a program makes for every connection and request it serves (accept,
// setsockopt, fcntl, read, write, send, recv, epoll_ctl, epoll_wait, poll...), gathered
// in one place of libferry's text (core/base/fork_page.ld puts it right after the fork
// path's, with the library code they use).
//
// On a connection that stays on kernel TCP, ferry's part of such a call is a few
// loads and a branch; what it costs beyond its instructions is the pages it touches.
// After each system call the next access to a page may miss the TLB (always so under
// a hypervisor that switches page tables on every kernel entry), so code spread over
// several modules costs a walk per module per call. Marked FERRY_IO_PATH, the
// exports and their passthrough paths share a few pages of text.
#pragma once

#define FERRY_IO_PATH __attribute__((section(".text.sorted.ferry_io")))
