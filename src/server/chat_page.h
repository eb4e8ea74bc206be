// The web chat page served at / : static HTML and JavaScript, no build step, no file outside
// the binary. It names the model (GET /v1/models, and the chat template from /props), streams
// answers from /v1/chat/completions, renders them as Markdown (chat_markdown.h: the model's
// HTML is shown as text), shows a reply's reasoning_content (a <think> block, or gpt-oss's
// analysis channel) folded in a <details> block above the answer, and under each reply its
// tokens and tokens per second from the server's `timings` (the engine's own figures, sent
// with the last chunk; a reply stopped before them shows chunks per second measured by the
// page, marked "~"). It has a stop button and the sampling settings, reasoning effort included.
#pragma once

#include <string>

namespace pi::server {

// The page's HTML, the Markdown renderer inlined in <script id="markdown">.
const std::string& chat_page_html();

}  // namespace pi::server
