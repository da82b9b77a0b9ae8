// The page of `tether serve`: threads | conversation | side panel (Trace, Jobs, Approvals, Runs).
//
// State is rebuilt from the REST API on load (and after a reconnect or when the tab becomes visible
// again), then kept current by the server's event stream. Server data is untrusted: it reaches the
// DOM only through textContent and attribute values (see h() in dag.js), never as markup.

import { api } from './api.js';
import { keepFocusInPlace } from './focus.js';
import { loadNotices, wireNotices } from './notices.js';
import { applyLang, lang, onLangChange, t, toggleLang } from './i18n.js';
import {
  chip,
  compactJson,
  formatSeconds,
  h,
  prettyJson,
  renderDag,
  renderTaskDetail,
} from './dag.js';

const $ = (id) => document.getElementById(id);

const ACTIVE_JOB = new Set(['pending', 'starting', 'running']); // counted in the badge, and stoppable
const TERMINAL_RUN = new Set(['completed', 'failed', 'cancelled']);
const DONE_TASK = new Set(['completed', 'skipped', 'rejected', 'cancelled', 'failed']); // as the server counts
const SIDE_TABS = ['trace', 'jobs', 'approvals', 'runs', 'memory', 'notices'];
const THEME_KEY = 'tether.theme';
const WORKING_GRACE_MS = 2500; // a turn just asked for may not be "running" on the server yet
const WATCHDOG_MS = 4000;

const state = {
  info: null,
  agents: [], // the store's agents, for the picker of a new thread
  activity: new Map(), // thread id → what its agent is doing now (idle, thinking, files, research, …)
  files: [], // the current thread's generated files
  lastEventId: 0,
  // threads
  threads: [],
  threadsNext: null,
  threadsPaged: false,
  threadsLoaded: false,
  currentId: null,
  current: null,
  // the current thread's conversation and trace
  messages: [],
  optimistic: [],
  cards: new Map(),
  turnUsage: new Map(), // turn → what its model calls cost, delegations included (from the record)
  openTrees: new Set(), // delegations unfolded in the trace (child thread ids): kept open across redraws
  sending: false,
  // live turn state, by thread id
  working: new Set(),
  workingSince: new Map(),
  thinking: new Map(), // thread → the model's last ModelThinking (seconds, tokens), until it decides
  finishedTurn: new Map(),
  unread: new Set(),
  execOfThread: new Map(),
  // side panel
  confirmations: [],
  reviews: [], // goal-run tasks waiting at a review point
  answered: new Set(), // question ids and `review:<run>:<task>` keys answered from this page
  jobs: [],
  jobsFilter: 'active',
  jobLogs: new Map(),
  progress: new Map(),
  runs: [],
  runId: null,
  run: null,
  runCounts: new Map(), // run_id → {tasks_done, tasks_total} of the full runs loaded here
  taskId: null,
  taskDraft: {},
  sideTab: 'trace',
  view: 'chat',
};

// ---------------------------------------------------------------------------------------------
// Small helpers

function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

/** Run `action`; a failure is shown in the error banner, never swallowed. */
async function attempt(action) {
  try {
    return await action();
  } catch (err) {
    showError(err);
    return undefined;
  }
}

function readStorage(key) {
  try {
    return localStorage.getItem(key);
  } catch {
    return null;
  }
}

function writeStorage(key, value) {
  try {
    localStorage.setItem(key, value);
  } catch {
    // not remembered; the choice still applies to this page
  }
}

function toDate(value) {
  if (value === null || value === undefined || value === '') return null;
  const date = typeof value === 'number' ? new Date(value * 1000) : new Date(value);
  return Number.isNaN(date.getTime()) ? null : date;
}

function formatTime(value) {
  const date = toDate(value);
  if (!date) return '';
  const today = date.toDateString() === new Date().toDateString();
  const options = today
    ? { hour: '2-digit', minute: '2-digit' }
    : { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' };
  return date.toLocaleString(lang() === 'zh' ? 'zh-CN' : 'en', options);
}

function secondsOf(value) {
  const date = toDate(value);
  return date ? date.getTime() / 1000 : NaN;
}

function nearBottom(el) {
  return el.scrollHeight - el.scrollTop - el.clientHeight < 80;
}

function setBusy(buttons, busy) {
  for (const button of buttons) if (button) button.disabled = busy;
}

// ---------------------------------------------------------------------------------------------
// Rendering that leaves unchanged nodes (and the focus) alone

const keyedCaches = new WeakMap();

function focusedKey(parent) {
  const active = document.activeElement;
  if (!active || !parent.contains(active)) return null;
  const holder = active.closest('[data-focus-key]');
  if (!holder || !parent.contains(holder)) return { key: null };
  const selection = 'selectionStart' in active ? [active.selectionStart, active.selectionEnd] : null;
  return { key: holder.dataset.focusKey, selection };
}

function restoreFocus(parent, saved) {
  if (!saved || parent.contains(document.activeElement)) return;
  const target = saved.key ? parent.querySelector(`[data-focus-key="${CSS.escape(saved.key)}"]`) : null;
  if (target) {
    target.focus({ preventScroll: true });
    if (saved.selection && 'setSelectionRange' in target) {
      try {
        target.setSelectionRange(...saved.selection);
      } catch {
        // not a text field after all
      }
    }
  } else {
    const fallback = parent.closest('[tabindex]');
    if (fallback) fallback.focus({ preventScroll: true });
  }
}

/** Make `parent`'s children exactly `nodes`, moving only what moved. */
function reconcile(parent, nodes) {
  nodes.forEach((node, i) => {
    const at = parent.childNodes[i];
    if (at !== node) parent.insertBefore(node, at ?? null);
  });
  while (parent.childNodes.length > nodes.length) parent.lastChild.remove();
}

/**
 * Render `items` into `parent`, reusing the node of every item whose key and signature are
 * unchanged: focus, scroll and screen readers see only what really changed.
 */
function keyedRender(parent, items, { key, sig, build }) {
  const old = keyedCaches.get(parent) || new Map();
  const next = new Map();
  const saved = focusedKey(parent);
  const nodes = items.map((item, i) => {
    let k = key(item);
    if (next.has(k)) k = `${k}#${i}`;
    const signature = `${lang()}|${sig(item)}`;
    const found = old.get(k);
    const node = found && found.sig === signature ? found.node : build(item);
    next.set(k, { sig: signature, node });
    return node;
  });
  keyedCaches.set(parent, next);
  reconcile(parent, nodes);
  restoreFocus(parent, saved);
}

/** Replace `parent`'s content wholesale, keeping the focus on the "same" element when it exists. */
function renderInto(parent, nodes) {
  const saved = focusedKey(parent);
  parent.replaceChildren(...nodes.filter(Boolean));
  restoreFocus(parent, saved);
}

// ---------------------------------------------------------------------------------------------
// Banners and the confirmation dialog

let errorTimer;
let noticeTimer;

/** Show an error; a `sticky` one (why the page cannot work at all) stays until it is dismissed. */
function showError(err, { sticky = false } = {}) {
  const message = err && err.message ? err.message : String(err);
  $('error-text').textContent = message;
  $('error').hidden = false;
  clearTimeout(errorTimer);
  if (!sticky && !(err && err.status === 401)) errorTimer = setTimeout(hideError, 15000);
}

function hideError() {
  $('error').hidden = true;
}

function showNotice(message) {
  $('notice-text').textContent = message;
  $('notice').hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(hideNotice, 6000);
}

function hideNotice() {
  $('notice').hidden = true;
}

/** Ask a yes/no question in a modal dialog; resolves true for OK. */
function confirmDialog(text) {
  const dialog = $('confirm-dialog');
  $('confirm-text').textContent = text;
  if (typeof dialog.showModal !== 'function') return Promise.resolve(window.confirm(text));
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.returnValue = '';
    dialog.showModal();
  });
}

// ---------------------------------------------------------------------------------------------
// Top bar: model, theme, language, live indicator

function renderInfo() {
  const label = $('model-label');
  const info = state.info;
  label.textContent = info && info.model ? t('app.model', { model: info.model }) : t('app.modelUnknown');
  label.title = info ? [t('app.version', { version: info.version || '' }), info.executor_id, info.home].filter(Boolean).join(' · ') : '';
}

