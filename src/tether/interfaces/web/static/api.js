// The backend's JSON API: one fetch wrapper, then one small function per endpoint.
//
// Every request is same-origin with credentials and carries `X-Tether: 1` (a non-simple header: a
// cross-site page could not send it without a preflight, which the server never grants; the server's
// own check is on Origin and Sec-Fetch-Site). A 4xx/5xx answer becomes a
// thrown ApiError whose message is the server's own words, so the page can show it.

import { t } from './i18n.js';

export class ApiError extends Error {
  constructor(message, { status = 0, code = 'error' } = {}) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

/** A path whose ${…} parts are URL-encoded path segments: path`/api/threads/${id}`. */
export function path(strings, ...parts) {
  return strings.reduce((out, text, i) => out + text + (i < parts.length ? encodeURIComponent(parts[i]) : ''), '');
}

/** `base` with the defined, non-empty entries of `params` as its query string. */
export function withQuery(base, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') query.set(key, String(value));
  }
  const text = query.toString();
  return text ? `${base}?${text}` : base;
}

function messageOf(detail) {
  if (typeof detail === 'string') return detail;
  if (Array.isArray(detail)) {
    // FastAPI's validation errors: [{loc, msg, type}, …]
    return detail.map((item) => (item && item.msg ? item.msg : JSON.stringify(item))).join('; ');
  }
  if (detail && typeof detail === 'object') return detail.message || detail.code || JSON.stringify(detail);
  return '';
}

function errorFrom(response, data) {
  const detail = data && typeof data === 'object' ? data.detail : undefined;
  const code = detail && typeof detail === 'object' && !Array.isArray(detail) ? detail.code : undefined;
  // No token (a bookmark, a browser without the cookie): say how to get in, in the page's language.
  const message =
    response.status === 401 ? t('error.unauthorized') : messageOf(detail) || t('error.http', { status: response.status });
  return new ApiError(message, { status: response.status, code: code || `http_${response.status}` });
}

async function readBody(response) {
  if (response.status === 204) return null;
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    if (!response.ok) return null; // an HTML error page: the status line says enough
    throw new ApiError(t('error.badJson'), { status: response.status, code: 'bad_json' });
  }
}

/** One request. `body` (for POST/PATCH) is sent as JSON, `{}` when there is none. */
export async function request(method, url, body) {
  const headers = { Accept: 'application/json', 'X-Tether': '1' };
  const init = { method, headers, credentials: 'same-origin', cache: 'no-store' };
  if (method === 'POST' || method === 'PATCH' || method === 'PUT') {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body ?? {});
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    throw new ApiError(t('error.network', { message: err && err.message ? err.message : String(err) }), {
      code: 'network',
    });
  }
  const data = await readBody(response);
  if (!response.ok) throw errorFrom(response, data);
  return data;
}

const get = (url) => request('GET', url);
const post = (url, body) => request('POST', url, body);
const patch = (url, body) => request('PATCH', url, body);
const del = (url) => request('DELETE', url);

export const api = {
  info: () => get('/api/info'),

  threads: ({ before, limit = 50 } = {}) => get(withQuery('/api/threads', { limit, before })),
  createThread: (title, agent) => post('/api/threads', { ...(title ? { title } : {}), ...(agent ? { agent } : {}) }),
  agents: () => get('/api/agents'),
  thread: (threadId) => get(path`/api/threads/${threadId}`),
  renameThread: (threadId, title) => patch(path`/api/threads/${threadId}`, { title }),
  privateThread: (threadId, isPrivate) => patch(path`/api/threads/${threadId}`, { private: isPrivate }),
  memory: (agent) => get(withQuery('/api/memory', { agent })),
  searchMemory: (q, agent) => get(withQuery('/api/memory', { q, agent })),
  forgetMemory: (id) => del(path`/api/memory/${String(id)}`),
  decisions: ({ fired, limit = 50 } = {}) => get(withQuery('/api/initiative', { fired, limit })),
  rate: (id, rating, note) => post(path`/api/initiative/${String(id)}/rating`, { rating, note: note || '' }),
  schedules: () => get('/api/schedules'),
  addSchedule: (body) => post('/api/schedules', body),
  removeSchedule: (name) => del(path`/api/schedules/${name}`),
  runSchedule: (name) => post(path`/api/schedules/${name}/run`),
  deleteThread: (threadId) => del(path`/api/threads/${threadId}`),
  messages: (threadId) => get(path`/api/threads/${threadId}/messages`),
  cancelTurn: (threadId) => post(path`/api/threads/${threadId}/turn/cancel`),
  sendMessage: (threadId, text, formats = [], images = []) =>
    post(path`/api/threads/${threadId}/messages`, images.length ? { text, formats, images } : { text, formats }),
  artifacts: (threadId) => get(path`/api/threads/${threadId}/artifacts`),
  steps: (threadId, turn) => get(withQuery(path`/api/threads/${threadId}/steps`, { turn })),

  confirmations: () => get('/api/confirmations'),
  answerConfirmation: (threadId, pendingId, approve) =>
    post(path`/api/threads/${threadId}/confirmations/${pendingId}/` + (approve ? 'approve' : 'deny')),

  jobs: ({ active, limit = 50 } = {}) => get(withQuery('/api/jobs', { active, limit })),
  job: (executionId) => get(path`/api/jobs/${executionId}`),
  stopJob: (executionId) => post(path`/api/jobs/${executionId}/stop`),
  jobLog: (executionId, lines = 50) => get(withQuery(path`/api/jobs/${executionId}/log`, { lines })),

  /** Goal-run tasks waiting at their review point (shown with the questions in Approvals). */
  reviews: () => get('/api/reviews'),
  runs: ({ limit = 50 } = {}) => get(withQuery('/api/runs', { limit })),
  startRun: (goal) => post('/api/runs', { goal }),
  run: (runId) => get(path`/api/runs/${runId}`),
  /** verb: approve | reject | edit; body: {reason} or {args} / {description}. */
  answerTask: (runId, taskId, verb, body) => post(path`/api/runs/${runId}/tasks/${taskId}/${verb}`, body),
  cancelRun: (runId) => post(path`/api/runs/${runId}/cancel`),
  resumeRun: (runId) => post(path`/api/runs/${runId}/resume`),
};
