// The processes `ferry stat` and `ferry ss` look at when no pid is named.
#pragma once

#include <vector>

namespace ferry::launcher {

// Every process of this user (of every user, for root) but this one, by pid.
std::vector<long> processes_of_user();

}  // namespace ferry::launcher
