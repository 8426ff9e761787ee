// `hlx bench -m DIR [--json FILE] [--threads N] [--capacity C] [--small-capacity C]`
//
// One benchmark record for a text checkpoint on this machine: the machine and the kernel paths
// taken, a DRAM read probe on the same threads and the decode roofline it implies, prefill
// throughput and time to first token, decode at batch 1 and aggregate at 4 and 8 slots (in rounds that
// alternate the batches, each after its own short probe), decode
// at a short context under a small and a large capacity (alternating runs), load/plan/emit times and peak RSS;
// with --long-context (or --long-context-only) also long contexts: decode b1/b8 at 8k and 32k with
// roofline fractions and the prefill of the whole context against prefill-512 (issue 27); with
// --prefix-chat (or --prefix-chat-only) the TTFT of a chat's later turns with prefix reuse on and
// off (issue 19).
// docs/PERFORMANCE.md records its output for the Qwen3-0.6B-shaped fixture.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/clock.h"
#include "engine/sampling.h"
#include "engine/session.h"
#include "engine/text_model.h"
#include "io/hf_config.h"
#include "models/text_spec.h"
#include "runtime/kernels/cpu.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/membw.h"
#include "runtime/kernels/parallel.h"

namespace hlx::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

struct BenchArgs {
  std::string model;
  std::string json_out;
  int threads = 0;
  std::string weights;                 // "int8", or empty: the checkpoint's own type
  std::string kv_dtype = "auto";       // auto | bf16 | f32 | int8
  std::string batch_invariant = "on";  // on | off (TextModelOptions::product_order)
  int64_t capacity = 4096;
  int64_t small_capacity = 512;
  int64_t context = 64;        // context the decode runs start from
  int64_t decode_tokens = 32;  // decode steps per measurement
  int reps = 3;                // repetitions of every prefill and decode measurement (best reported)
  std::vector<int64_t> prefill_lengths{128, 512};
  std::vector<int64_t> batches{1, 4, 8};
  // Long-context section (issue 27), off by default: an 8k prefill takes about a minute, 32k ten.
  bool long_context = false;
  bool long_only = false;     // skip every other section after the DRAM probe
  int64_t long_capacity = 0;  // 0: the largest context + the decode steps, rounded up to 1024
  std::vector<int64_t> long_contexts{8192, 32768};
  std::vector<int64_t> long_batches{1, 8};
  // Prefix-reuse section (issue 19), off by default (a minute or two): a chat of `chat_turns`
  // turns on a `chat_history`-token first prompt.
  bool prefix_chat = false;
  bool prefix_chat_only = false;  // skip every other section (no DRAM probe either)
  int64_t chat_history = 1500;
  int64_t chat_turns = 4;
};

// MemAvailable of /proc/meminfo in bytes (0 if unreadable).
size_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    size_t kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %zu kB", &kb) == 1) return kb * 1024;
  }
  return 0;
}

// Peak resident set (VmHWM) and current RSS of this process in bytes, from /proc/self/status.
void read_rss(size_t* hwm, size_t* rss) {
  std::ifstream in("/proc/self/status");
  std::string line;
  *hwm = *rss = 0;
  while (std::getline(in, line)) {
    size_t kb = 0;
    if (std::sscanf(line.c_str(), "VmHWM: %zu kB", &kb) == 1) *hwm = kb * 1024;
    if (std::sscanf(line.c_str(), "VmRSS: %zu kB", &kb) == 1) *rss = kb * 1024;
  }
}

// Resets VmHWM to the current RSS (Linux >= 4.0), so a later peak belongs to what follows.
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// The load average for a printed figure, and the serial periods the thread pool has started so far
// (it runs jobs on one thread while waiting for descheduled workers costs more than they save).
std::string load_note() {
  const int64_t backoffs = kernels::pool_backoffs();
  return backoffs ? loadavg() + "; pool serial periods so far " + std::to_string(backoffs) : loadavg();
}

std::vector<int64_t> prompt_tokens(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = (i * 7919 + salt * 104729 + 13) % vocab;
  return t;
}

// The next token as the engine picks it at temperature 0 (the server's greedy sampler), so the
// decode figures include the same per-row cost a served request pays.
int64_t argmax(const float* row, int64_t n) {
  static engine::Sampler greedy = engine::Sampler::create(engine::SamplingParams{}).value();
  return greedy.sample({row, size_t(n)}).value();
}

// K and V bytes attention reads per token (one sequence) at context `len`.
size_t kv_bytes_per_token(const models::TextModelSpec& spec, DType kv, int64_t len) {
  // int8 KV also reads one f32 scale per row and kv head.
  const size_t row = size_t(spec.num_kv_heads) * (size_t(spec.head_dim) * dtype_size(kv) + (kv == DType::kI8 ? 4 : 0));
  return size_t(spec.num_layers) * 2 * size_t(len) * row;
}

struct DecodeRun {
  double tok_s = 0;  // aggregate over rows
  double ms_per_step = 0;
};

