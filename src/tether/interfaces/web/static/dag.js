// A goal run's tasks as a DAG in inline SVG, and the detail box of one task.
//
// It also holds the small DOM builders the whole page shares (h, svg, chip, formatting), since the
// graph needs both HTML and SVG builders. Server data only ever reaches the page as text nodes or
// attribute values: never as markup.

import { t, statusLabel } from './i18n.js';

const SVG_NS = 'http://www.w3.org/2000/svg';

// ---------------------------------------------------------------------------------------------
// Shared builders

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === 'value' && 'value' in el && !(el instanceof SVGElement)) {
      el.value = value;
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** An HTML element: h('button', {class: 'x', onclick: fn}, 'text', otherNode, [more]). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  return append(el, children);
}

/** An SVG element, same call shape as h(). */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  return append(el, children);
}

const TONES = {
  ok: ['completed', 'finished', 'approved'],
  bad: ['failed', 'rejected', 'timeout', 'not_found', 'denied'],
  warn: ['waiting_for_human', 'needs_confirmation', 'asked', 'budget_exhausted', 'interrupted', 'unknown'],
  info: ['running', 'starting', 'started'],
};

/** ok | bad | warn | info | neutral: the colour family of a status. */
export function statusTone(status) {
  for (const [tone, names] of Object.entries(TONES)) if (names.includes(status)) return tone;
  return 'neutral';
}

/** A status chip, coloured by tone, labelled in the current language. */
export function chip(status, extra = {}) {
  const name = status || 'unknown';
  return h('span', { class: 'chip', 'data-tone': statusTone(name), 'data-status': name, ...extra }, statusLabel(name));
}

/** "0.42 s", "12.3 s", "2 min 05 s" (localized). */
export function formatSeconds(seconds) {
  if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0) return '';
  if (seconds < 10) return t('common.seconds', { s: seconds.toFixed(2) });
  if (seconds < 60) return t('common.seconds', { s: seconds.toFixed(1) });
  const minutes = Math.floor(seconds / 60);
  return t('common.minutes', { m: minutes, s: String(Math.round(seconds % 60)).padStart(2, '0') });
}

export function compactJson(value) {
  try {
    return JSON.stringify(value ?? null);
  } catch {
    return String(value);
  }
}

export function prettyJson(value) {
  try {
    return JSON.stringify(value ?? null, null, 2);
  } catch {
    return String(value);
  }
}

function isEmpty(value) {
  if (value === null || value === undefined) return true;
  if (typeof value === 'object') return Object.keys(value).length === 0;
  return value === '';
}

// ---------------------------------------------------------------------------------------------
// Layout: a task's layer is 1 + the highest layer of what it needs (layer 0: needs nothing).

const NODE_W = 168;
const NODE_H = 54;
const GAP_X = 20;
const GAP_Y = 44;
const PAD = 14;
const ID_CHARS = 19;

/** Map task_id → layer. A dependency cycle (never valid, but never fatal here) is cut. */
export function layerOf(tasks) {
  const byId = new Map(tasks.map((task) => [task.task_id, task]));
  const layers = new Map();
  const visit = (id, trail) => {
    if (layers.has(id)) return layers.get(id);
    if (trail.has(id)) return 0;
    trail.add(id);
    const needs = (byId.get(id)?.needs || []).filter((need) => byId.has(need));
    const layer = needs.length ? 1 + Math.max(...needs.map((need) => visit(need, trail))) : 0;
    trail.delete(id);
    layers.set(id, layer);
    return layer;
  };
  for (const task of tasks) visit(task.task_id, new Set());
  return layers;
}

/** Order each layer by the mean position of its tasks' needs (fewer crossing edges). */
function orderedLayers(tasks, layers) {
  const rows = [];
  for (const task of tasks) {
    const layer = layers.get(task.task_id);
    (rows[layer] ||= []).push(task);
  }
  const slot = new Map();
  rows.forEach((row, depth) => {
    if (depth > 0) {
      const weight = (task) => {
        const known = (task.needs || []).filter((need) => slot.has(need)).map((need) => slot.get(need));
        return known.length ? known.reduce((a, b) => a + b, 0) / known.length : 0;
      };
      row.sort((a, b) => weight(a) - weight(b));
    }
    row.forEach((task, i) => slot.set(task.task_id, i - (row.length - 1) / 2));
  });
  return rows.filter(Boolean);
}

