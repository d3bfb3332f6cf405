// One compiled variant of a random pipeline: its seed, its scheduler and its entry points.
#pragma once

#include "HalideRuntime.h"

struct RpVariant {
  int seed;
  int stages;
  const char *scheduler; // "Root" is the reference: every Func computed at root
  int (*argv)(void **);
  const halide_filter_metadata_t *(*metadata)();
};
