// What nearly every test file includes first, precompiled once per kind of test (unit,
// integration) instead of parsed again in each of 90 files: Boost.Test and nlohmann/json are
// about 4 of a typical test file's 12 seconds of compile time.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>
