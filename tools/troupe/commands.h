// The troupe commands: each gets what its command line gave (tools/troupe/command_tree.cpp
// declares the flags) and returns the process's exit code.
#pragma once
#include "tools/troupe/args.h"

namespace troupe::cli {

int cmd_serve(const args& a);              // troupe serve [CONFIG | MODEL]
int cmd_node(const args& a);               // troupe node CONFIG --name NODE
int cmd_launch(const args& a);             // troupe launch CONFIG
int cmd_admin(const args& a);              // troupe admin [COMMAND [ARGS]]
int cmd_admin_keygen(const args& a);       // troupe admin keygen [PREFIX]
int cmd_generate(const args& a);           // troupe generate
int cmd_model_synth(const args& a);        // troupe model synth
int cmd_model_synth_lora(const args& a);   // troupe model synth-lora
int cmd_model_quantize(const args& a);     // troupe model quantize
int cmd_bench_engine(const args& a);       // troupe bench engine
int cmd_bench_runtime(const args& a);      // troupe bench runtime
int cmd_bench_serve(const args& a);        // troupe bench serve
int cmd_bench_kv(const args& a);           // troupe bench kv-transfer
int cmd_bench_sim(const args& a);          // troupe bench sim
int cmd_bench_structured(const args& a);   // troupe bench structured
int cmd_bench_tokenizer(const args& a);    // troupe bench tokenizer
int cmd_bench_autoscale(const args& a);    // troupe bench autoscale
int cmd_bench_collectives(const args& a);  // troupe bench collectives
int cmd_eval_perplexity(const args& a);    // troupe eval perplexity
int cmd_deploy_kubernetes(const args& a);  // troupe deploy kubernetes
int cmd_plan(const args& a);               // troupe plan
int cmd_info(const args& a);               // troupe info

}  // namespace troupe::cli