// Admits `batch` sequences, prefills `context` tokens into each, then runs `steps` decode steps
// over all of them (greedy). Frees the slots after.
Result<DecodeRun> run_decode_once(engine::TextModel& m, int64_t batch, int64_t context, int64_t steps) {
  const int64_t vocab = m.spec().vocab_size;
  std::vector<int64_t> slots;
  std::vector<engine::DecodeRow> rows;
  auto cleanup = [&] {
    for (int64_t s : slots) (void)m.release(s);
  };
  for (int64_t b = 0; b < batch; ++b) {
    auto prompt = prompt_tokens(context, vocab, b + 1);
    auto slot = m.admit(prompt, steps + 1);
    if (!slot.ok()) {
      cleanup();
      return slot.status();
    }
    slots.push_back(*slot);
    auto logits = m.prefill(*slot, prompt);
    if (!logits.ok()) {
      cleanup();
      return logits.status();
    }
    rows.push_back({*slot, argmax(logits->data<float>(), vocab), context});
  }
  auto t0 = Clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    auto logits = m.decode(rows);
    if (!logits.ok()) {
      cleanup();
      return logits.status();
    }
    for (int64_t b = 0; b < batch; ++b) {
      rows[size_t(b)].token = argmax(logits->data<float>() + b * vocab, vocab);
      ++rows[size_t(b)].position;
    }
  }
  const double ms = ms_since(t0);
  cleanup();
  DecodeRun r;
  r.ms_per_step = ms / double(steps);
  r.tok_s = double(batch * steps) / (ms / 1000.0);
  return r;
}

// The median of a non-empty list (the upper one of the two middle values).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct PrefillRun {
  double tok_s = 0, ttft_ms = 0;  // best of reps; TTFT = prefill + first-token argmax
};

Result<PrefillRun> run_prefill(engine::TextModel& m, int64_t len, int reps) {
  const int64_t vocab = m.spec().vocab_size;
  PrefillRun best;
  for (int r = 0; r < reps; ++r) {
    auto prompt = prompt_tokens(len, vocab, 100 + r);
    auto t0 = Clock::now();
    HLX_ASSIGN_OR_RETURN(int64_t slot, m.admit(prompt, 1));
    auto logits = m.prefill(slot, prompt);
    if (!logits.ok()) {
      (void)m.release(slot);
      return logits.status();
    }
    volatile int64_t first = argmax(logits->data<float>(), vocab);
    (void)first;
    const double ms = ms_since(t0);
    HLX_RETURN_IF_ERROR(m.release(slot));
    if (best.ttft_ms == 0 || ms < best.ttft_ms) {
      best.ttft_ms = ms;
      best.tok_s = double(len) / (ms / 1000.0);
    }
  }
  return best;
}

std::string gb(double bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(3);
  os << bytes / 1e9 << " GB";
  return os.str();
}

Status write_record(const BenchArgs& a, json& rec);

// ---- prefix reuse (issue 19): one slot, a greedy chat whose turn k resends turn k-1's prompt,
// its reply and a new user message (ids, no tokenizer needed). Each turn runs with reuse on, then
// off, on the same model, so both see the same machine load: the on run reuses the rows the
// previous turn's run left (the previous prompt, as in a served chat), the off run prefills all.
// TTFT = submit -> first token event. Best of --reps chats per turn and side.
Status run_prefix_chat(const BenchArgs& a, const engine::TextModelOptions& base, json& rec) {
  constexpr int64_t kUser = 24, kReply = 8;
  engine::TextModelOptions o = base;
  o.slots = 1;
  o.context_capacity = a.chat_history + a.chat_turns * (kUser + kReply) + 1;
  HLX_ASSIGN_OR_RETURN(auto m, engine::TextModel::load(a.model, o));
  const int64_t vocab = m->spec().vocab_size;
  // Compile every prefill bucket and the decode entry off the clock (a remainder's chunks start
  // mid-slot, so they may take any bucket).
  for (int64_t b : m->prefill_buckets()) HLX_RETURN_IF_ERROR(m->warm_up(b, false, 1));
  std::vector<double> best_on(size_t(a.chat_turns), 0), best_off(size_t(a.chat_turns), 0);
  std::vector<int64_t> prompt_len(size_t(a.chat_turns)), cached(size_t(a.chat_turns));
  bool same_tokens = true;
  for (int rep = 0; rep < a.reps; ++rep) {
    m->reset();
    std::vector<int64_t> prompt = prompt_tokens(a.chat_history, vocab, 31 + rep);
    for (int64_t k = 0; k < a.chat_turns; ++k) {
      std::vector<int64_t> tokens[2];
      for (int side = 0; side < 2; ++side) {  // 0: reuse on, 1: off
        engine::BatchEngineOptions bo;
        bo.prefix_cache = side == 0;
        engine::Session session(*m, bo);
        engine::GenerationRequest r;
        r.prompt = prompt;
        r.max_new_tokens = kReply;
        r.eos_token_ids = std::vector<int64_t>{};
        Clock::time_point first;
        r.on_event = [&first](const engine::Event& e) {
          if (e.kind == engine::Event::Kind::kToken && first == Clock::time_point()) first = Clock::now();
        };
        const auto t0 = Clock::now();
        HLX_ASSIGN_OR_RETURN(engine::Completion c, session.generate(std::move(r)));
        if (c.finish != engine::Finish::kLength)
          return make_error(ErrorKind::kInternal, "chat turn ", k + 1,
                            " did not run to its length: ", c.error.to_string());
        const double ttft = std::chrono::duration<double, std::milli>(first - t0).count();
        double& best = side == 0 ? best_on[size_t(k)] : best_off[size_t(k)];
        if (best == 0 || ttft < best) best = ttft;
        if (side == 0) cached[size_t(k)] = c.cached_tokens;
        tokens[side] = c.tokens;
      }
      same_tokens = same_tokens && tokens[0] == tokens[1];
      prompt_len[size_t(k)] = int64_t(prompt.size());
      prompt.insert(prompt.end(), tokens[1].begin(), tokens[1].end());
      for (int64_t i = 0; i < kUser; ++i) prompt.push_back((i * 131 + k * 977 + 5) % vocab);
    }
  }
  json turns = json::array();
  double sum_on = 0, sum_off = 0;
  for (int64_t k = 0; k < a.chat_turns; ++k) {
    const double on = best_on[size_t(k)], off = best_off[size_t(k)];
    if (k > 0) {
      sum_on += on;
      sum_off += off;
    }
    turns.push_back({{"turn", k + 1},
                     {"prompt_tokens", prompt_len[size_t(k)]},
                     {"cached_tokens", cached[size_t(k)]},
                     {"ttft_ms_reuse", on},
                     {"ttft_ms_no_reuse", off},
                     {"ratio", off > 0 ? on / off : 0.0}});
    std::printf("chat turn %lld: %lld prompt tokens, %lld cached; TTFT reuse %.1f ms, no reuse %.1f ms (%.1f %%)\n",
                static_cast<long long>(k + 1), static_cast<long long>(prompt_len[size_t(k)]),
                static_cast<long long>(cached[size_t(k)]), on, off, off > 0 ? 100.0 * on / off : 0.0);
  }
  const double ratio = sum_off > 0 ? sum_on / sum_off : 0.0;
  rec["prefix_chat"] = {{"history_tokens", a.chat_history}, {"turns", turns}, {"later_turns_ttft_ratio", ratio},
                        {"same_tokens", same_tokens},       {"reps", a.reps}, {"loadavg", loadavg()}};
  std::printf("prefix reuse: TTFT of turns 2-%lld with reuse = %.1f %% of without (tokens %s)   (load %s)\n",
              static_cast<long long>(a.chat_turns), 100.0 * ratio, same_tokens ? "identical" : "DIFFER",
              load_note().c_str());
  return ok_status();
}

