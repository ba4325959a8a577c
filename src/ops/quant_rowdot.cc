// The decode path for quantized weights: activations quantized once per call, then each thread
// streams its ranges of weight rows once, every token of the call reusing a chunk while it is in cache.
#include <algorithm>
#include <vector>

#include "ops/quant_act.h"
#include "ops/quant_dot.h"
#include "ops/quant_linear.h"
#include "ops/row_ranges.h"
#include "tessera/check.h"
#include "tessera/gemm.h"
#include "tessera/quant.h"

namespace tessera::ops {
namespace {

constexpr int64_t kItemsPerThread = 8;  // prefill's equal items: enough to balance compute-bound work
// Weight bytes per chunk of rows that every token of the call walks before the next chunk: small
// enough to stay in L1/L2 between tokens, large enough that a chunk is many blocks.
constexpr int64_t kChunkBytes = 32 * 1024;
// The same for decode-sized calls of more tokens than one kernel call takes (past the table's
// max_tokens; AVX2 Q6_K's one or two, run per token): a kernel prefetches only within its call, so
// each chunk's first rows come cold from memory, and at 32 KiB that was every row group
// (bench/results/small_batch.md, "Nine tokens and more"). At most half a core's L2 on the CPUs measured.
constexpr int64_t kStepChunkBytes = 256 * 1024;
// Room for the quantized activations of 3 tokens at kMaxQuantRowDotIn features in 32-blocks (the
// larger form; 256-blocks take 292 bytes per 256 values): 12 tokens at 16384 features, so Linear's
// decode-sized row-dot calls (up to 11 tokens) stream Gemma's weights once; wider calls without a
// scratch go in groups of tokens, the weights read once per group.
constexpr int64_t kActBytes = 3 * kMaxQuantRowDotIn / 32 * int64_t(sizeof(ActBlock32));
int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Rows per parallel item of prefill's row dots: whole kRowGroup groups, kItemsPerThread items per
// thread; without a pool, one item.
int64_t RowsPerItem(int64_t rows, const ThreadPool* pool) {
  const int64_t parts = pool ? pool->num_threads() * kItemsPerThread : 1;
  return RoundUp(std::max(kRowGroup, (rows + parts - 1) / parts), kRowGroup);
}

// Prefill on the row dots (many tokens, a kernel that unpacks each block once for several): each
// chunk of weight rows is dotted with this many tokens before the next, so the weights stream from
// memory once per 64 tokens (Q4_0: about 230 flop per byte read, compute-bound however many cores
// share the memory) instead of once per stack buffer of tokens (12 at 15360 features, 3 at the
// widest input); the tokens' rows come from L2 or L3 (bench/results/quant_prefill.md, "Token blocks").
constexpr int64_t kTokenBlock = 64;

// Whether one call takes all g tokens of a row range: one token, or a table whose dot_rows_tokens
// unpacks the blocks for all of them and reads each weight from memory once (unpacks_once). Then
// an item is one call, and a group kernel's prefetch
// of its next rows runs through the whole item; in 32 KiB chunks the first group of each came cold
// from memory (at Gemma's widths a chunk is one or two groups). A kernel run per token needs the
// chunks: the second token finds the rows in cache.
bool OnePass(const QuantDotKernels& k, QuantType t, int64_t g) {
  return g == 1 || (g <= k.max_tokens && UnpacksOnce(k, t, static_cast<int>(g)));
}

// Tokens whose quantized rows at `in` features fit QuantRowDot's stack buffer.
int64_t StackTokens(QuantType t, int64_t in) { return kActBytes / ActRowBytes(t, in); }

void RunParallel(ThreadPool* pool, int64_t items, ThreadPool::ItemFn run) {
  if (pool) return pool->ParallelFor(items, run);
  for (int64_t i = 0; i < items; ++i) run(i, 0);
}

// QuantRowDot for n tokens whose quantized rows all fit in `scratch`: one parallel loop; each item
// walks its rows in chunks, each chunk dotted with a block of tokens, the table's max_tokens per call.
void RowDotTokenBlocks(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
                       ThreadPool* pool, unsigned char* scratch) {
  const QuantType t = w.quant;
  const int64_t act_bytes = ActRowBytes(t, w.in), nb = w.in / QuantBlockElems(t), row_bytes = QuantRowBytes(t, w.in);
  const QuantDotKernels& k = QuantDot();
  RunParallel(pool, n, [&](int64_t i, int) { k.quantize_act(t, x + i * x_stride, w.in, scratch + i * act_bytes); });
  const int64_t rows_per_item = RowsPerItem(w.out, pool);  // compute-bound: equal items
  const int64_t items = (w.out + rows_per_item - 1) / rows_per_item;
  const int64_t chunk_rows = RoundUp(std::max<int64_t>(1, kChunkBytes / row_bytes), kRowGroup);
  const char* base = static_cast<const char*>(w.data);
  RunParallel(pool, items, [&](int64_t item, int) {
    const int64_t o1 = std::min(w.out, (item + 1) * rows_per_item);
    for (int64_t b0 = 0; b0 < n; b0 += kTokenBlock)
      for (int64_t o = item * rows_per_item; o < o1; o += chunk_rows) {
        const int64_t rows = std::min(chunk_rows, o1 - o);
        for (int64_t i = b0; i < std::min(n, b0 + kTokenBlock); i += k.max_tokens)
          k.dot_rows_tokens(t, base + o * row_bytes, row_bytes, rows, scratch + i * act_bytes, act_bytes,
                            static_cast<int>(std::min<int64_t>(k.max_tokens, n - i)), nb, y + i * y_stride + o,
                            y_stride);
      }
  });
}

}  // namespace

void QuantRowDot(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
                 ThreadPool* pool, uint32_t* scratch) {
  const QuantType t = w.quant;
  const int64_t be = QuantBlockElems(t);
  TESSERA_CHECK(be > 0 && w.in % be == 0, "LinearRowDot: quantized weight rows must be whole blocks");
  TESSERA_CHECK(w.in <= kMaxQuantRowDotIn, "LinearRowDot: quantized weights need in <= kMaxQuantRowDotIn");
  alignas(64) unsigned char xq[kActBytes];  // [group][ActRowBytes] quantized token rows
  const int64_t act_bytes = ActRowBytes(t, w.in), nb = w.in / be, row_bytes = QuantRowBytes(t, w.in);
  const int64_t group = StackTokens(t, w.in);
  const QuantDotKernels& k = QuantDot();
  if (scratch && n > group && UnpacksOnce(k, t, k.max_tokens)) {
    TESSERA_CHECK(act_bytes <= GemmScratchWords(1, w.in) * 4, "QuantRowDot: scratch rows too short");
    return RowDotTokenBlocks(w, x, n, x_stride, y, y_stride, pool, reinterpret_cast<unsigned char*>(scratch));
  }
  const int64_t chunk_rows = RoundUp(std::max<int64_t>(1, kStepChunkBytes / row_bytes), kRowGroup);
  const char* base = static_cast<const char*>(w.data);
  for (int64_t t0 = 0; t0 < n; t0 += group) {
    const int64_t g = std::min(group, n - t0);
    for (int64_t i = 0; i < g; ++i) k.quantize_act(t, x + (t0 + i) * x_stride, w.in, xq + i * act_bytes);
    // Chunks serve tokens that take several passes over the rows; one pass walks the item's rows as
    // one range, so a kernel's prefetch of its next rows runs through the whole item. (Each output
    // is the same either way: a row's result never depends on its neighbours.)
    const bool one_pass = OnePass(k, t, g);
    auto run = [&](int64_t o0, int64_t o1) {
      const int64_t chunk = one_pass ? o1 - o0 : chunk_rows;
      for (int64_t o = o0; o < o1; o += chunk) {
        const int64_t rows = std::min(chunk, o1 - o);
        if (k.dot_rows_tokens && g > 1) {  // one token: dot_rows, as decode always ran
          for (int64_t i = 0; i < g; i += k.max_tokens)
            k.dot_rows_tokens(t, base + o * row_bytes, row_bytes, rows, xq + i * act_bytes, act_bytes,
                              static_cast<int>(std::min<int64_t>(k.max_tokens, g - i)), nb,
                              y + (t0 + i) * y_stride + o, y_stride);
          continue;
        }
        for (int64_t i = 0; i < g; ++i)
          k.dot_rows(t, base + o * row_bytes, row_bytes, rows, xq + i * act_bytes, nb, y + (t0 + i) * y_stride + o);
      }
    };
    ParallelRowRanges(pool, w.out, row_bytes, run);
  }
}

void QuantRowDotBatch(const LinearJob* jobs_in, int64_t count_in, ThreadPool* pool, uint32_t* scratch) {
  // Jobs of more tokens than an item's stack buffer holds run on their own (with the scratch, their
  // tokens quantized once): in the loop below every item would quantize them again, group by group.
  LinearJob jobs[kMaxLinearJobs];
  int64_t count = 0, rows = 0, bytes = 0;
  for (int64_t j = 0; j < count_in; ++j) {
    const LinearJob& job = jobs_in[j];
    if (job.n > StackTokens(job.w.quant, job.w.in)) {
      QuantRowDot(job.w, job.x, job.n, job.x_stride, job.y, job.y_stride, pool, scratch);
      continue;
    }
    jobs[count++] = job;
    rows += job.w.out, bytes += job.w.out * QuantRowBytes(job.w.quant, job.w.in);
  }
  // Ranges over the jobs' rows end to end; a range that crosses from one job into the next runs its
  // part of each. A row's result never depends on the rows beside it, so a job split is the job.
  int64_t first[kMaxLinearJobs + 1];  // job j's rows: [first[j], first[j + 1]) of the whole
  first[0] = 0;
  for (int64_t j = 0; j < count; ++j) first[j + 1] = first[j] + jobs[j].w.out;
  auto run = [&](int64_t r, int64_t r1) {
    while (r < r1) {
      const int64_t j = std::upper_bound(first, first + count + 1, r) - first - 1;
      const LinearJob& job = jobs[j];
      const int64_t r0 = r - first[j], take = std::min(r1, first[j + 1]) - r;
      WeightView part = job.w;
      part.data = static_cast<const char*>(job.w.data) + r0 * QuantRowBytes(job.w.quant, job.w.in);
      part.out = take;
      QuantRowDot(part, job.x, job.n, job.x_stride, job.y + r0, job.y_stride, nullptr);
      r += take;
    }
  };
  ParallelRowRanges(pool, rows, rows > 0 ? bytes / rows : 0, run);
}

void LinearReferenceInt8(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y,
                         int64_t y_stride) {
  const int64_t be = ActBlockElems(w.quant), row_bytes = QuantRowBytes(w.quant, w.in);
  std::vector<unsigned char> xq(ActRowBytes(w.quant, w.in));
  std::vector<float> row(w.in), xd(n * w.in), dx(n * (w.in / be));
  // The quantized activations as (scale, integer) per element, read back from the blocks.
  for (int64_t t = 0; t < n; ++t) {
    QuantizeActivations(w.quant, x + t * x_stride, w.in, xq.data());
    for (int64_t b = 0; b < w.in / be; ++b) {
      const int8_t* q;
      if (be == 32) {
        const auto& blk = reinterpret_cast<const ActBlock32*>(xq.data())[b];
        dx[t * (w.in / be) + b] = blk.d, q = blk.q;
      } else {
        const auto& blk = reinterpret_cast<const ActBlock256*>(xq.data())[b];
        dx[t * (w.in / be) + b] = blk.d, q = blk.q;
      }
      for (int64_t i = 0; i < be; ++i) xd[t * w.in + b * be + i] = q[i];
    }
  }
  for (int64_t o = 0; o < w.out; ++o) {
    DequantizeRow(w.quant, static_cast<const char*>(w.data) + o * row_bytes, row.data(), w.in);
    for (int64_t t = 0; t < n; ++t) {
      double s = 0;
      for (int64_t b = 0; b < w.in / be; ++b) {
        double sb = 0;
        for (int64_t i = b * be; i < (b + 1) * be; ++i) sb += double(row[i]) * xd[t * w.in + i];
        s += sb * dx[t * (w.in / be) + b];
      }
      y[t * y_stride + o] = static_cast<float>(s);
    }
  }
}

}  // namespace tessera::ops
