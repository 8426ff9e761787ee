#include "multimodal/image_prompt.h"

#include <limits>

namespace hlx::mm {

std::string expand_image_placeholders(std::string_view text, const ImageBlockText& layout, int64_t* images,
                                      std::span<const int64_t> counts) {
  std::string out;
  int64_t n = 0;
  size_t at = 0;
  while (!layout.placeholder.empty()) {
    const size_t hit = text.find(layout.placeholder, at);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(at, hit - at));
    out += layout.around + layout.boi;
    const int64_t tokens = size_t(n) < counts.size() ? counts[size_t(n)] : layout.tokens_per_image;
    for (int64_t i = 0; i < tokens; ++i) out += layout.image;
    out += layout.eoi + layout.around;
    at = hit + layout.placeholder.size();
    ++n;
  }
  out.append(text.substr(at));
  if (images) *images = n;
  return out;
}

int64_t count_placeholders(std::string_view text, std::string_view placeholder) {
  int64_t n = 0;
  for (size_t at = placeholder.empty() ? text.npos : text.find(placeholder); at != text.npos;
       at = text.find(placeholder, at + placeholder.size()))
    ++n;
  return n;
}

std::vector<uint8_t> image_token_types(std::span<const int64_t> ids, int64_t image_token_id) {
  std::vector<uint8_t> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) out[i] = ids[i] == image_token_id ? 1 : 0;
  return out;
}

bool splits_image_block(std::span<const int64_t> ids, int64_t image_token_id, int64_t at) {
  if (at <= 0 || at >= int64_t(ids.size())) return false;
  return ids[size_t(at - 1)] == image_token_id && ids[size_t(at)] == image_token_id;
}

Result<Tensor> prefill_mask(std::span<const int64_t> ids, int64_t image_token_id, int64_t begin, int64_t end,
                            int64_t rows, MaskRule rule) {
  const int64_t n = int64_t(ids.size());
  if (begin < 0 || end > n || begin >= end)
    return make_error(ErrorKind::kInvalidArgument, "prefill mask: rows [", begin, ", ", end, ") of a ", n,
                      "-row prompt");
  if (end - begin > rows)
    return make_error(ErrorKind::kInvalidArgument, "prefill mask: ", end - begin, " rows do not fit a ", rows,
                      "-row chunk");
  if (splits_image_block(ids, image_token_id, begin) || splits_image_block(ids, image_token_id, end))
    return make_error(ErrorKind::kInvalidArgument, "prefill mask: chunk [", begin, ", ", end,
                      ") splits an image block (image token ", image_token_id, ")");
  const float blocked = -std::numeric_limits<float>::max();
  Tensor out = Tensor::empty(DType::kF32, {1, 1, rows, rows});
  float* m = out.data<float>();
  std::fill(m, m + rows * rows, blocked);
  // Image group of each chunk row: runs of image tokens numbered from 0, -1 for text rows.
  const int64_t len = end - begin;
  std::vector<int64_t> group(size_t(len), -1);
  int64_t g = -1;
  for (int64_t i = 0; i < len; ++i) {
    const bool image = ids[size_t(begin + i)] == image_token_id;
    const bool prev = i > 0 && ids[size_t(begin + i - 1)] == image_token_id;
    if (image && !prev) ++g;
    if (image) group[size_t(i)] = g;
  }
  for (int64_t i = 0; i < len; ++i)
    for (int64_t j = 0; j < len; ++j) {
      const bool ok =
          rule == MaskRule::kBidirectional || j <= i || (group[size_t(i)] >= 0 && group[size_t(i)] == group[size_t(j)]);
      if (ok) m[i * rows + j] = 0.f;
    }
  return out;
}

}  // namespace hlx::mm
