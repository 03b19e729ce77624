// Declares one function in each per-ISA namespace and picks the active one at run time.
// Used only by the scalar build of a kernel file, which also owns the public entry point.
#pragma once
#include "kernels/cpu/cpu_features.h"

#define TROUPE_DECLARE_ISA_VARIANTS(ret, name, params) \
  namespace troupe::kernels::scalar { ret name params; } \
  namespace troupe::kernels::avx2 { ret name params; } \
  namespace troupe::kernels::avx512 { ret name params; }

// The variant for ISA `which` (an expression, evaluated once).
#define TROUPE_PICK_ISA_FOR(which, name)                                                           \
  ([](::troupe::kernels::isa i) {                                                                  \
    return i == ::troupe::kernels::isa::avx512 ? &::troupe::kernels::avx512::name                  \
           : i == ::troupe::kernels::isa::avx2 ? &::troupe::kernels::avx2::name                    \
                                               : &::troupe::kernels::scalar::name;                 \
  }(which))

#define TROUPE_PICK_ISA(name) TROUPE_PICK_ISA_FOR(::troupe::kernels::active_isa(), name)
