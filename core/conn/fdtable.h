// The process's table of TCP sockets: fd number -> Socket (core/base/fd_map.h).
#pragma once

#include "core/base/fd_map.h"
#include "core/conn/socket.h"

namespace ferry {

using FdTable = FdMap<Socket>;

namespace fdmap_detail {
// Constant-initialized and never destroyed: sockets may be used while the process exits.
union TableHolder {
  constexpr TableHolder() : table() {}
  ~TableHolder();  // does nothing, at every exit
  FdTable table;
};
extern constinit TableHolder g_table;
}  // namespace fdmap_detail

// The process's table of TCP sockets. Never destroyed: calls may arrive during exit.
// Inline: every call of the program asks it first.
inline FdTable& fd_table() noexcept { return fdmap_detail::g_table.table; }

}  // namespace ferry
