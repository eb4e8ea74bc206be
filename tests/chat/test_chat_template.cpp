#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pi::chat {
namespace {

const std::vector<Message> kWithSystem = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Why?"}};
const std::vector<Message> kNoSystem = {{"user", "Hi"}, {"assistant", "Hello."}, {"user", "Why?"}};

std::string must_render(Template t, const std::vector<Message>& m, bool gen) {
  auto r = render(t, m, gen);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::string();
}

struct Case {
  Template t;
  std::string with_system_gen;  // kWithSystem, add_generation_prompt
  std::string no_system_nogen;  // kNoSystem, no generation prompt
};

const std::vector<Case> kCases = {
    {Template::ChatML,
     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>"
     "assistant\nHello.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n",
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n"
     "Why?<|im_end|>\n"},
    {Template::Llama2,
     "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Why? [/INST]",
     "[INST] Hi [/INST] Hello. </s><s>[INST] Why? [/INST]"},
    {Template::Llama3,
     "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
     "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello."
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|><|start_header_id|>"
     "assistant<|end_header_id|>\n\n",
     "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
     "<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhy?"
     "<|eot_id|>"},
    {Template::Mistral, "[INST] Be brief.\n\nHi [/INST]Hello.</s>[INST] Why? [/INST]",
     "[INST] Hi [/INST]Hello.</s>[INST] Why? [/INST]"},
    {Template::Zephyr,
     "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\nWhy?</s>\n"
     "<|assistant|>\n",
     "<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\nWhy?</s>\n"},
    {Template::Gemma,
     "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>"
     "\n<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n",
     "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
     "<start_of_turn>user\nWhy?<end_of_turn>\n"},
    {Template::Phi3,
     "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\n"
     "Why?<|end|>\n<|assistant|>\n",
     "<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nWhy?<|end|>\n"},
    {Template::Vicuna, "Be brief.\n\nUSER: Hi\nASSISTANT: Hello.</s>\nUSER: Why?\nASSISTANT:",
     "USER: Hi\nASSISTANT: Hello.</s>\nUSER: Why?\n"},
    {Template::Alpaca,
     "Be brief.\n\n### Instruction:\nHi\n\n### Response:\nHello.</s>\n\n### Instruction:\nWhy?\n\n"
     "### Response:\n",
     "### Instruction:\nHi\n\n### Response:\nHello.</s>\n\n### Instruction:\nWhy?\n\n"},
    {Template::DeepSeek,
     "Be brief.\n### Instruction:\nHi\n### Response:\nHello.\n<|EOT|>\n### Instruction:\nWhy?\n"
     "### Response:\n",
     "### Instruction:\nHi\n### Response:\nHello.\n<|EOT|>\n### Instruction:\nWhy?\n"},
};

TEST(ChatTemplate, EveryFamilyRendersExactly) {
  ASSERT_EQ(kCases.size(), 10u);  // and Harmony, whose text has its own tests (test_harmony.cpp)
  for (const Case& c : kCases) {
    SCOPED_TRACE(template_name(c.t));
    EXPECT_EQ(must_render(c.t, kWithSystem, true), c.with_system_gen);
    EXPECT_EQ(must_render(c.t, kNoSystem, false), c.no_system_nogen);
  }
}

// Conversation mode feeds only the text a turn adds: each family must be prefix-stable.
TEST(ChatTemplate, RenderingIsPrefixStable) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(template_name(c.t));
    for (size_t k = 2; k <= kWithSystem.size(); ++k) {
      std::vector<Message> head(kWithSystem.begin(), kWithSystem.begin() + k);
      const std::string a = must_render(c.t, head, false);
      const std::string with_gen = must_render(c.t, head, true);
      const std::string all = must_render(c.t, kWithSystem, true);
      EXPECT_EQ(all.compare(0, a.size(), a), 0) << "k=" << k;
      EXPECT_EQ(with_gen.compare(0, a.size(), a), 0) << "k=" << k;
    }
  }
}

TEST(ChatTemplate, NamesRoundTrip) {
  for (const Case& c : kCases) {
    auto t = template_from_name(template_name(c.t));
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(*t, c.t);
  }
  auto bad = template_from_name("llama9");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("unknown chat template 'llama9'"), std::string::npos);
  EXPECT_NE(bad.error().message.find("chatml"), std::string::npos);
  EXPECT_EQ(bad.error().code, ErrorCode::BadRequest);
}

