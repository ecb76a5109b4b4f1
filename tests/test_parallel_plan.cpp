// The MPI layer's decisions, which are plain arithmetic and run in every
// build (docs/PARALLEL.md): which rank runs which case (largest first, to the
// least loaded rank), how a case is cut into one segment per rank (contiguous,
// on chunk boundaries of its sequences, about equal chunk counts), which
// segments' carried states a segment starts from, and the case results sent
// between ranks. Without mpirun a run is one rank.
#include "app/case_result_message.hpp"
#include "parallel/case_assignment.hpp"
#include "parallel/communicator.hpp"
#include "parallel/open_mpi_defaults.hpp"
#include "parallel/rank_cpus.hpp"
#include "parallel/segment_plan.hpp"

#include <gtest/gtest.h>

#include <map>

#include <numeric>

namespace linattn {
namespace {

using parallel::assign_cases;
using parallel::carried_piece;
using parallel::carry_chain;
using parallel::plan_segments;

Problem plain(std::int64_t B, std::int64_t T, std::int64_t chunk = 64) {
  Problem p;
  p.B = B;
  p.T = T;
  p.H = 2;
  p.DK = 16;
  p.DV = 8;
  p.chunk = chunk;
  return p;
}

Problem packed(const std::vector<std::int64_t>& lengths, std::int64_t chunk = 64) {
  Problem p = plain(1, 0, chunk);
  p.cu_seqlens = {0};
  for (std::int64_t n : lengths) p.cu_seqlens.push_back(p.cu_seqlens.back() + n);
  p.T = p.cu_seqlens.back();
  return p;
}

TEST(CaseAssignment, LargestFirstToTheLeastLoadedRank) {
  // Sorted: 9 (case 1), 7 (3), 5 (0), 4 (4), 2 (2). Rank 0 takes 9, rank 1 7, rank 1 5 (7 < 9),
  // rank 0 4 (9 < 12), rank 1 2 (12 < 13).
  EXPECT_EQ(assign_cases({5, 9, 2, 7, 4}, 2), (std::vector<int>{1, 0, 1, 1, 0}));
  // Three ranks: 9 -> 0, 7 -> 1, 5 -> 2, 4 -> 2 (5 is least), 2 -> 1 (7 < 9).
  EXPECT_EQ(assign_cases({5, 9, 2, 7, 4}, 3), (std::vector<int>{2, 0, 1, 1, 2}));
  // Equal costs are spread in case order, whatever their cost (0: cases of unknown size).
  EXPECT_EQ(assign_cases({3, 3, 3, 3}, 2), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(assign_cases({0, 0, 0}, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(assign_cases({}, 4), std::vector<int>{});
  EXPECT_EQ(assign_cases({1, 2, 3}, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_THROW(assign_cases({1}, 0), std::invalid_argument);
}

TEST(CaseAssignment, BalancesWithinTheLargestCase) {
  // LPT's bound: the most loaded rank carries at most the average plus the largest case.
  std::vector<std::int64_t> costs;
  for (int i = 0; i < 40; ++i) costs.push_back((i * 7919) % 97 + 1);
  for (int ranks : {2, 3, 5}) {
    const std::vector<int> owner = assign_cases(costs, ranks);
    std::vector<std::int64_t> load(static_cast<std::size_t>(ranks), 0);
    for (std::size_t i = 0; i < costs.size(); ++i) load[static_cast<std::size_t>(owner[i])] += costs[i];
    const std::int64_t total = std::accumulate(costs.begin(), costs.end(), std::int64_t(0));
    const std::int64_t largest = *std::max_element(costs.begin(), costs.end());
    for (std::int64_t l : load) EXPECT_LE(l, total / ranks + largest) << ranks << " ranks";
  }
}

// The segments tile the tokens in order, start on chunk boundaries of their
// sequences and number h's chunks consecutively.
void expect_tiling(const Problem& p, const std::vector<Window>& segments) {
  std::int64_t chunk = 0, t = 0;
  for (const Window& w : segments) {
    EXPECT_EQ(w.chunk0 == chunk || w.chunks == 0, true);
    if (w.chunks == 0) continue;
    EXPECT_EQ(w.t0, t);
    const std::int64_t seq_start = p.varlen() ? p.cu_seqlens[w.seq_begin] : 0;
    EXPECT_EQ((w.t0 - seq_start) % p.chunk, 0) << "segment starts off a chunk boundary";
    EXPECT_EQ(w.continues, w.t0 > seq_start);
    chunk += w.chunks;
    t = w.t1;
  }
  EXPECT_EQ(t, p.T);
  EXPECT_EQ(chunk, p.varlen() ? p.total_chunks() : p.num_chunks());
}

TEST(SegmentPlan, PlainBatchCutOnChunkBoundaries) {
  const Problem p = plain(2, 1000);  // 16 chunks, the last 40 tokens
  const std::vector<Window> two = plan_segments(p, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].t0, 0);
  EXPECT_EQ(two[0].t1, 512);
  EXPECT_TRUE(two[0].carries);
  EXPECT_FALSE(two[0].continues);
  EXPECT_EQ(two[1].t1, 1000);
  EXPECT_TRUE(two[1].continues);
  EXPECT_FALSE(two[1].carries);
  expect_tiling(p, two);
  const std::vector<Window> three = plan_segments(p, 3);  // 5, 5, 6 chunks
  EXPECT_EQ(three[1].t0, 320);
  EXPECT_EQ(three[2].t0, 640);
  expect_tiling(p, three);
  EXPECT_EQ(carry_chain(p, three, 0), std::vector<int>{});
  EXPECT_EQ(carry_chain(p, three, 1), std::vector<int>{0});
  EXPECT_EQ(carry_chain(p, three, 2), (std::vector<int>{0, 1}));
  const parallel::CarriedPiece piece = carried_piece(p, three[1]);
  EXPECT_EQ(piece.t0, 320);
  EXPECT_FALSE(piece.from_start);
  EXPECT_TRUE(carried_piece(p, three[0]).from_start);
}

TEST(SegmentPlan, FewerChunksThanRanksLeavesEmptySegments) {
  const Problem p = plain(1, 100);  // 2 chunks over 3 ranks: 0, 1, 1 chunks
  const std::vector<Window> s = plan_segments(p, 3);
  EXPECT_EQ(s[0].chunks, 0);
  EXPECT_EQ(s[0].sequences(), 0);
  EXPECT_EQ(s[1].chunks, 1);
  EXPECT_EQ(s[2].chunks, 1);
  expect_tiling(p, s);
  EXPECT_EQ(carry_chain(p, s, 2), std::vector<int>{1});  // the empty segment 0 is passed over
  const std::vector<Window> one = plan_segments(plain(1, 10), 4);
  expect_tiling(plain(1, 10), one);
  EXPECT_EQ(one[3].chunks, 1);
}

TEST(SegmentPlan, PackedSequencesCarryOnlyWhereCut) {
  // Chunks per sequence: 1, 1, 1, 2, 5, 11, 3 (24 in all).
  const Problem p = packed({1, 63, 64, 65, 300, 700, 129});
  const std::vector<Window> s = plan_segments(p, 3);  // 8 chunks each
  expect_tiling(p, s);
  // Segment 1 starts in sequence 4 (its 4th chunk) and ends in sequence 5 (its 6th chunk).
  EXPECT_EQ(s[1].seq_begin, 4);
  EXPECT_EQ(s[1].t0, p.cu_seqlens[4] + 3 * 64);
  EXPECT_EQ(s[1].t1, p.cu_seqlens[5] + 6 * 64);
  EXPECT_EQ(s[1].seq_end, 6);
  EXPECT_TRUE(s[1].continues);
  EXPECT_TRUE(s[1].carries);
  EXPECT_EQ(s[1].fresh_begin(), 5);
  EXPECT_EQ(s[1].finished_end(), 5);
  // Segment 2 continues sequence 5, which started in segment 1: the chain is segment 1 alone.
  EXPECT_EQ(carry_chain(p, s, 2), std::vector<int>{1});
  const parallel::CarriedPiece piece = carried_piece(p, s[1]);
  EXPECT_EQ(piece.t0, p.cu_seqlens[5]);
  EXPECT_TRUE(piece.from_start);
  // Segment 0 ends inside sequence 4, which starts in it.
  EXPECT_TRUE(carried_piece(p, s[0]).from_start);
  EXPECT_EQ(carried_piece(p, s[0]).t0, p.cu_seqlens[4]);
}

TEST(SegmentPlan, ALongSequenceAcrossSeveralSegments) {
  const Problem p = packed({10, 1000, 20});  // chunks 1, 16, 1
  const std::vector<Window> s = plan_segments(p, 4);  // 4, 5, 4, 5 chunks
  expect_tiling(p, s);
  EXPECT_EQ(carry_chain(p, s, 1), std::vector<int>{0});
  EXPECT_EQ(carry_chain(p, s, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(carry_chain(p, s, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(carried_piece(p, s[0]).from_start);  // sequence 1 starts in segment 0
  EXPECT_EQ(carried_piece(p, s[0]).t0, 10);
  EXPECT_FALSE(carried_piece(p, s[1]).from_start);
}

TEST(SegmentPlan, SharesBalanceTheStatePass) {
  // Rank r's work is its share plus the state pass over rank r - 1's: all equal.
  for (int ranks : {2, 3, 5})
    for (double cost : {0.1, 0.25, 0.6}) {
      const std::vector<double> g = parallel::segment_shares(ranks, cost);
      ASSERT_EQ(g.size(), static_cast<std::size_t>(ranks));
      EXPECT_NEAR(std::accumulate(g.begin(), g.end(), 0.0), 1.0, 1e-12);
      for (int r = 1; r < ranks; ++r) EXPECT_NEAR(g[r] + cost * g[r - 1], g[0], 1e-12) << ranks << " ranks, cost " << cost;
    }
  EXPECT_NEAR(parallel::segment_shares(2, 1.0 / 3.0)[0], 0.6, 1e-12);  // 1 / (2 - cost)
  for (double cost : {0.0, 1.0, 2.0})  // free, or no cheaper than the forward: even
    EXPECT_EQ(parallel::segment_shares(3, cost), std::vector<double>(3, 1.0 / 3.0));
  EXPECT_THROW(parallel::segment_shares(2, -0.5), std::invalid_argument);
}

TEST(SegmentPlan, UnevenSplitFollowsTheShares) {
  const Problem p = plain(1, 100 * 64);  // 100 chunks
  const std::vector<Window> two = plan_segments(p, 2, 1.0 / 3.0);  // 60, 40
  expect_tiling(p, two);
  EXPECT_EQ(two[0].chunks, 60);
  EXPECT_EQ(two[1].chunks, 40);
  const std::vector<Window> three = plan_segments(p, 3, 0.5);  // shares 1, 0.5, 0.75 of 2.25: cuts 44.4, 66.7
  expect_tiling(p, three);
  EXPECT_EQ(three[0].chunks, 44);
  EXPECT_EQ(three[1].chunks, 23);
  EXPECT_EQ(three[2].chunks, 33);
  const Problem q = packed({10, 1000, 20});  // chunks 1, 16, 1
  expect_tiling(q, plan_segments(q, 3, 0.25));
  expect_tiling(plain(1, 10), plan_segments(plain(1, 10), 4, 0.25));  // one chunk: three empty segments
}

TEST(SegmentPlan, CarryRoutesFollowTheChains) {
  // Sequence 1 spans all four segments: rank r computes segment r - 1's piece,
  // and adds it to segment r - 1's start, received from rank r - 1.
  const Problem p = packed({10, 1000, 20});
  const std::vector<Window> s = plan_segments(p, 4);
  const parallel::CarryRoute r0 = parallel::carry_route(p, s, 0), r1 = parallel::carry_route(p, s, 1);
  const parallel::CarryRoute r2 = parallel::carry_route(p, s, 2), r3 = parallel::carry_route(p, s, 3);
  EXPECT_EQ(r0.carry_of, -1);
  EXPECT_EQ(r0.start_to, -1);  // rank 1 needs only segment 0's piece, which it computes itself
  EXPECT_EQ(r1.carry_of, 0);
  EXPECT_EQ(r1.start_from, -1);
  EXPECT_EQ(r1.start_to, 2);
  EXPECT_EQ(r2.carry_of, 1);
  EXPECT_EQ(r2.start_from, 1);
  EXPECT_EQ(r2.start_to, 3);
  EXPECT_EQ(r3.carry_of, 2);
  EXPECT_EQ(r3.start_from, 2);
  EXPECT_EQ(r3.start_to, -1);
  // An empty segment is passed over: rank 2 computes segment 1's piece.
  const Problem tiny = plain(1, 100);  // 0, 1, 1 chunks
  const std::vector<Window> e = plan_segments(tiny, 3);
  EXPECT_EQ(parallel::carry_route(tiny, e, 0).carry_of, -1);
  EXPECT_EQ(parallel::carry_route(tiny, e, 2).carry_of, 1);
  EXPECT_EQ(parallel::carry_route(tiny, e, 2).start_from, -1);
  // Packed, cut where a sequence started in the segment before: one piece, no start received.
  const Problem q = packed({1, 63, 64, 65, 300, 700, 129});
  const std::vector<Window> t = plan_segments(q, 3);
  EXPECT_EQ(parallel::carry_route(q, t, 2).carry_of, 1);
  EXPECT_EQ(parallel::carry_route(q, t, 2).start_from, -1);
  EXPECT_EQ(parallel::carry_route(q, t, 1).start_to, -1);
}

TEST(RankCpus, ABindingToOneCpuWidensToTheRanksShare) {
  using parallel::widened_cpus;
  EXPECT_EQ(widened_cpus(1, 16, 0, 2), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(widened_cpus(1, 16, 1, 2), (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(widened_cpus(1, 10, 2, 3), (std::vector<int>{6, 7, 8, 9}));  // [20 / 3, 30 / 3)
  EXPECT_TRUE(widened_cpus(4, 16, 0, 2).empty());  // bound to several CPUs: the user's choice stays
  EXPECT_TRUE(widened_cpus(1, 2, 0, 2).empty());   // a share of one CPU: nothing to gain
  EXPECT_TRUE(widened_cpus(1, 16, 2, 2).empty());  // not a rank of this node
}

TEST(CaseResultMessage, RoundTrip) {
  std::vector<CaseResult> results(3);
  results[1].input = "in.h5";
  results[1].group = "case1";
  results[1].output = "out/in.case1.h5";
  results[1].ok = true;
  results[1].kernel_seconds = 0.125;
  results[1].min_bytes = 1e9 + 0.5;
  results[1].wall_seconds = 3.25;
  results[1].windows = 4;
  results[1].dtype = DType::bf16;
  results[1].tile_path = "hosttile";
  Problem p = plain(2, 300);
  p.scale = 0.3;
  results[1].problem = p;
  results[2].input = "bad.h5";
  results[2].error = "bad.h5: not an HDF5 file";
  std::vector<CaseResult> back;
  decode_results(encode_results(results, {1, 2}), back);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[1].label(), "in.h5:case1");
  EXPECT_EQ(back[1].output, results[1].output);
  EXPECT_TRUE(back[1].ok);
  EXPECT_EQ(back[1].kernel_seconds, 0.125);
  EXPECT_EQ(back[1].min_bytes, 1e9 + 0.5);
  EXPECT_EQ(back[1].wall_seconds, 3.25);
  EXPECT_EQ(back[1].windows, 4);
  EXPECT_EQ(back[1].dtype, DType::bf16);
  EXPECT_EQ(back[1].tile_path, "hosttile");
  ASSERT_TRUE(back[1].problem.has_value());
  EXPECT_EQ(back[1].problem->T, 300);
  EXPECT_EQ(back[1].problem->scale, 0.3);
  EXPECT_FALSE(back[2].ok);
  EXPECT_EQ(back[2].error, results[2].error);
  EXPECT_FALSE(back[2].problem.has_value());
}

TEST(Communicator, WithoutMpirunARunIsOneRank) {
  // The test binary never starts MPI: every collective is the trivial one.
  EXPECT_EQ(parallel::size(), 1);
  EXPECT_EQ(parallel::rank(), 0);
  EXPECT_TRUE(parallel::any(true));
  EXPECT_FALSE(parallel::any(false));
  EXPECT_EQ(parallel::broadcast("x"), "x");
  EXPECT_EQ(parallel::first_non_empty("why"), "why");
}

TEST(OpenMpiDefaults, OneNodeGetsOb1UnlessTheUserChose) {
  using parallel::single_node_mpi_settings;
  using Settings = std::vector<std::pair<std::string, std::string>>;
  const auto env = [](std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  const Settings both{{"OMPI_MCA_pml", "ob1"}};
  // Every rank on this node.
  EXPECT_EQ(single_node_mpi_settings(env({{"OMPI_COMM_WORLD_SIZE", "16"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "16"}})),
            both);
  // Ranks on other nodes too: the interconnect's transport stays.
  EXPECT_TRUE(single_node_mpi_settings(env({{"OMPI_COMM_WORLD_SIZE", "32"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "16"}}))
                  .empty());
  // Not Open MPI's launcher (or no launcher).
  EXPECT_TRUE(single_node_mpi_settings(env({{"PMI_SIZE", "4"}})).empty());
  // The user's own setting wins.
  EXPECT_TRUE(single_node_mpi_settings(env({{"OMPI_COMM_WORLD_SIZE", "4"},
                                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                            {"OMPI_MCA_pml", "ucx"}}))
                  .empty());
  EXPECT_TRUE(single_node_mpi_settings(env({{"OMPI_COMM_WORLD_SIZE", "4"},
                                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                            {"LINATTN_KEEP_MPI_SETTINGS", "1"}}))
                  .empty());
}

}  // namespace
}  // namespace linattn
