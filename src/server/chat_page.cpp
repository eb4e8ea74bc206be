#include "server/chat_page.h"

namespace pi::server {

const char* const kChatPage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>powerinfer chat</title>
<style>
body { font-family: sans-serif; margin: 0; display: flex; height: 100vh; }
#side { width: 16em; padding: 1em; background: #f3f3f3; overflow-y: auto; }
#side label { display: block; margin-top: .6em; font-size: .9em; }
#side input, #side textarea { width: 100%; box-sizing: border-box; }
#main { flex: 1; display: flex; flex-direction: column; }
#log { flex: 1; overflow-y: auto; padding: 1em; }
.msg { margin: .5em 0; padding: .5em .8em; border-radius: .5em; white-space: pre-wrap; }
.user { background: #dbeafe; }
.assistant { background: #eee; }
.error { background: #fee2e2; }
#bar { display: flex; padding: .5em; gap: .5em; border-top: 1px solid #ccc; }
#input { flex: 1; height: 3em; }
#stats { font-size: .85em; color: #555; padding: 0 1em .5em; }
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
<label>Max tokens <input id="max_tokens" type="number" value="256"></label>
<label>Seed (-1: random) <input id="seed" type="number" value="-1"></label>
<label>API key <input id="api_key" type="password"></label>
<p><button id="clear">New chat</button></p>
</div>
<div id="main">
<div id="log"></div>
<div id="stats"></div>
<div id="bar">
<textarea id="input" placeholder="Type a message, Enter to send"></textarea>
<button id="send">Send</button>
<button id="stop" disabled>Stop</button>
</div>
</div>
<script>
const $ = (id) => document.getElementById(id);
let history = [];
let controller = null;

function add(role, text) {
  const d = document.createElement('div');
  d.className = 'msg ' + role;
  d.textContent = text;
  $('log').appendChild(d);
  $('log').scrollTop = $('log').scrollHeight;
  return d;
}

function num(id) { return Number($(id).value); }

async function send() {
  const text = $('input').value.trim();
  if (!text || controller) return;
  $('input').value = '';
  history.push({role: 'user', content: text});
  add('user', text);
  const out = add('assistant', '');
  const messages = [];
  if ($('system').value.trim()) messages.push({role: 'system', content: $('system').value});
  const body = {
    messages: messages.concat(history), stream: true,
    temperature: num('temperature'), top_k: num('top_k'), top_p: num('top_p'),
    min_p: num('min_p'), repeat_penalty: num('repeat_penalty'), max_tokens: num('max_tokens'),
  };
  if (num('seed') >= 0) body.seed = num('seed');
  const headers = {'Content-Type': 'application/json'};
  if ($('api_key').value) headers['Authorization'] = 'Bearer ' + $('api_key').value;
  controller = new AbortController();
  $('send').disabled = true; $('stop').disabled = false;
  const t0 = performance.now();
  let answer = '', n = 0, tFirst = 0;
  try {
    const res = await fetch('/v1/chat/completions',
                            {method: 'POST', headers, body: JSON.stringify(body), signal: controller.signal});
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
      let at;
      while ((at = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, at); buf = buf.slice(at + 2);
        if (!ev.startsWith('data: ')) continue;
        const data = ev.slice(6);
        if (data === '[DONE]') continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        const c = j.choices && j.choices[0];
        if (c && c.delta && c.delta.content) {
          if (!tFirst) tFirst = performance.now();
          answer += c.delta.content; n++;
          out.textContent = answer;
          $('log').scrollTop = $('log').scrollHeight;
        }
        if (j.timings) {
          $('stats').textContent = j.timings.predicted_n + ' tokens, ' +
            j.timings.predicted_per_second.toFixed(1) + ' tokens/s; prompt ' +
            j.timings.prompt_n + ' tokens, ' + j.timings.prompt_per_second.toFixed(1) + ' tokens/s';
        }
      }
      if (tFirst && !$('stats').textContent.includes('prompt')) {
        const s = (performance.now() - tFirst) / 1000;
        $('stats').textContent = n + ' chunks, ' + (s > 0 ? (n / s).toFixed(1) : '-') + ' tokens/s';
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') { out.className = 'msg error'; out.textContent = 'Error: ' + e.message; }
  }
  history.push({role: 'assistant', content: answer});
  out.dataset.done = '1';
  controller = null;
  $('send').disabled = false; $('stop').disabled = true;
}

$('send').onclick = send;
$('stop').onclick = () => { if (controller) controller.abort(); };
$('clear').onclick = () => { history = []; $('log').innerHTML = ''; $('stats').textContent = ''; };
// /?prompt=TEXT sends TEXT at once; the settings can be given too (?seed=1&max_tokens=8; used
// by the headless-browser test).
const params = new URLSearchParams(location.search);
for (const id of ['temperature', 'top_k', 'top_p', 'min_p', 'repeat_penalty', 'max_tokens', 'seed'])
  if (params.get(id) !== null) $(id).value = params.get(id);
if (params.get('prompt')) { $('input').value = params.get('prompt'); send(); }
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); send(); }
});
</script>
</body>
</html>
)PAGE";

}  // namespace pi::server