function effectiveTheme() {
  const chosen = document.documentElement.dataset.theme;
  if (chosen === 'light' || chosen === 'dark') return chosen;
  return window.matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

function renderThemeButton() {
  const dark = effectiveTheme() === 'dark';
  const button = $('theme-switch');
  const label = t(dark ? 'theme.toLight' : 'theme.toDark');
  button.textContent = dark ? '☀' : '☾';
  button.setAttribute('aria-label', label);
  button.title = label;
  button.dataset.theme = effectiveTheme();
}

function initTheme() {
  const stored = readStorage(THEME_KEY);
  if (stored === 'light' || stored === 'dark') document.documentElement.dataset.theme = stored;
  window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', renderThemeButton);
  renderThemeButton();
}

function toggleTheme() {
  const next = effectiveTheme() === 'dark' ? 'light' : 'dark';
  document.documentElement.dataset.theme = next;
  writeStorage(THEME_KEY, next);
  renderThemeButton();
}

function setLive(status) {
  const live = $('live');
  live.dataset.state = status;
  live.querySelector('.live-text').textContent = t(`live.${status}`);
}

// ---------------------------------------------------------------------------------------------
// Tabs: the side panel's tabs, and the single-column navigation on a phone

function markTabs(list, isSelected) {
  for (const tab of list.querySelectorAll('[role="tab"]')) {
    const selected = isSelected(tab);
    tab.setAttribute('aria-selected', selected ? 'true' : 'false');
    tab.tabIndex = selected ? 0 : -1;
  }
}

/** WAI-ARIA tabs: click selects, arrow keys / Home / End move and select. */
function setupTablist(list, select) {
  list.addEventListener('click', (event) => {
    const tab = event.target.closest('[role="tab"]');
    if (tab && list.contains(tab)) select(tab);
  });
  list.addEventListener('keydown', (event) => {
    const tabs = [...list.querySelectorAll('[role="tab"]')];
    const i = tabs.indexOf(document.activeElement);
    if (i < 0) return;
    const moves = { ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: tabs.length - 1 };
    if (!(event.key in moves)) return;
    event.preventDefault();
    const tab = tabs[(moves[event.key] + tabs.length) % tabs.length];
    tab.focus();
    select(tab);
  });
}

function showSideTab(name) {
  state.sideTab = name;
  markTabs($('side-tabs'), (tab) => tab.dataset.tab === name);
  for (const tab of SIDE_TABS) $(`panel-${tab}`).hidden = tab !== name;
  if (SIDE_TABS.includes(state.view) && state.view !== name) showView(name);
  if (name === 'jobs') attempt(loadJobs);
  if (name === 'approvals') attempt(loadConfirmations);
  if (name === 'memory') attempt(loadMemory);
  if (name === 'notices') attempt(() => loadNotices(attempt));
}

// ---------------------------------------------------------------------------------------------
// Memory: what the current thread's agent remembers (facts it noted, turns it recalls); forget one

function memoryAgent() {
  return (state.current && state.current.agent) || 'assistant';
}

function memoryItem(memory) {
  const where = memory.thread_id ? memory.thread_id : t('memory.noted');
  return h(
    'li',
    { class: 'memory-item', 'data-testid': 'memory-item', 'data-kind': memory.kind },
    h('p', { class: 'prewrap' }, memory.text),
    h('p', { class: 'muted small' }, `${memory.said_at.slice(0, 10)} · ${where} `,
      h('button', { type: 'button', class: 'link', 'data-testid': 'memory-forget', onclick: () => attempt(() => forgetMemory(memory.id)) }, t('memory.forget'))),
  );
}

function showMemory(items, emptyKey) {
  $('memory-list').replaceChildren(...(items.length ? items.map(memoryItem) : [h('li', { class: 'empty' }, t(emptyKey))]));
}

async function loadMemory() {
  const agent = memoryAgent();
  const query = $('memory-input').value.trim();
  const [listed, found] = await Promise.all([api.memory(agent), query ? api.searchMemory(query, agent) : null]);
  $('memory-counts').textContent = t('memory.counts', { agent, facts: listed.counts.fact, turns: listed.counts.turn });
  if (found) showMemory(found.hits || [], 'memory.noHits');
  else showMemory(listed.facts, 'memory.empty');
}

async function forgetMemory(id) {
  await api.forgetMemory(id);
  await loadMemory();
}

async function togglePrivate() {
  if (!state.currentId || !state.current) return;
  state.current = await api.privateThread(state.currentId, !state.current.private);
  renderChatHead();
  if (state.sideTab === 'memory') attempt(loadMemory);
}

function showView(view) {
  state.view = view;
  document.body.dataset.view = view;
  markTabs($('mobile-nav'), (tab) => tab.dataset.view === view);
  if (SIDE_TABS.includes(view) && state.sideTab !== view) showSideTab(view);
}

function renderBadges() {
  const approvals = visibleConfirmations().length + visibleReviews().length;
  const jobs = activeJobCount();
  setBadge('approvals', approvals, t('badge.approvals', { n: approvals }));
  setBadge('jobs', jobs, t('badge.jobs', { n: jobs }));
  renderSkipLinks();
}

function setBadge(name, count, label) {
  for (const badge of document.querySelectorAll(`[data-badge="${name}"]`)) {
    badge.hidden = count === 0;
    badge.textContent = String(count);
    badge.title = label;
  }
}

// ---------------------------------------------------------------------------------------------
// Threads

function titleOf(thread) {
  return (thread && thread.title) || t('threads.untitled');
}

function findThread(threadId) {
  if (state.current && state.current.thread_id === threadId) return state.current;
  return state.threads.find((thread) => thread.thread_id === threadId) || null;
}

function threadTitle(threadId) {
  const thread = findThread(threadId);
  return thread ? titleOf(thread) : threadId;
}

function isRunning(thread) {
  return Boolean(thread.running) || state.working.has(thread.thread_id);
}

function setWorking(threadId, on) {
  if (on) {
    if (!state.working.has(threadId)) state.workingSince.set(threadId, Date.now());
    state.working.add(threadId);
  } else {
    state.working.delete(threadId);
    state.workingSince.delete(threadId);
  }
}

/** The server's `running` wins, except just after this page asked for a turn (it may be queued). */
function syncWorking(thread) {
  if (thread.running) return setWorking(thread.thread_id, true);
  const since = state.workingSince.get(thread.thread_id) || 0;
  if (Date.now() - since > WORKING_GRACE_MS) setWorking(thread.thread_id, false);
}

function knownTurns(threadId) {
  const thread = findThread(threadId);
  let turns = Math.max(thread ? thread.turns || 0 : 0, state.finishedTurn.get(threadId) || 0);
  if (threadId === state.currentId) for (const m of state.messages) turns = Math.max(turns, m.turn || 0);
  return turns;
}

/** After a POST that starts a turn: show "working" unless that turn already finished meanwhile. */
function markWorkingAfterPost(threadId, baseTurn) {
  if ((state.finishedTurn.get(threadId) || 0) > baseTurn) return;
  setWorking(threadId, true);
}

function upsertThread(thread, { prepend = false } = {}) {
  const i = state.threads.findIndex((item) => item.thread_id === thread.thread_id);
  if (i >= 0) state.threads[i] = thread;
  else if (prepend) state.threads.unshift(thread);
  if (thread.thread_id === state.currentId) state.current = thread;
  syncWorking(thread);
}

function mergeFirstPage(items) {
  if (!state.threadsPaged) return items;
  const fresh = new Set(items.map((thread) => thread.thread_id));
  return [...items, ...state.threads.filter((thread) => !fresh.has(thread.thread_id))];
}

async function loadThreads({ more = false } = {}) {
  const page = await api.threads({ before: more ? state.threadsNext : undefined });
  const items = page.items || [];
  if (more) {
    const known = new Set(state.threads.map((thread) => thread.thread_id));
    state.threads = [...state.threads, ...items.filter((thread) => !known.has(thread.thread_id))];
    state.threadsPaged = true;
    state.threadsNext = page.next ?? null;
  } else {
    state.threads = mergeFirstPage(items);
    if (!state.threadsPaged) state.threadsNext = page.next ?? null;
  }
  for (const thread of items) syncWorking(thread);
  const current = state.threads.find((thread) => thread.thread_id === state.currentId);
  if (current) state.current = current;
  state.threadsLoaded = true;
  renderThreads();
  renderWorking();
}

const refreshThreadsSoon = debounce(() => attempt(loadThreads), 400);

function threadMarker(thread) {
  if (isRunning(thread)) {
    return h('span', { class: 'dot spin', 'data-testid': 'thread-running', role: 'img', 'aria-label': t('threads.running'), title: t('threads.running') });
  }
  if (thread.pending) {
    return h('span', { class: 'dot warn', role: 'img', 'aria-label': t('threads.waiting'), title: t('threads.waiting') });
  }
  if (state.unread.has(thread.thread_id)) {
    return h('span', { class: 'dot unread', 'data-testid': 'thread-unread', role: 'img', 'aria-label': t('threads.unread'), title: t('threads.unread') });
  }
  return null;
}

function threadItem(thread) {
  const id = thread.thread_id;
  const turns = thread.turns === 1 ? t('threads.turn1') : t('threads.turns', { n: thread.turns || 0 });
  return h(
    'li',
    {},
    h(
      'button',
      {
        type: 'button',
        class: 'thread-item',
        'data-testid': 'thread-item',
        'data-thread': id,
        'data-focus-key': `thread:${id}`,
        'aria-current': id === state.currentId ? 'true' : null,
        tabindex: id === threadTabStop() ? '0' : '-1',
        onclick: () => openThread(id),
      },
      h('span', { class: 'thread-title', title: titleOf(thread) }, titleOf(thread)),
      h('span', { class: 'thread-meta' }, [thread.agent && thread.agent !== 'assistant' ? `${thread.agent} · ` : '', `${turns} · ${formatTime(thread.updated_at)}`].join('')),
      threadMarker(thread),
    ),
  );
}

/** The one thread of the list that Tab stops at (the open one, else the first): the arrow keys move
 * within the list, so a long list costs one Tab, not one per thread. */
function threadTabStop() {
  const open = state.threads.some((thread) => thread.thread_id === state.currentId);
  return open ? state.currentId : state.threads.length ? state.threads[0].thread_id : null;
}

function moveInThreadList(event) {
  const items = [...$('thread-list').querySelectorAll('.thread-item')];
  const i = items.indexOf(document.activeElement);
  const moves = { ArrowDown: i + 1, ArrowUp: i - 1, Home: 0, End: items.length - 1 };
  if (i < 0 || !(event.key in moves)) return;
  event.preventDefault();
  const target = items[Math.max(0, Math.min(items.length - 1, moves[event.key]))];
  for (const item of items) item.tabIndex = item === target ? 0 : -1;
  target.focus();
}

function renderThreads() {
  const stop = threadTabStop();
  keyedRender($('thread-list'), state.threads, {
    key: (thread) => thread.thread_id,
    sig: (thread) =>
      [thread.title, thread.turns, thread.updated_at, isRunning(thread), Boolean(thread.pending),
        state.unread.has(thread.thread_id), thread.thread_id === state.currentId, thread.thread_id === stop].join('|'),
    build: threadItem,
  });
  $('threads-empty').hidden = !state.threadsLoaded || state.threads.length > 0;
  $('threads-more').hidden = !state.threadsNext;
}

function setHash(threadId) {
  const want = threadId ? `#thread=${encodeURIComponent(threadId)}` : '';
  if (location.hash === want) return;
  history.replaceState(null, '', want || `${location.pathname}${location.search}`);
}

function threadFromHash() {
  const found = /(?:^#|&)thread=([^&]+)/.exec(location.hash);
  if (!found) return null;
  try {
    return decodeURIComponent(found[1]);
  } catch {
    return null;
  }
}

function resetConversation() {
  state.files = [];
  renderFiles();
  state.messages = [];
  state.optimistic = [];
  state.cards = new Map();
  state.turnUsage = new Map();
  keyedCaches.delete($('conversation'));
  keyedCaches.delete($('trace'));
  delegationTrees.clear();
  cancelRename();
}

async function openThread(threadId) {
  showView('chat');
  if (threadId === state.currentId && state.current) return;
  state.currentId = threadId;
  state.current = findThread(threadId);
  state.unread.delete(threadId);
  resetConversation();
  setHash(threadId);
  renderThreads();
  renderChat();
  renderTrace();
  await loadCurrentThread({ scroll: true });
}

function forgetCurrent() {
  state.currentId = null;
  state.current = null;
  resetConversation();
  setHash(null);
  renderThreads();
  renderChat();
  renderTrace();
}

// The agents of this store: a new thread goes to the one picked (the thread keeps it).
async function loadAgents() {
  const found = await api.agents();
  state.agents = found.items || [];
  const picker = $('agent-picker');
  const chosen = picker.value || 'assistant';
  picker.replaceChildren(...state.agents.map((a) => h('option', { value: a.name, title: a.description || '' }, a.name)));
  picker.value = state.agents.some((a) => a.name === chosen) ? chosen : 'assistant';
  $('agent-pick').hidden = state.agents.length < 2;
}

function pickedAgent() {
  const value = $('agent-picker').value;
  return value && value !== 'assistant' ? value : undefined;
}

async function newThread() {
  const thread = await api.createThread(undefined, pickedAgent());
  upsertThread(thread, { prepend: true });
  await openThread(thread.thread_id);
  $('composer').focus();
}

function startRename() {
  if (!state.current) return;
  const input = $('rename-input');
  input.value = state.current.title || '';
  $('rename-form').hidden = false;
  $('chat-title').hidden = true;
  $('chat-actions').hidden = true;
  input.focus();
  input.select();
}

function cancelRename({ focus = false } = {}) {
  $('rename-form').hidden = true;
  $('chat-title').hidden = false;
  $('chat-actions').hidden = false;
  if (focus) $('rename-thread').focus();
}

async function saveRename() {
  const title = $('rename-input').value.trim();
  if (!state.currentId || !title) return cancelRename({ focus: true });
  const thread = await api.renameThread(state.currentId, title);
  upsertThread(thread);
  cancelRename({ focus: true });
  renderThreads();
  renderChatHead();
}

async function deleteThread() {
  // A thread opened from a link may not be loaded yet: the click still counts.
  const thread = state.current || (state.currentId ? await api.thread(state.currentId) : null);
  if (!thread) return;
  if (!(await confirmDialog(t('threads.deleteConfirm', { title: titleOf(thread) })))) return;
  const out = await api.deleteThread(thread.thread_id);
  state.threads = state.threads.filter((item) => item.thread_id !== thread.thread_id);
  setWorking(thread.thread_id, false);
  forgetCurrent();
  showNotice(t('threads.deleted', { turns: out.cancelled_turns ?? 0, jobs: (out.stopped_jobs || []).length }));
  attempt(loadConfirmations);
  attempt(loadJobs);
  $('new-thread').focus();
}

// ---------------------------------------------------------------------------------------------
// The conversation of the current thread

async function loadCurrentThread({ scroll = false } = {}) {
  const id = state.currentId;
  if (!id) return;
  const busy = [$('conversation'), $('trace')];
  for (const el of busy) el.setAttribute('aria-busy', 'true');
  try {
    const thread = await api.thread(id); // first: a stale id is one 404, not three
    const [messages, steps] = await Promise.all([api.messages(id), api.steps(id)]);
    if (id !== state.currentId) return; // the person moved on meanwhile
    upsertThread(thread);
    state.messages = messages.items || [];
    dropSettledOptimistic();
    mergeSteps(steps.items || []);
    state.turnUsage = new Map((steps.usage || []).map((u) => [u.turn, u]));
    renderThreads();
    renderChat({ scroll });
    renderTrace({ scroll });
    await loadFiles(id);
  } catch (err) {
    if (err.status === 404 && id === state.currentId) {
      state.threads = state.threads.filter((thread) => thread.thread_id !== id);
      forgetCurrent();
      showError(new Error(t('threads.notFound')));
    } else {
      showError(err);
    }
  } finally {
    for (const el of busy) el.removeAttribute('aria-busy');
  }
}

const reloadCurrentSoon = debounce(() => loadCurrentThread(), 250);

// ---------------------------------------------------------------------------------------------
// Files: the formats ticked under the composer go with a message; the thread's files are listed
// under the conversation (per format only the newest), each a download.

function tickedFormats() {
  return [...document.querySelectorAll('#formats input[name=format]:checked')].map((box) => box.value);
}

function clearFormats() {
  for (const box of document.querySelectorAll('#formats input[name=format]')) box.checked = false;
}

async function loadFiles(id) {
  const data = await api.artifacts(id);
  if (id !== state.currentId) return;
  state.files = data.items || [];
  renderFiles();
}

const refreshFilesSoon = debounce(() => state.currentId && attempt(() => loadFiles(state.currentId)), 150);

function fileSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  return bytes < 1024 * 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

function renderFiles() {
  const files = state.files || [];
  $('files').hidden = files.length === 0;
  $('files-list').replaceChildren(
    ...files.map((f) =>
      h(
        'li',
        { class: 'file', 'data-testid': 'artifact', 'data-format': f.format, 'data-artifact': f.artifact_id },
        h('a', { href: f.url, download: f.name, 'data-testid': 'artifact-download', title: t('files.download') }, f.name),
        h('span', { class: 'muted small' }, ` ${f.format.toUpperCase()} · ${fileSize(f.size)}`),
      ),
    ),
  );
}

function onArtifactEvent(e) {
  if (state.currentId && e.topic === `thread:${state.currentId}`) refreshFilesSoon();
}

function dropSettledOptimistic() {
  state.optimistic = state.optimistic.filter(
    (sent) => !state.messages.some((m) => m.role === 'user' && m.turn > sent.base && m.text.trim() === sent.text),
  );
}

function visibleConfirmations() {
  return state.confirmations.filter((c) => !state.answered.has(c.pending_id));
}

function currentPending() {
  if (!state.currentId) return null;
  const listed = visibleConfirmations().find((c) => c.thread_id === state.currentId);
  if (listed) return listed;
  const pending = state.current && state.current.pending;
  if (!pending || state.answered.has(pending.pending_id)) return null;
  return { thread_id: state.currentId, ...pending };
}

function renderChat(options) {
  renderChatHead();
  renderConversation(options);
  renderWorking();
}

function renderChatHead() {
  const has = Boolean(state.currentId);
  $('chat-title').textContent = has ? titleOf(state.current) : t('chat.noThread');
  $('chat-title').title = $('chat-title').textContent; // (a long title shows three lines; all of it here)
  const agent = has && state.current ? state.current.agent : null;
  $('thread-agent').hidden = !agent || agent === 'assistant';
  $('thread-agent').textContent = agent ? t('agents.answers', { name: agent }) : '';
  renderActivity();
  $('rename-thread').hidden = !has;
  $('delete-thread').hidden = !has;
  const isPrivate = Boolean(has && state.current && state.current.private);
  $('private-thread').hidden = !has;
  $('private-thread').textContent = t(isPrivate ? 'memory.privateOn' : 'memory.private');
  $('private-thread').title = t('memory.privateTitle');
  $('private-thread').setAttribute('aria-pressed', String(isPrivate));
}

function conversationItems() {
  const items = state.messages.map((m) => ({ key: `${m.turn}:${m.role}`, message: m }));
  for (const sent of state.optimistic) {
    items.push({ key: `local:${sent.id}`, message: { role: 'user', text: sent.text, at: sent.at } });
  }
  const pending = currentPending();
  if (pending) items.push({ key: `confirm:${pending.pending_id}`, confirmation: pending });
  if (!items.length) items.push({ key: 'empty', empty: true });
  return items;
}

function conversationSig(item) {
  if (item.message) return [item.message.text, item.message.status, item.message.at].join('|');
  if (item.confirmation) return compactJson(item.confirmation);
  return 'empty';
}

function buildConversationItem(item) {
  if (item.message) return messageBubble(item.message);
  if (item.confirmation) return confirmationCard(item.confirmation, { inline: true });
  return h(
    'div',
    { class: 'empty-chat', 'data-testid': 'chat-empty' },
    h('p', { class: 'empty-lead' }, t('chat.empty')),
    h('p', { class: 'muted' }, t('chat.emptyHint')),
  );
}

function messageBubble(message) {
  const user = message.role === 'user';
  const proactive = message.status === 'proactive';
  const showStatus = !user && !proactive && message.status && message.status !== 'completed';
  return h(
    'article',
    {
      class: `msg ${user ? 'msg-user' : 'msg-assistant'}${proactive ? ' msg-proactive' : ''}`,
      'data-testid': user ? 'msg-user' : proactive ? 'msg-proactive' : 'msg-assistant',
      'data-turn': message.turn ?? null,
    },
    h(
      'div',
      { class: 'msg-meta' },
      h('span', { class: 'who' }, user ? t('chat.you') : proactive ? t('chat.proactive') : t('chat.assistant')),
      message.at ? h('time', { datetime: message.at }, formatTime(message.at)) : null,
      showStatus ? chip(message.status) : null,
    ),
    h('div', { class: 'msg-text' }, message.text || ''),
  );
}

function renderConversation({ scroll = false } = {}) {
  const box = $('conversation');
  const stick = scroll || nearBottom(box);
  keyedRender(box, conversationItems(), {
    key: (item) => item.key,
    sig: conversationSig,
    build: buildConversationItem,
  });
  renderSkipLinks();
  if (stick) box.scrollTop = box.scrollHeight;
}

function workingText() {
  const thinking = state.thinking.get(state.currentId);
  if (thinking) {
    // A slow model (a cold prompt on a CPU takes minutes): it works, it is not frozen.
    const seconds = Math.round(thinking.elapsed_s);
    return thinking.tokens
      ? t('chat.thinkingTokens', { seconds, tokens: thinking.tokens })
      : t('chat.thinking', { seconds });
  }
  const execution = state.execOfThread.get(state.currentId);
  const progress = execution ? state.progress.get(execution) : null;
  if (!progress) return t('chat.working');
  const parts = [];
  if (typeof progress.fraction === 'number') parts.push(`${Math.round(progress.fraction * 100)}%`);
  if (progress.message) parts.push(progress.message);
  return parts.length ? t('chat.workingProgress', { progress: parts.join(' · ') }) : t('chat.working');
}

function renderWorking() {
  const slot = $('working-slot');
  const on = Boolean(state.currentId) && state.working.has(state.currentId);
  if (!on) {
    slot.replaceChildren();
    stopWatchdog();
    return;
  }
  let el = slot.firstElementChild;
  if (!el) {
    el = h(
      'div',
      { class: 'working', 'data-testid': 'working' },
      h('span', { class: 'spinner', 'aria-hidden': 'true' }),
      h('span', { class: 'working-text', role: 'status' }),
      // Ctrl-C for the page: the turn ends now, and the job it waits on is stopped.
      h('button', { type: 'button', class: 'small', 'data-testid': 'cancel-turn', onclick: () => attempt(cancelTurn) }),
    );
    slot.append(el);
  }
  el.querySelector('.working-text').textContent = workingText();
  const cancel = el.querySelector('[data-testid=cancel-turn]');
  cancel.textContent = t('chat.cancelTurn');
  cancel.title = t('chat.cancelTurnHint');
  startWatchdog();
}

async function cancelTurn() {
  const id = state.currentId;
  const button = $('working-slot').querySelector('[data-testid=cancel-turn]');
  if (!id || (button && button.disabled)) return;
  if (button) button.disabled = true;
  try {
    const out = await api.cancelTurn(id);
    if (id !== state.currentId) return;
    setWorking(id, false);
    if (out.turn === null) state.optimistic = []; // a message still queued: it never became a turn
    if (out.cancelled) showNotice(t('chat.turnCancelled', { jobs: (out.stopped_jobs || []).length }));
    renderWorking();
    await loadCurrentThread();
    attempt(loadJobs);
  } finally {
    if (button) button.disabled = false;
  }
}

// While "working" shows, check now and then that the turn still runs: a missed event never leaves
// it spinning forever.
let watchdog = null;

function startWatchdog() {
  if (!watchdog) watchdog = setInterval(checkWorking, WATCHDOG_MS);
}

function stopWatchdog() {
  clearInterval(watchdog);
  watchdog = null;
}

async function checkWorking() {
  const id = state.currentId;
  if (!id || !state.working.has(id)) return stopWatchdog();
  let thread;
  try {
    thread = await api.thread(id);
  } catch {
    return; // the stream's indicator already says the server is away
  }
  if (id !== state.currentId) return;
  upsertThread(thread);
  if (!state.working.has(id)) await loadCurrentThread();
  renderWorking();
  renderThreads();
}

function titleFrom(text) {
  const line = text.split('\n')[0].trim();
  return Array.from(line).length > 60 ? `${Array.from(line).slice(0, 59).join('')}…` : line;
}

// Images picked with the attach button, sent with the next message as base64 (the server checks them).
function renderAttached() {
  const files = $('image-input').files;
  $('attached').textContent = files && files.length ? t('images.attached', { n: files.length }) : '';
}

function clearAttached() {
  $('image-input').value = '';
  renderAttached();
}

function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(',', 2)[1] || '');
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function attachedImages() {
  const files = Array.from($('image-input').files || []);
  return Promise.all(files.map(async (file) => ({ name: file.name.slice(0, 200), data: await base64Of(file) })));
}

let sentCount = 0;

async function sendMessage() {
  const box = $('composer');
  const text = box.value.trim();
  if (!text || state.sending) return;
  state.sending = true;
  $('send').disabled = true;
  let sent = null;
  try {
    if (!state.currentId) {
      const thread = await api.createThread(titleFrom(text), pickedAgent());
      upsertThread(thread, { prepend: true });
      await openThread(thread.thread_id);
    }
    const id = state.currentId;
    const base = knownTurns(id);
    sent = { id: ++sentCount, text, at: new Date().toISOString(), base };
    state.optimistic.push(sent);
    box.value = '';
    autosize();
    renderConversation({ scroll: true });
    const images = await attachedImages();
    await api.sendMessage(id, text, tickedFormats(), images);
    clearAttached();
    clearFormats(); // the files asked for go with this message only, like its images
    markWorkingAfterPost(id, base);
    renderWorking();
    renderThreads();
  } catch (err) {
    if (sent) state.optimistic = state.optimistic.filter((item) => item !== sent);
    if (!box.value) box.value = text;
    renderConversation();
    showError(err);
  } finally {
    state.sending = false;
    $('send').disabled = false;
  }
}

function autosize() {
  const box = $('composer');
  box.style.height = 'auto';
  box.style.height = `${Math.min(box.scrollHeight, 240)}px`;
}

// ---------------------------------------------------------------------------------------------
// Confirmations: inline in the conversation and in the Approvals panel

function dangerChip(danger) {
  const level = danger || 'unknown';
  const tone = { destructive: 'bad', caution: 'warn', safe: 'ok' }[level] || 'neutral';
  return h(
    'span',
    { class: 'chip danger-chip', 'data-tone': tone, 'data-testid': 'danger', 'data-danger': level },
    `${t('confirm.danger')}: ${t(`danger.${level}`)}`,
  );
}

function confirmationCard(c, { inline = false } = {}) {
  const approve = h('button', { type: 'button', class: 'primary', 'data-testid': 'approve', 'data-focus-key': `approve:${c.pending_id}` }, t('confirm.approve'));
  const deny = h('button', { type: 'button', class: 'danger', 'data-testid': 'deny', 'data-focus-key': `deny:${c.pending_id}` }, t('confirm.deny'));
  approve.addEventListener('click', () => answerConfirmation(c, true, [approve, deny]));
  deny.addEventListener('click', () => answerConfirmation(c, false, [approve, deny]));
  const thread = inline
    ? null
    : h(
        'p',
        { class: 'approval-thread' },
        h('span', { class: 'muted' }, `${t('confirm.thread')}: `),
        h('button', { type: 'button', class: 'link', 'data-testid': 'approval-open', onclick: () => openThread(c.thread_id) }, threadTitle(c.thread_id)),
      );
  return h(
    'article',
    {
      class: `approval${inline ? ' inline' : ''}`,
      'data-testid': inline ? 'inline-approval' : 'approval',
      'data-thread': c.thread_id,
      'data-pending': c.pending_id,
      'data-danger': c.danger || 'unknown',
    },
    h('header', { class: 'approval-head' }, h('h3', {}, t('confirm.heading')), dangerChip(c.danger)),
    thread,
    c.question ? h('p', { class: 'approval-question prewrap' }, c.question) : null,
    h('p', { class: 'approval-tool' }, h('span', { class: 'muted' }, `${t('confirm.tool')}: `), h('code', { 'data-testid': 'approval-tool' }, c.tool)),
    h('p', { class: 'muted small' }, t('confirm.args')),
    h('pre', { class: 'json', 'data-testid': 'approval-args' }, prettyJson(c.args)),
    h('div', { class: 'row' }, approve, deny),
  );
}

/** Where the focus goes once `card` (an answered question) leaves: the next card's first button in the
 * same list, else `fallback` — never the page's top (a disabled, removed button drops the focus). */
function focusAfterAnswer(card, fallback) {
  const list = card && card.parentElement;
  const cards = list ? [...list.querySelectorAll(':scope > .approval')] : [];
  const i = cards.indexOf(card);
  const next = cards.slice(i + 1).concat(cards.slice(0, Math.max(i, 0))).find((other) => other.isConnected && other !== card);
  const key = next && next.querySelector('[data-focus-key]') ? next.querySelector('[data-focus-key]').dataset.focusKey : null;
  return () => {
    const target = (key && document.querySelector(`[data-focus-key="${CSS.escape(key)}"]`)) || fallback();
    if (target && !target.disabled) target.focus();
  };
}

function answeredFallback(card) {
  return () => (card && card.classList.contains('inline') ? $('composer') : $('panel-approvals'));
}

async function answerConfirmation(c, approve, buttons) {
  const card = buttons[0].closest('.approval');
  const refocus = focusAfterAnswer(card, answeredFallback(card));
  const hadFocus = card && card.contains(document.activeElement);
  setBusy(buttons, true);
  const base = knownTurns(c.thread_id);
  try {
    await api.answerConfirmation(c.thread_id, c.pending_id, approve);
  } catch (err) {
    if (err.status === 404) {
      // The question is no longer waiting (answered elsewhere, or its turn ended): drop its card.
      state.answered.add(c.pending_id);
      renderApprovals();
      renderChat();
      renderBadges();
      reloadCurrentSoon();
    } else {
      setBusy(buttons, false);
    }
    showError(err);
    attempt(loadConfirmations);
    return;
  }
  state.answered.add(c.pending_id);
  markWorkingAfterPost(c.thread_id, base);
  showNotice(t(approve ? 'confirm.sentApproved' : 'confirm.sentDenied'));
  renderApprovals();
  renderChat();
  renderThreads();
  renderBadges();
  if (hadFocus || document.activeElement === document.body) refocus();
  refreshConfirmationsSoon();
}

async function loadConfirmations() {
  const [data, reviews] = await Promise.all([api.confirmations(), api.reviews()]);
  state.confirmations = data.items || [];
  state.reviews = reviews.items || [];
  // `state.answered` keeps every id answered from this page: question ids are never reused, and the
  // thread's record may still name an answered question until it is reloaded (a stale card came back).
  renderApprovals();
  renderConversation();
  renderBadges();
}

const refreshConfirmationsSoon = debounce(() => attempt(loadConfirmations), 200);

const reviewKey = (r) => `review:${r.run_id}:${r.task.task_id}`;

function visibleReviews() {
  // A key answered here leaves the list until the server no longer lists it (a task may wait again).
  return state.reviews.filter((r) => !state.answered.has(`${reviewKey(r)}:${r.task.attempts}`));
}

/** A goal run's review point, answered where the questions are answered. */
function reviewCard(r) {
  const task = r.task;
  const key = reviewKey(r);
  const approve = h('button', { type: 'button', class: 'primary', 'data-testid': 'review-approve', 'data-focus-key': `approve:${key}` }, t('task.approve'));
  const reject = h('button', { type: 'button', class: 'danger', 'data-testid': 'review-reject', 'data-focus-key': `reject:${key}` }, t('task.reject'));
  approve.addEventListener('click', () => answerReview(r, 'approve', [approve, reject]));
  reject.addEventListener('click', () => answerReview(r, 'reject', [approve, reject]));
  const kind = task.review && task.review.kind ? t(`review.${task.review.kind}`) : t('task.waiting');
  const shown = task.call ? (task.review && task.review.args) || task.call.args : null;
  return h(
    'article',
    { class: 'approval review', 'data-testid': 'review', 'data-run': r.run_id, 'data-task': task.task_id },
    h('header', { class: 'approval-head' }, h('h3', {}, t('review.heading')), chip(task.status)),
    h(
      'p',
      { class: 'approval-thread' },
      h('span', { class: 'muted' }, `${t('review.run')}: `),
      h('button', { type: 'button', class: 'link', 'data-testid': 'review-open', onclick: () => openReview(r) }, r.goal || r.run_id),
    ),
    h('p', { class: 'approval-question' }, task.title || task.task_id),
    h('p', { class: 'muted small' }, kind),
    shown ? h('pre', { class: 'json', 'data-testid': 'review-args' }, `${task.call.task} ${prettyJson(shown)}`) : null,
    task.message && !(task.review && task.review.kind) ? h('p', { class: 'muted small prewrap' }, task.message) : null,
    h('div', { class: 'row' }, approve, reject),
  );
}

function openReview(r) {
  showSideTab('runs');
  selectRun(r.run_id);
  state.taskId = r.task.task_id;
  renderRunDetail();
}

async function answerReview(r, verb, buttons) {
  const card = buttons[0].closest('.approval');
  const refocus = focusAfterAnswer(card, answeredFallback(card));
  setBusy(buttons, true);
  const run = await attempt(() => api.answerTask(r.run_id, r.task.task_id, verb, {}));
  if (!run) {
    setBusy(buttons, false);
    attempt(loadConfirmations);
    return;
  }
  state.answered.add(`${reviewKey(r)}:${r.task.attempts}`);
  if (run.run_id === state.runId) setRun(run);
  showNotice(t(verb === 'approve' ? 'confirm.sentApproved' : 'confirm.sentDenied'));
  renderApprovals();
  renderBadges();
  refocus();
  refreshConfirmationsSoon();
  refreshRunsSoon();
}

function renderApprovals() {
  const items = [...visibleConfirmations(), ...visibleReviews().map((review) => ({ review }))];
  keyedRender($('approval-list'), items.length ? items : [{ empty: true }], {
    key: (c) => (c.empty ? 'empty' : c.review ? reviewKey(c.review) : c.pending_id),
    sig: (c) => (c.empty ? 'empty' : c.review ? compactJson(c.review) : `${compactJson(c)}|${threadTitle(c.thread_id)}`),
    build: (c) => (c.empty ? h('p', { class: 'empty' }, t('approvals.empty')) : c.review ? reviewCard(c.review) : confirmationCard(c)),
  });
}

/** The skip link to what waits for an answer: there only while something waits. */
function renderSkipLinks() {
  const link = $('skip-waiting');
  const pending = currentPending(); // (the thread's own record may know of its question first)
  const listed = pending && visibleConfirmations().some((c) => c.pending_id === pending.pending_id);
  const waiting = visibleConfirmations().length + visibleReviews().length + (pending && !listed ? 1 : 0);
  link.hidden = waiting === 0;
  link.textContent = t('app.skipWaiting', { n: waiting });
}

function goToWaiting(event) {
  event.preventDefault();
  const inline = $('conversation').querySelector('[data-testid=inline-approval] [data-testid=approve]');
  if (inline && !inline.disabled) {
    showView('chat');
    inline.focus();
    return;
  }
  showSideTab('approvals');
  if (state.view === 'chat' || state.view === 'threads') showView('approvals');
  const first = $('approval-list').querySelector('.approval button:not([disabled]):not(.link)');
  (first || $('panel-approvals')).focus();
}

// ---------------------------------------------------------------------------------------------
// Trace: the steps of the current thread's turns, as cards

const KIND_ORDER = { plan: 0, action: 0, confirmation: 1, observation: 2, budget: 0, result: 0 };

function toolNames(calls) {
  return (calls || []).map((call) => call.name || call.tool || '?');
}

function turnStatus(turn) {
  const answer = state.messages.find((m) => m.turn === turn && m.role === 'assistant');
  return answer ? answer.status : undefined;
}

function toolCards(step, at) {
  const action = { kind: 'action', tool: step.tool, args: step.args, ts: at };
  const result = step.result;
  if (step.status === 'started' || !result) return [action];
  const observation = {
    kind: 'observation',
    tool: step.tool,
    status: result.status,
    message: result.message,
    duration: result.duration_seconds,
    // A delegation: the thread its sub-agent worked in, to open from here (who asked whom).
    delegated: result.data && result.data.thread_id ? { thread: result.data.thread_id, to: result.data.to } : null,
    ts: at,
  };
  if (result.status === 'skipped') return [observation]; // skipped calls never started
  if (typeof result.duration_seconds === 'number') action.ts = at - result.duration_seconds;
  return [action, observation];
}

function confirmationCards(step, at) {
  const base = { kind: 'confirmation', tool: step.tool, args: step.args, ts: at };
  if (step.result && step.result.status === 'needs_confirmation') {
    return [{ kind: 'action', tool: step.tool, args: step.args, ts: at }, { ...base, question: step.text }];
  }
  // An answered confirmation: the step's text says which way ("confirmed …" / "declined …").
  return [{ ...base, approved: !/^declined/i.test(step.text || '') }];
}

/** The cards one recorded step stands for. */
function cardsFromStep(step) {
  const at = secondsOf(step.created_at);
  let cards = [];
  if (step.kind === 'model') {
    const calls = (step.result && step.result.model_calls) || [];
    cards = [{ kind: 'plan', text: step.text, tools: toolNames(step.args && step.args.tool_calls), call: calls[0] || null, ts: at }];
  } else if (step.kind === 'tool') {
    cards = toolCards(step, at);
  } else if (step.kind === 'confirmation') {
    cards = confirmationCards(step, at);
  } else if (step.kind === 'budget') {
    cards = [{ kind: 'budget', extend: step.result ? step.result.extend : 0, reason: step.text, ts: at }];
  } else if (step.kind === 'final') {
    cards = [{ kind: 'result', status: turnStatus(step.turn), text: step.text, ts: at }];
  }
  return cards.map((card) => ({ ...card, turn: step.turn, index: step.index }));
}

const EVENT_CARDS = {
  model_decided: (e) => ({ kind: 'plan', text: e.text, tools: toolNames(e.tool_calls), call: e.call || null }),
  tool_started: (e) => ({ kind: 'action', tool: e.tool, args: e.args }),
  tool_finished: (e) => ({
    kind: 'observation',
    tool: e.tool,
    status: e.result && e.result.status,
    message: e.result && e.result.message,
    duration: e.result && e.result.duration_seconds,
    delegated: e.result && e.result.data && e.result.data.thread_id ? { thread: e.result.data.thread_id, to: e.result.data.to } : null,
  }),
  confirmation_requested: (e) => ({ kind: 'confirmation', tool: e.tool, args: e.args, question: e.question }),
  confirmation_answered: (e) => ({ kind: 'confirmation', tool: e.tool, args: e.args, approved: e.approved }),
  budget_reviewed: (e) => ({ kind: 'budget', extend: e.extend, reason: e.reason }),
  turn_finished: (e) => ({ kind: 'result', status: e.status, text: e.final }),
};

const cardKey = (card) => `${card.turn}:${card.index}:${card.kind}`;

/** Steps are the record: they replace what live events drew for the same (turn, index, kind). */
function mergeSteps(steps) {
  for (const step of steps) for (const card of cardsFromStep(step)) state.cards.set(cardKey(card), card);
}

/** A live event's card, unless that (turn, index, kind) is drawn already. */
function addLiveCard(event) {
  const make = EVENT_CARDS[event.kind];
  if (!make) return false;
  const card = { ...make(event), turn: event.turn, index: event.index, ts: event.ts };
  const key = cardKey(card);
  if (state.cards.has(key)) return false;
  state.cards.set(key, card);
  return true;
}

function sortedCards() {
  return [...state.cards.values()].sort(
    (a, b) => a.turn - b.turn || a.index - b.index || KIND_ORDER[a.kind] - KIND_ORDER[b.kind],
  );
}

function turnAsk(turn) {
  return state.messages.find((m) => m.turn === turn && m.role === 'user') || null;
}

/** A plan with no tool call whose text is the turn's answer: the result card says it already. */
function repeatsAnswer(card, cards) {
  if (card.kind !== 'plan' || (card.tools && card.tools.length) || !card.text) return false;
  return cards.some((other) => other.kind === 'result' && other.turn === card.turn && other.text === card.text);
}

/** Turn headings and cards in order; each card knows the seconds since the one before it. */
function traceItems() {
  const items = [];
  const cards = sortedCards();
  let turn = null;
  let previous = NaN;
  for (const card of cards) {
    if (card.turn !== turn) {
      turn = card.turn;
      const ask = turnAsk(turn);
      previous = ask ? secondsOf(ask.at) : NaN;
      items.push({ key: `turn:${turn}`, heading: turn, ask: ask ? ask.text : '', usage: turnUsageOf(turn, cards) });
    }
    const delta = card.ts - previous;
    items.push({
      key: cardKey(card),
      card,
      delta: Number.isFinite(delta) && delta >= 0 ? delta : null,
      repeat: repeatsAnswer(card, cards),
    });
    if (Number.isFinite(card.ts)) previous = card.ts;
  }
  return items;
}

/** What some model calls cost, for a person: "2 model calls · 1,234 in / 56 out tokens · 3.4 s"; tokens
 * a service did not report are said to be not reported, never shown as 0. */
function usageText(u) {
  const n = u.model_calls || 0;
  const r = u.reported_calls || 0;
  let tokens = t('usage.notReported');
  if (r) {
    tokens = t('usage.tokens', { i: (u.input_tokens || 0).toLocaleString(), o: (u.output_tokens || 0).toLocaleString() });
    if (r < n) tokens += ` ${t('usage.partial', { r, n })}`;
  }
  return [n === 1 ? t('usage.call') : t('usage.calls', { n }), tokens, formatSeconds(u.duration_s || 0)].join(' · ');
}

function callUsageText(call) {
  const reported = typeof call.input_tokens === 'number' || typeof call.output_tokens === 'number';
  const tokens = reported
    ? t('usage.tokens', { i: (call.input_tokens || 0).toLocaleString(), o: (call.output_tokens || 0).toLocaleString() })
    : t('usage.notReported');
  const took = typeof call.duration_s === 'number' ? formatSeconds(call.duration_s) : '';
  return [call.model, tokens, took].filter(Boolean).join(' · ');
}

/** A turn's cost: the record's (its delegations included) once read, else what its live cards say. */
function turnUsageOf(turn, cards) {
  if (state.turnUsage.has(turn)) return state.turnUsage.get(turn);
  const calls = cards.filter((c) => c.turn === turn && c.call).map((c) => c.call);
  if (!calls.length) return null;
  const reported = calls.filter((c) => typeof c.input_tokens === 'number' || typeof c.output_tokens === 'number');
  return {
    model_calls: calls.length,
    reported_calls: reported.length,
    input_tokens: reported.reduce((sum, c) => sum + (c.input_tokens || 0), 0),
    output_tokens: reported.reduce((sum, c) => sum + (c.output_tokens || 0), 0),
    duration_s: calls.reduce((sum, c) => sum + (c.duration_s || 0), 0),
  };
}

function cardTiming(card, delta) {
  if (card.kind === 'observation') {
    if (typeof card.duration !== 'number') return null;
    const d = formatSeconds(card.duration);
    return { text: d, label: t('trace.took', { d }) };
  }
  if (delta === null) return null;
  const d = formatSeconds(delta);
  return { text: `+${d}`, label: t('trace.after', { d }) };
}

function cardStatus(card) {
  if (card.kind === 'observation' || card.kind === 'result') return card.status ? chip(card.status) : null;
  if (card.kind === 'confirmation') {
    if (card.approved === true) return chip('completed', { title: t('trace.approved') });
    if (card.approved === false) return chip('rejected', { title: t('trace.declined') });
    return chip('needs_confirmation');
  }
  return null;
}

function toolChips(tools) {
  if (!tools.length) return h('p', { class: 'muted small' }, t('trace.noTool'));
  return h('p', { class: 'tool-chips' }, h('span', { class: 'muted small' }, `${t('trace.chose')}: `), tools.map((name) => h('code', { class: 'tool-chip' }, name)));
}

function cardBody(card, repeat) {
  switch (card.kind) {
    case 'plan':
      return [
        card.text && !repeat ? h('p', { class: 'prewrap' }, card.text) : null,
        toolChips(card.tools || []),
        card.call ? h('p', { class: 'muted small', 'data-testid': 'model-usage', title: t('usage.title') }, callUsageText(card.call)) : null,
      ];
    case 'action':
      return [h('code', { class: 'json block' }, compactJson(card.args))];
    case 'observation':
      return [
        card.message ? h('p', { class: 'prewrap' }, card.message) : null,
        card.delegated ? delegationTree(card.delegated, 0) : null,
      ];
    case 'confirmation':
      if (card.approved === undefined) {
        return [card.question ? h('p', { class: 'prewrap' }, card.question) : h('p', {}, t('trace.asked')), h('code', { class: 'json block' }, compactJson(card.args))];
      }
      return [h('p', {}, t(card.approved ? 'trace.approved' : 'trace.declined'))];
    case 'budget':
      return [h('p', {}, card.extend ? t('trace.extend', { n: card.extend }) : t('trace.noExtend')), card.reason ? h('p', { class: 'muted prewrap' }, card.reason) : null];
    case 'result':
      return [card.text ? h('p', { class: 'prewrap' }, card.text) : null];
    default:
      return [];
  }
}

const MAX_TREE_DEPTH = 8;

/** One line of a delegated turn's record, as the tree shows it (what it decided, ran, got, said). */
function treeLine(step, depth) {
  const result = step.result || {};
  const data = result.data || {};
  let body = null;
  if (step.kind === 'model') {
    const tools = toolNames(step.args && step.args.tool_calls);
    body = [h('span', { class: 'card-kind' }, t('trace.kind.plan')), tools.length ? tools.map((n) => h('code', { class: 'tool-chip' }, n)) : h('span', { class: 'muted small' }, t('trace.noTool'))];
  } else if (step.kind === 'tool') {
    body = [
      h('code', { class: 'card-tool' }, step.tool || '?'),
      chip(step.status === 'started' && !step.result ? 'started' : result.status),
      result.message ? h('span', { class: 'prewrap small' }, ` ${result.message}`) : null,
      data.thread_id && depth + 1 < MAX_TREE_DEPTH ? delegationTree({ thread: data.thread_id, to: data.to }, depth + 1) : null,
    ];
  } else if (step.kind === 'confirmation') {
    body = [h('span', { class: 'card-kind' }, t('trace.kind.confirmation')), h('span', { class: 'prewrap small' }, ` ${step.text || ''}`)];
  } else if (step.kind === 'final') {
    body = [h('span', { class: 'card-kind' }, t('trace.kind.result')), h('span', { class: 'prewrap' }, ` ${step.text || ''}`)];
  }
  return body ? h('li', { class: 'tree-line', 'data-testid': 'tree-line', 'data-kind': step.kind }, body) : null;
}

/** Who asked whom, what it did, what it returned: a delegation's own steps, nested under the call that
 * handed the work over (read when opened), each sub-delegation a branch of its own. */
const delegationTrees = new Map(); // `${lang}|${depth}|${thread}` → its <details>, kept across redraws

/** The trace redraws a card as its record lands (the live card and the step's differ): the tree in it is
 * the same element, moved into the new card, so a click on it is never lost with the old card. */
function delegationTree(delegated, depth) {
  const key = `${lang()}|${depth}|${delegated.thread}`;
  if (!delegationTrees.has(key)) delegationTrees.set(key, buildDelegationTree(delegated, depth));
  return delegationTrees.get(key);
}

function buildDelegationTree(delegated, depth) {
  const list = h('ul', { class: 'tree', 'data-testid': 'tree-steps' });
  const details = h(
    'details',
    { class: 'delegation-tree', 'data-testid': 'delegation-tree', 'data-thread': delegated.thread },
    h('summary', {}, t('trace.delegationSteps', { name: delegated.to })),
    list,
    h('button', { type: 'button', class: 'link', 'data-testid': 'open-delegation', onclick: () => openThread(delegated.thread) },
      t('trace.delegation', { name: delegated.to })),
  );
  let loaded = false;
  details.addEventListener('toggle', async () => {
    if (!details.open) state.openTrees.delete(delegated.thread);
    if (!details.open || loaded) return;
    state.openTrees.add(delegated.thread);
    loaded = true;
    try {
      const steps = await api.steps(delegated.thread);
      const lines = (steps.items || []).map((step) => treeLine(step, depth)).filter(Boolean);
      list.replaceChildren(...(lines.length ? lines : [h('li', { class: 'muted small' }, t('trace.treeEmpty'))]));
    } catch (err) {
      loaded = false;
      list.replaceChildren(h('li', { class: 'muted small' }, String(err.message || err)));
    }
  });
  // The trace is redrawn as events arrive: a tree the person unfolded stays unfolded (and is read again).
  if (state.openTrees.has(delegated.thread)) details.open = true;
  return details;
}

function traceCard({ card, delta, repeat }) {
  const timing = cardTiming(card, delta);
  return h(
    'article',
    { class: 'trace-card', 'data-testid': 'trace-card', 'data-kind': card.kind, 'data-turn': card.turn, 'data-index': card.index },
    h(
      'header',
      { class: 'card-head' },
      h('span', { class: 'card-kind' }, t(`trace.kind.${card.kind}`)),
      card.tool ? h('code', { class: 'card-tool' }, card.tool) : null,
      cardStatus(card),
      timing ? h('span', { class: 'card-time', title: timing.label }, timing.text) : null,
    ),
    ...cardBody(card, repeat),
  );
}

function traceItem(item) {
  if (item.empty) return h('p', { class: 'empty' }, item.empty);
  if (item.heading !== undefined) {
    return h(
      'h3',
      { class: 'turn-heading', 'data-testid': 'trace-turn' },
      h('span', {}, t('trace.turn', { n: item.heading })),
      item.ask ? h('span', { class: 'turn-ask', title: item.ask }, item.ask) : null,
      item.usage ? h('span', { class: 'turn-usage muted small', 'data-testid': 'turn-usage', title: t('usage.title') }, usageText(item.usage)) : null,
    );
  }
  return traceCard(item);
}

function traceSig(item) {
  if (item.empty) return item.empty;
  if (item.heading !== undefined) return `${item.ask}|${compactJson(item.usage)}`;
  const delta = item.delta === null ? '' : item.delta.toFixed(2);
  return `${compactJson(item.card)}|${delta}|${item.repeat}`;
}

function renderTrace({ scroll = false } = {}) {
  const box = $('trace');
  const scroller = $('panel-trace');
  const stick = scroll || nearBottom(scroller);
  let items = traceItems();
  if (!state.currentId) items = [{ key: 'empty', empty: t('trace.noThread') }];
  else if (!items.length) items = [{ key: 'empty', empty: t('trace.empty') }];
  keyedRender(box, items, { key: (item) => item.key, sig: traceSig, build: traceItem });
  if (stick) scroller.scrollTop = scroller.scrollHeight;
}

// ---------------------------------------------------------------------------------------------
// Jobs

function activeJobCount() {
  return state.jobs.filter((job) => ACTIVE_JOB.has(job.status)).length;
}

function seedProgress(job) {
  const progress = job.data && job.data.progress;
  if (!progress) return;
  const known = state.progress.get(job.execution_id);
  if (!known || (progress.ts || 0) >= (known.ts || 0)) state.progress.set(job.execution_id, progress);
}

/** An execution refused only because the person had not confirmed it yet: the agent asked, nothing was
 * turned down. */
function isConsentAsk(job) {
  return job.status === 'rejected' && Boolean(job.data && job.data.needs_confirmation);
}

/** The list without the asks that were answered by a run of the same call (the approved job is the
 * record of it; listing its ask as "rejected" beside it read as a refusal). */
function foldConsentAsks(jobs) {
  const ranAfter = (ask) => jobs.some(
    (job) => job !== ask && !isConsentAsk(job) && job.task_id === ask.task_id
      && (job.data && job.data.origin) === (ask.data && ask.data.origin)
      && String((job.data && job.data.created_at) || '') >= String((ask.data && ask.data.created_at) || ''),
  );
  return jobs.filter((job) => !isConsentAsk(job) || !ranAfter(job));
}

async function loadJobs() {
  const data = await api.jobs({ active: state.jobsFilter === 'active' });
  state.jobs = foldConsentAsks(data.items || []);
  for (const job of state.jobs) seedProgress(job);
  renderJobs();
  renderBadges();
}

const refreshJobsSoon = debounce(() => attempt(loadJobs), 150);

/** The bar of a job: moving (indeterminate) only while the job is active; an ended job's bar stands still
 * at its last known fraction, or is left out when it never reported one. */
function fillProgress(box, progress, active) {
  const bar = box.querySelector('progress');
  const fraction = progress && typeof progress.fraction === 'number' ? Math.max(0, Math.min(1, progress.fraction)) : null;
  box.dataset.state = active ? 'active' : 'ended';
  bar.hidden = fraction === null && !active;
  if (fraction === null) bar.removeAttribute('value');
  else bar.value = fraction;
  bar.setAttribute('aria-valuetext', fraction === null ? (progress && progress.message) || '' : `${Math.round(fraction * 100)}%`);
  box.querySelector('.progress-pct').textContent = fraction === null ? '' : `${Math.round(fraction * 100)}%`;
  box.querySelector('.progress-msg').textContent = (progress && progress.message) || '';
}

function progressBlock(job) {
  const progress = state.progress.get(job.execution_id);
  const active = ACTIVE_JOB.has(job.status);
  if (!progress && !active) return null;
  const box = h(
    'div',
    { class: 'progress', 'data-testid': 'job-progress' },
    h('progress', { max: '1', 'aria-label': job.task_id }),
    h('span', { class: 'progress-pct' }),
    h('span', { class: 'progress-msg', 'data-testid': 'job-progress-text' }),
  );
  fillProgress(box, progress, active);
  return box;
}

function jobRow(job) {
  const id = job.execution_id;
  const log = state.jobLogs.get(id);
  const logOpen = state.jobLogs.has(id);
  const origin = job.data && job.data.origin;
  // Another installation's job (a database shared by several homes): shown, never acted on here.
  const elsewhere = job.data && job.data.elsewhere;
  return h(
    'li',
    { class: 'job-row', 'data-testid': 'job-row', 'data-job': id, 'data-status': isConsentAsk(job) ? 'asked' : job.status, 'data-elsewhere': elsewhere ? 'true' : null },
    h(
      'div',
      { class: 'job-head' },
      h('code', { class: 'job-task' }, job.task_id),
      chip(isConsentAsk(job) ? 'asked' : job.status),
      job.duration_seconds && !ACTIVE_JOB.has(job.status)
        ? h('span', { class: 'muted small' }, formatSeconds(job.duration_seconds))
        : null,
    ),
    job.message && !isConsentAsk(job) ? h('p', { class: 'job-msg prewrap' }, job.message) : null,
    isConsentAsk(job) ? h('p', { class: 'job-msg' }, t('jobs.asked')) : null,
    h('p', { class: 'muted small job-id' }, id, origin ? ` · ${t('jobs.origin', { origin })}` : ''),
    elsewhere ? h('p', { class: 'muted small', 'data-testid': 'job-elsewhere' }, t('jobs.elsewhere', { host: elsewhere.host || '?' })) : null,
    progressBlock(job),
    h(
      'div',
      { class: 'row' },
      ACTIVE_JOB.has(job.status) && !elsewhere
        ? h('button', { type: 'button', class: 'small danger', 'data-testid': 'job-stop', 'data-focus-key': `stop:${id}`, onclick: (e) => stopJob(job, e.currentTarget) }, t('jobs.stop'))
        : null,
      elsewhere ? null : h(
        'button',
        { type: 'button', class: 'small', 'data-testid': 'job-log', 'data-focus-key': `log:${id}`, 'aria-expanded': logOpen ? 'true' : 'false', onclick: () => toggleLog(id) },
        logOpen ? t('jobs.hideLog') : t('jobs.log'),
      ),
    ),
    logOpen && typeof log === 'string' ? h('pre', { class: 'log', 'data-testid': 'job-log-text', tabindex: '0' }, log || t('jobs.logEmpty')) : null,
  );
}

function renderJobs() {
  for (const button of document.querySelectorAll('[data-filter]')) {
    button.setAttribute('aria-pressed', button.dataset.filter === state.jobsFilter ? 'true' : 'false');
  }
  const items = state.jobs.length ? state.jobs : [{ empty: true }];
  keyedRender($('job-list'), items, {
    key: (job) => (job.empty ? 'empty' : job.execution_id),
    sig: (job) => (job.empty ? state.jobsFilter : `${compactJson(job)}|${state.jobLogs.has(job.execution_id)}|${state.jobLogs.get(job.execution_id) ?? ''}`),
    build: (job) => (job.empty ? h('li', { class: 'empty' }, t(state.jobsFilter === 'active' ? 'jobs.emptyActive' : 'jobs.empty')) : jobRow(job)),
  });
}

/** A live progress report: update the bar in place (no re-render of the list). */
function showProgress(executionId) {
  const row = document.querySelector(`[data-testid="job-row"][data-job="${CSS.escape(executionId)}"]`);
  const job = state.jobs.find((item) => item.execution_id === executionId);
  if (!row || !job) return;
  const active = ACTIVE_JOB.has(job.status);
  let box = row.querySelector('.progress');
  if (!box) {
    box = progressBlock(job);
    if (!box) return;
    row.querySelector('.row').before(box);
  }
  fillProgress(box, state.progress.get(executionId), active);
}

async function stopJob(job, button) {
  button.disabled = true;
  const stopped = await attempt(() => api.stopJob(job.execution_id));
  if (!stopped) {
    if (button.isConnected) button.disabled = false;
    return;
  }
  state.jobs = state.jobs.map((item) => (item.execution_id === job.execution_id ? stopped : item));
  showNotice(t('jobs.stopped', { task: job.task_id }));
  renderJobs();
  renderBadges();
  refreshJobsSoon();
}

async function toggleLog(executionId) {
  if (state.jobLogs.has(executionId)) {
    state.jobLogs.delete(executionId);
    renderJobs();
    return;
  }
  const out = await attempt(() => api.jobLog(executionId, 50));
  if (!out) return;
  state.jobLogs.set(executionId, out.text || '');
  renderJobs();
}

async function setJobsFilter(filter) {
  if (state.jobsFilter === filter) return;
  state.jobsFilter = filter;
  renderJobs();
  await attempt(loadJobs);
}

// ---------------------------------------------------------------------------------------------
// Goal runs

function summaryOf(run) {
  const tasks = run.tasks || [];
  return {
    run_id: run.run_id,
    status: run.status,
    goal: run.goal,
    message: run.message,
    created_at: run.created_at,
    ended_at: run.ended_at,
    tasks_total: tasks.length,
    tasks_done: tasks.filter((task) => DONE_TASK.has(task.status)).length,
  };
}

async function loadRuns() {
  const data = await api.runs();
  state.runs = data.items || [];
  renderRuns();
}

const refreshRunsSoon = debounce(() => attempt(loadRuns), 300);

async function loadSelectedRun() {
  const id = state.runId;
  if (!id) return;
  const run = await api.run(id);
  if (id !== state.runId) return;
  setRun(run);
}

const refreshRunSoon = debounce(() => attempt(loadSelectedRun), 100);

function setRun(run) {
  state.run = run;
  state.runCounts.set(run.run_id, summaryOf(run));
  const i = state.runs.findIndex((item) => item.run_id === run.run_id);
  const summary = { ...(i >= 0 ? state.runs[i] : {}), ...summaryOf(run) };
  if (i >= 0) state.runs[i] = summary;
  else state.runs.unshift(summary);
  renderRuns();
}

/** done/total of a run: the list's, unless it has none and a full copy of the run was loaded. */
function runProgress(run) {
  const loaded = state.runCounts.get(run.run_id);
  const counts = !run.tasks_total && loaded ? loaded : run;
  return t('runs.progress', { done: counts.tasks_done ?? 0, total: counts.tasks_total ?? 0 });
}

function runItem(run) {
  const selected = run.run_id === state.runId;
  return h(
    'li',
    {},
    h(
      'button',
      {
        type: 'button',
        class: 'run-item',
        'data-testid': 'run-item',
        'data-run': run.run_id,
        'data-status': run.status,
        'data-focus-key': `run:${run.run_id}`,
        'aria-current': selected ? 'true' : null,
        onclick: () => selectRun(run.run_id),
      },
      h('span', { class: 'run-goal' }, run.goal || t('runs.noGoal')),
      h(
        'span',
        { class: 'run-meta' },
        chip(run.status),
        h('span', {}, runProgress(run)),
        h('span', { class: 'muted' }, formatTime(run.created_at)),
      ),
    ),
  );
}

function renderRuns() {
  const items = state.runs.length ? state.runs : [{ empty: true }];
  keyedRender($('run-list'), items, {
    key: (run) => (run.empty ? 'empty' : run.run_id),
    sig: (run) => (run.empty ? 'empty' : `${compactJson(run)}|${runProgress(run)}|${run.run_id === state.runId}`),
    build: (run) => (run.empty ? h('li', { class: 'empty' }, t('runs.empty')) : runItem(run)),
  });
  renderRunDetail();
}

function selectRun(runId) {
  if (state.runId !== runId) {
    state.runId = runId;
    state.run = null;
    state.taskId = null;
    state.taskDraft = {};
  }
  renderRuns();
  attempt(loadSelectedRun);
}

function selectTask(taskId) {
  if (state.taskId !== taskId) state.taskDraft = {};
  state.taskId = taskId;
  renderRunDetail();
  const detail = $('run-detail').querySelector('[data-testid="task-detail"]');
  if (detail) detail.scrollIntoView({ block: 'nearest' });
}

function closeTask() {
  const taskId = state.taskId;
  state.taskId = null;
  state.taskDraft = {};
  renderRunDetail();
  const node = $('run-detail').querySelector(`[data-focus-key="${CSS.escape(`node:${taskId}`)}"]`);
  if (node) node.focus();
}

async function answerTask(verb, body) {
  const run = await attempt(() => api.answerTask(state.runId, state.taskId, verb, body));
  if (!run) return;
  state.taskDraft = {};
  setRun(run);
  refreshRunsSoon();
}

async function cancelRun() {
  if (!(await confirmDialog(t('runs.cancelConfirm')))) return;
  const run = await attempt(() => api.cancelRun(state.runId));
  if (run) setRun(run);
  refreshRunsSoon();
  refreshJobsSoon();
}

async function resumeRun() {
  const out = await attempt(() => api.resumeRun(state.runId));
  if (!out) return;
  if (out.run) setRun(out.run);
  if (out.done) showNotice(t('runs.resumed', { done: out.done }));
  refreshRunsSoon();
}

function runHeader(run) {
  const terminal = TERMINAL_RUN.has(run.status);
  return h(
    'div',
    { class: 'run-head' },
    h('h3', { class: 'run-title' }, run.goal || t('runs.noGoal')),
    h('p', { class: 'run-meta' }, chip(run.status), h('code', { class: 'muted small' }, run.run_id)),
    run.usage && run.usage.model_calls ? h('p', { class: 'muted small', 'data-testid': 'run-usage', title: t('usage.title') }, usageText(run.usage)) : null,
    run.message ? h('p', { class: 'muted prewrap' }, run.message) : null,
    h(
      'div',
      { class: 'row' },
      h('button', { type: 'button', class: 'small danger', 'data-testid': 'run-cancel', 'data-focus-key': 'run-cancel', disabled: terminal, onclick: cancelRun }, t('runs.cancel')),
      h('button', { type: 'button', class: 'small', 'data-testid': 'run-resume', 'data-focus-key': 'run-resume', disabled: run.status === 'completed', onclick: resumeRun }, t('runs.resume')),
    ),
  );
}

function runGraph(run) {
  const tasks = run.tasks || [];
  const wrap = h('div', {
    class: 'dag-wrap',
    'data-testid': 'run-dag',
    onkeydown: (event) => {
      if (event.key === 'Escape' && state.taskId) {
        event.preventDefault();
        closeTask();
      }
    },
  });
  if (!tasks.length) wrap.append(h('p', { class: 'muted' }, t('runs.planning')));
  else wrap.append(renderDag(tasks, { selectedId: state.taskId, onSelect: selectTask }));
  return wrap;
}

function taskDetail(run) {
  const task = (run.tasks || []).find((item) => item.task_id === state.taskId);
  if (!task) return null;
  return renderTaskDetail(task, state.taskDraft, {
    onAnswer: answerTask,
    onClose: closeTask,
    onDraft: (patch) => {
      const reopen = 'open' in patch && patch.open !== state.taskDraft.open;
      state.taskDraft = { ...state.taskDraft, ...patch };
      if (reopen) {
        renderRunDetail();
        const target = $('run-detail').querySelector(patch.open ? '[data-testid="task-edit-input"]' : '[data-testid="task-edit"]');
        if (target) target.focus();
      }
    },
  });
}

function renderRunDetail() {
  const box = $('run-detail');
  const scroll = box.querySelector('.dag-wrap');
  const left = scroll ? scroll.scrollLeft : 0;
  if (!state.runId) {
    renderInto(box, [state.runs.length ? h('p', { class: 'muted' }, t('runs.pick')) : null]);
    return;
  }
  const run = state.run;
  if (!run || run.run_id !== state.runId) {
    renderInto(box, []);
    return;
  }
  renderInto(box, [runHeader(run), runGraph(run), taskDetail(run)]);
  const wrap = box.querySelector('.dag-wrap');
  if (wrap) wrap.scrollLeft = left;
}

async function startGoal() {
  const input = $('goal-input');
  const goal = input.value.trim();
  if (!goal) {
    input.focus();
    return;
  }
  const button = $('goal-start');
  button.disabled = true;
  try {
    const run = await attempt(() => api.startRun(goal));
    if (!run) return;
    input.value = '';
    state.runId = run.run_id;
    state.taskId = null;
    state.taskDraft = {};
    setRun(run);
    refreshRunsSoon();
  } finally {
    button.disabled = false;
  }
}

// ---------------------------------------------------------------------------------------------
// Live events

function touchThread(threadId, patch) {
  const thread = findThread(threadId);
  if (!thread) {
    refreshThreadsSoon(); // a thread this page has not seen yet
    return;
  }
  // A turn's number is the thread's count of turns from the moment it starts: the list says so at once
  // (it said "0 turns" for a new thread until the list was read again).
  const turns = Math.max(thread.turns || 0, patch.turns || 0);
  Object.assign(thread, patch, { turns });
  renderThreads();
}

function setActivity(threadId, activity) {
  state.activity.set(threadId, activity);
  if (threadId === state.currentId) renderActivity();
}

function renderActivity() {
  const activity = (state.currentId && state.activity.get(state.currentId)) || 'idle';
  const el = $('agent-activity');
  el.dataset.activity = activity;
  el.textContent = t(`activity.${activity}`);
}

function onTurnStarted(e) {
  setActivity(e.thread_id, 'thinking');
  setWorking(e.thread_id, true);
  state.execOfThread.delete(e.thread_id); // the last turn's progress is not this one's
  touchThread(e.thread_id, { running: true, turns: e.turn });
  if (e.thread_id !== state.currentId) return;
  if (!state.messages.some((m) => m.turn === e.turn && m.role === 'user')) {
    state.messages.push({ turn: e.turn, role: 'user', text: e.message, status: 'running', at: new Date(e.ts * 1000).toISOString() });
    const i = state.optimistic.findIndex((sent) => sent.text === (e.message || '').trim());
    if (i >= 0) state.optimistic.splice(i, 1);
  }
  renderChat();
  renderTrace();
}

function onModelThinking(e) {
  state.thinking.set(e.thread_id, { elapsed_s: e.elapsed_s, tokens: e.tokens });
  if (e.thread_id === state.currentId) renderWorking();
}

function onTraceEvent(e) {
  if (state.thinking.delete(e.thread_id) && e.thread_id === state.currentId) renderWorking();
  if (e.thread_id !== state.currentId) return;
  if (addLiveCard(e)) renderTrace();
}

function onToolStarted(e) {
  setActivity(e.thread_id, e.activity || 'other');
  if (e.execution_id) state.execOfThread.set(e.thread_id, e.execution_id);
  onTraceEvent(e);
  refreshJobsSoon();
}

function onToolProgress(e) {
  state.progress.set(e.execution_id, { fraction: e.fraction, message: e.message, ts: e.ts });
  showProgress(e.execution_id);
  if (state.currentId && e.topic === `thread:${state.currentId}`) {
    state.execOfThread.set(state.currentId, e.execution_id);
    renderWorking();
  }
}

function onConfirmationEvent(e) {
  onTraceEvent(e);
  refreshConfirmationsSoon();
  if (e.thread_id === state.currentId) reloadCurrentSoon();
  else refreshThreadsSoon();
}

function onTurnFinished(e) {
  setActivity(e.thread_id, 'idle');
  state.thinking.delete(e.thread_id);
  state.finishedTurn.set(e.thread_id, Math.max(e.turn, state.finishedTurn.get(e.thread_id) || 0));
  setWorking(e.thread_id, false);
  touchThread(e.thread_id, { running: false, turns: e.turn });
  refreshConfirmationsSoon();
  refreshThreadsSoon();
  if (e.thread_id !== state.currentId) {
    state.unread.add(e.thread_id);
    renderThreads();
    return;
  }
  if (!state.messages.some((m) => m.turn === e.turn && m.role === 'assistant')) {
    state.messages.push({ turn: e.turn, role: 'assistant', text: e.final, status: e.status, at: new Date(e.ts * 1000).toISOString() });
  }
  addLiveCard(e);
  renderChat();
  renderTrace();
  reloadCurrentSoon(); // the record has the last word (titles, pending questions, statuses)
}

function onRunEvent(e) {
  refreshRunsSoon();
  refreshConfirmationsSoon(); // a review point reached or answered: the Approvals list and badge
  if (e.run_id === state.runId) refreshRunSoon();
}

function onProactive(e) {
  refreshThreadsSoon();
  if (state.sideTab === 'notices') attempt(() => loadNotices(attempt));
  if (e.thread_id !== state.currentId) {
    state.unread.add(e.thread_id);
    renderThreads();
    return;
  }
  if (!state.messages.some((m) => m.turn === e.turn && m.role === 'assistant')) {
    state.messages.push({ turn: e.turn, role: 'assistant', text: e.text, status: 'proactive', at: new Date(e.ts * 1000).toISOString() });
  }
  renderChat();
}

const HANDLERS = {
  proactive_posted: onProactive,
  turn_started: onTurnStarted,
  model_decided: onTraceEvent,
  model_thinking: onModelThinking,
  tool_started: onToolStarted,
  tool_progress: onToolProgress,
  tool_finished: (e) => {
    setActivity(e.thread_id, 'thinking'); // the model reads the result next
    onTraceEvent(e);
  },
  confirmation_requested: onConfirmationEvent,
  confirmation_answered: onConfirmationEvent,
  budget_reviewed: onTraceEvent,
  turn_finished: onTurnFinished,
  job_state_changed: () => refreshJobsSoon(),
  artifact_created: onArtifactEvent,
  run_changed: onRunEvent,
  run_task_changed: onRunEvent,
};

let source = null;
let streamBroken = false;
let retryDelay = 1000;
let retryTimer = null;
// The server pings every `every_s` seconds (it says so in each ping). An open stream that brings
// nothing for several pings is cut off (a server that is gone, frozen or unreachable sends no error):
// the indicator stops saying "live" and the stream is opened again.
const STALL_PINGS = 3;
let heardAt = 0;
let pingEvery = 15;
let stallTimer = null;

function heard() {
  heardAt = Date.now();
}

function onPing(message) {
  heard();
  try {
    const every = Number(JSON.parse(message.data).every_s);
    if (every > 0) pingEvery = every;
  } catch {
    // an older server's ping: keep the interval known
  }
  if (source && source.readyState === EventSource.OPEN && $('live').dataset.state !== 'live') setLive('live');
}

function checkStalled() {
  if (!source || source.readyState !== EventSource.OPEN) return;
  if (Date.now() - heardAt <= STALL_PINGS * pingEvery * 1000) return;
  streamBroken = true;
  setLive('stalled');
  connectEvents(); // a new request: it opens (and says "live") only when the server answers again
}

function dispatch(kind, message) {
  heard();
  const id = Number(message.lastEventId);
  if (Number.isFinite(id) && id > 0) {
    if (id <= state.lastEventId) return; // seen already
    state.lastEventId = id;
  }
  let event;
  try {
    event = JSON.parse(message.data);
  } catch {
    return; // not an event: nothing to show
  }
  try {
    HANDLERS[kind]({ kind, ...event });
  } catch (err) {
    showError(err);
  }
}

const REFUSED = new Set(['busy', 'unauthorized']); // the server said no: the banner says why
let refusalShown = false; // the banner holds why the stream was refused: it goes once the stream opens

function connectEvents() {
  if (source) source.close();
  clearTimeout(retryTimer);
  const shown = $('live').dataset.state;
  if (!REFUSED.has(shown) && shown !== 'stalled') setLive(streamBroken ? 'reconnecting' : 'connecting');
  source = new EventSource(`/api/events?after=${encodeURIComponent(state.lastEventId)}`);
  if (!stallTimer) stallTimer = setInterval(checkStalled, 1000);
  source.addEventListener('ping', onPing);
  source.addEventListener('open', () => {
    heard();
    if (refusalShown) hideError();
    refusalShown = false;
    setLive('live');
    retryDelay = 1000;
    if (streamBroken) {
      streamBroken = false;
      resync();
    }
  });
  source.addEventListener('error', async () => {
    streamBroken = true;
    if (source.readyState !== EventSource.CLOSED) {
      setLive('reconnecting'); // the browser reconnects by itself
      return;
    }
    // The browser gave up: the server answered with an error, which EventSource does not show.
    // Ask once more with fetch to learn why, say so, and try again ourselves.
    const refusal = await streamRefusal();
    if (refusal) {
      setLive(refusal);
      showError(new Error(t(refusal === 'busy' ? 'error.streamsFull' : 'error.unauthorized')), { sticky: true });
      refusalShown = true;
    } else setLive('reconnecting');
    retryTimer = setTimeout(connectEvents, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 15000);
  });
  for (const kind of Object.keys(HANDLERS)) source.addEventListener(kind, (message) => dispatch(kind, message));
}

/** Why the event stream was refused: 'busy' (every slot taken), 'unauthorized', or null. */
async function streamRefusal() {
  const controller = new AbortController();
  try {
    const url = `/api/events?after=${encodeURIComponent(state.lastEventId)}`;
    const response = await fetch(url, { signal: controller.signal, credentials: 'same-origin', cache: 'no-store' });
    if (response.status === 401) return 'unauthorized';
    if (response.status !== 503) return null; // open after all (it is closed below), or the server is away
    const data = await response.json().catch(() => null);
    return data && data.detail && data.detail.code === 'busy' ? 'busy' : null;
  } catch {
    return null;
  } finally {
    controller.abort();
  }
}

/** Rebuild everything from the record (after a reconnect, or when the page is visible again). */
let lastResync = 0;

async function resync() {
  if (Date.now() - lastResync < 1500) return;
  lastResync = Date.now();
  await Promise.all([
    attempt(loadThreads),
    loadCurrentThread(),
    attempt(loadConfirmations),
    attempt(loadJobs),
    attempt(loadRuns),
    state.runId ? attempt(loadSelectedRun) : null,
  ]);
}

// ---------------------------------------------------------------------------------------------
// Wiring and start

function renderAll() {
  renderInfo();
  renderThemeButton();
  setLive($('live').dataset.state || 'connecting');
  renderThreads();
  renderChat();
  renderTrace();
  renderJobs();
  renderApprovals();
  renderRuns();
  renderBadges();
}

function bindTopBar() {
  $('theme-switch').addEventListener('click', toggleTheme);
  $('lang-switch').addEventListener('click', toggleLang);
  $('error-dismiss').addEventListener('click', hideError);
  $('notice-dismiss').addEventListener('click', hideNotice);
  $('skip-waiting').addEventListener('click', goToWaiting);
  for (const id of ['error', 'notice']) {
    $(id).addEventListener('keydown', (event) => {
      if (event.key === 'Escape') $(id).hidden = true;
    });
  }
  onLangChange(renderAll);
}

function bindThreads() {
  $('new-thread').addEventListener('click', () => attempt(newThread));
  $('image-input').addEventListener('change', renderAttached);
  $('thread-list').addEventListener('keydown', moveInThreadList);
  $('threads-more').addEventListener('click', () => attempt(() => loadThreads({ more: true })));
  $('rename-thread').addEventListener('click', startRename);
  $('private-thread').addEventListener('click', () => attempt(togglePrivate));
  wireNotices(attempt);
  $('memory-form').addEventListener('submit', (event) => {
    event.preventDefault();
    attempt(loadMemory);
  });
  $('delete-thread').addEventListener('click', () => attempt(deleteThread));
  $('rename-form').addEventListener('submit', (event) => {
    event.preventDefault();
    attempt(saveRename);
  });
  $('rename-cancel').addEventListener('click', () => cancelRename({ focus: true }));
  $('rename-input').addEventListener('keydown', (event) => {
    if (event.key === 'Escape') {
      event.preventDefault();
      cancelRename({ focus: true });
    }
  });
}

function bindComposer() {
  const box = $('composer');
  box.addEventListener('keydown', (event) => {
    // Enter sends; Shift+Enter is a new line; Enter that ends an IME composition is not a send.
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
      event.preventDefault();
      sendMessage();
    }
  });
  box.addEventListener('input', autosize);
  $('composer-form').addEventListener('submit', (event) => {
    event.preventDefault();
    sendMessage();
  });
}

