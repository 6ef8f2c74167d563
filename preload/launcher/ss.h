// ferry ss [-j] [PID...]: every connection of running ferry processes, one line each.
#pragma once

namespace ferry::launcher {

// Runs the command on argv[at..argc): the exit status.
int ss(int argc, char** argv, int at);

}  // namespace ferry::launcher
