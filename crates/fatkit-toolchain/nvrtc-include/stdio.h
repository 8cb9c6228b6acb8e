// fatkit: <stdio.h> for NVRTC: device printf is an NVRTC built-in. See README.md.
#pragma once
#include <stddef.h>
