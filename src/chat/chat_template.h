// Chat templates: turning a list of messages into the prompt text an instruction-tuned model
// was trained on. A GGUF file names its template as Jinja source (tokenizer.chat_template);
// we do not run Jinja but recognise the common families by distinctive substrings and render
// each family with fixed code. --chat-template NAME overrides the file.
//
// Rendered text carries the family's special tokens as text ("<|im_start|>", "</s>"); encode it
// with parse_special. It never starts with BOS: the tokenizer adds it (add_bos). Every family
// is prefix-stable: rendering messages m[0..k] without a generation prompt gives a prefix of
// rendering m[0..n] for n > k, so a conversation feeds only the difference each turn.
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
};

struct Message {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// The name --chat-template takes: "chatml", "llama2", "llama3", "mistral", "zephyr", "gemma",
// "phi3", "vicuna", "alpaca", "deepseek".
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

// The prompt text for `messages`; with add_generation_prompt it ends with the opening of an
// assistant turn. Fails (ErrorCode::BadRequest) naming the message index for a role other than
// system, user and assistant, and, for the families that fold the system text into the first
// user turn (Llama 2, Mistral, Gemma), for a system message that is not the first.
Result<std::string> render(Template t, std::span<const Message> messages,
                           bool add_generation_prompt);

}  // namespace pi::chat
