// Notices: what agents said first (proactive messages), each rated 👍/👎 with a word — ratings move
// the agent's threshold — and the schedules that make them speak at set times. Server data reaches the
// DOM through h() only (textContent and attribute values).

import { api } from './api.js';
import { t } from './i18n.js';
import { chip, h } from './dag.js';

const $ = (id) => document.getElementById(id);

function ratingButtons(decision, reload, attempt) {
  const note = h('input', {
    type: 'text', maxlength: '200', class: 'notice-note', 'data-testid': 'notice-note',
    placeholder: t('notices.note'), value: decision.rating_note || '',
  });
  const rate = (value) => attempt(async () => {
    await api.rate(decision.id, value, note.value.trim());
    await reload();
  });
  const button = (value, label, key) => h('button', {
    type: 'button', class: decision.rating === value ? 'primary' : '', 'data-testid': `notice-${key}`,
    'aria-pressed': String(decision.rating === value), title: t(`notices.${key}`), onclick: () => rate(value),
  }, label);
  return h('div', { class: 'notice-rate' }, button(1, t('notices.up'), 'up'), button(-1, t('notices.down'), 'down'), note);
}

function noticeItem(decision, reload, attempt) {
  return h(
    'li',
    { class: 'notice-item', 'data-testid': 'notice-item', 'data-category': decision.category },
    h('p', { class: 'muted small' }, `${decision.created_at.slice(0, 16).replace('T', ' ')} · ${decision.agent} · `,
      chip(decision.category), ` ${decision.reason}`),
    h('p', { class: 'prewrap' }, decision.message || ''),
    ratingButtons(decision, reload, attempt),
  );
}

function scheduleItem(schedule, reload, attempt) {
  const what = schedule.action === 'remind' ? t('notices.reminder', { text: schedule.text }) : t('notices.report');
  const last = schedule.last_fired_at ? schedule.last_fired_at.slice(0, 16).replace('T', ' ') : t('notices.never');
  return h(
    'li',
    { class: 'schedule-item', 'data-testid': 'schedule-item', 'data-name': schedule.name },
    h('p', {}, h('strong', {}, schedule.name), ` · ${schedule.cron} (${schedule.timezone || 'UTC'}) · ${what}`),
    h('p', { class: 'muted small' }, t('notices.last', { at: last }), ' ',
      h('button', { type: 'button', class: 'link', 'data-testid': 'schedule-run',
        onclick: () => attempt(async () => { await api.runSchedule(schedule.name); await reload(); }) }, t('notices.runNow')),
      ' · ',
      h('button', { type: 'button', class: 'link', 'data-testid': 'schedule-remove',
        onclick: () => attempt(async () => { await api.removeSchedule(schedule.name); await reload(); }) }, t('notices.remove'))),
  );
}

export async function loadNotices(attempt) {
  const reload = () => loadNotices(attempt);
  const [decided, scheduled] = await Promise.all([api.decisions({ fired: true, limit: 50 }), api.schedules()]);
  const notices = decided.decisions.map((d) => noticeItem(d, reload, attempt));
  $('notices-list').replaceChildren(...(notices.length ? notices : [h('li', { class: 'empty' }, t('notices.empty'))]));
  const items = scheduled.schedules.map((s) => scheduleItem(s, reload, attempt));
  $('schedule-list').replaceChildren(...(items.length ? items : [h('li', { class: 'empty' }, t('notices.noSchedules'))]));
}

export function wireNotices(attempt) {
  $('schedule-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const body = { name: $('schedule-name').value.trim(), cron: $('schedule-cron').value.trim() };
    const remind = $('schedule-remind').value.trim();
    if (remind) body.remind = remind;
    attempt(async () => {
      await api.addSchedule(body);
      $('schedule-form').reset();
      await loadNotices(attempt);
    });
  });
}