// ---- long context (issue 27): per decode batch a model whose capacity is --long-capacity (a
// batch whose KV would not fit in memory at that capacity gets the smallest capacity that holds
// its contexts, rounded up to 1024: attention cost follows the context, not the capacity; the
// record says which). Per context: one prefill of the whole context into slot 0 (timed: the
// prefill figure, on the batch-1 model), the other rows of the batch copied from it by prefix
// reuse (a memcpy of K/V rows, then one token of prefill), then decode steps over all rows after
// a short DRAM probe, and another after them. Rooflines count the weights and the K/V actually read.
// Both probes are reported because this host's DRAM rate can double or halve within a minute
// (Zen 5 VMs: 31-89 GB/s between rounds): a round is judged against the probes that bracket it.
// The smallest capacity that holds every long context and its decode steps, rounded up to 1024.
int64_t smallest_long_capacity(const BenchArgs& a) {
  return (*std::max_element(a.long_contexts.begin(), a.long_contexts.end()) + a.decode_tokens + 1023) / 1024 * 1024;
}

Status run_long_context(const BenchArgs& a, const engine::TextModelOptions& base, int threads, double bw, json& rec) {
  json out = json::array();
  double prefill512 = 0;
  for (int64_t batch : a.long_batches) {
    engine::TextModelOptions o = base;
    o.slots = batch;
    o.context_capacity = a.long_capacity;
    // K/V bytes per context row for the memory check (f32 KV for f32 checkpoints, else bf16:
    // conservative when the option is unset); the roofline uses the loaded model's own.
    HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(a.model));
    HLX_ASSIGN_OR_RETURN(models::TextModelSpec spec, models::text_spec_from_config(config));
    const DType kv_guess = base.kv_dtype                      ? *base.kv_dtype
                           : spec.weight_dtype == DType::kF32 ? DType::kF32
                                                              : DType::kBF16;
    size_t kv_row = kv_bytes_per_token(spec, kv_guess, 1);
    const double budget = 0.6 * double(mem_available());
    if (double(kv_row) * double(batch) * double(o.context_capacity) > budget)
      o.context_capacity = std::min(a.long_capacity, smallest_long_capacity(a));
    std::vector<int64_t> contexts;
    for (int64_t c : a.long_contexts)
      if (c + a.decode_tokens <= o.context_capacity) contexts.push_back(c);
    if (contexts.empty() || double(kv_row) * double(batch) * double(o.context_capacity) > budget) {
      std::printf(
          "long context, batch %lld: skipped (KV of %lld rows x capacity %lld = %s exceeds 60%% of the %s "
          "available)\n",
          static_cast<long long>(batch), static_cast<long long>(batch), static_cast<long long>(o.context_capacity),
          gb(double(kv_row) * double(batch) * double(o.context_capacity)).c_str(), gb(double(mem_available())).c_str());
      out.push_back({{"batch", batch}, {"skipped", "KV does not fit in memory"}});
      continue;
    }
    HLX_ASSIGN_OR_RETURN(auto m, engine::TextModel::load(a.model, o));
    const int64_t ref_len = std::min<int64_t>(512, o.context_capacity - 1);  // 512 but on tiny test capacities
    HLX_RETURN_IF_ERROR(m->warm_up(ref_len, false, batch));
    kv_row = kv_bytes_per_token(m->spec(), m->shape().kv_dtype, 1);
    const size_t wbytes = m->stats().decode_weight_bytes;
    if (prefill512 == 0) {
      HLX_ASSIGN_OR_RETURN(PrefillRun r, run_prefill(*m, ref_len, a.reps));
      prefill512 = r.tok_s;
      rec["long_context_prefill_reference"] = {{"tokens", ref_len}, {"tok_s", prefill512}};
      std::printf("long context: prefill %lld tokens %.1f tok/s (the reference rate)\n",
                  static_cast<long long>(ref_len), prefill512);
    }
    const int64_t vocab = m->spec().vocab_size;
    for (int64_t ctx : contexts) {
      auto prompt = prompt_tokens(ctx, vocab, 7);
      std::vector<int64_t> slots;
      auto cleanup = [&] {
        for (int64_t s : slots) (void)m->release(s);
      };
      json e = {{"batch", batch}, {"context", ctx}, {"capacity", o.context_capacity}};
      HLX_ASSIGN_OR_RETURN(int64_t s0, m->admit(prompt, a.decode_tokens + 1));
      slots.push_back(s0);
      auto t0 = Clock::now();
      auto logits = m->prefill(s0, prompt);
      const double prefill_ms = ms_since(t0);
      if (!logits.ok()) {
        cleanup();
        return logits.status();
      }
      std::vector<engine::DecodeRow> rows{{s0, argmax(logits->data<float>(), vocab), ctx}};
      if (batch == 1) {
        e["prefill_tok_s"] = double(ctx) / (prefill_ms / 1000.0);
        e["prefill_over_prefill512"] = double(ctx) / (prefill_ms / 1000.0) / prefill512;
      }
      for (int64_t b = 1; b < batch; ++b) {
        auto slot = m->admit_reusing(prompt, a.decode_tokens + 1, int64_t(b), ctx - 1, s0);
        if (!slot.ok()) {
          cleanup();
          return slot.status();
        }
        slots.push_back(*slot);
        auto l = m->prefill(*slot, std::span<const int64_t>(prompt).subspan(size_t(ctx - 1)));
        if (!l.ok()) {
          cleanup();
          return l.status();
        }
        rows.push_back({*slot, argmax(l->data<float>(), vocab), ctx});
      }
      auto round_probe = [threads] {
        kernels::ThreadLimit limit(threads);
        return kernels::probe_dram_read(size_t(1) << 28, 3).best_gbps * 1e9;
      };
      const double round_bw = round_probe();
      t0 = Clock::now();
      for (int64_t step = 0; step < a.decode_tokens; ++step) {
        auto l = m->decode(rows);
        if (!l.ok()) {
          cleanup();
          return l.status();
        }
        for (int64_t b = 0; b < batch; ++b) {
          rows[size_t(b)].token = argmax(l->data<float>() + b * vocab, vocab);
          ++rows[size_t(b)].position;
        }
      }
      const double ms = ms_since(t0);
      const double after_bw = round_probe();
      cleanup();
      const int64_t mid = ctx + a.decode_tokens / 2;
      const double per_step = double(wbytes) + double(batch) * double(kv_row) * double(mid);
      const double tok_s = double(batch * a.decode_tokens) / (ms / 1000.0);
      const double roof = double(batch) * bw / per_step, roof_round = double(batch) * round_bw / per_step,
                   roof_after = double(batch) * after_bw / per_step;
      e["decode_tok_s"] = tok_s;
      e["decode_ms_per_step"] = ms / double(a.decode_tokens);
      e["roofline_tok_s"] = roof;
      e["fraction_of_roofline"] = tok_s / roof;
      e["round_probe_gbps"] = round_bw / 1e9;
      e["fraction_of_round_probe_roofline"] = tok_s / roof_round;
      e["probe_after_gbps"] = after_bw / 1e9;
      e["fraction_of_probe_after_roofline"] = tok_s / roof_after;
      e["bytes_per_step"] = per_step;
      e["loadavg"] = loadavg();
      std::printf(
          "long context %lld (capacity %lld), batch %lld: decode %.2f tok/s (%.1f ms/step), roofline %.1f "
          "(%s weights + %lld x %s KV per step) -> %.0f%%; vs the probes before / after it (%.1f / %.1f GB/s) "
          "%.0f%% / %.0f%%",
          static_cast<long long>(ctx), static_cast<long long>(o.context_capacity), static_cast<long long>(batch), tok_s,
          ms / double(a.decode_tokens), roof, gb(double(wbytes)).c_str(), static_cast<long long>(batch),
          gb(double(kv_row) * double(mid)).c_str(), 100.0 * tok_s / roof, round_bw / 1e9, after_bw / 1e9,
          100.0 * tok_s / roof_round, 100.0 * tok_s / roof_after);
      if (batch == 1)
        std::printf("; prefill %lld tokens %.1f tok/s = %.2fx prefill-%lld", static_cast<long long>(ctx),
                    double(ctx) / (prefill_ms / 1000.0), double(ctx) / (prefill_ms / 1000.0) / prefill512,
                    static_cast<long long>(ref_len));
      std::printf("   (load %s)\n", load_note().c_str());
      out.push_back(e);
    }
  }
  rec["long_context"] = out;
  return ok_status();
}

