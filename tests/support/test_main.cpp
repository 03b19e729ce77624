// The one main() and master suite of every test executable but those with a main of their own:
// compiled once per kind of test rather than in each test file, whose precompiled
// <boost/test/unit_test.hpp> (tests/support/test_pch.h) comes without BOOST_TEST_MODULE.
// This file is compiled without that header so that the module's definition takes effect here.
#define BOOST_TEST_MODULE troupe
#include <boost/test/unit_test.hpp>
