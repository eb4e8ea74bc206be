// Chat templates: turning a list of messages into the prompt text an instruction-tuned model
// was trained on. A GGUF file names its template as Jinja source (tokenizer.chat_template);
// we do not run Jinja but recognise the common families by distinctive substrings and render
// each family with fixed code. --chat-template NAME overrides the file.
//
// Rendered text carries the family's special tokens as text ("<|im_start|>", "</s>"); encode it
// with parse_special. It never starts with BOS: the tokenizer adds it (add_bos). Every family
// but Harmony is prefix-stable: rendering messages m[0..k] without a generation prompt gives a
// prefix of rendering m[0..n] for n > k, so a conversation feeds only the difference each turn.
// Harmony (gpt-oss, harmony.h) is not, in three places: the model's reply holds its analysis
// channel, which history drops (an earlier assistant turn is rendered with its final channel
// only), so the text the session holds after a reply is not a prefix of the next rendering;
// the last assistant message of a rendering without generation prompt ends with <|return|>,
// which becomes <|end|> once a message follows; and the system message carries the current
// date. A conversation re-feeds from where the texts part (run_conversation.cpp); the server's
// prompt cache reuses the common prefix of tokens.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "powerinfer/error.h"

namespace pi::chat {

enum class Template {
  ChatML,    // <|im_start|>role\n...<|im_end|>\n
  Llama2,    // [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s><s>[INST] ...
  Llama3,    // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  Mistral,   // [INST] ... [/INST] ...</s>[INST] ... (system text leads the first user turn)
  Zephyr,    // <|role|>\n...</s>\n
  Gemma,     // <start_of_turn>user\n...<end_of_turn>\n, assistant spelt "model"
  Phi3,      // <|role|>\n...<|end|>\n
  Vicuna,    // system\n\nUSER: ...\nASSISTANT: ...</s>\n
  Alpaca,    // system\n\n### Instruction:\n...\n\n### Response:\n...</s>\n\n
  DeepSeek,  // DeepSeek Coder: system\n### Instruction:\n...\n### Response:\n...\n<|EOT|>\n
  Harmony,   // gpt-oss: <|start|>role<|message|>...<|end|>, replies on channels (harmony.h)
};

struct Message {
  std::string role;  // "system", "user" or "assistant" (Harmony: "developer" too, first only)
  std::string content;
};

// gpt-oss's reasoning effort, written into Harmony's system message ("Reasoning: medium").
enum class ReasoningEffort { Low, Medium, High };
const char* reasoning_effort_name(ReasoningEffort e);  // "low", "medium", "high"
// From "low", "medium" or "high"; false for anything else.
bool parse_reasoning_effort(std::string_view s, ReasoningEffort& out);

// What a rendering depends on besides the messages (a request's chat_template_kwargs).
struct RenderOptions {
  // Harmony: written into the system message.
  ReasoningEffort reasoning_effort = ReasoningEffort::Medium;
  // "YYYY-MM-DD", the system message's "Current date"; empty: today, local time. A
  // conversation fixes it once so that its renderings agree across midnight.
  std::string current_date;
  // ChatML with a generation prompt: false opens the assistant turn with an empty
  // "<think>\n\n</think>\n\n" block, as Qwen3's template does for enable_thinking=false (the
  // model answers without reasoning). For models whose template has the switch
  // (has_thinking_switch); the other families ignore it.
  bool enable_thinking = true;
};

// The name --chat-template takes: "chatml", "llama2", "llama3", "mistral", "zephyr", "gemma",
// "phi3", "vicuna", "alpaca", "deepseek", "gpt-oss" (also accepted as "harmony").
const char* template_name(Template t);
// Every name, comma-separated, for messages and --help.
std::string template_names();

// A template from its name. Fails naming the unknown name and listing the known ones.
Result<Template> template_from_name(std::string_view name);

// The family of a Jinja chat template, by its distinctive substrings. Fails (one line, with a
// hint to pass --chat-template) when none matches.
Result<Template> detect_template(std::string_view jinja);

// The template to use: `override_spec` when given (a name, else Jinja text to detect), else
// the model's tokenizer.chat_template. Fails when both are empty ("the model has no chat
// template ...") or the one given is not recognised.
Result<Template> resolve_template(std::string_view override_spec, std::string_view model_template);

// Whether a Jinja chat template reads enable_thinking (Qwen3's), so that RenderOptions's
// switch means something for its model.
bool has_thinking_switch(std::string_view jinja);

// The prompt text for `messages`; with add_generation_prompt it ends with the opening of an
// assistant turn. Fails (ErrorCode::BadRequest) naming the message index for a role other than
// system, user and assistant, and, for the families that fold the system text into the first
// user turn (Llama 2, Mistral, Gemma) and for Harmony, for a system message that is not the
// first.
Result<std::string> render(Template t, std::span<const Message> messages,
                           bool add_generation_prompt, const RenderOptions& options = {});

// The control tokens a generation loop treats differently for a family's replies, by their
// text (a front end looks up the ids in its vocabulary; a text the vocabulary lacks is
// skipped). Empty for every family but Harmony, whose replies are several messages:
// `shown` are kept in the reply's text (message headers and ends, which the reasoning split
// reads: reasoning.h), `not_end` are end-of-generation tokens of the vocabulary that do not end
// the reply (<|end|> closes the analysis message, the final one follows), `end` end it
// (<|return|>, and <|call|> for a tool call) whether or not the vocabulary marks them.
struct ReplyTokens {
  std::vector<std::string_view> shown, not_end, end;
  bool empty() const { return shown.empty() && not_end.empty() && end.empty(); }
};
ReplyTokens reply_tokens(Template t);

}  // namespace pi::chat
