// The control plane plugged in from outside: a separate program that follows a running
// cluster through the admin protocol (docs/admin.md) and scales one pool by its own rule,
// here the queue per serving replica. It uses only the admin client (actors/control/admin_client.h):
// the same could be written in any language with ZeroMQ and MessagePack.
//
//   example_external_controller --endpoint tcp://127.0.0.1:7600 --events tcp://127.0.0.1:7601
//       --pool decode --high 2 --low 0.5 --for 60
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "actors/control/admin_client.h"

using namespace troupe;

int main(int argc, char** argv) {
  actors::admin_client_config cfg;
  std::string pool = "decode";
  double high = 2, low = 0.5, seconds = 60;
  auto usage = [&](std::FILE* to) {
    std::fprintf(to, "usage: %s [--endpoint E] [--events E] [--pool P] [--high Q] [--low Q] [--for S]\n", argv[0]);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      usage(stderr);
      return 2;
    }
    const std::string v = argv[++i];
    if (k == "--endpoint") cfg.endpoint = v;
    else if (k == "--events") cfg.events = v;
    else if (k == "--pool") pool = v;
    else if (k == "--high") high = std::atof(v.c_str());
    else if (k == "--low") low = std::atof(v.c_str());
    else if (k == "--for") seconds = std::atof(v.c_str());
    else {
      usage(stderr);
      return 2;
    }
  }
  actors::admin_client admin(cfg);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int quiet_looks = 0;
  while (std::chrono::steady_clock::now() < end) {
    // Events since the last look: print what the cluster reports (placements are many; skip them).
    while (auto e = admin.next_event(std::chrono::milliseconds(0)))
      if ((*e)["kind"] != "placement") std::printf("event: %s\n", e->dump().c_str());
    const auto status = admin.call("status");
    if (!status.ok) {
      std::fprintf(stderr, "status: %s\n", status.error.c_str());
      return 1;
    }
    int serving = 0, warm = 0, min = 1, max = 1;
    double waiting = 0;
    for (const auto& p : status.result["pools"])
      if (p["name"] == pool) {
        serving = p["replicas"];
        warm = p["warm"];
        min = p["min"];
        max = p["max"];
      }
    for (const auto& r : status.result["replicas"])
      if (r["pool"] == pool && r["state"] == "running") waiting += r["waiting"].get<double>();
    const double per = serving > 0 ? waiting / serving : waiting;
    quiet_looks = per < low ? quiet_looks + 1 : 0;
    int target = serving;
    if (per > high && serving < max && warm > 0) target = serving + 1;
    if (quiet_looks >= 5 && serving > min) target = serving - 1;
    if (target != serving) {
      const auto r = admin.call("scale", {pool, std::to_string(target)});
      if (r.ok)
        std::printf("scaled %s to %d (queue %.1f per replica)\n", pool.c_str(), target, per);
      else
        std::printf("scale refused: %s\n", r.error.c_str());
      std::fflush(stdout);
      quiet_looks = 0;
    }
    if (auto e = admin.next_event(std::chrono::milliseconds(250)))  // the pace of its looks
      if ((*e)["kind"] != "placement") std::printf("event: %s\n", e->dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
