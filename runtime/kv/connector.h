// The KV connector: the one place that decides about KV which comes from elsewhere. Three uses
// share it: a disaggregation handoff (a prefill replica computed the prompt, a decode replica
// pulls it), a KV-store hit (the store pins blocks, the replica pulls them) and a drain with live
// KV (a draining replica hands its requests on and holds their blocks for the next one).
//
// It is pure: no actors, no clocks, no threads. The actors ask it what to do and carry out the
// answer (a message, a timer armed with the number it gives, blocks freed); every failure path is
// a unit test without actors (tests/kv/connector_test.cpp). Its parts, by who asks:
//
// - incoming (the engine, per request): the pull into blocks the replica reserved, from the
//   handle the request came with to the pull's end, and what the failure policy says then.
// - scheduler_side<Peer> (a replica's scheduler): as a receiver, who holds each request's KV and
//   must be told when the pull ended; as a sender, the blocks it holds for a receiver, their
//   holds and expiries, and the requests it stands in for (relays: handed on before they pulled).
// - lease<Peer> (the request owner): a handle and its holder between two replicas, taken once.
//
// `Peer` is whatever names a holder: an actor handle in the actors, a number in the tests.
// vLLM's v1 KV connector has the same split (scheduler side: what is available, what to do once
// blocks are allocated, whether a finished request's blocks wait; worker side: loads started and
// finished); this one also owns the holds, because here the holder is another actor.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "runtime/kv/transfer/holds.h"
#include "runtime/kv/transfer/kv_handle.h"

namespace troupe::kv::connector {

// What a failed pull leads to (the topology's [kv_transfer] retry_on_failure): the reserved blocks
// go back either way; then the prompt is computed here, or the request ends (transfer_failed) and
// its owner prefills it again on another replica.
enum class failure_policy { recompute, retry };

// What the engine does once a pull ended.
enum class after_pull {
  stale,            // not the current pull of this request (a superseded one): nothing
  compute_on,       // the KV is here: the request computes from where it ends
  abort,            // it was aborted while the copy wrote its blocks: it ends now
  recompute_here,   // failed: free the reserved blocks, compute the prompt here, first in line
  retry_elsewhere,  // failed: free the reserved blocks, end it with reason transfer_failed
};

// One request's KV to pull into this replica. Empty when the request brought none.
class incoming {
 public:
  incoming() = default;
  explicit incoming(transfer::kv_handle from) : from_(std::move(from)) {}

  // A handle waits to be pulled or is being pulled.
  bool expected() const { return !from_.empty(); }
  bool in_flight() const { return pulling_; }
  int positions() const { return from_.positions; }
  const transfer::kv_handle& handle() const { return from_; }
  int skip() const { return skip_; }  // leading blocks of the table found cached here, not pulled

  // Admission found the first `blocks` blocks (`tokens` positions) in this replica's own cache:
  // only the rest is pulled. True if nothing is left to pull (the handle is spent).
  bool trim(int blocks, int tokens);
  // The pull starts; its completion must name `epoch` to count.
  void start(std::uint64_t epoch);
  // The request is aborted. True while a pull is in flight: the copy may still write its
  // blocks, so it ends when the pull does (end() says abort).
  bool abort_when_pulled();
  // The replica's KV was lost. True while a pull is in flight: it ends as a failure.
  bool lose();
  // The pull numbered `epoch` ended (`error` empty: it worked). Fills in the error of a pull
  // whose replica lost its KV meanwhile; the handle is spent after any answer but stale.
  after_pull end(std::uint64_t epoch, std::string& error, failure_policy policy);
  // Handed off before its pull began: the next replica pulls from the same holder.
  transfer::kv_handle pass_on();

