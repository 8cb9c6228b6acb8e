// fatkit: <string.h> for NVRTC: device memcpy and memset are NVRTC built-ins. See README.md.
#pragma once
#include <stddef.h>
