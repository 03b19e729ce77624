// Which vector instruction set the CPU kernels dispatch to, decided once at run time.
#pragma once

namespace troupe::kernels {

enum class isa { scalar, avx2, avx512 };

const char* isa_name(isa i);

// The best ISA this CPU supports, lowered by TROUPE_ISA=scalar|avx2 in the environment
// (for tests and for comparing paths). avx2 here means AVX2 + FMA + F16C.
isa detected_isa();

// The ISA the kernels use now; starts as detected_isa(). Tests may lower it.
isa active_isa();

// AVX-512 VNNI (the int8 dot product the quantized matmul's AVX-512 path needs).
bool cpu_has_avx512_vnni();
// Sets the active ISA; returns false (and changes nothing) if the CPU lacks it.
bool set_active_isa(isa i);

}  // namespace troupe::kernels
