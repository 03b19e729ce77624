// Compiled with tests/support/test_pch.h precompiled: the source through which CMake builds the
// header each kind of test reuses (test_main.cpp is compiled without it).
