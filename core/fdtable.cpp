#include "core/fdtable.h"

namespace ferry {
namespace {
// Constant-initialized and never destroyed: sockets may be used while the process exits.
union Holder {
  constexpr Holder() : table() {}
  FERRY_FORK_PATH ~Holder() {}  // runs at every exit
  FdTable table;
};
constinit Holder g_holder;
}  // namespace

FdTable& fd_table() noexcept { return g_holder.table; }

}  // namespace ferry
