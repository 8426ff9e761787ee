// The attention body (attention_impl.h) compiled for AVX-512; attention.cc calls it when
// cpu_features().avx512f. Measured on the decode/prefill shapes in docs/PERFORMANCE.md.
#define HLX_ATTENTION_NS hlx::kernels::attention_avx512
#include "runtime/kernels/attention_impl.h"
