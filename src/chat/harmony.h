// OpenAI's harmony format, which gpt-oss speaks (Template::Harmony). Every message is
// <|start|>{role}<|message|>{content}<|end|>. The prompt opens with a system message that
// carries the model identity, the knowledge cutoff, the current date, the reasoning effort and
// the valid channels; a user's system prompt goes into a developer message ("# Instructions").
// The assistant writes on channels: <|start|>assistant<|channel|>{channel}<|message|>...;
// `analysis` is its reasoning, `commentary` tool calls and preambles, `final` the answer. Its
// reply starts after the prompt's trailing "<|start|>assistant", so a generation reads
//   <|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...<|return|>
// and ends with <|return|> (<|call|> for a tool call); <|end|> ends one message, not the reply.
// In history an assistant turn keeps only its final channel; the last assistant message of a
// rendering without generation prompt ends with <|return|> (the training form), any other with
// <|end|>. This is the text of gpt-oss's chat_template.jinja without tools (tool definitions,
// tool calls and tool messages are not supported).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "chat/chat_template.h"

namespace pi::chat {

// The special tokens of the format, by their text.
namespace harmony {
inline constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>",
                                  kMessage = "<|message|>", kEnd = "<|end|>",
                                  kReturn = "<|return|>", kCall = "<|call|>",
                                  kConstrain = "<|constrain|>";
}  // namespace harmony

// The prompt text of `messages` (render() with Template::Harmony). A first message with role
// system or developer becomes the developer message; a later one fails (BadRequest), as does
// an assistant message whose content holds channel tags.
Result<std::string> render_harmony(std::span<const Message> messages, bool add_generation_prompt,
                                   const RenderOptions& options);

// Today's date as "YYYY-MM-DD" in local time (the template's strftime_now("%Y-%m-%d")).
std::string local_date();

}  // namespace pi::chat
