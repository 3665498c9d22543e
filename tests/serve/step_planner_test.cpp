#include "serve/step_planner.h"

#include <gtest/gtest.h>

namespace zoo {
namespace {

// A decoder's server: 2 rows, 1 waiting place, prompts over 8 tokens read 8 a turn, a context of 32.
PlannerOptions decoder(int64_t chunk = 8) {
  PlannerOptions o;
  o.max_batch = 2, o.max_queue = 1, o.prefill_chunk = chunk;
  o.limits = {false, 32, 32};
  return o;
}

TEST(StepPlanner, AdmitsAsManyAsThereAreRowsOldestFirst) {
  StepPlanner planner(decoder());
  EXPECT_TRUE(planner.accepts(3));
  EXPECT_FALSE(planner.accepts(4));  // 2 rows and 1 waiting place
  planner.enqueue(1, 4, 2), planner.enqueue(2, 5, 2), planner.enqueue(3, 6, 2);
  EXPECT_FALSE(planner.accepts(1));
  const auto plan = planner.plan();
  EXPECT_EQ(plan.prefill, (std::vector<SequenceId>{1, 2}));
  EXPECT_FALSE(plan.chunk.has_value());
  EXPECT_EQ(planner.state(1), SequenceState::kPrefilling);
  EXPECT_EQ(planner.state(3), SequenceState::kWaiting);
  planner.placed(1), planner.placed(2);
  EXPECT_EQ(planner.rows(), (std::vector<SequenceId>{1, 2}));
  EXPECT_EQ(planner.state(2), SequenceState::kRunning);
  EXPECT_TRUE(planner.plan().prefill.empty());  // no free row: 3 waits
  // Row 0 ends: the last row moves into it, which the runner follows; 3 then takes row 1.
  EXPECT_EQ(planner.finished(1), std::optional<int64_t>(0));
  EXPECT_EQ(planner.rows(), (std::vector<SequenceId>{2}));
  EXPECT_EQ(planner.state(1), SequenceState::kFinished);
  EXPECT_EQ(planner.plan().prefill, (std::vector<SequenceId>{3}));
  planner.placed(3);
  EXPECT_EQ(planner.finished(3), std::optional<int64_t>(1));  // the last row: nothing moves into it
  EXPECT_EQ(planner.admitted(), 1);
}

// A sequence that generates nothing (a prompt scored for its log-probabilities) is admitted as one
// that is read, long or not, never chunked nor placed in a row; it holds its place until finished.
TEST(StepPlanner, ScoredPromptsAreReadAloneAndTakeNoRow) {
  StepPlanner planner(decoder(4));
  planner.enqueue(1, 20, 0), planner.enqueue(2, 3, 2), planner.enqueue(3, 3, 2);
  auto plan = planner.plan();
  EXPECT_EQ(plan.scored, (std::vector<SequenceId>{1}));
  EXPECT_EQ(plan.prefill, (std::vector<SequenceId>{2}));
  EXPECT_TRUE(planner.chunked().empty());
  EXPECT_EQ(planner.state(3), SequenceState::kWaiting);  // 1 holds the second row's place while read
  EXPECT_FALSE(planner.finished(1).has_value());
  planner.placed(2);
  plan = planner.plan();
  EXPECT_EQ(plan.prefill, (std::vector<SequenceId>{3}));
  EXPECT_TRUE(planner.rows() == std::vector<SequenceId>{2});
}

TEST(StepPlanner, LongPromptsAreReadAChunkATurnHoldingTheirRow) {
  StepPlanner planner(decoder());
  planner.enqueue(1, 20, 4), planner.enqueue(2, 3, 4), planner.enqueue(3, 3, 4);
  auto plan = planner.plan();
  EXPECT_EQ(plan.prefill, (std::vector<SequenceId>{2}));  // 1 holds the other row while it is read
  ASSERT_TRUE(plan.chunk.has_value());
  EXPECT_EQ(plan.chunk->id, 1u);
  EXPECT_EQ(plan.chunk->begin, 0);
  EXPECT_EQ(plan.chunk->length, 8);
  EXPECT_FALSE(plan.chunk->last);
  planner.placed(2);
  plan = planner.plan();
  EXPECT_TRUE(plan.prefill.empty());
  EXPECT_EQ(plan.chunk->begin, 8);
  EXPECT_EQ(plan.chunk->length, 8);
  plan = planner.plan();
  EXPECT_EQ(plan.chunk->begin, 16);
  EXPECT_EQ(plan.chunk->length, 4);
  EXPECT_TRUE(plan.chunk->last);
  planner.placed(1);
  EXPECT_EQ(planner.rows(), (std::vector<SequenceId>{2, 1}));
  EXPECT_TRUE(planner.chunked().empty());
  // 3 takes the row 2 leaves.
  planner.finished(2);
  EXPECT_EQ(planner.plan().prefill, (std::vector<SequenceId>{3}));
  planner.placed(3);
  // A chunked prompt that ends (cancelled, failed) frees the row it held.
  planner.finished(1);
  planner.enqueue(4, 30, 1), planner.enqueue(5, 3, 1);
  const auto next = planner.plan();
  ASSERT_TRUE(next.chunk.has_value());
  EXPECT_EQ(next.chunk->id, 4u);
  EXPECT_TRUE(next.prefill.empty());  // 3 and 4 hold both rows
  planner.finished(4);
  EXPECT_EQ(planner.plan().prefill, (std::vector<SequenceId>{5}));
}

// A model whose layers keep a recurrent state, under a prefix cache of 4-token blocks: a prompt
// longer than a block is read in chunks, one ending at its last block short of its last token,
// chunked or not otherwise; a short prompt is read whole.
TEST(StepPlanner, RecurrentStatesCutPromptsAtTheirLastBlock) {
  for (const int64_t chunk : {int64_t{0}, int64_t{3}}) {
    SCOPED_TRACE(chunk);
    PlannerOptions o = decoder(chunk);
    o.state_block = 4;
    StepPlanner planner(o);
    planner.enqueue(1, 14, 2), planner.enqueue(2, 3, 2);
    auto plan = planner.plan();
    EXPECT_EQ(plan.prefill, (std::vector<SequenceId>{2}));
    std::vector<std::pair<int64_t, int64_t>> chunks;
    while (plan.chunk) {
      chunks.emplace_back(plan.chunk->begin, plan.chunk->length);
      if (plan.chunk->last) break;
      plan = planner.plan();
    }
    const std::vector<std::pair<int64_t, int64_t>> want =
        chunk == 0 ? std::vector<std::pair<int64_t, int64_t>>{{0, 12}, {12, 2}}
                   : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 3}, {6, 3}, {9, 3}, {12, 2}};
    EXPECT_EQ(chunks, want);
  }
}

