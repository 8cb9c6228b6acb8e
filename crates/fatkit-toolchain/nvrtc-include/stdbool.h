// fatkit: <stdbool.h> for NVRTC (C++ has bool). See README.md.
#pragma once
#define __bool_true_false_are_defined 1
