// A multi-turn chat on libpowerinfer from C++: RAII over the C handles, the model's chat
// template (or the one named on the command line), and a session that keeps the conversation
// in its KV cache, feeding only each turn's new text.
//   chat MODEL [TEMPLATE] [N_TOKENS]   (user turns from stdin, one per line)
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "powerinfer/powerinfer.h"

namespace {

struct EngineFree {
  void operator()(pi_engine* e) const { pi_engine_free(e); }
};
struct SessionFree {
  void operator()(pi_session* s) const { pi_session_free(s); }
};
using Engine = std::unique_ptr<pi_engine, EngineFree>;
using Session = std::unique_ptr<pi_session, SessionFree>;

std::string render(pi_engine* e, const char* tmpl, const std::vector<pi_chat_message>& msgs,
                   bool add_assistant) {
  const int32_t n = pi_chat_apply_template(e, tmpl, msgs.data(), msgs.size(), add_assistant, nullptr, 0);
  if (n < 0) throw std::runtime_error(pi_engine_error(e));
  std::string out(static_cast<size_t>(n), '\0');
  pi_chat_apply_template(e, tmpl, msgs.data(), msgs.size(), add_assistant, out.data(), n);
  return out;
}

std::vector<int32_t> tokenize(const pi_engine* e, const std::string& text, bool bos) {
  const int32_t n = pi_tokenize(e, text.data(), static_cast<int32_t>(text.size()), bos, true, nullptr, 0);
  if (n < 0) throw std::runtime_error("the model has no vocabulary");
  std::vector<int32_t> ids(static_cast<size_t>(n));
  pi_tokenize(e, text.data(), static_cast<int32_t>(text.size()), bos, true, ids.data(), n);
  return ids;
}

std::string piece(const pi_engine* e, int32_t t) {
  const int32_t n = pi_token_piece(e, t, nullptr, 0);
  std::string s(static_cast<size_t>(n > 0 ? n : 0), '\0');
  if (n > 0) pi_token_piece(e, t, s.data(), n);
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s MODEL [TEMPLATE] [N_TOKENS]\n", argv[0]);
    return 1;
  }
  const char* tmpl = argc > 2 ? argv[2] : nullptr;
  const int n_predict = argc > 3 ? std::atoi(argv[3]) : 64;
  pi_engine* raw_engine = nullptr;
  const pi_status st = pi_engine_load(argv[1], nullptr, &raw_engine);
  Engine engine(raw_engine);
  if (st != PI_OK) throw std::runtime_error(pi_engine_error(engine.get()));
  pi_session_options so = pi_session_options_default();
  so.sampling.temperature = 0.0f;
  pi_session* raw_session = nullptr;
  const pi_status made = pi_session_create(engine.get(), &so, &raw_session);
  Session session(raw_session);
  if (made != PI_OK) throw std::runtime_error(pi_session_error(session.get()));

  std::vector<std::pair<std::string, std::string>> turns;
  std::string fed;  // the rendered conversation the session holds
  for (std::string line; std::getline(std::cin, line);) {
    turns.emplace_back("user", line);
    std::vector<pi_chat_message> msgs;
    for (const auto& [role, content] : turns) msgs.push_back({role.c_str(), content.c_str()});
    const std::string prompt = render(engine.get(), tmpl, msgs, true);
    // Templates are prefix-stable: feed only what the session does not hold yet.
    const std::vector<int32_t> ids =
        tokenize(engine.get(), prompt.substr(fed.size()), fed.empty() && pi_add_bos(engine.get()));
    if (pi_session_prompt(session.get(), ids.data(), ids.size()) != PI_OK)
      throw std::runtime_error(pi_session_error(session.get()));
    std::string answer;
    size_t answer_tokens = 0;
    for (int i = 0; i < n_predict; ++i) {
      const int32_t t = pi_session_sample(session.get());
      if (pi_token_is_eog(engine.get(), t)) break;
      answer += piece(engine.get(), t);
      if (pi_session_advance(session.get(), t) != PI_OK)
        throw std::runtime_error(pi_session_error(session.get()));
      ++answer_tokens;
    }
    std::cout << "assistant: " << answer << "\n" << std::flush;
    turns.emplace_back("assistant", answer);
    // Forget the generated tokens: the next turn feeds the answer again as the template lays
    // it out (its end-of-turn marker included), after the prompt the session keeps.
    const auto n_prompt = static_cast<int32_t>(pi_session_n_past(session.get()) - static_cast<int64_t>(answer_tokens));
    if (pi_session_seq_rm(session.get(), 0, n_prompt, -1) != PI_OK)
      throw std::runtime_error(pi_session_error(session.get()));
    fed = prompt;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
