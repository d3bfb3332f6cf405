// Ensembles of weights files: the list's parsing and the median of the members' predictions,
// against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "hkfac/cost_model/ensemble.h"
#include "hkfac/error.h"

namespace cm = hkfac::cost_model;

namespace {

std::string split_error(const std::string &list) {
  try {
    cm::split_weights_list(list);
  } catch (const hkfac::Error &e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(Ensemble, SplitsAListInOrder) {
  EXPECT_EQ(cm::split_weights_list("a.weights"), std::vector<std::string>{"a.weights"});
  EXPECT_EQ(cm::split_weights_list("c:a:b"), (std::vector<std::string>{"c", "a", "b"}));
}

TEST(Ensemble, EmptyEntriesAreNamedErrors) {
  for (const char *bad : {"", ":a", "a:", "a::b"}) {
    const std::string e = split_error(bad);
    EXPECT_NE(e.find("empty entry"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find(std::string("\"") + bad + "\""), std::string::npos) << e;
  }
}

TEST(Ensemble, OneMemberIsItsOwnPrediction) {
  EXPECT_EQ(cm::ensemble_prediction({0.f}), 0.0);
  EXPECT_EQ(cm::ensemble_prediction({3.25f}), 3.25);
}

TEST(Ensemble, AnOddCountScoresTheMiddleMember) {
  // The middle value whatever the order, not the mean (4) nor the geometric mean (2.88).
  EXPECT_NEAR(cm::ensemble_prediction({9.f, 1.f, 2.f}), 2.0, 1e-12);
  EXPECT_NEAR(cm::ensemble_prediction({2.f, 9.f, 1.f, 100.f, 1000.f}), 9.0, 1e-12);
}

TEST(Ensemble, AnEvenCountScoresTheGeometricMeanOfTheMiddleTwo) {
  EXPECT_NEAR(cm::ensemble_prediction({4.f, 1.f}), 2.0, 1e-12);
  EXPECT_NEAR(cm::ensemble_prediction({1000.f, 2.f, 1.f, 8.f}), 4.0, 1e-12);
  // Zero counts as 1e-30, so a free schedule stays cheapest without a log of zero.
  EXPECT_NEAR(cm::ensemble_prediction({0.f, 1e-30f}), 1e-30, 1e-36);
}

TEST(Ensemble, ANonFiniteMemberMakesTheScoreInfinite) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isinf(cm::ensemble_prediction({1.f, inf, 2.f})));
  EXPECT_TRUE(std::isinf(cm::ensemble_prediction({nan})));
}

TEST(Ensemble, NoMembersIsAnError) { EXPECT_THROW(cm::ensemble_prediction({}), hkfac::Error); }
