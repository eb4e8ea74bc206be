// The web chat page served at / : static HTML and JavaScript, no build step. It streams
// answers from /v1/chat/completions, has a stop button, the sampling settings and shows
// tokens per second.
#pragma once

namespace pi::server {

extern const char* const kChatPage;

}  // namespace pi::server
