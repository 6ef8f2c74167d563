// splice: a pipe's bytes into a connection, or a connection's into a pipe.
#include "preload/export.h"

FERRY_EXPORT ssize_t splice(int in, loff_t* off_in, int out, loff_t* off_out, size_t len, unsigned flags) {
  return FERRY_RESULT(ssize_t, splice(in, off_in, out, off_out, len, flags));
}
