// A model's fingerprint: what a node and the head compare before the node may serve the head's
// traffic. It covers config.json (parsed, so formatting does not matter) and every tensor's
// name, dtype, shape and first bytes, which tells apart models of the same shape with other
// weights without reading them whole.
#pragma once
#include <string>

#include "runtime/model/model_config.h"

namespace troupe::model {

// Of a model folder; throws input_error like the loader for a folder it cannot read.
std::string model_fingerprint(const std::string& dir);

// Of a shape alone (the sim backend, which has no weights).
std::string shape_fingerprint(const model_config& c);

}  // namespace troupe::model
