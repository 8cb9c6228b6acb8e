// fatkit: <limits.h> for NVRTC. See README.md.
#pragma once
#include <cuda/std/climits>