/** Positions (top-left corners) of every task, and the drawing's size. */
export function layout(tasks) {
  const rows = orderedLayers(tasks, layerOf(tasks));
  const widest = Math.max(1, ...rows.map((row) => row.length));
  const width = PAD * 2 + widest * NODE_W + (widest - 1) * GAP_X;
  const height = PAD * 2 + rows.length * NODE_H + Math.max(0, rows.length - 1) * GAP_Y;
  const at = new Map();
  rows.forEach((row, depth) => {
    const rowWidth = row.length * NODE_W + (row.length - 1) * GAP_X;
    const left = (width - rowWidth) / 2;
    row.forEach((task, i) => {
      at.set(task.task_id, { x: left + i * (NODE_W + GAP_X), y: PAD + depth * (NODE_H + GAP_Y) });
    });
  });
  return { at, width, height };
}

// ---------------------------------------------------------------------------------------------
// Drawing

let markerCount = 0;

function shorten(text, limit) {
  const chars = Array.from(text || '');
  return chars.length > limit ? `${chars.slice(0, limit - 1).join('')}…` : chars.join('');
}

function edgePath(from, to) {
  const x1 = from.x + NODE_W / 2;
  const y1 = from.y + NODE_H;
  const x2 = to.x + NODE_W / 2;
  const y2 = to.y - 2;
  const mid = (y1 + y2) / 2;
  return `M ${x1} ${y1} C ${x1} ${mid}, ${x2} ${mid}, ${x2} ${y2}`;
}

function drawEdges(tasks, at, markerId) {
  const group = svg('g', { class: 'dag-edges', 'aria-hidden': 'true' });
  for (const task of tasks) {
    for (const need of task.needs || []) {
      if (!at.has(need)) continue;
      group.append(
        svg('path', {
          class: 'dag-edge',
          'data-from': need,
          'data-to': task.task_id,
          d: edgePath(at.get(need), at.get(task.task_id)),
          'marker-end': `url(#${markerId})`,
        }),
      );
    }
  }
  return group;
}

function retryBadge(attempts) {
  const label = `×${attempts}`;
  const width = 12 + label.length * 7;
  return svg(
    'g',
    { class: 'dag-badge', transform: `translate(${NODE_W - width - 6}, 6)`, 'aria-hidden': 'true' },
    svg('rect', { width, height: 18, rx: 9 }),
    svg('text', { x: width / 2, y: 13, 'text-anchor': 'middle' }, label),
  );
}

/** The mark of a task that waits for a person (drawn, not an emoji: every font has a "?"). */
function waitingFlag() {
  return svg(
    'g',
    { class: 'dag-flag', transform: `translate(${NODE_W - 18}, ${NODE_H - 18})`, 'aria-hidden': 'true' },
    svg('circle', { cx: 8, cy: 8, r: 8 }),
    svg('text', { x: 8, y: 12, 'text-anchor': 'middle' }, '?'),
  );
}

function nodeLabel(task) {
  const parts = [`${task.task_id}: ${statusLabel(task.status)}`];
  if (task.attempts > 1) parts.push(t('task.retries', { n: task.attempts }));
  if (task.title) parts.push(task.title);
  return parts.join(' · ');
}

function drawNode(task, pos, { selectedId, onSelect }) {
  const waiting = task.status === 'waiting_for_human';
  const selected = task.task_id === selectedId;
  const activate = () => onSelect(task.task_id);
  const node = svg(
    'g',
    {
      class: `dag-node${waiting ? ' is-waiting' : ''}${selected ? ' is-selected' : ''}`,
      'data-testid': 'dag-node',
      'data-task': task.task_id,
      'data-status': task.status,
      'data-tone': statusTone(task.status),
      'data-focus-key': `node:${task.task_id}`,
      transform: `translate(${pos.x}, ${pos.y})`,
      tabindex: '0',
      role: 'button',
      'aria-label': nodeLabel(task),
      'aria-expanded': selected ? 'true' : 'false',
      onclick: activate,
      onkeydown: (event) => {
        if (event.key === 'Enter' || event.key === ' ') {
          event.preventDefault();
          activate();
        }
      },
    },
    svg('title', {}, task.title ? `${task.task_id} — ${task.title}` : task.task_id),
    svg('rect', { class: 'dag-box', width: NODE_W, height: NODE_H, rx: 10 }),
    svg('text', { class: 'dag-id', x: 12, y: 22 }, shorten(task.task_id, task.attempts > 1 ? ID_CHARS - 4 : ID_CHARS)),
    svg('text', { class: 'dag-state', x: 12, y: 41 }, statusLabel(task.status)),
  );
  if (task.attempts > 1) node.append(retryBadge(task.attempts));
  if (waiting) node.append(waitingFlag());
  return node;
}

