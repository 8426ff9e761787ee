// `hlx qwen3vl-probe -m DIR --tokens IDS --image A.png [--image B.png] --out-dir D`: a test hook
// that drives the Qwen3-VL engine-model path without the batch engine: preprocess each image,
// encode it with the bucketed tower, expand the image tokens, merge the features into the token
// embeddings, M-RoPE + DeepStack prefill, greedy decode using the slot's rope delta. Writes .npy
// files for tests/models/test_qwen3_vl_e2e.py: ids, positions, patches_K, features_K,
// deepstack_K, logits (one call), row_logits (row r from a call ending at r + 1, chunked over
// tiny buckets), decode_logits, tokens. --no-deepstack and --ignore-delta are the ablations.
// --time-prefill R measures the DeepStack entry against the same prompt without the payload
// (issue: DeepStack prefill within 5 % of prefill_embeddings): R alternating pairs, in a second
// slot, printed per pair and as the ratio of the medians.
#include <algorithm>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/int_list.h"
#include "cli/model_flags.h"
#include "core/clock.h"
#include "engine/qwen3_vl_vision_model.h"
#include "engine/text_model.h"
#include "io/npy.h"

namespace hlx::cli {
namespace {

struct ProbeArgs {
  std::string model, tokens, out_dir;
  std::vector<std::string> images;
  std::vector<int64_t> buckets;
  int64_t max_new = 16, time_prefill = 0;
  bool no_deepstack = false, ignore_delta = false, row_logits = false;
  ModelFlags flags;
};

int64_t argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

Status run_probe(const ProbeArgs& a) {
  const std::string out = a.out_dir + "/";
  HLX_ASSIGN_OR_RETURN(std::vector<int64_t> parsed, parse_int_list(a.tokens, "--tokens", 0, INT32_MAX));
  std::vector<int32_t> ids(parsed.begin(), parsed.end());
  HLX_ASSIGN_OR_RETURN(auto vision, engine::Qwen3VLVisionModel::load(a.model, {a.flags.threads, {}, false}));
  const models::Qwen3VLSpec& spec = vision->spec();

  // ---- images: preprocess, encode.
  std::vector<engine::Qwen3VLImageFeatures> feats;
  std::vector<mm::ImageGrid> grids;
  for (size_t k = 0; k < a.images.size(); ++k) {
    HLX_ASSIGN_OR_RETURN(mm::Image img, mm::load_image(a.images[k]));
    HLX_ASSIGN_OR_RETURN(mm::Qwen2VLImage px, vision->preprocess(img));
    HLX_RETURN_IF_ERROR(write_npy(str_cat(out, "patches_", k, ".npy"), px.patches));
    HLX_ASSIGN_OR_RETURN(engine::Qwen3VLImageFeatures f, vision->encode(px));
    HLX_RETURN_IF_ERROR(write_npy(str_cat(out, "features_", k, ".npy"), f.features));
    HLX_RETURN_IF_ERROR(write_npy(str_cat(out, "deepstack_", k, ".npy"), f.deepstack));
    std::cout << "grid " << k << " " << f.grid.t << " " << f.grid.h << " " << f.grid.w << " bucket " << f.bucket
              << "\n";
    grids.push_back(f.grid);
    feats.push_back(std::move(f));
  }

  // ---- prompt: expanded ids, positions, merged embeddings, DeepStack payload.
  const int32_t image_id = int32_t(spec.image_token_id);
  const int64_t merge = spec.vision.spatial_merge_size;
  HLX_ASSIGN_OR_RETURN(ids, mm::qwen_expand_image_tokens(ids, image_id, grids, merge));
  HLX_ASSIGN_OR_RETURN(mm::MropePositions mp, mm::qwen_mrope_positions(ids, image_id, grids, merge));
  const int64_t n = int64_t(ids.size());
  std::vector<int64_t> ids64(ids.begin(), ids.end());
  Tensor ids_t = Tensor::empty(DType::kI64, {n});
  std::copy(ids64.begin(), ids64.end(), ids_t.data<int64_t>());
  HLX_RETURN_IF_ERROR(write_npy(out + "ids.npy", ids_t));
  Tensor pos = Tensor::empty(DType::kI32, {3, n});
  std::copy(mp.positions.begin(), mp.positions.end(), pos.data<int32_t>());
  HLX_RETURN_IF_ERROR(write_npy(out + "positions.npy", pos));
  std::cout << "rope_delta " << mp.rope_delta << "\n";

  HLX_ASSIGN_OR_RETURN(engine::TextModelOptions to, a.flags.options());
  to.slots = 2;
  to.prefill_buckets = a.buckets;
  HLX_ASSIGN_OR_RETURN(auto text, engine::TextModel::load(a.model, to));
  const int64_t hidden = text->spec().hidden_size, vocab = text->spec().vocab_size;
  HLX_ASSIGN_OR_RETURN(Tensor emb, text->embed_tokens(ids64));
  std::vector<int32_t> visual;
  for (int64_t r = 0; r < n; ++r)
    if (ids[size_t(r)] == image_id) visual.push_back(int32_t(r));
  int64_t total = 0;
  for (const auto& f : feats) total += f.features.dim(0);
  if (total != int64_t(visual.size()))
    return make_error(ErrorKind::kInternal, "probe: ", visual.size(), " image rows for ", total, " features");
  const int64_t k_layers = int64_t(spec.vision.deepstack_visual_indexes.size()), nv = total;
  engine::DeepstackPayload ds{Tensor::empty(DType::kI32, {nv}), Tensor::empty(DType::kF32, {k_layers, nv, hidden}), nv};
  std::copy(visual.begin(), visual.end(), ds.visual_positions.data<int32_t>());
  int64_t v = 0;
  for (const auto& f : feats) {
    const int64_t t = f.features.dim(0);
    for (int64_t i = 0; i < t; ++i)
      std::memcpy(emb.data<float>() + visual[size_t(v + i)] * hidden, f.features.data<float>() + i * hidden,
                  size_t(hidden) * sizeof(float));
    for (int64_t k = 0; k < k_layers; ++k)
      std::memcpy(ds.layer_features.data<float>() + (k * nv + v) * hidden, f.deepstack.data<float>() + k * t * hidden,
                  size_t(t * hidden) * sizeof(float));
    v += t;
  }
  const engine::DeepstackPayload* payload = a.no_deepstack ? nullptr : &ds;
  const int64_t delta = a.ignore_delta ? 0 : mp.rope_delta;

  // ---- one call over the whole prompt, then greedy decode with the slot's delta.
  HLX_ASSIGN_OR_RETURN(int64_t slot, text->admit(engine::AdmissionRequest{n, a.max_new, {}}));
  HLX_ASSIGN_OR_RETURN(Tensor logits, text->prefill_embeddings_mrope(slot, emb, ids64, pos, delta, n, payload));
  HLX_RETURN_IF_ERROR(write_npy(out + "logits.npy", logits));
  Tensor dec = Tensor::zeros(DType::kF32, {a.max_new, vocab});
  Tensor toks = Tensor::zeros(DType::kI64, {a.max_new});
  int64_t next = argmax(logits.data<float>(), vocab);
  for (int64_t i = 0; i < a.max_new; ++i) {
    toks.data<int64_t>()[i] = next;
    if (i + 1 == a.max_new) break;
    engine::DecodeRow row{slot, next, n + i};
    HLX_ASSIGN_OR_RETURN(Tensor dl, text->decode(std::span<const engine::DecodeRow>(&row, 1)));
    std::memcpy(dec.data<float>() + i * vocab, dl.data<float>(), size_t(vocab) * sizeof(float));
    next = argmax(dl.data<float>(), vocab);
  }
  HLX_RETURN_IF_ERROR(write_npy(out + "decode_logits.npy", dec));
  HLX_RETURN_IF_ERROR(write_npy(out + "tokens.npy", toks));
  HLX_RETURN_IF_ERROR(text->release(slot));

  if (a.time_prefill > 0) {
    std::vector<double> with, without;
    for (int64_t r = 0; r < a.time_prefill; ++r) {
      for (const engine::DeepstackPayload* p :
           {static_cast<const engine::DeepstackPayload*>(&ds), static_cast<const engine::DeepstackPayload*>(nullptr)}) {
        HLX_ASSIGN_OR_RETURN(int64_t s, text->admit(engine::AdmissionRequest{n, 0, {}}));
        const auto t0 = std::chrono::steady_clock::now();
        HLX_RETURN_IF_ERROR(text->prefill_embeddings_mrope(s, emb, ids64, pos, delta, n, p).status());
        (p ? with : without).push_back(ms_since(t0));
        HLX_RETURN_IF_ERROR(text->release(s));
      }
      std::cout << "prefill " << n << " rows: deepstack " << with.back() << " ms, without payload " << without.back()
                << " ms\n";
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::cout << "prefill median: deepstack / without payload = " << median(with) / median(without) << "\n";
  }

  // ---- every row's logits: row r from a call that ends at r + 1 (the payload's rows past it are
  // left out through its count), in a second slot.
  if (a.row_logits) {
    HLX_ASSIGN_OR_RETURN(int64_t s2, text->admit(engine::AdmissionRequest{n, 0, {}}));
    Tensor rows = Tensor::empty(DType::kF32, {n, vocab});
    for (int64_t r = 0; r < n; ++r) {
      engine::DeepstackPayload part{
          ds.visual_positions, ds.layer_features,
          int64_t(std::lower_bound(visual.begin(), visual.end(), int32_t(r + 1)) - visual.begin())};
      HLX_ASSIGN_OR_RETURN(Tensor lg, text->prefill_embeddings_mrope(s2, emb, ids64, pos, delta, r + 1,
                                                                     a.no_deepstack ? nullptr : &part));
      std::memcpy(rows.data<float>() + r * vocab, lg.data<float>(), size_t(vocab) * sizeof(float));
    }
    HLX_RETURN_IF_ERROR(write_npy(out + "row_logits.npy", rows));
    HLX_RETURN_IF_ERROR(text->release(s2));
  }
  return ok_status();
}

}  // namespace

static CommandRun setup_probe(CLI::App& root) {
  auto args = std::make_shared<ProbeArgs>();
  auto* sub = root.add_subcommand("qwen3vl-probe", "Test hook: Qwen3-VL image prompt through tower + TextModel");
  sub->add_option("-m,--model", args->model, "qwen3_vl checkpoint directory")->required();
  sub->add_option("--tokens", args->tokens, "comma-separated prompt ids, one image token per image")->required();
  sub->add_option("--image", args->images, "image files, in prompt order");
  sub->add_option("--out-dir", args->out_dir, "directory for the .npy outputs")->required();
  sub->add_option("--buckets", args->buckets, "prefill buckets (default: the model's)")->delimiter(',');
  sub->add_option("--max-new", args->max_new, "greedy tokens (default 16)");
  sub->add_flag("--row-logits", args->row_logits, "also write every row's logits (one call per row)");
  sub->add_flag("--no-deepstack", args->no_deepstack, "ablation: prefill without the DeepStack payload");
  sub->add_flag("--ignore-delta", args->ignore_delta, "ablation: rope delta 0 at decode");
  sub->add_option("--time-prefill", args->time_prefill,
                  "R alternating timed prefills with and without the DeepStack payload (default 0)");
  args->flags.add_to(sub);
  return [args] { return report(run_probe(*args)); };
}
HLX_REGISTER_COMMAND(setup_probe);

}  // namespace hlx::cli
