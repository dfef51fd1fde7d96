// The softmax's exp as 2^t (exp2_ps in simd_avx512.h, exp2_rows_avx2.h): log2(e), folded into the multiply-add the
// rows do anyway, and 2^f for f in [-1/2, 1/2] as c[0] + c[1] f + ... + c[5] f^5, fitted for relative error (1.8e-7
// in float arithmetic). Constants only, so any kernel header may include it after level_target.h.
#pragma once

namespace vitpipe::cpu {

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kExp2Poly[6] = {1.0f,
                                       0.6931470036506653f,
                                       0.24022242426872253f,
                                       5.550733953714371e-2f,
                                       9.671511128544807e-3f,
                                       1.3264707522466779e-3f};

}  // namespace vitpipe::cpu
