// One compiled variant of a random pipeline: its seed, generation, scheduler and entry points.
#pragma once

#include "HalideRuntime.h"

struct RpVariant {
  int seed;
  int stages;
  int generation; // the generator's `generation` (docs/data.md)
  const char *scheduler; // "Root" is the reference: every Func computed at root
  int (*argv)(void **);
  const halide_filter_metadata_t *(*metadata)();
};