 private:
  transfer::kv_handle from_;
  bool pulling_ = false;
  std::uint64_t epoch_ = 0;
  bool lost_ = false;
  bool abort_ = false;
  int skip_ = 0;
};

// A scheduler's side of the connector, for one replica.
template <class Peer>
class scheduler_side {
 public:
  // --- as a receiver ---
  // A request arrives with KV held by `holder`.
  void expect(const std::string& id, Peer holder) { holders_[id] = std::move(holder); }
  // Whom to ask before pulling `id` (the worker side's claim); none: the KV is in this process.
  std::optional<Peer> holder_of(const std::string& id) const {
    auto it = holders_.find(id);
    if (it == holders_.end()) return std::nullopt;
    return it->second;
  }
  // Its pull ended (or the request did first): the holder to tell that it may free the blocks.
  std::optional<Peer> pulled(const std::string& id) {
    auto it = holders_.find(id);
    if (it == holders_.end()) return std::nullopt;
    Peer p = std::move(it->second);
    holders_.erase(it);
    return p;
  }

  // --- as a sender ---
  // What a request that ended with reason handoff does to the blocks here.
  struct handoff {
    enum kind { nothing, free_now, hold } what = nothing;
    std::uint64_t timer = 0;  // hold: arm the hold's timer with this number
  };
  // `id` ended with reason handoff carrying a handle; `received`: a receiver takes it (its
  // sink is alive). A request handed on before its own pull began relays its holder: this replica
  // answers for that holder's blocks until the next receiver releases them.
  handoff handed_off(const std::string& id, bool received) {
    if (auto h = holders_.find(id); h != holders_.end()) {
      if (!received) return {};  // nobody receives it: the request's end releases its holder
      relayed_[id] = std::move(h->second);
      holders_.erase(h);
      return {handoff::hold, held_.start(id)};
    }
    if (!received) return {handoff::free_now, 0};
    return {handoff::hold, held_.start(id)};
  }

  // A receiver claims `id` before pulling it: held (a fresh hold, `timer` to arm), or not.
  // A relay asks its holder (`ask`), whose answer is the claim's.
  struct claim {
    bool held = false;
    std::optional<std::uint64_t> timer;
    std::optional<Peer> ask;
  };
  claim claimed(const std::string& id) {
    claim c;
    c.timer = held_.claim(id);
    c.held = c.timer.has_value();
    if (auto r = relayed_.find(id); r != relayed_.end()) c.ask = r->second;
    return c;
  }

  // The receiver has the blocks (or gave up). `free_blocks`: this replica frees them; `tell`:
  // a relay passes the release on to its holder.
  struct release {
    bool free_blocks = false;
    std::optional<Peer> tell;
  };
  release released(const std::string& id) {
    release r;
    if (auto it = relayed_.find(id); it != relayed_.end()) {
      r.tell = std::move(it->second);
      relayed_.erase(it);
      held_.release(id);
      return r;
    }
    r.free_blocks = held_.release(id);
    return r;
  }

  // The timer of hold `n` of `id` fired. True: free the blocks here (a superseded timer, or a
  // relay's, frees nothing: the holder's own hold frees its blocks).
  bool expired(const std::string& id, std::uint64_t n) { return held_.expire(id, n) && !relayed_.erase(id); }

  std::size_t num_relayed() const { return relayed_.size(); }
  std::size_t num_expected() const { return holders_.size(); }

 private:
  std::map<std::string, Peer> holders_;  // receiver: who holds each expected request's KV
  std::map<std::string, Peer> relayed_;  // sender: handed on unpulled, stood in for
  transfer::hold_book held_;             // sender: holds by number
};

// The request owner's side: a handle and its holder between two replicas. The KV goes to one
// receiver only: a later move of the request recomputes it.
// `Origin` names the replica that computed it.
template <class Peer, class Origin>
class lease {
 public:
  void grant(transfer::kv_handle kv, Peer holder, Origin from) {
    kv_ = std::move(kv);
    holder_ = std::move(holder);
    from_ = from;
  }
  bool held() const { return !kv_.empty(); }
  const Origin& from() const { return from_; }  // the replica that computed it (a retry avoids it)
  // For the next receiver, once.
  std::pair<transfer::kv_handle, std::optional<Peer>> take() {
    std::pair<transfer::kv_handle, std::optional<Peer>> out{std::move(kv_), std::move(holder_)};
    kv_ = {};
    holder_.reset();
    return out;
  }
  // The request ends before anyone pulled it: the holder to release.
  std::optional<Peer> drop() { return take().second; }

 private:
  transfer::kv_handle kv_;
  std::optional<Peer> holder_;
  Origin from_{};
};

}  // namespace troupe::kv::connector
