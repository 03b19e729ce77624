// Embedding Troupe in your own CAF actor system: start a topology's actors next to yours, submit
// a request to the request owner and receive its tokens in your own actor.
//
//   example_embed [MODEL_DIR]     (a tiny model is synthesized there if the folder is empty)
#include <caf/all.hpp>
#include <cstdio>
#include <filesystem>

#include "actors/cluster/local_cluster.h"
#include "runtime/model/synth.h"

using namespace troupe;

namespace {

struct config : caf::actor_system_config {
  config() {
    actors::register_protocols(*this);  // Troupe's message types, once
    actors::configure_workers(*this);   // idle CAF workers sleep instead of polling every 50 us
  }
};

// Your actor: prints tokens as they arrive and quits when the request ends.
actors::token_sink::behavior_type printer(actors::token_sink::pointer self) {
  return {
      [=](actors::token_batch& b) {
        for (auto& u : b.updates) {
          for (auto t : u.tokens) std::printf("token %d\n", t);
          if (!u.text.empty()) std::printf("text so far + \"%s\"\n", u.text.c_str());  // never half a character
          if (u.finished) {
            std::printf("finished: %s after %d tokens\n", engine::finish_reason_name(u.reason), u.output_tokens);
            self->quit();
          }
        }
      },
  };
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "models/tiny";
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    model::synth_options o;
    o.preset = "tiny";
    o.out = dir;
    model::synthesize(o);
  }
  // A topology can come from a file (topology::load_topology) or be written in code.
  auto topo = topology::parse_topology(R"(
    [model]
    path = "unused: the model is passed in below"
    [[nodes]]
    name = "here"
    [[pools]]
    name = "main"
    replicas = 2
    [router]
    policy = "least_loaded"
  )", "embedded topology");
  auto model = std::shared_ptr<const model::llama_model>(model::llama_model::load(dir));
  auto tok = std::shared_ptr<const tokenizer::tokenizer>(tokenizer::tokenizer::load(dir + "/tokenizer.json"));

  config cfg;
  caf::actor_system sys{cfg};
  actors::local_cluster troupe_actors(sys, topo, model, tok);  // router, request owner, 2 replicas

  auto sink = sys.spawn(printer);
  engine::request r;
  r.id = "hello";
  r.prompt = tok->encode("Hello from my own actor system");
  r.params.max_tokens = 8;
  r.params.temperature = 0;  // greedy
  caf::scoped_actor self{sys};
  bool accepted = false;
  self->request(troupe_actors.owner(), std::chrono::seconds(10), actors::submit_atom::value, r, sink)
      .receive([&](bool ok) { accepted = ok; },
               [&](caf::error& e) { std::printf("refused: %s\n", sys.render(e).c_str()); });
  if (!accepted) return 1;
  self->wait_for(sink);  // the printer quits after the last token
  return 0;
}
