// fatkit: libcu++'s names, visible in std. See README.md.
#pragma once
#ifndef __CUDACC_RTC__
#error "fatkit's NVRTC headers are for NVRTC; nvcc uses the host compiler's"
#endif
namespace cuda { namespace std {} }
namespace std { using namespace ::cuda::std; }