/**
 * The run's tasks as an <svg>: one node per task (click or Enter selects it), an edge per need.
 * options: {selectedId, onSelect(taskId)}.
 */
export function renderDag(tasks, options) {
  const { at, width, height } = layout(tasks);
  const markerId = `dag-arrow-${++markerCount}`;
  const defs = svg(
    'defs',
    {},
    svg(
      'marker',
      { id: markerId, viewBox: '0 0 10 10', refX: '9', refY: '5', markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse' },
      svg('path', { class: 'dag-arrow', d: 'M 0 0 L 10 5 L 0 10 z' }),
    ),
  );
  const nodes = svg('g', { class: 'dag-nodes' }, tasks.map((task) => drawNode(task, at.get(task.task_id), options)));
  return svg(
    'svg',
    {
      class: 'dag',
      width,
      height,
      viewBox: `0 0 ${width} ${height}`,
      role: 'group',
      'aria-label': t('runs.dag'),
    },
    defs,
    drawEdges(tasks, at, markerId),
    nodes,
  );
}

// ---------------------------------------------------------------------------------------------
// The detail box of one task

function field(label, ...value) {
  return [h('dt', {}, label), h('dd', {}, ...value)];
}

function taskFields(task) {
  const rows = [field(t('task.status'), chip(task.status))];
  if (task.title) rows.push(field(t('task.title'), task.title));
  rows.push(field(t('task.needs'), task.needs && task.needs.length ? task.needs.join(', ') : t('task.none')));
  if (task.call) {
    // A review that read arguments from the run's context shows those values: they are what runs.
    const shown = (task.review && task.review.args) || task.call.args;
    rows.push(field(t('task.call'), h('code', { class: 'json' }, `${task.call.task} ${compactJson(shown)}`)));
  } else if (task.description) {
    rows.push(field(t('task.description'), h('span', { class: 'prewrap' }, task.description)));
  }
  if (task.message) rows.push(field(t('task.message'), h('span', { class: 'prewrap' }, task.message)));
  if (task.review && task.review.kind) {
    const key = `review.${task.review.kind}`;
    const text = t(key);
    rows.push(field(t('task.review'), text === key ? task.review.kind : text));
  }
  return h('dl', { class: 'fields' }, rows);
}

function attemptsList(task) {
  const steps = task.steps || [];
  const list = steps.length
    ? h(
        'ol',
        { class: 'attempts' },
        steps.map((step) =>
          h(
            'li',
            {},
            h('span', { class: 'attempt-n' }, t('task.attempt', { n: step.attempt })),
            chip(step.status),
            step.duration_seconds ? h('span', { class: 'muted' }, formatSeconds(step.duration_seconds)) : null,
            step.message ? h('span', { class: 'attempt-msg' }, step.message) : null,
          ),
        ),
      )
    : h('p', { class: 'muted' }, t('task.noAttempts'));
  return h('div', { class: 'detail-block' }, h('h5', {}, t('task.attempts')), list);
}

function diagnosticsBlock(task) {
  if (isEmpty(task.diagnostics)) return null;
  return h(
    'details',
    { class: 'detail-block' },
    h('summary', {}, t('task.diagnostics')),
    h('pre', { class: 'json', 'data-testid': 'task-diagnostics' }, prettyJson(task.diagnostics)),
  );
}

function editDefault(task) {
  return task.call ? prettyJson(task.call.args || {}) : task.description || '';
}

/** The edit's request body, or throws an Error whose message says what is wrong with the text. */
function editBody(task, text) {
  if (!task.call) {
    if (!text.trim()) throw new Error(t('task.emptyDescription'));
    return { description: text.trim() };
  }
  let args;
  try {
    args = JSON.parse(text);
  } catch (err) {
    throw new Error(t('task.badJson', { error: err.message }));
  }
  if (!args || typeof args !== 'object' || Array.isArray(args)) throw new Error(t('task.notObject'));
  return { args };
}

function setBusy(container, busy) {
  for (const el of container.querySelectorAll('button, input, textarea')) el.disabled = busy;
}

function editForm(task, draft, handlers, submit) {
  const error = h('p', { class: 'field-error', 'data-testid': 'task-edit-error', role: 'alert', hidden: true });
  const label = task.call ? t('task.editArgs') : t('task.editDescription');
  const input = h('textarea', {
    id: `edit-${task.task_id}`,
    class: task.call ? 'json' : '',
    rows: task.call ? '6' : '4',
    spellcheck: 'false',
    'data-testid': 'task-edit-input',
    'data-focus-key': `edit:${task.task_id}`,
    value: draft.text ?? editDefault(task),
    oninput: () => handlers.onDraft({ text: input.value }),
  });
  const form = h(
    'form',
    {
      class: 'task-edit-form',
      onsubmit: (event) => {
        event.preventDefault();
        let body;
        try {
          body = editBody(task, input.value);
        } catch (err) {
          error.textContent = err.message;
          error.hidden = false;
          input.focus();
          return;
        }
        submit('edit', body);
      },
    },
    h('label', { for: input.id }, label),
    input,
    error,
    h(
      'div',
      { class: 'row' },
      h('button', { type: 'submit', class: 'primary', 'data-testid': 'task-edit-submit' }, t('task.editSubmit')),
      h('button', { type: 'button', onclick: () => handlers.onDraft({ open: false }) }, t('common.cancel')),
    ),
  );
  return form;
}

function answerBlock(task, draft, handlers) {
  const box = h('div', { class: 'task-answer' });
  const reasonId = `reason-${task.task_id}`;
  const reason = h('input', {
    id: reasonId,
    type: 'text',
    'data-testid': 'task-reason',
    'data-focus-key': `reason:${task.task_id}`,
    value: draft.reason || '',
    oninput: () => handlers.onDraft({ reason: reason.value }),
  });
  const submit = async (verb, body) => {
    setBusy(box, true);
    try {
      await handlers.onAnswer(verb, body);
    } finally {
      if (box.isConnected) setBusy(box, false);
    }
  };
  const withReason = () => (reason.value.trim() ? { reason: reason.value.trim() } : {});
  box.append(
    h('label', { for: reasonId }, t('task.reason')),
    reason,
    h(
      'div',
      { class: 'row' },
      h('button', { type: 'button', class: 'primary', 'data-testid': 'task-approve', onclick: () => submit('approve', withReason()) }, t('task.approve')),
      h('button', { type: 'button', class: 'danger', 'data-testid': 'task-reject', onclick: () => submit('reject', withReason()) }, t('task.reject')),
      h(
        'button',
        {
          type: 'button',
          'data-testid': 'task-edit',
          'data-focus-key': `edit-toggle:${task.task_id}`,
          'aria-expanded': draft.open ? 'true' : 'false',
          onclick: () => handlers.onDraft({ open: !draft.open }),
        },
        t('task.edit'),
      ),
    ),
  );
  if (draft.open) box.append(editForm(task, draft, handlers, submit));
  return box;
}

/**
 * The details of `task` (status, message, attempts, diagnostics) and, when it waits for a person,
 * Approve / Reject / Edit. handlers: {onAnswer(verb, body) → Promise, onClose(), onDraft(patch)};
 * draft: {open, text, reason}, the unsent answer kept by the caller across re-renders.
 */
export function renderTaskDetail(task, draft, handlers) {
  const waiting = task.status === 'waiting_for_human';
  return h(
    'section',
    {
      class: `task-detail${waiting ? ' is-waiting' : ''}`,
      'data-testid': 'task-detail',
      'data-task': task.task_id,
      'aria-label': t('task.detail', { task: task.task_id }),
      onkeydown: (event) => {
        if (event.key === 'Escape') {
          event.stopPropagation();
          handlers.onClose();
        }
      },
    },
    h(
      'div',
      { class: 'detail-head' },
      h('h4', {}, task.task_id),
      task.attempts > 1 ? h('span', { class: 'retry' }, `×${task.attempts}`) : null,
      h('button', { type: 'button', class: 'icon', 'aria-label': t('common.close'), title: t('common.close'), onclick: handlers.onClose }, '×'),
    ),
    taskFields(task),
    waiting ? answerBlock(task, draft, handlers) : null,
    attemptsList(task),
    diagnosticsBlock(task),
  );
}
