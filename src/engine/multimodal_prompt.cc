#include "engine/multimodal_prompt.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace hlx::engine {

int64_t count_image_tokens(std::span<const int64_t> prompt, int64_t image_token_id) {
  return int64_t(std::count(prompt.begin(), prompt.end(), image_token_id));
}

std::vector<int64_t> ExpandedPrompt::text_ids() const {
  std::vector<int64_t> out;
  size_t next = 0;
  for (int64_t r = 0; r < size(); ++r) {
    if (next < image_rows.size() && r == image_rows[next]) {
      r += image_tokens[next] - 1;
      ++next;
      continue;
    }
    out.push_back(ids[size_t(r)]);
  }
  return out;
}

Result<ExpandedPrompt> locate_image_rows(std::span<const int64_t> prompt, std::span<const int64_t> tokens_per_image,
                                         const ImagePromptLimits& limits) {
  const int64_t images = int64_t(tokens_per_image.size());
  ExpandedPrompt out;
  out.ids.assign(prompt.begin(), prompt.end());
  if (!limits.accepts_images) {
    if (images > 0)
      return make_error(ErrorKind::kInvalidArgument, "the request has ", images,
                        " image(s) but the model is text-only (no vision encoder loaded)");
    return out;  // a text-only model does not know an image token: ids are just ids
  }
  if (images > limits.max_images)
    return make_error(ErrorKind::kInvalidArgument, "the request has ", images, " images, more than the ",
                      limits.max_images, " allowed per request");
  const int64_t want = std::accumulate(tokens_per_image.begin(), tokens_per_image.end(), int64_t(0));
  const int64_t have = count_image_tokens(prompt, limits.image_token_id);
  if (have != want)
    return make_error(ErrorKind::kInvalidArgument, "the prompt has ", have, " image token(s) (id ",
                      limits.image_token_id, ") but its ", images, " image(s) need ", want,
                      "; expand the prompt text for its images before tokenizing (VisionModel::expand_prompt)");
  int64_t r = 0;
  for (int64_t i = 0; i < images; ++i) {
    const int64_t n = tokens_per_image[size_t(i)];
    if (n < 1) return make_error(ErrorKind::kInvalidArgument, "image ", i, " has ", n, " tokens (must be >= 1)");
    while (prompt[size_t(r)] != limits.image_token_id) ++r;  // have == want: there is a next one
    for (int64_t k = 0; k < n; ++k)
      if (prompt[size_t(r + k)] != limits.image_token_id)
        return make_error(ErrorKind::kInvalidArgument, "image ", i, " needs ", n, " consecutive image tokens from row ",
                          r, " but row ", r + k, " holds token ", prompt[size_t(r + k)]);
    out.image_rows.push_back(r);
    out.image_tokens.push_back(n);
    r += n;
  }
  return out;
}

Result<std::vector<int64_t>> expand_image_tokens(std::span<const int64_t> prompt, int64_t image_token_id,
                                                 std::span<const int64_t> tokens_per_image) {
  const int64_t have = count_image_tokens(prompt, image_token_id);
  if (have != int64_t(tokens_per_image.size()))
    return make_error(ErrorKind::kInvalidArgument, "the prompt has ", have, " image placeholder(s) (token id ",
                      image_token_id, ") but the request has ", tokens_per_image.size(),
                      " image(s); each image needs exactly one placeholder");
  std::vector<int64_t> out;
  size_t k = 0;
  for (int64_t id : prompt) {
    if (id == image_token_id)
      out.insert(out.end(), size_t(tokens_per_image[k++]), id);
    else
      out.push_back(id);
  }
  return out;
}

Result<Tensor> merge_embeddings(const ExpandedPrompt& prompt, const Tensor& text_embeddings,
                                std::span<const Tensor> features) {
  const int64_t n = prompt.size(), images = int64_t(prompt.image_rows.size());
  const int64_t image_rows = std::accumulate(prompt.image_tokens.begin(), prompt.image_tokens.end(), int64_t(0));
  const int64_t text_rows = n - image_rows;
  if (int64_t(features.size()) != images)
    return make_error(ErrorKind::kInvalidArgument, "merge: ", features.size(), " feature tensors for ", images,
                      " image(s)");
  if (text_embeddings.dtype() != DType::kF32 || text_embeddings.rank() != 2 || text_embeddings.dim(0) != text_rows)
    return make_error(ErrorKind::kInvalidArgument, "merge: text embeddings are ", text_embeddings.type_string(),
                      ", expected f32 [", text_rows, ", hidden]");
  const int64_t hidden = text_embeddings.dim(1);
  for (int64_t i = 0; i < images; ++i) {
    const Tensor& f = features[size_t(i)];
    const int64_t t = prompt.image_tokens[size_t(i)];
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
      const int64_t t = prompt.image_tokens[next_image];
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