// The options every section's models start from.
engine::TextModelOptions base_options(const BenchArgs& a) {
  engine::TextModelOptions base;
  base.threads = a.threads;
  if (a.weights == "int8") base.weight_format = kernels::WeightFormat::kInt8;
  if (a.weights == "int4") base.weight_format = kernels::WeightFormat::kInt4;
  if (a.kv_dtype != "auto") base.kv_dtype = a.kv_dtype == "int8" ? DType::kI8 : *dtype_from_name(a.kv_dtype);
  if (a.batch_invariant == "off") base.product_order = kernels::ProductOrder::kAnyOrder;
  return base;
}

Status run_bench(const BenchArgs& a) {
  json rec;
  const engine::TextModelOptions base = base_options(a);
  if (a.prefix_chat_only) {
    HLX_RETURN_IF_ERROR(run_prefix_chat(a, base, rec));
    return write_record(a, rec);
  }
  const auto& cpu = kernels::cpu_features();
  // ---- machine
  const int threads = a.threads > 0 ? a.threads : [] {
    kernels::ThreadLimit none(0);
    return kernels::max_threads();
  }();
  kernels::MatmulPaths paths = kernels::matmul_paths(base.product_order);
  rec["machine"] = {{"cpu", cpu.model_name},
                    {"cores", kernels::hardware_threads()},
                    {"threads", threads},
                    {"isa",
                     {{"avx512f", cpu.avx512f},
                      {"avx512bf16", cpu.avx512bf16},
                      {"avx512fp16", cpu.avx512fp16},
                      {"amx_bf16", cpu.amx_bf16},
                      {"amx_int8", cpu.amx_int8}}},
                    {"matmul",
                     {{"gemm_impl", paths.gemm_impl},
                      {"weight_layout", paths.weight_layout},
                      {"small_m_stream_kernel", paths.stream_gemv ? "hlx gemv_vnni_bf16_avx512" : "off"},
                      {"small_m_max", paths.stream_max_m},
                      {"large_m", paths.own_gemm     ? "hlx gemm_bf16_avx512 on the hlx pool"
                                  : paths.pool_tiles ? "oneDNN single-thread tiles on the hlx pool"
                                                     : "oneDNN OpenMP"}}},
                    {"loadavg_start", loadavg()}};
  std::cout << "machine: " << cpu.model_name << ", " << kernels::hardware_threads() << " cores, " << threads
            << " threads; avx512f=" << cpu.avx512f << " avx512_bf16=" << cpu.avx512bf16 << " amx_bf16=" << cpu.amx_bf16
            << " amx_int8=" << cpu.amx_int8 << "\n"
            << "matmul: M<=" << paths.stream_max_m << " "
            << (paths.stream_gemv ? "hlx AVX512-BF16 weight streaming" : "oneDNN") << "; larger M "
            << (paths.own_gemm ? "hlx AVX512-BF16 GEMM" : "oneDNN " + paths.gemm_impl) << " (" << paths.weight_layout
            << ")" << (!paths.own_gemm && paths.pool_tiles ? " in tiles on the hlx pool" : "") << "\n"
            << "loadavg: " << loadavg() << "\n";

  // ---- DRAM probe (same thread count as the model)
  kernels::DramProbe probe;
  {
    kernels::ThreadLimit limit(threads);
    probe = kernels::probe_dram_read();
  }
  rec["dram_read_gbps"] = {{"best", probe.best_gbps}, {"median", probe.median_gbps}, {"threads", probe.threads}};
  std::printf("DRAM read probe (1 GiB, %d threads): best %.1f GB/s, median %.1f GB/s\n", probe.threads, probe.best_gbps,
              probe.median_gbps);
  const double bw = probe.best_gbps * 1e9;

  rec["kv_dtype_option"] = a.kv_dtype;
  rec["batch_invariant"] = a.batch_invariant;
  if (a.long_only) {
    HLX_RETURN_IF_ERROR(run_long_context(a, base, threads, bw, rec));
    return write_record(a, rec);
  }

  // ---- the main model: large capacity, slots for the largest batch (the probe's buffer is freed:
  // the peak that counts starts here)
  reset_peak_rss();
  engine::TextModelOptions o = base;
  o.context_capacity = a.capacity;
  o.slots = *std::max_element(a.batches.begin(), a.batches.end());
  auto t0 = Clock::now();
  HLX_ASSIGN_OR_RETURN(auto m, engine::TextModel::load(a.model, o));
  const double load_ms = ms_since(t0);
  const auto& spec = m->spec();
  t0 = Clock::now();
  for (int64_t len : a.prefill_lengths) HLX_RETURN_IF_ERROR(m->warm_up(len, false, 0));
  HLX_RETURN_IF_ERROR(m->warm_up(a.context, false, 0));
  for (int64_t b : a.batches) HLX_RETURN_IF_ERROR(m->warm_up(0, false, b));
  const double warm_ms = ms_since(t0);
  const engine::TextModelStats st = m->stats();
  rec["model"] = {{"dir", a.model},
                  {"model_type", spec.model_type},
                  {"layers", spec.num_layers},
                  {"hidden", spec.hidden_size},
                  {"vocab", spec.vocab_size},
                  {"weight_dtype", dtype_name(spec.weight_dtype)},
                  {"weight_format", spec.weight_format.empty() ? "as-stored" : spec.weight_format},
                  {"weight_bytes", st.weight_bytes},
                  {"kv_bytes", st.kv_bytes},
                  {"capacity", a.capacity},
                  {"slots", o.slots}};
  rec["times_ms"] = {{"load", load_ms},
                     {"emit_all_entries", st.emit_ms},
                     {"modules_emitted", st.modules},
                     {"plan_compile", st.compile_ms},
                     {"entries_compiled", st.compiled},
                     {"plan_compile_per_entry", st.compiled ? st.compile_ms / st.compiled : 0.0},
                     {"bind_pack_weights", st.bind_ms},
                     {"warm_up_total", warm_ms}};
  std::printf("model: %s, %lld layers, weights %s (%s, matmuls %s), KV %s (capacity %lld x %lld slots)\n",
              spec.model_type.c_str(), static_cast<long long>(spec.num_layers), gb(double(st.weight_bytes)).c_str(),
              dtype_name(spec.weight_dtype).data(),
              spec.weight_format.empty() ? "as-stored" : spec.weight_format.c_str(), gb(double(st.kv_bytes)).c_str(),
              static_cast<long long>(a.capacity), static_cast<long long>(o.slots));
  std::printf(
      "load %.0f ms: emit %d entries %.0f ms; plan/compile %d entries %.0f ms (%.0f ms each); "
      "bind+pack weights %.0f ms\n",
      load_ms, st.modules, st.emit_ms, st.compiled, st.compile_ms, st.compiled ? st.compile_ms / st.compiled : 0.0,
      st.bind_ms);

  // ---- roofline
  const size_t wbytes = st.decode_weight_bytes;
  auto roofline = [&](int64_t batch, int64_t ctx, double bandwidth) {
    const double per_step = double(wbytes) + double(batch) * double(kv_bytes_per_token(spec, m->shape().kv_dtype, ctx));
    return double(batch) * bandwidth / per_step;
  };
  const int64_t mid_ctx = a.context + a.decode_tokens / 2;
  rec["roofline"] = {{"weight_bytes_per_token", wbytes},
                     {"kv_bytes_per_token_at_context", kv_bytes_per_token(spec, m->shape().kv_dtype, mid_ctx)},
                     {"context", mid_ctx},
                     {"decode_tok_s_batch1", roofline(1, mid_ctx, bw)}};
  std::printf("roofline: %s weights + %s KV per token at context %lld -> %.1f tok/s at batch 1\n",
              gb(double(wbytes)).c_str(), gb(double(kv_bytes_per_token(spec, m->shape().kv_dtype, mid_ctx))).c_str(),
              static_cast<long long>(mid_ctx), roofline(1, mid_ctx, bw));

  // ---- prefill / TTFT
  json pre = json::array();
  for (int64_t len : a.prefill_lengths) {
    HLX_ASSIGN_OR_RETURN(PrefillRun r, run_prefill(*m, len, a.reps));
    pre.push_back({{"tokens", len}, {"tok_s", r.tok_s}, {"ttft_ms", r.ttft_ms}, {"loadavg", loadavg()}});
    std::printf("prefill %4lld tokens: %7.1f tok/s, TTFT %7.1f ms   (load %s)\n", static_cast<long long>(len), r.tok_s,
                r.ttft_ms, load_note().c_str());
  }
  rec["prefill"] = pre;

  // ---- memory, before the decode rounds below allocate their probe buffers
  size_t hwm = 0, rss = 0;
  read_rss(&hwm, &rss);
  // The budget counts weights as held (packed int8 / int4 bytes under --weights), not as stored.
  const double budget = double(st.held_weight_bytes + st.kv_bytes);
  rec["memory"] = {{"peak_rss_bytes", hwm},
                   {"rss_bytes", rss},
                   {"weights_plus_kv_bytes", st.held_weight_bytes + st.kv_bytes},
                   {"arena_bytes", st.arena_bytes},
                   {"peak_over_weights_plus_kv", double(hwm) / budget}};

  // ---- decode: `reps` rounds, each a short DRAM probe (256 MiB, best of 3) followed by one run
  // of every batch, so the batch ratios compare runs taken minutes apart at most and each run has
  // a bandwidth figure from the same moment (the host's memory bandwidth drifts ~2x between runs).
  struct BatchRuns {
    DecodeRun best;
    std::vector<double> tok_s;              // per round
    std::vector<double> adjacent_fraction;  // per round: tok/s over the roofline of that round's probe
  };
  std::vector<BatchRuns> runs(a.batches.size());
  std::vector<double> round_probe;
  for (int r = 0; r < a.reps; ++r) {
    double round_bw = 0;
    {
      kernels::ThreadLimit limit(threads);
      round_bw = kernels::probe_dram_read(size_t(1) << 28, 3).best_gbps * 1e9;
    }
    round_probe.push_back(round_bw / 1e9);
    for (size_t i = 0; i < a.batches.size(); ++i) {
      const int64_t b = a.batches[i];
      HLX_ASSIGN_OR_RETURN(DecodeRun run, run_decode_once(*m, b, a.context, a.decode_tokens));
      if (run.tok_s > runs[i].best.tok_s) runs[i].best = run;
      runs[i].tok_s.push_back(run.tok_s);
      runs[i].adjacent_fraction.push_back(run.tok_s / roofline(b, mid_ctx, round_bw));
    }
  }
  std::printf("decode: %d rounds of batches", a.reps);
  for (int64_t b : a.batches) std::printf(" %lld", static_cast<long long>(b));
  std::printf(", each after a probe (256 MiB): ");
  for (double g : round_probe) std::printf("%.1f ", g);
  std::printf("GB/s\n");
  json dec = json::array();
  double b1 = 0;
  for (size_t i = 0; i < a.batches.size(); ++i) {
    const int64_t b = a.batches[i];
    const DecodeRun& r = runs[i].best;
    if (b == 1) b1 = r.tok_s;
    const double roof = roofline(b, mid_ctx, bw);
    const double adjacent = median(runs[i].adjacent_fraction);
    dec.push_back({{"batch", b},
                   {"tok_s", r.tok_s},
                   {"ms_per_step", r.ms_per_step},
                   {"roofline_tok_s", roof},
                   {"fraction_of_roofline", r.tok_s / roof},
                   {"round_tok_s", runs[i].tok_s},
                   {"fraction_of_adjacent_probe_roofline_median", adjacent},
                   {"vs_batch1", b1 > 0 ? r.tok_s / b1 : 0.0},
                   {"loadavg", loadavg()}});
    std::printf(
        "decode batch %lld: %7.2f tok/s aggregate (%.1f ms/step), roofline %.1f -> %.0f%% "
        "(vs each round's probe: median %.0f%%), %.2fx batch 1   (load %s)\n",
        static_cast<long long>(b), r.tok_s, r.ms_per_step, roof, 100.0 * r.tok_s / roof, 100.0 * adjacent,
        b1 > 0 ? r.tok_s / b1 : 0.0, load_note().c_str());
  }
  rec["decode"] = dec;
  rec["decode_round_probe_gbps"] = round_probe;
  std::printf("peak RSS %s vs weights as held + KV %s (%.2fx; arenas %s; taken before the decode probes)\n",
              gb(double(hwm)).c_str(), gb(budget).c_str(), double(hwm) / budget, gb(double(st.arena_bytes)).c_str());

  // ---- capacity invariance: a second model at the small capacity, loaded after the memory figures
  // (it has its own packed weights), then both decode at batch 1 in alternation, so start-up and
  // drifting machine load fall on both sides alike.
  {
    engine::TextModelOptions so = base;
    so.context_capacity = a.small_capacity;
    so.slots = 1;
    HLX_ASSIGN_OR_RETURN(auto small, engine::TextModel::load(a.model, so));
    HLX_RETURN_IF_ERROR(small->warm_up(a.context, false, 1));
    // The figure is the median over pairs of adjacent runs of large / small: the best of each side
    // alone compared two different moments of a machine whose bandwidth drifts. Which side runs
    // first alternates, so neither always follows the other's warm-up.
    DecodeRun large_best, small_best;
    std::vector<double> pair_ratio;
    const int pairs = std::max(5, a.reps);
    for (int r = 0; r < pairs; ++r) {
      DecodeRun l, s;
      for (int side = 0; side < 2; ++side) {
        if ((side == 0) == (r % 2 == 0)) {
          HLX_ASSIGN_OR_RETURN(l, run_decode_once(*m, 1, a.context, a.decode_tokens));
        } else {
          HLX_ASSIGN_OR_RETURN(s, run_decode_once(*small, 1, a.context, a.decode_tokens));
        }
      }
      if (l.tok_s > large_best.tok_s) large_best = l;
      if (s.tok_s > small_best.tok_s) small_best = s;
      if (s.tok_s > 0) pair_ratio.push_back(l.tok_s / s.tok_s);
    }
    std::sort(pair_ratio.begin(), pair_ratio.end());
    const double ratio = pair_ratio.empty() ? 0.0 : pair_ratio[pair_ratio.size() / 2];
    rec["capacity_invariance"] = {{"context", a.context},
                                  {"small_capacity", a.small_capacity},
                                  {"small_tok_s", small_best.tok_s},
                                  {"large_capacity", a.capacity},
                                  {"large_tok_s", large_best.tok_s},
                                  {"large_over_small", ratio},
                                  {"pair_ratios", pair_ratio},
                                  {"loadavg", loadavg()}};
    std::printf(
        "decode at context %lld, %d alternating pairs: capacity %lld best %.2f tok/s, capacity %lld best "
        "%.2f tok/s (median ratio of pairs %.2f, range %.2f-%.2f)   (load %s)\n",
        static_cast<long long>(a.context), pairs, static_cast<long long>(a.small_capacity), small_best.tok_s,
        static_cast<long long>(a.capacity), large_best.tok_s, ratio, pair_ratio.empty() ? 0.0 : pair_ratio.front(),
        pair_ratio.empty() ? 0.0 : pair_ratio.back(), load_note().c_str());
  }
  if (a.long_context) HLX_RETURN_IF_ERROR(run_long_context(a, base, threads, bw, rec));
  if (a.prefix_chat) HLX_RETURN_IF_ERROR(run_prefix_chat(a, base, rec));
  return write_record(a, rec);
}

