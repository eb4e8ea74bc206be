// StopText (powerinfer/stop_text.h): text cut before the first stop string, whatever pieces it
// arrives in, and nothing shown that may still turn out to begin one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "powerinfer/stop_text.h"

namespace {

using pi::StopText;

// Appends the pieces, taking after each; returns what was shown (take, then take_rest).
std::string shown(StopText& t, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) {
    const bool stop = t.append(p);
    out += t.take();
    if (stop) break;
  }
  return out + t.take_rest();
}

TEST(StopText, WithoutStopsEverythingShowsAtOnce) {
  StopText t;
  EXPECT_FALSE(t.append("Hello"));
  EXPECT_EQ(t.take(), "Hello");
  EXPECT_FALSE(t.append(", world"));
  EXPECT_EQ(t.take(), ", world");
  EXPECT_EQ(t.take_rest(), "");
  EXPECT_EQ(t.text(), "Hello, world");
}

TEST(StopText, AStopAcrossPiecesIsHeldBackThenCut) {
  StopText t({"\nUser:"});
  EXPECT_FALSE(t.append("Fine.\nUs"));
  EXPECT_EQ(t.take(), "Fine.");  // "\nUs" may begin the stop string
  EXPECT_TRUE(t.append("er: hi"));
  EXPECT_EQ(t.stop_word(), "\nUser:");
  EXPECT_EQ(t.text(), "Fine.");
  EXPECT_EQ(t.take(), "");
  EXPECT_EQ(t.take_rest(), "");
  EXPECT_TRUE(t.append("more"));  // ignored after the stop
  EXPECT_EQ(t.text(), "Fine.");
}

TEST(StopText, HeldBackTextIsShownWhenItTurnsOutNotToBeAStop) {
  StopText t({"###"});
  EXPECT_FALSE(t.append("a ##"));
  EXPECT_EQ(t.take(), "a ");
  EXPECT_FALSE(t.append(" b"));
  EXPECT_EQ(t.take(), "## b");
  // At the end the held-back bytes are the text's too.
  EXPECT_FALSE(t.append(" #"));
  EXPECT_EQ(t.take(), " ");
  EXPECT_EQ(t.take_rest(), "#");
  EXPECT_EQ(t.stop_word(), "");
}

TEST(StopText, TheEarliestStopWinsAndEmptyStopsAreIgnored) {
  StopText t({"", "cd", "bcde"});
  EXPECT_TRUE(t.append("abcdef"));
  EXPECT_EQ(t.text(), "a");
  EXPECT_EQ(t.stop_word(), "bcde");
  StopText start({"x"});
  EXPECT_TRUE(start.append("xyz"));
  EXPECT_EQ(start.text(), "");
}

TEST(StopText, TheSameShownTextForAnySplitOfThePieces) {
  const std::string text = "one two </s> three";
  const std::vector<std::string> stops = {"</s>", "two three"};
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      StopText t(stops);
      EXPECT_EQ(shown(t, {text.substr(0, a), text.substr(a, b - a), text.substr(b)}), "one two ") << a << " " << b;
      EXPECT_EQ(t.stop_word(), "</s>");
    }
  }
}

}  // namespace
