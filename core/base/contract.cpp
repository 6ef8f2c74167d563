#include "core/base/contract.h"

#include "core/base/log.h"

#include <stdlib.h>

namespace ferry {

void contract_broken(const char* what, const char* where) noexcept {
  FERRY_LOG(error, "contract", "%s %s: aborting (a FERRY_CHECKS build)", where, what);
  abort();
}

}  // namespace ferry
