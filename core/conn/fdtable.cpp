#include "core/conn/fdtable.h"

#include "core/base/fork_path.h"

namespace ferry::fdmap_detail {

FERRY_FORK_PATH TableHolder::~TableHolder() {}

// Among the data a forked child writes anyway (core/base/fork_path.h): a bind or an
// unbind writes the map's size.
// Its own alignment, not the 32 bytes a compiler gives large objects: no padding on the
// fork page.
FERRY_FORK_DATA alignas(TableHolder) constinit TableHolder g_table;

}  // namespace ferry::fdmap_detail
