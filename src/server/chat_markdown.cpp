#include "server/chat_markdown.h"

namespace pi::server {

const char* const kChatMarkdownJs = R"JS(
'use strict';
const MD_ESCAPES = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};
function mdEscape(s) { return s.replace(/[&<>"']/g, (c) => MD_ESCAPES[c]); }

const MD_FENCE = /^( {0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)(.*)$/;
const MD_HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const MD_RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const MD_QUOTE = /^ {0,3}> ?/;
const MD_ITEM = /^( *)([-*+]|\d{1,9}[.)])([ \t]+|$)(.*)$/;
const MD_TABLE_RULE = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;

function mdBlank(line) { return /^\s*$/.test(line); }

function mdFence(line) {
  const m = MD_FENCE.exec(line);
  // A backtick fence's info string has no backtick: "```a```" is inline code.
  if (!m || (m[2][0] === '`' && m[4].includes('`'))) return null;
  return m;
}

function mdTableCells(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function mdIsTable(lines, i) {
  return lines[i].includes('|') && i + 1 < lines.length && MD_TABLE_RULE.test(lines[i + 1]) &&
         mdTableCells(lines[i + 1]).length === mdTableCells(lines[i]).length;
}

// Whether `line` opens a block other than a paragraph (so it ends one).
function mdOpensBlock(lines, i) {
  const line = lines[i];
  return mdFence(line) !== null || MD_HEADING.test(line) || MD_RULE.test(line) ||
         MD_QUOTE.test(line) || MD_ITEM.test(line) || mdIsTable(lines, i);
}

function mdBlocks(lines, tight) {
  let out = '';
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (mdBlank(line)) {
      i++;
    } else if ((m = mdFence(line))) {
      const fence = m[2], indent = m[1].length;
      const close = new RegExp('^ {0,3}' + (fence[0] === '`' ? '`' : '~') + '{' + fence.length + ',}[ \\t]*$');
      const body = [];
      for (i++; i < lines.length && !close.test(lines[i]); i++)
        body.push(lines[i].slice(Math.min(indent, lines[i].search(/\S|$/))));
      i++;  // the closing fence; an unclosed block (still streaming) runs to the end
      const lang = m[3].replace(/[^\w+#.-]/g, '');
      out += '<pre><code' + (lang ? ' class="language-' + lang + '"' : '') + '>' +
             mdEscape(body.join('\n')) + '</code></pre>';
    } else if ((m = MD_HEADING.exec(line))) {
      const n = m[1].length;
      out += '<h' + n + '>' + mdInline(m[2] || '') + '</h' + n + '>';
      i++;
    } else if (MD_RULE.test(line)) {
      out += '<hr>';
      i++;
    } else if (MD_QUOTE.test(line)) {
      const inner = [];
      for (; i < lines.length && MD_QUOTE.test(lines[i]); i++) inner.push(lines[i].replace(MD_QUOTE, ''));
      out += '<blockquote>' + mdBlocks(inner, false) + '</blockquote>';
    } else if (MD_ITEM.test(line)) {
      const r = mdList(lines, i);
      out += r.html;
      i = r.next;
    } else if (mdIsTable(lines, i)) {
      const r = mdTable(lines, i);
      out += r.html;
      i = r.next;
    } else {
      const para = [line.trim()];
      for (i++; i < lines.length && !mdBlank(lines[i]) && !mdOpensBlock(lines, i); i++) para.push(lines[i].trim());
      const html = para.map(mdInline).join('<br>');
      out += tight ? html : '<p>' + html + '</p>';
    }
  }
  return out;
}

// A list from lines[i]: items of one kind (bullets or numbers); lines indented to an item's
// content belong to it (nested lists included); a blank line makes the list loose.
function mdList(lines, i) {
  const first = MD_ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const items = [];
  let loose = false;
  let cur = null;
  while (i < lines.length) {
    const line = lines[i];
    const m = MD_ITEM.exec(line);
    const indent = line.search(/\S|$/);
    if (m && (!cur || m[1].length < cur.content)) {
      if (/\d/.test(m[2]) !== ordered) break;
      const gap = m[3].length === 0 || m[3].length > 4 ? 1 : m[3].length;
      cur = {content: m[1].length + m[2].length + gap, lines: [m[4]]};
      items.push(cur);
      i++;
    } else if (mdBlank(line)) {
      let j = i + 1;
      while (j < lines.length && mdBlank(lines[j])) j++;
      if (j === lines.length) break;
      const next = MD_ITEM.exec(lines[j]);
      const nextIndent = lines[j].search(/\S/);
      if (nextIndent < cur.content && !(next && /\d/.test(next[2]) === ordered)) break;
      loose = true;
      for (; i < j; i++) cur.lines.push('');
    } else if (indent >= cur.content) {
      cur.lines.push(line.slice(cur.content));
      i++;
    } else if (!m && !mdOpensBlock(lines, i) && !mdBlank(cur.lines[cur.lines.length - 1])) {
      cur.lines.push(line.trim());  // a lazy continuation of the item's paragraph
      i++;
    } else {
      break;
    }
  }
  const start = ordered ? parseInt(first[2], 10) : 1;
  const tag = ordered ? 'ol' : 'ul';
  let html = '<' + tag + (ordered && start !== 1 ? ' start="' + start + '"' : '') + '>';
  for (const it of items) html += '<li>' + mdBlocks(it.lines, !loose) + '</li>';
  return {html: html + '</' + tag + '>', next: i};
}

function mdTable(lines, i) {
  const align = mdTableCells(lines[i + 1]).map((c) =>
      /^:-+:$/.test(c) ? 'center' : /-:$/.test(c) ? 'right' : /^:-/.test(c) ? 'left' : '');
  const row = (cells, tag) => '<tr>' + align.map((a, k) =>
      '<' + tag + (a ? ' style="text-align:' + a + '"' : '') + '>' + mdInline(cells[k] || '') +
      '</' + tag + '>').join('') + '</tr>';
  let html = '<table><thead>' + row(mdTableCells(lines[i]), 'th') + '</thead><tbody>';
  for (i += 2; i < lines.length && lines[i].includes('|') && !mdBlank(lines[i]); i++)
    html += row(mdTableCells(lines[i]), 'td');
  return {html: html + '</tbody></table>', next: i};
}

function mdSafeUrl(url) { return /^(https?:|mailto:)/i.test(url) || /^[/#]/.test(url); }

function mdLink(url, labelHtml) {
  return '<a href="' + mdEscape(url) + '" target="_blank" rel="noopener noreferrer">' + labelHtml + '</a>';
}

function mdEmphasis(s) {
  return s
      .replace(/\*\*([^\s*](?:[\s\S]*?[^\s*])?)\*\*/g, '<strong>$1</strong>')
      .replace(/(^|[^\w])__([^\s_](?:[\s\S]*?[^\s_])?)__(?!\w)/g, '$1<strong>$2</strong>')
      .replace(/\*([^\s*](?:[^*]*?[^\s*])?)\*/g, '<em>$1</em>')
      .replace(/(^|[^\w])_([^\s_](?:[^_]*?[^\s_])?)_(?!\w)/g, '$1<em>$2</em>')
      .replace(/~~([^\s~](?:[\s\S]*?[^\s~])?)~~/g, '<del>$1</del>');
}

// One line (or table cell) of inline Markdown. Code spans, backslash escapes and links are set
// aside as finished HTML (placeholders \0N\0), the rest is escaped, then emphasis is added.
function mdInline(text) {
  const kept = [];
  const keep = (html) => '\u0000' + (kept.push(html) - 1) + '\u0000';
  text = text.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g,
                      (_, ticks, code) => keep('<code>' + mdEscape(code.replace(/^ ([\s\S]*) $/, '$1')) + '</code>'));
  text = text.replace(/\\([\\`*_{}\[\]()#+\-.!|~<>])/g, (_, c) => keep(mdEscape(c)));
  text = text.replace(/\[([^\]\n]+)\]\(\s*<?([^\s()<>]+)>?(?:\s+"[^"\n]*")?\s*\)/g,
                      (all, label, url) => mdSafeUrl(url) ? keep(mdLink(url, mdEmphasis(mdEscape(label)))) : all);
  text = text.replace(/\bhttps?:\/\/[^\s<>()\u0000]*[^\s<>()\u0000.,;:!?'"*_~]/g,
                      (url) => keep(mdLink(url, mdEscape(url))));
  let html = mdEmphasis(mdEscape(text));
  while (/\u0000\d+\u0000/.test(html)) html = html.replace(/\u0000(\d+)\u0000/g, (_, k) => kept[+k]);
  return html;
}

function renderMarkdown(src) {
  return mdBlocks(String(src).replace(/\r\n?/g, '\n').replace(/\u0000/g, '\uFFFD').split('\n'), false);
}
)JS";

}  // namespace pi::server
