// fatkit: <stddef.h> for NVRTC (size_t is an NVRTC built-in). See README.md.
#pragma once
typedef long ptrdiff_t;
typedef decltype(nullptr) nullptr_t;
typedef struct { long long __ll; long double __ld; } max_align_t;
#ifndef NULL
#define NULL 0
#endif
#ifndef offsetof
#define offsetof(type, member) ((size_t)&reinterpret_cast<const volatile char&>((((type*)0)->member)))
#endif
