// The chat page's Markdown renderer: JavaScript source defining renderMarkdown(text), which
// returns HTML for headings, paragraphs (single newlines kept as <br>), emphasis (*, _, **,
// __, ~~), inline code, fenced code blocks (<pre><code class="language-X">), block quotes,
// bullet and numbered lists (nested by indentation), GFM tables, rules, links [text](url)
// and bare http(s) URLs.
//
// Safety by construction: no HTML of the source is passed through. Every piece of the source
// reaches the output escaped (& < > " ' as entities), the only tags are the ones the renderer
// writes, a code block's language is cut to [A-Za-z0-9_+#.-], and a link is made only for an
// http:, https: or mailto: URL or a path (/..., #...), anything else staying text. It is
// written for the page (no library: Debian's libjs-marked passes HTML through and would need
// a sanitizer beside it) and tested in headless Chromium (tests/server/test_server_page.py).
#pragma once

namespace pi::server {

extern const char* const kChatMarkdownJs;

}  // namespace pi::server