TEST(StepPlanner, EncoderDecodersAndChunkZeroReadWhole) {
  PlannerOptions o = decoder(0);
  StepPlanner whole(o);
  whole.enqueue(1, 30, 1);
  EXPECT_EQ(whole.plan().prefill, (std::vector<SequenceId>{1}));
  o = decoder();
  o.limits = {true, 32, 16};  // an encoder-decoder's source: the encoder's 32 positions
  StepPlanner seq2seq(o);
  seq2seq.enqueue(1, 30, 16);
  const auto plan = seq2seq.plan();
  EXPECT_EQ(plan.prefill, (std::vector<SequenceId>{1}));
  EXPECT_FALSE(plan.chunk.has_value());
}

TEST(StepPlanner, WhatDoesNotFitIsRefusedAndHoldsNoRow) {
  StepPlanner planner(decoder());
  planner.enqueue(1, 30, 3);  // 30 + 3 > 32
  planner.enqueue(2, 0, 1);   // no prompt
  planner.enqueue(3, 30, 2);  // fits exactly
  const auto plan = planner.plan();
  ASSERT_EQ(plan.refused.size(), 2u);
  EXPECT_EQ(plan.refused[0].first, 1u);
  EXPECT_EQ(plan.refused[0].second, "a prompt of 30 tokens with max_new_tokens 3 does not fit the context of 32");
  EXPECT_EQ(planner.state(1), SequenceState::kFinished);
  EXPECT_EQ(plan.chunk->id, 3u);
  EXPECT_EQ(planner.admitted(), 1);
}

TEST(StepPlanner, WaitingSequencesLeaveTheQueueAndLengthEndsBySeen) {
  StepPlanner planner(decoder());
  planner.enqueue(1, 4, 2), planner.enqueue(2, 4, 2), planner.enqueue(3, 4, 2);
  planner.finished(2);  // its client went away before it ran
  EXPECT_EQ(planner.waiting(), (std::deque<SequenceId>{1, 3}));
  EXPECT_TRUE(planner.accepts(1));
  EXPECT_FALSE(planner.finished(2).has_value());  // already forgotten
  // max_new_tokens (2) reached, or the last token past the context's 32 positions once fed back.
  EXPECT_TRUE(planner.ends_by_length(4, 2, 2));
  EXPECT_FALSE(planner.ends_by_length(4, 2, 1));
  EXPECT_FALSE(planner.ends_by_length(30, 8, 2));  // 30 + 2 positions
  EXPECT_TRUE(planner.ends_by_length(30, 8, 3));
  PlannerOptions o = decoder();
  o.limits = {true, 32, 16};  // an encoder-decoder's row: its start token and the new tokens
  StepPlanner seq2seq(o);
  EXPECT_FALSE(seq2seq.ends_by_length(30, 20, 15));
  EXPECT_TRUE(seq2seq.ends_by_length(30, 20, 16));
  EXPECT_THROW(planner.enqueue(1, 4, 2), std::logic_error);  // queued twice
  EXPECT_THROW(planner.placed(3), std::logic_error);          // not admitted
}

}  // namespace
}  // namespace zoo
