#include "tessera/kv/kv_store.h"

#include <string>

namespace tessera::kv {

Status CheckAppend(const char* store, const KvGeometry& g, const KvAppend& in, const int32_t* last_pos) {
  const std::string who = std::string(store) + "::Append: ";
  if (in.k.batch < 1 || in.k.batch > g.batch || in.v.batch != in.k.batch)
    return InvalidArgument(who + "batch " + std::to_string(in.k.batch) + " is outside [1, cache batch " +
                           std::to_string(g.batch) + "]");
  if (in.first_row < 0 || in.first_row + in.k.batch > g.batch)
    return InvalidArgument(who + "rows [" + std::to_string(in.first_row) + ", " +
                           std::to_string(in.first_row + in.k.batch) + ") are outside the cache's " +
                           std::to_string(g.batch) + " rows");
  if (in.k.heads != g.kv_heads || in.v.heads != g.kv_heads)
    return InvalidArgument(who + "kv heads " + std::to_string(in.k.heads) + "/" + std::to_string(in.v.heads) +
                           " != cache kv heads " + std::to_string(g.kv_heads));
  if (in.k.dim != g.head_dim || in.v.dim != g.v_head_dim)
    return InvalidArgument(who + "head dims " + std::to_string(in.k.dim) + "/" + std::to_string(in.v.dim) +
                           " != cache head dims " + std::to_string(g.head_dim) + "/" + std::to_string(g.v_head_dim));
  if (in.k.seq != in.v.seq)
    return InvalidArgument(who + "k has " + std::to_string(in.k.seq) + " tokens, v has " + std::to_string(in.v.seq));
  if (in.k.dtype != in.v.dtype) return InvalidArgument(who + "k and v dtypes differ");
  if (in.k.seq > 0 && (in.k.data == nullptr || in.v.data == nullptr || in.pos == nullptr))
    return InvalidArgument(who + "k, v and pos are required");
  const int64_t S = in.k.seq;
  for (int64_t b = 0; b < in.k.batch; ++b) {
    const int64_t n = in.count ? in.count[b] : S;
    if (n < 0 || n > S)
      return InvalidArgument(who + "count[" + std::to_string(b) + "] = " + std::to_string(n) + " is outside [0, " +
                             std::to_string(S) + "]");
    int64_t prev = last_pos[in.first_row + b];
    for (int64_t i = 0; i < n; ++i) {
      const int32_t p = in.pos[b * S + i];
      if (p <= prev || p == kNoTokenPos)
        return InvalidArgument(who + "position " + std::to_string(p) + " of row " + std::to_string(in.first_row + b) +
                               " does not follow " + std::to_string(prev) + " (positions must increase)");
      prev = p;
      if (in.block && in.block[b * S + i] < -1)
        return InvalidArgument(who + "block id " + std::to_string(in.block[b * S + i]) + " < -1");
    }
  }
  return Status::Ok();
}

}  // namespace tessera::kv
