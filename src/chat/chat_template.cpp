#include "chat/chat_template.h"

#include <array>
#include <utility>

#include "chat/harmony.h"

namespace pi::chat {
namespace {

struct Named {
  Template t;
  const char* name;
};

constexpr std::array<Named, 11> kNames = {{
    {Template::ChatML, "chatml"},
    {Template::Llama2, "llama2"},
    {Template::Llama3, "llama3"},
    {Template::Mistral, "mistral"},
    {Template::Zephyr, "zephyr"},
    {Template::Gemma, "gemma"},
    {Template::Phi3, "phi3"},
    {Template::Vicuna, "vicuna"},
    {Template::Alpaca, "alpaca"},
    {Template::DeepSeek, "deepseek"},
    {Template::Harmony, "gpt-oss"},
}};

bool has(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

Error bad(Error e) { return with_code(std::move(e), ErrorCode::BadRequest); }

Status check_role(Template t, const Message& m, size_t i) {
  if (m.role == "system" || m.role == "user" || m.role == "assistant") return Status::Ok();
  if (t == Template::Harmony && m.role == "developer") return Status::Ok();
  return bad(err("messages[%zu]: role '%s' is not one of system, %suser, assistant", i,
                 m.role.c_str(), t == Template::Harmony ? "developer, " : ""));
}

// Families that write each message as opening + role + separator + content + closing.
struct Tagged {
  std::string_view open, after_role, close;
  std::string_view assistant_role = "assistant";
};

std::string render_tagged(const Tagged& f, std::span<const Message> msgs, bool gen) {
  std::string out;
  for (const Message& m : msgs) {
    out += f.open;
    out += m.role == "assistant" ? f.assistant_role : std::string_view(m.role);
    out += f.after_role;
    out += m.content;
    out += f.close;
  }
  if (gen) {
    out += f.open;
    out += f.assistant_role;
    out += f.after_role;
  }
  return out;
}

// Families with plain-text prefixes per role: system text, then user/assistant turns.
struct Prefixed {
  std::string_view system_close;  // after the system text
  std::string_view user_open, user_close;
  std::string_view assistant_open, assistant_close;
  std::string_view generation;  // the opening of the answer
};

std::string render_prefixed(const Prefixed& f, std::span<const Message> msgs, bool gen) {
  std::string out;
  for (const Message& m : msgs) {
    if (m.role == "system") {
      out += m.content;
      out += f.system_close;
    } else if (m.role == "user") {
      out += f.user_open;
      out += m.content;
      out += f.user_close;
    } else {
      out += f.assistant_open;
      out += m.content;
      out += f.assistant_close;
    }
  }
  if (gen) out += f.generation;
  return out;
}

// Llama 2, Mistral and Gemma fold the system text into the first user turn. A lone trailing
// system message (no user turn after it) is written as a user turn of its own.
Result<std::string> render_folded(Template t, std::span<const Message> msgs, bool gen) {
  std::string out;
  std::string system;
  bool pending_system = false;
  bool first_user = true;
  auto user_turn = [&](const std::string& content) {
    switch (t) {
      case Template::Llama2:
        out += first_user ? "[INST] " : "<s>[INST] ";
        if (pending_system) out += "<<SYS>>\n" + system + "\n<</SYS>>\n\n";
        out += content;
        out += " [/INST]";
        break;
      case Template::Mistral:
        out += "[INST] ";
        if (pending_system) out += system + "\n\n";
        out += content;
        out += " [/INST]";
        break;
      default:  // Gemma
        out += "<start_of_turn>user\n";
        if (pending_system) out += system + "\n\n";
        out += content;
        out += "<end_of_turn>\n";
        break;
    }
    pending_system = false;
    first_user = false;
  };
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Message& m = msgs[i];
    if (m.role == "system") {
      if (i != 0) {
        return bad(err("messages[%zu]: the %s template takes a system message only first", i,
                       template_name(t)));
      }
      system = m.content;
      pending_system = true;
    } else if (m.role == "user") {
      user_turn(m.content);
    } else if (t == Template::Llama2) {
      out += " " + m.content + " </s>";
    } else if (t == Template::Mistral) {
      out += m.content + "</s>";
    } else {
      out += "<start_of_turn>model\n" + m.content + "<end_of_turn>\n";
    }
  }
  if (pending_system) {
    const std::string text = std::exchange(system, std::string());
    pending_system = false;
    user_turn(text);
  }
  if (gen && t == Template::Gemma) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace

const char* template_name(Template t) {
  for (const Named& n : kNames)
    if (n.t == t) return n.name;
  return "?";
}

std::string template_names() {
  std::string s;
  for (const Named& n : kNames) {
    if (!s.empty()) s += ", ";
    s += n.name;
  }
  return s;
}

const char* reasoning_effort_name(ReasoningEffort e) {
  switch (e) {
    case ReasoningEffort::Low: return "low";
    case ReasoningEffort::Medium: return "medium";
    case ReasoningEffort::High: return "high";
  }
  return "medium";
}

bool parse_reasoning_effort(std::string_view s, ReasoningEffort& out) {
  for (ReasoningEffort e : {ReasoningEffort::Low, ReasoningEffort::Medium, ReasoningEffort::High}) {
    if (s == reasoning_effort_name(e)) {
      out = e;
      return true;
    }
  }
  return false;
}

Result<Template> template_from_name(std::string_view name) {
  for (const Named& n : kNames)
    if (name == n.name) return n.t;
  if (name == "harmony") return Template::Harmony;
  return bad(err("unknown chat template '%.*s' (known: %s)", static_cast<int>(name.size()),
                 name.data(), template_names().c_str()));
}

Result<Template> detect_template(std::string_view j) {
  // Most specific markers first: Phi-3 and Zephyr share <|user|>; DeepSeek Coder and Alpaca
  // share "### Instruction:"; Llama 2 and Mistral share [INST]; gpt-oss's <|end|> is Phi-3's
  // too.
  if (has(j, "<|channel|>") && has(j, "<|start|>")) return Template::Harmony;
  if (has(j, "<|im_start|>")) return Template::ChatML;
  if (has(j, "<|start_header_id|>") && has(j, "<|end_header_id|>")) return Template::Llama3;
  if (has(j, "<start_of_turn>")) return Template::Gemma;
  if (has(j, "<|assistant|>") && has(j, "<|end|>")) return Template::Phi3;
  if (has(j, "<|user|>") || has(j, "<|assistant|>")) return Template::Zephyr;
  if (has(j, "[INST]")) return has(j, "<<SYS>>") ? Template::Llama2 : Template::Mistral;
  if (has(j, "### Instruction:") && has(j, "<|EOT|>")) return Template::DeepSeek;
  if (has(j, "### Instruction:")) return Template::Alpaca;
  if (has(j, "USER: ") && has(j, "ASSISTANT: ")) return Template::Vicuna;
  if (has(j, "USER:") && has(j, "ASSISTANT:")) return Template::Vicuna;
  return bad(err("chat template not recognised (%zu bytes of Jinja matching none of: %s); pass "
                 "--chat-template NAME",
                 j.size(), template_names().c_str()));
}

Result<Template> resolve_template(std::string_view override_spec,
                                  std::string_view model_template) {
  if (!override_spec.empty()) {
    if (has(override_spec, "{%") || has(override_spec, "{{")) return detect_template(override_spec);
    return template_from_name(override_spec);
  }
  if (model_template.empty()) {
    return bad(err("the model has no chat template (tokenizer.chat_template): pass "
                   "--chat-template NAME (%s)",
                   template_names().c_str()));
  }
  return detect_template(model_template);
}

bool has_thinking_switch(std::string_view jinja) { return jinja.find("enable_thinking") != std::string_view::npos; }

Result<std::string> render(Template t, std::span<const Message> messages,
                           bool add_generation_prompt, const RenderOptions& options) {
  for (size_t i = 0; i < messages.size(); ++i) PI_TRY(check_role(t, messages[i], i));
  const bool gen = add_generation_prompt;
  switch (t) {
    case Template::ChatML: {
      std::string text = render_tagged({"<|im_start|>", "\n", "<|im_end|>\n"}, messages, gen);
      if (gen && !options.enable_thinking) text += "<think>\n\n</think>\n\n";
      return text;
    }
    case Template::Llama3:
      return render_tagged({"<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>"},
                           messages, gen);
    case Template::Zephyr:
      return render_tagged({"<|", "|>\n", "</s>\n"}, messages, gen);
    case Template::Phi3:
      return render_tagged({"<|", "|>\n", "<|end|>\n"}, messages, gen);
    case Template::Vicuna:
      return render_prefixed({"\n\n", "USER: ", "\n", "ASSISTANT: ", "</s>\n", "ASSISTANT:"},
                             messages, gen);
    case Template::Alpaca:
      return render_prefixed({"\n\n", "### Instruction:\n", "\n\n", "### Response:\n",
                              "</s>\n\n", "### Response:\n"},
                             messages, gen);
    case Template::DeepSeek:
      return render_prefixed({"\n", "### Instruction:\n", "\n", "### Response:\n", "\n<|EOT|>\n",
                              "### Response:\n"},
                             messages, gen);
    case Template::Llama2:
    case Template::Mistral:
    case Template::Gemma:
      return render_folded(t, messages, gen);
    case Template::Harmony:
      return render_harmony(messages, gen, options);
  }
  return err("chat template %d not implemented", static_cast<int>(t));
}

ReplyTokens reply_tokens(Template t) {
  if (t != Template::Harmony) return {};
  using namespace harmony;
  return {{kStart, kChannel, kMessage, kEnd, kConstrain}, {kEnd}, {kReturn, kCall}};
}

}  // namespace pi::chat
