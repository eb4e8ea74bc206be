// The placement planner against a brute-force oracle on small random instances, its
// invariants (budget, ascending ids, granularity), bad budgets, and its speed on a
// 70B-shaped instance (printed, never asserted).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <random>

#include "sparse/placement.h"

namespace pi::sparse {
namespace {

struct OracleResult {
  double cpu = std::numeric_limits<double>::infinity();
};

// Every dense subset (or only prefixes), head on/off and every neuron subset of every layer.
OracleResult oracle(const PlacementProblem& p, bool prefixes_only) {
  const size_t L = p.layers.size();
  std::vector<size_t> base(L + 1, 0);
  for (size_t l = 0; l < L; ++l) base[l + 1] = base[l] + p.layers[l].freq.size();
  const size_t N = base[L];
  OracleResult best;
  for (uint32_t dense = 0; dense < (1u << L); ++dense) {
    if (prefixes_only && (dense & (dense + 1)) != 0) continue;  // not of the form 0..01..1
    for (int head = 0; head < 2; ++head) {
      for (uint64_t nm = 0; nm < (uint64_t{1} << N); ++nm) {
        uint64_t bytes = head ? p.head_bytes : 0;
        double cpu = head ? 0.0 : static_cast<double>(p.head_bytes);
        bool any_neurons = false;
        for (size_t l = 0; l < L; ++l) {
          const LayerCost& c = p.layers[l];
          if (dense & (1u << l)) bytes += c.dense_bytes;
          else cpu += static_cast<double>(c.dense_read_bytes);
          uint64_t n_on = 0;
          for (size_t i = 0; i < c.freq.size(); ++i) {
            if (nm & (uint64_t{1} << (base[l] + i))) ++n_on;
            else cpu += c.freq[i] * static_cast<double>(c.neuron_bytes);
          }
          const auto g = static_cast<uint64_t>(p.granularity);
          bytes += (n_on + g - 1) / g * g * c.neuron_bytes;
          any_neurons = any_neurons || n_on > 0;
        }
        if (dense != 0 || head || any_neurons) bytes += p.scratch_bytes;
        if (dense != 0 || head) bytes += p.scratch_lane_bytes;
        if (dense != 0) bytes += p.scratch_dense_bytes;
        if (head) bytes += p.scratch_head_bytes;
        if (any_neurons) bytes += p.scratch_neuron_bytes;
        if (bytes <= p.budget && cpu < best.cpu) best.cpu = cpu;
      }
    }
  }
  return best;
}

PlacementProblem random_problem(std::mt19937_64& rng, bool equal_dense, int n_classes) {
  std::uniform_int_distribution<int> layers(1, 3), neurons(1, 4), gran(1, 3);
  std::uniform_int_distribution<uint64_t> bytes(1, 40);
  std::uniform_real_distribution<float> freq(0.0f, 1.0f);
  PlacementProblem p;
  const int L = layers(rng);
  p.granularity = gran(rng);
  const uint64_t dense = bytes(rng) * 4;
  const uint64_t nb0 = bytes(rng), nb1 = bytes(rng);
  p.layers.resize(static_cast<size_t>(L));
  uint64_t total = 0;
  for (int l = 0; l < L; ++l) {
    LayerCost& c = p.layers[static_cast<size_t>(l)];
    c.dense_bytes = equal_dense ? dense : bytes(rng) * 4;
    c.dense_read_bytes = equal_dense ? dense : c.dense_bytes + bytes(rng) - 1;
    c.neuron_bytes = (n_classes == 2 && l % 2 == 1) ? nb1 : nb0;
    c.freq.resize(static_cast<size_t>(neurons(rng)));
    for (float& f : c.freq) f = rng() % 5 == 0 ? 0.0f : freq(rng);  // some exact ties at 0
    total += c.dense_bytes + c.neuron_bytes * c.freq.size() * 3;
  }
  p.head_bytes = bytes(rng) * 3;
  p.scratch_bytes = rng() % 3 == 0 ? 0 : bytes(rng);
  // The conditional parts of the scratch (the hybrid executor's per kind of work), often zero.
  p.scratch_lane_bytes = rng() % 2 == 0 ? 0 : bytes(rng);
  p.scratch_dense_bytes = rng() % 2 == 0 ? 0 : bytes(rng);
  p.scratch_head_bytes = rng() % 2 == 0 ? 0 : bytes(rng);
  p.scratch_neuron_bytes = rng() % 2 == 0 ? 0 : bytes(rng);
  total += p.head_bytes + p.scratch_bytes + p.scratch_lane_bytes + p.scratch_dense_bytes +
           p.scratch_head_bytes +
           p.scratch_neuron_bytes;
  p.budget = std::uniform_int_distribution<uint64_t>(0, total)(rng);
  return p;
}

void expect_matches_oracle(const PlacementProblem& p, bool prefixes_only, int trial) {
  auto plan = solve_placement(p);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const OracleResult o = oracle(p, prefixes_only);
  EXPECT_NEAR(plan->cpu_bytes_per_token, o.cpu, 1e-9 * std::max(1.0, o.cpu)) << "trial " << trial;
  EXPECT_LE(plan->device_bytes, p.budget);
  EXPECT_TRUE(plan->exact);
  for (const LayerPlan& l : plan->layers) {
    for (size_t k = 1; k < l.device_neurons.size(); ++k) {
      EXPECT_LT(l.device_neurons[k - 1], l.device_neurons[k]);
    }
  }
}

// Equal dense blocks: a prefix is no restriction, so the plan is optimal over all placements.
TEST(Placement, OptimalOverAllPlacementsWithEqualLayers) {
  std::mt19937_64 rng(1);
  for (int t = 0; t < 300; ++t) expect_matches_oracle(random_problem(rng, true, 1), false, t);
}

// Unequal dense blocks: optimal over plans whose dense layers form a prefix.
TEST(Placement, OptimalOverPrefixPlansWithUnequalLayers) {
  std::mt19937_64 rng(2);
  for (int t = 0; t < 300; ++t) expect_matches_oracle(random_problem(rng, false, 1), true, t);
}

// Two sizes of neuron rows (layers in different types): still exact.
TEST(Placement, OptimalWithTwoNeuronCostClasses) {
  std::mt19937_64 rng(3);
  for (int t = 0; t < 300; ++t) expect_matches_oracle(random_problem(rng, true, 2), false, t);
}

// Three sizes of neuron rows: greedy by value per byte, flagged inexact; never better than the
// oracle (that would be a bookkeeping error) and always within the budget.
TEST(Placement, ThreeCostClassesAreGreedyAndFeasible) {
  std::mt19937_64 rng(4);
  int inexact = 0;
  for (int t = 0; t < 200; ++t) {
    PlacementProblem p = random_problem(rng, true, 1);
    if (p.layers.size() < 3) continue;
    for (size_t l = 0; l < 3; ++l) p.layers[l].neuron_bytes = 5 + 7 * l;
    auto plan = solve_placement(p);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_LE(plan->device_bytes, p.budget);
    inexact += plan->exact ? 0 : 1;
    const OracleResult o = oracle(p, false);
    EXPECT_GE(plan->cpu_bytes_per_token, o.cpu - 1e-9 * std::max(1.0, o.cpu)) << t;
  }
  EXPECT_GT(inexact, 0);
}

// A dense file: whole layers, like llama.cpp -ngl.
TEST(Placement, DenseLayersMoveWhole) {
  PlacementProblem p;
  p.layers.resize(4);
  for (LayerCost& c : p.layers) {
    c.split = false;
    c.dense_bytes = c.dense_read_bytes = 100;
  }
  p.head_bytes = 30;
  p.scratch_bytes = 10;
  p.budget = 345;  // 3 layers + scratch (310) or 3 layers + head + scratch (340)
  auto plan = solve_placement(p);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->n_dense_layers, 3);
  EXPECT_TRUE(plan->head_on_device);
  EXPECT_EQ(plan->device_bytes, 340u);
  EXPECT_DOUBLE_EQ(plan->cpu_bytes_per_token, 100.0);
  EXPECT_EQ(plan->n_device_neurons(), 0);
}

TEST(Placement, NothingFitsMeansAllOnTheCpu) {
  PlacementProblem p;
  p.layers.resize(2);
  for (LayerCost& c : p.layers) {
    c.dense_bytes = c.dense_read_bytes = 100;
    c.neuron_bytes = 10;
    c.freq = {0.5f, 0.25f, 0.0f};
  }
  p.scratch_bytes = 50;
  p.budget = 40;  // less than the scratch
  auto plan = solve_placement(p);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->device_bytes, 0u);
  EXPECT_EQ(plan->scratch_bytes, 0u);
  EXPECT_DOUBLE_EQ(plan->cpu_bytes_per_token, plan->cpu_bytes_all_cpu);
  EXPECT_DOUBLE_EQ(plan->mass_covered(), 0.0);
  // Room for the scratch and one group of two neurons (20 bytes) but no attention block.
  p.budget = 75;
  p.granularity = 2;
  plan = solve_placement(p);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->n_dense_layers, 0);
  EXPECT_EQ(plan->layers[0].device_neurons, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(plan->layers[1].device_neurons.empty());
  EXPECT_EQ(plan->device_bytes, 70u);
  // --disable-gpu-index: no neurons at all.
  p.allow_neurons = false;
  plan = solve_placement(p);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->n_device_neurons(), 0);
}

