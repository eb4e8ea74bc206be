#include "chat/harmony.h"

#include <ctime>

namespace pi::chat {
namespace {

Error bad(Error e) { return with_code(std::move(e), ErrorCode::BadRequest); }

bool has(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

void message(std::string& out, std::string_view role, std::string_view content) {
  out += harmony::kStart;
  out += role;
  out += harmony::kMessage;
  out += content;
  out += harmony::kEnd;
}

}  // namespace

std::string local_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
#ifdef _WIN32
  localtime_s(&tm, &now);  // the same, with Microsoft's order of arguments
#else
  localtime_r(&now, &tm);
#endif
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

Result<std::string> render_harmony(std::span<const Message> msgs, bool gen,
                                   const RenderOptions& o) {
  std::string system = "You are ChatGPT, a large language model trained by OpenAI.\n";
  system += "Knowledge cutoff: 2024-06\n";
  system += "Current date: " + (o.current_date.empty() ? local_date() : o.current_date) + "\n\n";
  system += "Reasoning: ";
  system += reasoning_effort_name(o.reasoning_effort);
  system += "\n\n";
  system += "# Valid channels: analysis, commentary, final. Channel must be included for every message.";
  std::string out;
  message(out, "system", system);

  size_t first = 0;
  if (!msgs.empty() && (msgs[0].role == "system" || msgs[0].role == "developer")) {
    if (!msgs[0].content.empty()) message(out, "developer", "# Instructions\n\n" + msgs[0].content + "\n\n");
    first = 1;
  }
  for (size_t i = first; i < msgs.size(); ++i) {
    const Message& m = msgs[i];
    if (m.role == "user") {
      message(out, "user", m.content);
    } else if (m.role == "assistant") {
      if (has(m.content, "<|channel|>analysis<|message|>") || has(m.content, "<|channel|>final<|message|>")) {
        return bad(err("messages[%zu]: an assistant message's content holds channel tags; send "
                       "only the final answer",
                       i));
      }
      out += harmony::kStart;
      out += "assistant";
      out += harmony::kChannel;
      out += "final";
      out += harmony::kMessage;
      out += m.content;
      // The training form: a conversation's last answer ends the generation.
      out += i + 1 == msgs.size() && !gen ? harmony::kReturn : harmony::kEnd;
    } else {
      return bad(err("messages[%zu]: the gpt-oss template takes a %s message only first", i,
                     m.role.c_str()));
    }
  }
  if (gen) {
    out += harmony::kStart;
    out += "assistant";
  }
  return out;
}

}  // namespace pi::chat
