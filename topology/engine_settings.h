// What a topology means for each replica's engine: the translation from the validated TOML
// (topology.h) to the runtime's settings, shared by the head (local_cluster), the nodes
// (node_agent, run_node) and the commands that read a topology (generate, bench).
#pragma once
#include "runtime/engine/engine.h"
#include "runtime/model/model_config.h"
#include "topology/topology.h"

namespace troupe::topology {

// The engine settings of the replicas serving model `model` ("" : [model]); the model's
// fingerprint and revision key its KV blocks.
engine::engine_config engine_config_of(const topology_config& topo, const std::string& model = "");

// Throws input_error naming the pool's line when a pool of model `model` has more pipeline
// ranks than the model has layers, or tensor ranks its heads do not divide over.
void check_groups(const topology_config& topo, const model::model_config& m, const std::string& model = "");

// The model sizes a sim topology simulates: its preset, or its folder's config.json.
model::model_config sim_shape(const model_spec& m);
inline model::model_config sim_shape(const topology_config& topo) { return sim_shape(topo.model); }

}  // namespace troupe::topology
