// fatkit: <stdlib.h> for NVRTC (malloc, free and abs are NVRTC built-ins). See README.md.
#pragma once
#include <stddef.h>
#include <cuda/std/cstdlib>
