#include "engine/multimodal_prompt.h"

#include <algorithm>
#include <cstring>

namespace hlx::engine {

int64_t count_image_tokens(std::span<const int64_t> prompt, int64_t image_token_id) {
  return int64_t(std::count(prompt.begin(), prompt.end(), image_token_id));
}

Status check_image_placeholders(std::span<const int64_t> prompt, int64_t num_images, const ImagePromptLimits& limits) {
  if (num_images < 0) return make_error(ErrorKind::kInvalidArgument, "image count ", num_images, " is negative");
  if (!limits.accepts_images) {
    if (num_images > 0)
      return make_error(ErrorKind::kInvalidArgument, "the request has ", num_images,
                        " image(s) but the model is text-only (no vision encoder loaded)");
    return ok_status();
  }
  if (num_images > limits.max_images)
    return make_error(ErrorKind::kInvalidArgument, "the request has ", num_images, " images, more than the ",
                      limits.max_images, " allowed per request");
  const int64_t placeholders = count_image_tokens(prompt, limits.image_token_id);
  if (placeholders != num_images)
    return make_error(ErrorKind::kInvalidArgument, "the prompt has ", placeholders, " image placeholder(s) (token id ",
                      limits.image_token_id, ") but the request has ", num_images,
                      " image(s); each image needs exactly one placeholder");
  return ok_status();
}

std::vector<int64_t> ExpandedPrompt::text_ids() const {
  std::vector<int64_t> out;
  out.reserve(ids.size() - image_rows.size() * size_t(tokens_per_image));
  size_t next = 0;
  for (int64_t r = 0; r < size(); ++r) {
    if (next < image_rows.size() && r == image_rows[next]) {
      r += tokens_per_image - 1;
      ++next;
      continue;
    }
    out.push_back(ids[size_t(r)]);
  }
  return out;
}

Result<ExpandedPrompt> expand_image_placeholders(std::span<const int64_t> prompt, int64_t num_images,
                                                 const ImagePromptLimits& limits) {
  HLX_RETURN_IF_ERROR(check_image_placeholders(prompt, num_images, limits));
  ExpandedPrompt out;
  out.tokens_per_image = limits.accepts_images ? limits.tokens_per_image : 0;
  if (num_images == 0) {
    out.ids.assign(prompt.begin(), prompt.end());
    return out;
  }
  if (limits.tokens_per_image < 1)
    return make_error(ErrorKind::kInvalidArgument, "tokens per image ", limits.tokens_per_image, " must be >= 1");
  out.ids.reserve(prompt.size() + size_t(num_images * (limits.tokens_per_image - 1)));
  for (int64_t id : prompt) {
    if (id == limits.image_token_id) {
      out.image_rows.push_back(int64_t(out.ids.size()));
      out.ids.insert(out.ids.end(), size_t(limits.tokens_per_image), id);
    } else {
      out.ids.push_back(id);
    }
  }
  return out;
}

Result<Tensor> merge_embeddings(const ExpandedPrompt& prompt, const Tensor& text_embeddings,
                                std::span<const Tensor> features) {
  const int64_t n = prompt.size(), t = prompt.tokens_per_image;
  const int64_t images = int64_t(prompt.image_rows.size());
  const int64_t text_rows = n - images * t;
  if (int64_t(features.size()) != images)
    return make_error(ErrorKind::kInvalidArgument, "merge: ", features.size(), " feature tensors for ", images,
                      " image(s)");
  if (text_embeddings.dtype() != DType::kF32 || text_embeddings.rank() != 2 || text_embeddings.dim(0) != text_rows)
    return make_error(ErrorKind::kInvalidArgument, "merge: text embeddings are ", text_embeddings.type_string(),
                      ", expected f32 [", text_rows, ", hidden]");
  const int64_t hidden = text_embeddings.dim(1);
  for (int64_t i = 0; i < images; ++i) {
    const Tensor& f = features[size_t(i)];
    if (f.dtype() != DType::kF32 || f.rank() != 2 || f.dim(0) != t || f.dim(1) != hidden)
      return make_error(ErrorKind::kInvalidArgument, "merge: features of image ", i, " are ", f.type_string(),
                        ", expected f32 [", t, ", ", hidden, "]");
  }
  Tensor out = Tensor::empty(DType::kF32, {n, hidden});
  const size_t row_bytes = size_t(hidden) * sizeof(float);
  int64_t next_text = 0;
  size_t next_image = 0;
  for (int64_t r = 0; r < n;) {
    float* dst = out.data<float>() + r * hidden;
    if (next_image < prompt.image_rows.size() && r == prompt.image_rows[next_image]) {
      std::memcpy(dst, features[next_image].data<float>(), size_t(t) * row_bytes);
      ++next_image;
      r += t;
    } else {
      std::memcpy(dst, text_embeddings.data<float>() + next_text * hidden, row_bytes);
      ++next_text;
      ++r;
    }
  }
  return out;
}

}  // namespace hlx::engine
