#include "core/fdtable.h"

namespace ferry::fdmap_detail {

FERRY_FORK_PATH TableHolder::~TableHolder() {}

constinit TableHolder g_table;

}  // namespace ferry::fdmap_detail
