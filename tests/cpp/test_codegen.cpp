// Code generation helpers that are pure arithmetic: the 32-bit division magic numbers and the
// row-kernel launch shapes.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "codegen/fusion_codegen.h"

using namespace thunder::codegen;

namespace {

// What the generated CUDA does with a magic number: (umulhi(n, magic) + n) >> shift.
uint32_t magicDivide(uint32_t n, int64_t magic, int64_t shift) {
  uint32_t hi = static_cast<uint32_t>((uint64_t(n) * uint64_t(magic)) >> 32);
  return (hi + n) >> shift;
}

}  // namespace

TEST(DivisionMagic, MatchesDivisionForEveryDivisorShape) {
  std::mt19937_64 rng(7);
  std::vector<int64_t> divisors = {1, 2, 3, 5, 7, 8, 64, 100, 127, 128, 129, 1000, 4096, 8191, 8192,
                                   65535, 65536, 1 << 20, (1 << 20) + 1, 1000003, (int64_t(1) << 30) + 7,
                                   (int64_t(1) << 31) - 1, int64_t(1) << 31};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + static_cast<int64_t>(rng() % (uint64_t(1) << 31)));
  for (int64_t d : divisors) {
    int64_t magic, shift;
    divisionMagic(d, magic, shift);
    ASSERT_GE(magic, 0);
    ASSERT_LE(magic, int64_t(0xffffffff));
    std::vector<uint32_t> ns = {0, 1, static_cast<uint32_t>(d - 1), static_cast<uint32_t>(d), 0x7fffffffu};
    if (d < (int64_t(1) << 31)) ns.push_back(static_cast<uint32_t>(d + 1));
    for (int k = 0; k < 2000; ++k) ns.push_back(static_cast<uint32_t>(rng() & 0x7fffffffu));
    for (uint32_t n : ns) ASSERT_EQ(magicDivide(n, magic, shift), n / uint64_t(d)) << n << " / " << d;
  }
}

TEST(RowLaunch, ShortRowsTakeAWarpLongRowsABlock) {
  RowLaunch s = chooseRowLaunch(100, 4);  // 25 chunks: one warp, one chunk per lane
  EXPECT_TRUE(s.warp);
  EXPECT_EQ(s.items, 1);
  RowLaunch l = chooseRowLaunch(8192, 4);  // 2048 chunks of 4 floats: 256 threads of 8
  EXPECT_FALSE(l.warp);
  EXPECT_EQ(l.threads, 256);
  EXPECT_EQ(l.items, 8);
  RowLaunch h = chooseRowLaunch(8192, 8);  // 1024 chunks of 8 bf16: 256 threads of 4
  EXPECT_EQ(h.threads, 256);
  EXPECT_EQ(h.items, 4);
  RowLaunch huge = chooseRowLaunch(int64_t(1) << 20, 4);  // more than 16 chunks per thread
  EXPECT_EQ(huge.items, 0);
  for (int64_t L : {1, 31, 1000, 2048, 4096, 65536, 262144})
    for (int vec : {1, 4, 8})
      for (int64_t rows : {int64_t(-1), int64_t(1), kFewRows - 1, kFewRows}) {
        RowLaunch r = chooseRowLaunch(L, vec, 0, false, rows);
        int64_t chunks = (L + vec - 1) / vec;
        if (r.items > 0) EXPECT_GE(int64_t(r.items) * (r.warp ? 32 : r.threads), chunks) << L << " " << vec;
        EXPECT_LE(r.threads, 1024);
      }
}

TEST(RowLaunch, FewRowsTakeABlockEach) {
  // Decoding's [1, 2048] bf16 row: 256 chunks of 8, one per thread of one block.
  RowLaunch one = chooseRowLaunch(2048, 8, 0, false, 1);
  EXPECT_FALSE(one.warp);
  EXPECT_EQ(one.threads, 256);
  EXPECT_EQ(one.items, 1);
  EXPECT_TRUE(chooseRowLaunch(2048, 8, 0, false, kFewRows).warp);  // enough rows: a warp each
  EXPECT_TRUE(chooseRowLaunch(512, 8, 0, true, 1).warp);  // column sums of short rows keep theirs
  EXPECT_TRUE(chooseRowLaunch(100, 4, 0, false, 1).warp);  // one warp's worth: nothing to spread
}

TEST(RowLaunch, WideColumnSumsTakeABlockPerRow) {
  // A norm's backward with its weight gradient: a warp per row would hold 8 chunks and 64 float
  // accumulators per lane (168 registers); a block per row holds one chunk per thread.
  RowLaunch norm = chooseRowLaunch(2048, 8, 0, true);
  EXPECT_FALSE(norm.warp);
  EXPECT_EQ(norm.threads, 256);
  EXPECT_EQ(norm.items, 1);
  RowLaunch wide = chooseRowLaunch(8192, 4, 0, true);  // 2048 chunks of 4 floats
  EXPECT_EQ(wide.threads, 1024);
  EXPECT_EQ(wide.items, 2);
  RowLaunch narrow = chooseRowLaunch(512, 8, 0, true);  // 64 chunks: two per lane of a warp
  EXPECT_TRUE(narrow.warp);
  EXPECT_EQ(narrow.items, 2);
  EXPECT_TRUE(chooseRowLaunch(2048, 8, 0, false).warp);  // no columns: a warp per row
}