Status write_record(const BenchArgs& a, json& rec) {
  rec["loadavg_end"] = loadavg();
  rec["pool_backoffs"] = kernels::pool_backoffs();  // serial periods of the pool (parallel.h)
  std::printf("loadavg: %s\n", load_note().c_str());
  if (!a.json_out.empty()) {
    std::ofstream out(a.json_out);
    if (!out) return make_error(ErrorKind::kInvalidArgument, "cannot write --json file '", a.json_out, "'");
    out << rec.dump(2) << "\n";
    if (!out) return make_error(ErrorKind::kInternal, "writing --json file '", a.json_out, "' failed");
  }
  return ok_status();
}

CommandRun setup_bench(CLI::App& root) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* sub = root.add_subcommand("bench", "Measure prefill, decode and memory of a text checkpoint");
  sub->add_option("-m,--model", a->model, "checkpoint directory (config.json + safetensors)")->required();
  sub->add_option("--json", a->json_out, "also write the record as JSON to this file");
  sub->add_option("--threads", a->threads, "runtime threads (default: all cores)")->check(CLI::Range(0, 1024));
  sub->add_option("--weights", a->weights,
                  "int8 | int4: matmul weights quantized at load (default: the checkpoint's type)");
  sub->add_option("--kv-dtype", a->kv_dtype,
                  "KV cache: auto (default: f32 for an f32 checkpoint, else bf16) | bf16 | f32 | int8")
      ->check(CLI::IsMember({"auto", "bf16", "f32", "int8"}));
  sub->add_option("--batch-invariant", a->batch_invariant,
                  "on (default) | off: let prefill products take faster kernels whose rows depend on the batch (AMX)")
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_option("--capacity", a->capacity, "context capacity of the main model (default 4096)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  sub->add_option("--small-capacity", a->small_capacity, "capacity of the comparison model (default 512)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  sub->add_option("--context", a->context, "tokens in context before decoding (default 64)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  sub->add_option("--decode-tokens", a->decode_tokens, "decode steps per measurement (default 32)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  sub->add_option("--reps", a->reps,
                  "repetitions of each prefill measurement and rounds of decode runs (one per batch, after a short "
                  "DRAM probe), best reported (default 3)")
      ->check(CLI::Range(1, 1000));
  sub->add_option("--prefill", a->prefill_lengths, "prompt lengths to prefill (default 128 512)");
  sub->add_option("--batches", a->batches, "decode batches (default 1 4 8)");
  sub->add_flag("--long-context", a->long_context,
                "also run the long-context section: prefill of each --long-contexts and decode at it (minutes)");
  sub->add_flag("--long-context-only", a->long_only, "only the DRAM probe and the long-context section");
  sub->add_option("--long-capacity", a->long_capacity,
                  "capacity of the long-context models (default: the largest --long-contexts + --decode-tokens, "
                  "rounded up to 1024: 33792)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  sub->add_option("--long-contexts", a->long_contexts, "contexts of the long-context section (default 8192 32768)");
  sub->add_option("--long-batches", a->long_batches, "decode batches of the long-context section (default 1 8)");
  sub->add_flag("--prefix-chat", a->prefix_chat,
                "also run the prefix-reuse section: TTFT of a chat's later turns with reuse on and off (minutes)");
  sub->add_flag("--prefix-chat-only", a->prefix_chat_only, "only the prefix-reuse section");
  sub->add_option("--chat-history", a->chat_history, "tokens of the chat's first prompt (default 1500)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  sub->add_option("--chat-turns", a->chat_turns, "turns of the prefix-reuse chat (default 4)")
      ->check(CLI::Range(int64_t(2), int64_t(64)));
  return [a] {
    for (int64_t v : a->prefill_lengths)
      if (v < 1 || v > a->capacity)
        return report(
            make_error(ErrorKind::kInvalidArgument, "--prefill ", v, " outside [1, capacity ", a->capacity, "]"));
    for (int64_t v : a->batches)
      if (v < 1) return report(make_error(ErrorKind::kInvalidArgument, "--batches ", v, " must be >= 1"));
    if (!a->weights.empty() && a->weights != "int8" && a->weights != "int4")
      return report(make_error(ErrorKind::kInvalidArgument, "--weights '", a->weights, "' (expected int8 or int4)"));
    if (a->batches.empty() || a->prefill_lengths.empty())
      return report(make_error(ErrorKind::kInvalidArgument, "--batches and --prefill need at least one value"));
    if (a->long_only) a->long_context = true;
    if (a->long_capacity == 0 && !a->long_contexts.empty()) a->long_capacity = smallest_long_capacity(*a);
    for (int64_t v : a->long_context ? a->long_contexts : std::vector<int64_t>{})
      if (v < 2 || v + a->decode_tokens > a->long_capacity)
        return report(make_error(ErrorKind::kInvalidArgument, "--long-contexts ", v, " + --decode-tokens ",
                                 a->decode_tokens, " outside [2, --long-capacity ", a->long_capacity, "]"));
    for (int64_t v : a->long_batches)
      if (v < 1) return report(make_error(ErrorKind::kInvalidArgument, "--long-batches ", v, " must be >= 1"));
    if (a->long_context && (a->long_contexts.empty() || a->long_batches.empty()))
      return report(make_error(ErrorKind::kInvalidArgument, "--long-contexts and --long-batches need a value"));
    if (a->context + a->decode_tokens > std::min(a->capacity, a->small_capacity))
      return report(make_error(ErrorKind::kInvalidArgument, "--context ", a->context, " + --decode-tokens ",
                               a->decode_tokens, " exceed the smaller capacity ",
                               std::min(a->capacity, a->small_capacity)));
    return report(run_bench(*a));
  };
}
HLX_REGISTER_COMMAND(setup_bench);

}  // namespace
}  // namespace hlx::cli
