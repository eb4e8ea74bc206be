// The generation loop's one home: what happens to each sampled token between the sampler and
// the text a user sees. The CLI, the HTTP server, the C API and Python all use it, so an answer
// ends, is cut and is shown the same way everywhere:
//   - end of generation: the vocabulary's end tokens (or a chat format's own set), unless
//     ignore_eos; a token that ends the answer adds no text;
//   - text pieces are whole UTF-8 characters (a character split over tokens waits for its
//     last byte), and control tokens add no text unless listed as shown;
//   - stop strings cut the text before the first one that occurs; text that may still become
//     one is held back until it is clear (StopText);
//   - a grammar whose text is complete ends the answer after the token that completed it;
//   - max_tokens and a full context end it too;
//   - log-probabilities (log-softmax of the raw logits) of each token, and the k most likely.
//
// One sequence driven by a Session (CLI, C API, Python):
//   Generator g(*engine.vocabulary());
//   print(g.context(prompt_tokens));          // the decoder sees what the sequence holds
//   g.begin(params);
//   for (GenEnd e = GenEnd::None; e == GenEnd::None;) {
//     e = *g.sample(session);                 // samples and accepts the next token
//     print(g.take());
//     g.feed(session);                        // its forward pass, unless it ended the answer
//   }
//   print(g.finish());
// Several sequences decoded together (the server) call accept() with the token each
// sequence's sampler chose, and feed it themselves while accept() returns GenEnd::None.
//
// Thread-safety: a Generator is single-threaded state; it must not outlive its Engine.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "powerinfer/error.h"
#include "powerinfer/stop_text.h"
#include "powerinfer/vocabulary.h"

namespace pi {

class Session;

struct TopProb {
  int32_t id = 0;
  std::string text;  // the token's bytes
  float logprob = 0;
};

// One generated token with its log-probability (log-softmax of the raw logits).
struct TokenProb {
  int32_t id = 0;
  std::string text;
  float logprob = 0;
  std::vector<TopProb> top;  // the top_logprobs most likely tokens, most likely first
};

struct GenerateParams {
  int64_t max_tokens = -1;         // tokens in the answer; -1: no limit
  std::vector<std::string> stop;   // stop strings (empty ones ignored)
  bool ignore_eos = false;         // end tokens do not end the answer (ban them from the
                                   // sampler too: Session::ban_tokens)
  // The tokens that end the answer; empty: the vocabulary's end-of-generation tokens
  // (Vocabulary::is_eog). A chat format's set: reply_ids().
  std::vector<int32_t> end_tokens;
  // Control tokens whose text is part of the answer (harmony's message headers); other
  // control tokens add no text.
  std::vector<int32_t> shown_tokens;
  // < 0: no log-probabilities; k >= 0: each token's, with the k most likely (up to n_vocab).
  int32_t top_logprobs = -1;
};

// Why an answer ended. With EndToken and NoToken the token is not part of the answer.
enum class GenEnd {
  None,         // go on: feed the token and sample the next
  EndToken,     // an end-of-generation token
  StopString,   // a stop string occurred (stop_word() names it); the text ends before it
  GrammarDone,  // the grammar's text is complete: the token ends it
  ContextFull,  // no room to feed the token (it is part of the answer, not fed)
  Length,       // max_tokens reached (the token is the answer's last)
  NoToken,      // the grammar allows no token of the vocabulary (the sampler returned -1)
};
const char* gen_end_name(GenEnd e);  // "none", "end token", "stop string", ...

// The error text for GenEnd::NoToken.
inline constexpr const char* kGrammarAllowsNoToken =
    "the grammar allows no token of the vocabulary after this text";

// A chat format's reply tokens for GenerateParams, from the texts of its control tokens
// (chat::reply_tokens gives them): `shown` adds text; a reply ends at the vocabulary's
// end-of-generation tokens except `not_end`, and at `end`. Texts that are not one token of this
// vocabulary are skipped. Both lists are empty when all three are (the vocabulary's own ends).
struct ReplyIds {
  std::vector<int32_t> shown, end;
};
ReplyIds reply_ids(const Vocabulary& v, std::span<const std::string_view> shown,
                   std::span<const std::string_view> not_end, std::span<const std::string_view> end);

class Generator {
 public:
  explicit Generator(const Vocabulary& v);

  // Tokens the sequence holds before the answer (a prompt, a user's turn): the decoder sees
  // them, so the answer's first piece keeps its leading space where the tokenizer drops it at
  // the start of a text. Returns their text (e.g. to show the prompt).
  std::string context(std::span<const int32_t> ids);
  // Starts an answer: counters, stop strings and log-probabilities start afresh; the decoder
  // goes on from the context.
  void begin(GenerateParams p);

  // Takes the token the sampler chose for this sequence. `logits` (those it was sampled from)
  // are read only for log-probabilities; `grammar_done` is Session::grammar_done(seq) after
  // sampling it; `context_full`: the sequence has no room to feed it. Returns None while the
  // answer goes on (feed the token); after the end, every call returns the same end.
  GenEnd accept(int32_t token, std::span<const float> logits = {}, bool grammar_done = false,
                bool context_full = false);
  // For one sequence (seq 0) of `s`: samples the next token and accepts it. Fails on
  // GenEnd::NoToken (kGrammarAllowsNoToken). Show take(), then feed().
  Result<GenEnd> sample(Session& s);
  // Feeds the token accepted last when it belongs in the sequence (the answer goes on, or it
  // is the last of a Length end, so the session holds the whole answer), once; true when it
  // did. Sampling and feeding are apart so that a token is shown before its forward pass.
  Result<bool> feed(Session& s);

  // The answer's text not taken yet that is ready to show (whole characters, not possibly part
  // of a stop string).
  std::string take();
  // At the end (or to abandon the answer): every byte not taken yet, the decoder's held-back
  // bytes too, unless a stop string cut the text there; the decoder restarts at the start of a
  // text, as after a flush.
  std::string finish();
  // Log-probabilities of the tokens accepted since the last call.
  std::vector<TokenProb> take_probs();

  GenEnd end() const { return end_; }
  int64_t n_tokens() const { return n_tokens_; }  // tokens in the answer so far
  int32_t last_token() const { return last_; }     // the token accepted last (-1: none)
  bool last_fed() const { return last_fed_; }       // feed() fed it
  const std::string& stop_word() const { return out_.stop_word(); }
  const std::string& text() const { return out_.text(); }  // the answer so far, cut at a stop

 private:
  bool ends(int32_t t) const;
  void add_probs(int32_t t, std::span<const float> logits);

  const Vocabulary* vocab_;
  Vocabulary::Decoder dec_;
  GenerateParams p_;
  StopText out_;
  std::vector<TokenProb> probs_;
  GenEnd end_ = GenEnd::None;
  int64_t n_tokens_ = 0;
  int32_t last_ = -1;
  bool last_fed_ = false;
  bool finished_ = false;
};

}  // namespace pi
