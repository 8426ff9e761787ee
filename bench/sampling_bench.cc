// Per-token sampling cost over Qwen3's vocabulary (151,936 logits) for the OpenAI default
// (temperature 1, no top_k, top_p 1), top-p 0.9, min-p 0.05 and top_k 50; the sorted-head path
// (issue 24 session 7; now the fallback of the bucketed draw, forced here by a min_p below 1e-16)
// and the full-sort path the sampler used before that (Sampler::distribution still takes it).
// Arg 0: an LLM-like row (normal, sd 2.5, a few tokens 10-20 nats above); arg 1: a flat row
// (sd 0.3), where every token matters for the softmax sum.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampling.h"

namespace {

using namespace hlx;

std::vector<float> row(int kind) {
  std::mt19937 g(42);
  std::normal_distribution<float> n(0.0f, kind == 0 ? 2.5f : 0.3f);
  std::vector<float> v(151936);
  for (auto& x : v) x = n(g);
  if (kind == 0)
    for (int i = 0; i < 20; ++i) v[size_t(g() % v.size())] += 10.0f + float(i) * 0.5f;
  return v;
}

void run(benchmark::State& state, engine::SamplingParams p) {
  const auto logits = row(int(state.range(0)));
  p.temperature = 1.0f;
  p.seed = 7;
  auto s = engine::Sampler::create(p);
  int64_t sink = 0;
  for (auto _ : state) sink += s->sample(logits).value();
  benchmark::DoNotOptimize(sink);
}

void BM_SampleOpenAiDefault(benchmark::State& state) { run(state, {}); }
void BM_SampleTopP09(benchmark::State& state) {
  engine::SamplingParams p;
  p.top_p = 0.9f;
  run(state, p);
}
void BM_SampleMinP005(benchmark::State& state) {
  engine::SamplingParams p;
  p.min_p = 0.05f;
  run(state, p);
}
void BM_SampleTopK50(benchmark::State& state) {
  engine::SamplingParams p;
  p.top_k = 50;
  run(state, p);
}
// The sorted-head path: min_p 1e-20 keeps every token of these rows, as no min-p would, but
// sample_full_vocab leaves min_p < 1e-16 to it.
void BM_SampleSortedHeadBefore(benchmark::State& state) {
  engine::SamplingParams p;
  p.min_p = 1e-20f;
  run(state, p);
}
// The full-vocabulary path before that: sort every candidate, softmax, filters (no draw).
void BM_SampleFullSortBefore(benchmark::State& state) {
  const auto logits = row(int(state.range(0)));
  engine::SamplingParams p;
  p.temperature = 1.0f;
  auto s = engine::Sampler::create(p);
  double sink = 0;
  for (auto _ : state) sink += s->distribution(logits).value()[0];
  benchmark::DoNotOptimize(sink);
}

// logprobs / top_logprobs (issue 21): the extra per-token work of a request that asks for them,
// top 20 (OpenAI's maximum) and chosen-only, without and with a logit_bias (which copies the row).
void BM_Logprobs(benchmark::State& state) {
  const auto logits = row(0);
  engine::SamplingParams p;
  p.temperature = 1.0f;
  p.logprobs = true;
  p.top_logprobs = state.range(0);
  if (state.range(1)) p.logit_bias = {{11, 3.0f}};
  auto s = engine::Sampler::create(p);
  double sink = 0;
  for (auto _ : state) sink += s->logprobs(logits, 11, p.top_logprobs).value().logprob;
  benchmark::DoNotOptimize(sink);
}
BENCHMARK(BM_Logprobs)->Args({20, 0})->Args({0, 0})->Args({20, 1})->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_SampleOpenAiDefault)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleTopP09)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleMinP005)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleTopK50)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleSortedHeadBefore)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleFullSortBefore)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
