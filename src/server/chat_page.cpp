#include "server/chat_page.h"

#include "server/chat_markdown.h"

namespace pi::server {
namespace {

const char* const kHead = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>powerinfer chat</title>
<style>
body { font-family: system-ui, sans-serif; margin: 0; display: flex; height: 100vh; color: #1f2328; }
#side { width: 16em; padding: 1em; background: #f6f8fa; overflow-y: auto; border-right: 1px solid #d0d7de; }
#side label { display: block; margin-top: .6em; font-size: .9em; }
#side input, #side textarea, #side select { width: 100%; box-sizing: border-box; }
#main { flex: 1; display: flex; flex-direction: column; min-width: 0; }
#top { display: flex; gap: .8em; align-items: baseline; padding: .6em 1em; border-bottom: 1px solid #d0d7de; }
#model { font-weight: 600; }
#template { font-size: .85em; color: #656d76; }
#log { flex: 1; overflow-y: auto; padding: 1em; }
.msg { margin: .6em 0; padding: .5em .9em; border-radius: .5em; max-width: 56em; }
.user { background: #dbeafe; white-space: pre-wrap; }
.assistant { background: #f3f4f6; }
.error { background: #fee2e2; white-space: pre-wrap; }
.answer { line-height: 1.5; overflow-wrap: anywhere; }
.answer > :first-child { margin-top: 0; }
.answer > :last-child { margin-bottom: 0; }
.answer pre { background: #1f2328; color: #f6f8fa; padding: .7em .9em; border-radius: .4em; overflow-x: auto; }
.answer pre, .answer code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .9em; }
.answer :not(pre) > code { background: #e1e4e8; padding: .1em .3em; border-radius: .3em; }
.answer blockquote { margin: .5em 0; padding-left: .8em; border-left: .25em solid #d0d7de; color: #57606a; }
.answer table { border-collapse: collapse; }
.answer th, .answer td { border: 1px solid #d0d7de; padding: .2em .6em; }
details.reasoning { margin-bottom: .5em; font-size: .9em; color: #57606a; }
details.reasoning summary { cursor: pointer; }
.reasoning-text { white-space: pre-wrap; margin-top: .3em; padding-left: .7em; border-left: .2em solid #d0d7de; }
.stats { margin-top: .4em; font-size: .8em; color: #656d76; }
#bar { display: flex; padding: .5em; gap: .5em; border-top: 1px solid #d0d7de; }
#input { flex: 1; height: 3em; }
</style>
</head>
<body>
<div id="side">
<b>Settings</b>
<label>System prompt<textarea id="system" rows="3"></textarea></label>
<label>Temperature <input id="temperature" type="number" step="0.05" value="0.8"></label>
<label>Top-k <input id="top_k" type="number" value="40"></label>
<label>Top-p <input id="top_p" type="number" step="0.01" value="0.95"></label>
<label>Min-p <input id="min_p" type="number" step="0.01" value="0.05"></label>
<label>Repeat penalty <input id="repeat_penalty" type="number" step="0.05" value="1.0"></label>
<label>Max tokens <input id="max_tokens" type="number" value="1024"></label>
<label>Seed (-1: random) <input id="seed" type="number" value="-1"></label>
<label>Reasoning effort (gpt-oss) <select id="reasoning_effort">
<option value="">server's default</option><option>low</option><option>medium</option><option>high</option>
</select></label>
<label>API key <input id="api_key" type="password"></label>
<p><button id="clear">New chat</button></p>
</div>
<div id="main">
<div id="top"><span id="model">(loading)</span><span id="template"></span></div>
<div id="log"></div>
<div id="bar">
<textarea id="input" placeholder="Type a message, Enter to send"></textarea>
<button id="send">Send</button>
<button id="stop" disabled>Stop</button>
</div>
</div>
<script id="markdown">)PAGE";

const char* const kTail = R"PAGE(</script>
<script>
const $ = (id) => document.getElementById(id);
let history = [];
let controller = null;

function headers() {
  const h = {'Content-Type': 'application/json'};
  if ($('api_key').value) h['Authorization'] = 'Bearer ' + $('api_key').value;
  return h;
}

// The model's name (/v1/models) and chat template (/props, which answers 503 while loading).
async function loadModel(tries) {
  try {
    const m = await fetch('/v1/models', {headers: headers()});
    if (m.ok) {
      const j = await m.json();
      const id = j.data && j.data.length ? j.data[0].id : '';
      if (id) { $('model').textContent = id; document.title = id + ' - powerinfer chat'; }
    }
    const p = await fetch('/props', {headers: headers()});
    if (p.ok) $('template').textContent = 'chat template ' + (await p.json()).chat_template;
    else if (p.status === 503 && tries > 0) setTimeout(() => loadModel(tries - 1), 1000);
  } catch (e) {
    if (tries > 0) setTimeout(() => loadModel(tries - 1), 1000);
  }
}

function scrollDown() { $('log').scrollTop = $('log').scrollHeight; }

function addUser(text) {
  const d = document.createElement('div');
  d.className = 'msg user';
  d.textContent = text;
  $('log').appendChild(d);
  scrollDown();
}

// A reply: its reasoning folded (shown once some arrives), the answer, the speed line.
function addReply() {
  const r = {d: document.createElement('div'), details: document.createElement('details'),
             summary: document.createElement('summary'), thought: document.createElement('div'),
             answer: document.createElement('div'), stats: document.createElement('div')};
  r.d.className = 'msg assistant';
  r.details.className = 'reasoning';
  r.details.hidden = true;
  r.summary.textContent = 'Thinking...';
  r.thought.className = 'reasoning-text';
  r.answer.className = 'answer';
  r.stats.className = 'stats';
  r.details.append(r.summary, r.thought);
  r.d.append(r.details, r.answer, r.stats);
  $('log').appendChild(r.d);
  scrollDown();
  return r;
}

function num(id) { return Number($(id).value); }

function speed(t) {
  return t.predicted_n + ' tokens, ' + t.predicted_per_second.toFixed(1) + ' tokens/s; prompt ' +
         t.prompt_n + ' tokens, ' + t.prompt_per_second.toFixed(1) + ' tokens/s';
}

async function send() {
  const text = $('input').value.trim();
  if (!text || controller) return;
  $('input').value = '';
  history.push({role: 'user', content: text});
  addUser(text);
  const r = addReply();
  const messages = [];
  if ($('system').value.trim()) messages.push({role: 'system', content: $('system').value});
  const body = {
    messages: messages.concat(history), stream: true,
    temperature: num('temperature'), top_k: num('top_k'), top_p: num('top_p'),
    min_p: num('min_p'), repeat_penalty: num('repeat_penalty'), max_tokens: num('max_tokens'),
  };
  if (num('seed') >= 0) body.seed = num('seed');
  if ($('reasoning_effort').value) body.reasoning_effort = $('reasoning_effort').value;
  controller = new AbortController();
  $('send').disabled = true; $('stop').disabled = false;
  let answer = '', reasoning = '', chunks = 0, tFirst = 0, timings = null;
  const measured = () => {
    const s = (performance.now() - tFirst) / 1000;
    return chunks + ' chunks, ~' + (s > 0 ? (chunks / s).toFixed(1) : '-') + ' chunks/s';
  };
  try {
    const res = await fetch('/v1/chat/completions',
                            {method: 'POST', headers: headers(), body: JSON.stringify(body), signal: controller.signal});
    if (!res.ok) {
      const e = await res.json().catch(() => ({error: {message: res.statusText}}));
      throw new Error(e.error ? e.error.message : res.statusText);
    }
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    while (true) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let at, grew = false;
      while ((at = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, at); buf = buf.slice(at + 2);
        if (!ev.startsWith('data: ')) continue;
        const data = ev.slice(6);
        if (data === '[DONE]') continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        const delta = j.choices && j.choices[0] && j.choices[0].delta;
        if (delta && (delta.content || delta.reasoning_content)) {
          if (!tFirst) tFirst = performance.now();
          chunks++;
        }
        if (delta && delta.reasoning_content) {
          reasoning += delta.reasoning_content;
          r.details.hidden = false;
          r.thought.textContent = reasoning;
        }
        if (delta && delta.content) { answer += delta.content; grew = true; }
        if (j.timings) timings = j.timings;
      }
      if (grew) {
        r.answer.innerHTML = renderMarkdown(answer);
        if (reasoning) r.summary.textContent = 'Reasoning';
      }
      if (tFirst && !timings) r.stats.textContent = measured();
      scrollDown();
    }
  } catch (e) {
    if (e.name !== 'AbortError') { r.d.className = 'msg error'; r.answer.textContent = 'Error: ' + e.message; }
  }
  if (reasoning) r.summary.textContent = 'Reasoning';
  if (timings) r.stats.textContent = speed(timings);
  else if (tFirst) r.stats.textContent = measured() + ' (stopped)';
  history.push({role: 'assistant', content: answer});
  r.d.dataset.done = '1';
  controller = null;
  $('send').disabled = false; $('stop').disabled = true;
}

$('send').onclick = send;
$('stop').onclick = () => { if (controller) controller.abort(); };
$('clear').onclick = () => { history = []; $('log').innerHTML = ''; };
$('api_key').onchange = () => loadModel(0);
// /?prompt=TEXT sends TEXT at once; the settings can be given too (?seed=1&max_tokens=8; used
// by the headless-browser test).
const params = new URLSearchParams(location.search);
for (const id of ['temperature', 'top_k', 'top_p', 'min_p', 'repeat_penalty', 'max_tokens', 'seed',
                  'reasoning_effort'])
  if (params.get(id) !== null) $(id).value = params.get(id);
loadModel(30);
if (params.get('prompt')) { $('input').value = params.get('prompt'); send(); }
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); send(); }
});
</script>
</body>
</html>
)PAGE";

}  // namespace

const std::string& chat_page_html() {
  static const std::string page = std::string(kHead) + kChatMarkdownJs + kTail;
  return page;
}

}  // namespace pi::server