TEST(Placement, BadProblemsFailClearly) {
  PlacementProblem p;
  EXPECT_FALSE(solve_placement(p).ok());  // no layers
  p.layers.resize(1);
  p.layers[0].neuron_bytes = 4;
  p.layers[0].freq = {0.5f, std::nanf("")};
  auto r = solve_placement(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("layer 0 neuron 1"), std::string::npos) << r.error().message;
  p.layers[0].freq = {0.5f, 1.5f};
  EXPECT_FALSE(solve_placement(p).ok());
  p.layers[0].freq = {0.5f, 0.5f};
  p.granularity = 0;
  EXPECT_FALSE(solve_placement(p).ok());
  p.granularity = 32;
  p.layers[0].dense_bytes = uint64_t{1} << 63;
  EXPECT_FALSE(solve_placement(p).ok());
  p.layers[0].dense_bytes = 0;
  EXPECT_FALSE(evaluate_placement(p, 0, false, {{0, 0}}).ok());  // duplicate
  EXPECT_FALSE(evaluate_placement(p, 0, false, {{2}}).ok());     // out of range
  EXPECT_FALSE(evaluate_placement(p, 2, false, {{}}).ok());      // too many dense layers
}

TEST(Placement, BudgetFromGib) {
  EXPECT_EQ(*budget_from_gib(0), 0u);
  EXPECT_EQ(*budget_from_gib(1.5), 1610612736u);
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 2e6}) {
    auto r = budget_from_gib(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("--vram-budget"), std::string::npos);
  }
}

