#include "processes.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

namespace ferry::launcher {

std::vector<long> processes_of_user() {
  std::vector<long> out;
  DIR* proc = opendir("/proc");
  if (!proc) return out;
  const uid_t me = geteuid();
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = strtol(e->d_name, &end, 10);
    struct stat st;
    if (!end || *end || pid <= 0 || pid == getpid()) continue;
    if (::stat((std::string("/proc/") + e->d_name).c_str(), &st) != 0 || (me != 0 && st.st_uid != me)) continue;
    out.push_back(pid);
  }
  closedir(proc);
  return out;
}

}  // namespace ferry::launcher
