// For helpers run under ferry in the test bed: waits until ferry counts at least `want`
// of this process's connections upgraded (20 s at most), asking the command named by
// the environment variable `env` (`ferry stat`, given the pid). Returns the count, or
// -1 without the variable.
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

inline long wait_upgraded(const char* env, long want) {
  const char* stat = getenv(env);
  if (!stat) return -1;
  char cmd[512], line[256];
  snprintf(cmd, sizeof cmd, "%s %d", stat, static_cast<int>(getpid()));
  long up = 0;
  for (int i = 0; i < 200 && up < want; ++i, usleep(100000)) {
    FILE* p = popen(cmd, "r");
    while (p && fgets(line, sizeof line, p)) sscanf(line, " upgraded %ld", &up);
    if (p) pclose(p);
  }
  return up;
}