function bindPanels() {
  setupTablist($('side-tabs'), (tab) => showSideTab(tab.dataset.tab));
  setupTablist($('mobile-nav'), (tab) => showView(tab.dataset.view));
  for (const button of document.querySelectorAll('[data-filter]')) {
    button.addEventListener('click', () => setJobsFilter(button.dataset.filter));
  }
  $('job-list').addEventListener('keydown', (event) => {
    const row = event.target.closest('[data-job]');
    if (event.key === 'Escape' && row && state.jobLogs.has(row.dataset.job)) {
      state.jobLogs.delete(row.dataset.job);
      renderJobs();
    }
  });
  $('goal-form').addEventListener('submit', (event) => {
    event.preventDefault();
    startGoal();
  });
}

function bindPage() {
  window.addEventListener('hashchange', () => {
    const id = threadFromHash();
    if (id && id !== state.currentId) openThread(id);
  });
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') resync();
  });
  window.addEventListener('unhandledrejection', (event) => {
    event.preventDefault();
    showError(event.reason);
  });
}

async function loadInfo() {
  try {
    state.info = await api.info();
    state.lastEventId = Number(state.info.last_event_id) || 0;
    renderInfo();
    return true;
  } catch (err) {
    const locked = err && err.status === 401;
    if (locked) setLive('unauthorized');
    showError(err, { sticky: locked });
    return false;
  }
}

/** The event stream starts from /api/info's last_event_id, never from 0 (that would replay all). */
async function startLive() {
  if (await loadInfo()) {
    hideError();
    streamBroken = true; // what failed to load meanwhile is loaded again once the stream is open
    connectEvents();
  } else {
    if ($('live').dataset.state !== 'unauthorized') setLive('reconnecting');
    setTimeout(startLive, 5000);
  }
}

async function boot() {
  applyLang();
  initTheme();
  bindTopBar();
  bindThreads();
  bindComposer();
  bindPanels();
  bindPage();
  keepFocusInPlace(() => $('composer'));
  showView('chat');
  renderAll();
  const infoReady = loadInfo();
  await Promise.all([attempt(loadThreads), attempt(loadConfirmations), attempt(loadJobs), attempt(loadRuns), attempt(loadAgents)]);
  const hashThread = threadFromHash();
  if (hashThread) await openThread(hashThread);
  if (await infoReady) connectEvents();
  else setTimeout(startLive, 5000);
}

boot();
