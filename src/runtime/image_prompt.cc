#include "runtime/image_prompt.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace tessera::runtime {
namespace {

void AppendImage(const ImageLayoutIds& ids, int64_t soft_tokens, ImageLayout* out) {
  auto put = [out](int32_t id, int32_t type) {
    out->tokens.push_back(id);
    out->token_types.push_back(type);
  };
  if (ids.double_newline) put(*ids.double_newline, 0);
  put(ids.boi, 0);
  for (int64_t i = 0; i < soft_tokens; ++i) put(ids.soft, 1);
  put(ids.eoi, 0);
  if (ids.double_newline) put(*ids.double_newline, 0);
}

}  // namespace

StatusOr<ImageLayout> LayoutImages(const std::vector<int32_t>& tokens, const std::vector<int64_t>& tokens_per_image,
                                   const ImageLayoutIds& ids) {
  const int64_t total = std::accumulate(tokens_per_image.begin(), tokens_per_image.end(), int64_t{0});
  const int64_t images = static_cast<int64_t>(tokens_per_image.size());
  const int64_t soft = std::count(tokens.begin(), tokens.end(), ids.soft);
  // Soft tokens already present mean a laid-out prompt, except where the marker is the soft id
  // itself and there is exactly one per image (Gemma 4's <|image|> markers).
  const bool laid_out = soft > 0 && !(ids.marker == ids.soft && soft == images);
  const int64_t markers = laid_out ? 0 : std::count(tokens.begin(), tokens.end(), ids.marker);
  ImageLayout out;
  if (laid_out) {  // every soft token must be there
    if (soft != total)
      return InvalidArgument("the prompt has " + std::to_string(soft) + " image soft tokens (id " +
                             std::to_string(ids.soft) + ") but the images make " + std::to_string(total));
    out.tokens = tokens;
    for (int32_t t : tokens) out.token_types.push_back(t == ids.soft ? 1 : 0);
    return out;
  }
  if (markers != 0 && markers != images)
    return InvalidArgument("the prompt has " + std::to_string(markers) + " image markers (id " +
                           std::to_string(ids.marker) + ") for " + std::to_string(images) + " images");
  out.tokens.reserve(tokens.size() + total + 4 * images);
  out.token_types.reserve(out.tokens.capacity());
  size_t i = 0;
  int64_t next = 0;
  if (markers == 0) {  // no marker: the images first, after a leading bos
    if (!tokens.empty() && ids.bos && tokens[0] == *ids.bos) {
      out.tokens.push_back(tokens[i++]);
      out.token_types.push_back(0);
    }
    for (; next < images; ++next) AppendImage(ids, tokens_per_image[next], &out);
  }
  for (; i < tokens.size(); ++i) {
    if (markers != 0 && tokens[i] == ids.marker) {
      AppendImage(ids, tokens_per_image[next++], &out);
      continue;
    }
    out.tokens.push_back(tokens[i]);
    out.token_types.push_back(0);
  }
  return out;
}

}  // namespace tessera::runtime