// Abridged forms of the templates that ship in real GGUF files.
TEST(ChatTemplate, DetectsFamiliesFromJinja) {
  const std::vector<std::pair<std::string, Template>> cases = {
      {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
       "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
       Template::ChatML},
      {"{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + "
       "messages[0]['content'] %}{% endif %}{{ bos_token + '[INST] ' + content.strip() + ' "
       "[/INST]' }}",
       Template::Llama2},
      {"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
       "message['content'] | trim + '<|eot_id|>' %}",
       Template::Llama3},
      {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' "
       "+ message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token}}",
       Template::Mistral},
      {"{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + "
       "message['content'] + eos_token }}{% elif message['role'] == 'assistant' %}{{ "
       "'<|assistant|>\\n'  + message['content'] + eos_token }}",
       Template::Zephyr},
      {"{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}",
       Template::Gemma},
      {"{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}",
       Template::Phi3},
      {"{% if message['role'] == 'user' %}{{ 'USER: ' + message['content'] + '\\n' }}{% else %}"
       "{{ 'ASSISTANT: ' + message['content'] + '</s>\\n' }}",
       Template::Vicuna},
      {"{{ '### Instruction:\\n' + message['content'] + '\\n\\n' }}{{ '### Response:\\n' }}",
       Template::Alpaca},
      {"{{'### Instruction:\\n' + message['content'] + '\\n'}}{{'### Response:\\n' + "
       "message['content'] + '\\n<|EOT|>\\n'}}",
       Template::DeepSeek},
  };
  for (const auto& [jinja, want] : cases) {
    auto t = detect_template(jinja);
    ASSERT_TRUE(t.ok()) << jinja;
    EXPECT_EQ(*t, want) << jinja;
  }
  auto none = detect_template("{{ messages }}");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("--chat-template"), std::string::npos);
}

TEST(ChatTemplate, ResolveOverrideModelAndMissing) {
  auto from_model = resolve_template("", "{{'<|im_start|>'}}");
  ASSERT_TRUE(from_model.ok());
  EXPECT_EQ(*from_model, Template::ChatML);
  auto overridden = resolve_template("gemma", "{{'<|im_start|>'}}");
  ASSERT_TRUE(overridden.ok());
  EXPECT_EQ(*overridden, Template::Gemma);
  auto jinja_override = resolve_template("{{ '<|start_header_id|><|end_header_id|>' }}", "");
  ASSERT_TRUE(jinja_override.ok());
  EXPECT_EQ(*jinja_override, Template::Llama3);
  auto missing = resolve_template("", "");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("no chat template"), std::string::npos);
  EXPECT_FALSE(resolve_template("nope", "").ok());
}

TEST(ChatTemplate, RejectsBadRolesAndLateSystem) {
  const std::vector<Message> tool = {{"user", "a"}, {"tool", "b"}};
  for (const Case& c : kCases) {
    auto r = render(c.t, tool, true);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("messages[1]: role 'tool'"), std::string::npos);
    EXPECT_EQ(r.error().code, ErrorCode::BadRequest);
  }
  const std::vector<Message> late = {{"user", "a"}, {"system", "b"}};
  EXPECT_FALSE(render(Template::Llama2, late, true).ok());
  EXPECT_TRUE(render(Template::ChatML, late, true).ok());
}

TEST(ChatTemplate, LoneSystemMessageBecomesAUserTurn) {
  const std::vector<Message> sys = {{"system", "S"}};
  EXPECT_EQ(must_render(Template::Gemma, sys, true),
            "<start_of_turn>user\nS<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(must_render(Template::ChatML, {}, true), "<|im_start|>assistant\n");
}

// Qwen3's enable_thinking=false (a request's chat_template_kwargs): the assistant turn opens
// with an empty think block, as its Jinja writes it; history and other families are unchanged.
TEST(ChatTemplate, ThinkingSwitchOpensAnEmptyThinkBlock) {
  RenderOptions off;
  off.enable_thinking = false;
  const std::vector<Message> m = {{"user", "Hi"}};
  auto r = render(Template::ChatML, m, true, off);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  r = render(Template::ChatML, m, false, off);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "<|im_start|>user\nHi<|im_end|>\n");  // no generation prompt: nothing added
  r = render(Template::Llama3, m, true, off);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->find("<think>"), std::string::npos);
  EXPECT_TRUE(has_thinking_switch("{%- if enable_thinking is defined and enable_thinking is false %}"));
  EXPECT_FALSE(has_thinking_switch("{% for message in messages %}<|im_start|>"));
}

}  // namespace
}  // namespace pi::chat