// Llama-2-70B shape, Q4_0: 80 layers, n_ff 28672, n_embd 8192. Prints the solve time.
TEST(Placement, SeventyBShapedInstance) {
  PlacementProblem p;
  p.layers.resize(80);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const uint64_t row = 8192 / 32 * 18;  // one Q4_0 row of 8192
  for (LayerCost& c : p.layers) {
    c.dense_bytes = c.dense_read_bytes = 8192ull * (8192 + 2 * 1024 + 8192) / 32 * 18 + 4096ull * 2 * 1024 * 2 * 2;
    c.neuron_bytes = 3 * row;
    c.freq.resize(28672);
    for (float& f : c.freq) f = std::min(1.0f, 0.02f * std::pow(u(rng) + 1e-3f, -0.8f));
  }
  p.head_bytes = 32000ull * row;
  p.scratch_bytes = 512ull << 20;
  p.budget = 24ull << 30;
  p.granularity = 32;
  // CPU time as well as wall time: on a loaded machine the wall time includes waiting.
  const std::clock_t c0 = std::clock();
  const auto t0 = std::chrono::steady_clock::now();
  auto plan = solve_placement(p);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_LE(plan->device_bytes, p.budget);
  std::printf("70B-shaped plan (80 x 28672, 24 GiB): %.1f ms wall, %.1f ms CPU; %lld dense layers, "
              "%lld hot neurons, mass %.3f, CPU bytes/token %.3g of %.3g\n",
              ms, cpu_ms, static_cast<long long>(plan->n_dense_layers),
              static_cast<long long>(plan->n_device_neurons()), plan->mass_covered(),
              plan->cpu_bytes_per_token, plan->cpu_bytes_all_cpu);
}

}  // namespace
}  // namespace pi::sparse
