// fatkit: <assert.h> for NVRTC: a failed assert traps with the expression, file and line, as
// nvcc's device assert does. See README.md.
#undef assert
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
extern "C" __device__ void __assertfail(const char*, const char*, unsigned, const char*, size_t);
#define assert(e) ((e) ? (void)0 : __assertfail(#e, __FILE__, __LINE__, __func__, sizeof(char)))
#endif
