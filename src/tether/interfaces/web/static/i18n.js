// Every string the page shows, in English and Chinese, and the switch between them.
//
// The language follows the browser (zh* → zh) unless the person picked one, which is remembered in
// localStorage under `tether.lang`. Static markup names its strings with data-i18n attributes
// (see translateTree); everything built in JS calls t().

const STORAGE_KEY = 'tether.lang';
const LANGS = ['en', 'zh'];

const en = {
  'app.skip': 'Skip to the message box',
  'app.model': 'model: {model}',
  'app.modelUnknown': 'model: unknown',
  'app.version': 'tether {version}',
  'live.connecting': 'connecting…',
  'live.live': 'live',
  'live.reconnecting': 'reconnecting…',
  'live.unauthorized': 'no access',
  'live.busy': 'too many pages',
  'live.title': 'Live updates from the server',
  'theme.toDark': 'Switch to the dark theme',
  'theme.toLight': 'Switch to the light theme',
  'lang.button': '中文',
  'lang.label': 'Switch the language to Chinese',
  'nav.label': 'Sections',
  'nav.threads': 'Threads',
  'nav.chat': 'Chat',
  'side.label': 'Panels',
  'tab.trace': 'Trace',
  'tab.jobs': 'Jobs',
  'tab.approvals': 'Approvals',
  'tab.runs': 'Runs',
  'badge.approvals': '{n} waiting for approval',
  'badge.jobs': '{n} active jobs',
  'common.close': 'Close',
  'common.cancel': 'Cancel',
  'common.save': 'Save',
  'common.ok': 'OK',
  'common.dismiss': 'Dismiss',
  'common.seconds': '{s} s',
  'common.minutes': '{m} min {s} s',
  'common.confirmTitle': 'Please confirm',
  'error.network': 'The server could not be reached: {message}',
  'error.http': 'The request failed (HTTP {status}).',
  'error.badJson': 'The server answered with something that is not JSON.',
  'error.unauthorized': 'This page has no access to the server yet: open the link `tether serve` printed in its terminal (it holds the token), once. This page then comes in by itself.',
  'error.streamsFull': 'Live updates are paused: the server already sends them to as many pages as it allows. Close another tether page or tab; this page keeps trying and comes in by itself.',
  'threads.heading': 'Threads',
  'threads.new': 'New thread',
  'agents.label': 'Agent',
  'agents.answers': 'answered by {name}',
  'threads.more': 'Load more',
  'threads.empty': 'No threads yet. Send a message to start one.',
  'threads.untitled': 'Untitled thread',
  'threads.turns': '{n} turns',
  'threads.turn1': '1 turn',
  'threads.running': 'running',
  'threads.unread': 'new activity',
  'threads.waiting': 'waits for your confirmation',
  'threads.rename': 'Rename',
  'threads.renameLabel': 'New title for this thread',
  'threads.delete': 'Delete',
  'threads.deleteConfirm': 'Delete the thread “{title}”? Its running turn is cancelled and the jobs it started are stopped.',
  'threads.deleted': 'Thread deleted: {turns} turn(s) cancelled, {jobs} job(s) stopped.',
  'threads.notFound': 'That thread no longer exists.',
  'chat.heading': 'Conversation',
  'chat.noThread': 'New conversation',
  'chat.empty': 'Ask for something, e.g. “list the tasks”.',
  'chat.emptyHint': 'Enter sends, Shift+Enter starts a new line.',
  'chat.you': 'You',
  'chat.assistant': 'tether',
  'chat.working': 'working…',
  'chat.workingProgress': 'working… {progress}',
  'chat.thinking': 'the model is thinking… {seconds} s',
  'chat.thinkingTokens': 'the model is writing… {seconds} s, {tokens} tokens',
  'chat.cancelTurn': 'Cancel',
  'chat.cancelTurnHint': 'Cancel this turn, as Ctrl-C does: the job it waits on is stopped (background jobs go on)',
  'chat.turnCancelled': 'Turn cancelled; {jobs} job(s) stopped. The conversation goes on.',
  'composer.label': 'Message',
  'composer.placeholder': 'Ask tether… (Enter sends, Shift+Enter for a new line)',
  'composer.send': 'Send',
  'formats.legend': 'Files to make',
  'files.title': 'Files',
  'files.download': 'Download',
  'confirm.heading': 'Waiting for your confirmation',
  'confirm.thread': 'Thread',
  'confirm.tool': 'Tool',
  'confirm.args': 'Arguments',
  'confirm.danger': 'Danger',
  'confirm.approve': 'Approve',
  'confirm.deny': 'Deny',
  'confirm.open': 'Open thread',
  'confirm.sent': 'Answer sent.',
  'danger.safe': 'safe',
  'danger.caution': 'caution',
  'danger.destructive': 'destructive',
  'danger.unknown': 'unknown',
  'approvals.heading': 'Pending approvals',
  'approvals.empty': 'Nothing waits for your approval.',
  'trace.heading': 'Trace',
  'trace.noThread': 'Pick or start a thread to see each step of its turns here.',
  'trace.empty': 'Each step of this thread’s turns appears here as it happens.',
  'trace.turn': 'Turn {n}',
  'trace.kind.plan': 'Plan',
  'trace.kind.action': 'Action',
  'trace.kind.observation': 'Observation',
  'trace.kind.result': 'Result',
  'trace.kind.confirmation': 'Confirmation',
  'trace.kind.budget': 'Budget',
  'trace.chose': 'chose',
  'trace.noTool': 'no tool call: it answers',
  'trace.asked': 'asks the person',
  'trace.approved': 'approved by the person',
  'trace.declined': 'declined by the person',
  'trace.extend': 'extended by {n} step(s)',
  'trace.noExtend': 'not extended',
  'trace.took': 'took {d}',
  'trace.after': '{d} after the previous step',
  'jobs.heading': 'Jobs',
  'jobs.filter': 'Show',
  'jobs.active': 'Active',
  'jobs.all': 'All',
  'jobs.empty': 'No jobs yet.',
  'jobs.emptyActive': 'No job is running.',
  'jobs.stop': 'Stop',
  'jobs.log': 'Log',
  'jobs.hideLog': 'Hide log',
  'jobs.logEmpty': '(the log is empty)',
  'jobs.origin': 'from {origin}',
  'jobs.elsewhere': 'runs on {host} (another tether home on this database): stop it there',
  'jobs.stopped': 'Stop requested for {task}.',
  'runs.heading': 'Goal runs',
  'runs.goalLabel': 'Goal',
  'runs.goalPlaceholder': 'Describe a goal, e.g. “farm credits 3 times”',
  'runs.start': 'Start',
  'runs.empty': 'No goal runs yet. Describe a goal above to start one.',
  'runs.progress': '{done}/{total} done',
  'runs.pick': 'Pick a run to see its tasks.',
  'runs.planning': 'No tasks yet: the goal is still being planned.',
  'runs.cancel': 'Cancel run',
  'runs.resume': 'Resume',
  'runs.cancelConfirm': 'Cancel this run? Its running tasks are stopped.',
  'runs.resumed': 'Resume: {done}',
  'runs.dag': 'Task graph of the run',
  'runs.noGoal': '(no goal)',
  'task.detail': 'Task {task}',
  'task.title': 'What it does',
  'task.status': 'Status',
  'task.message': 'Message',
  'task.needs': 'Needs',
  'task.none': 'nothing',
  'task.call': 'Call',
  'task.description': 'Description',
  'task.review': 'Review',
  'task.attempts': 'Attempts',
  'task.attempt': 'Attempt {n}',
  'task.noAttempts': 'Not run yet.',
  'task.diagnostics': 'Diagnostics',
  'task.retries': '{n} attempts',
  'task.waiting': 'waits for a person',
  'task.reason': 'Reason (optional)',
  'task.approve': 'Approve',
  'task.reject': 'Reject',
  'task.edit': 'Edit',
  'task.editArgs': 'New arguments (a JSON object)',
  'task.editDescription': 'New description',
  'task.editSubmit': 'Save and run',
  'task.badJson': 'The arguments are not valid JSON: {error}',
  'task.notObject': 'The arguments must be a JSON object, e.g. {"count": 3}.',
  'task.emptyDescription': 'The description cannot be empty.',
  'review.before': 'It waits for your go-ahead before it runs.',
  'review.after': 'It ran; it waits for you to accept its result.',
  'review.failed': 'It failed; approve to try again, or reject it.',
  'review.loop_bound': 'Its loop reached its bound; approve to accept, or reject it.',
  'status.completed': 'completed',
  'status.failed': 'failed',
  'status.running': 'running',
  'status.needs_confirmation': 'needs confirmation',
  'status.waiting_for_human': 'waiting for a person',
  'status.pending': 'pending',
  'status.skipped': 'skipped',
  'status.cancelled': 'cancelled',
  'status.stopped': 'stopped',
  'status.rejected': 'rejected',
  'status.interrupted': 'interrupted',
  'status.budget_exhausted': 'budget exhausted',
  'status.timeout': 'timeout',
  'status.unknown': 'unknown',
  'status.not_started': 'not started',
  'status.not_found': 'not found',
  'status.starting': 'starting',
  'status.started': 'started',
  'status.finished': 'finished',
};

const zh = {
  'app.skip': '跳到输入框',
  'app.model': '模型：{model}',
  'app.modelUnknown': '模型：未知',
  'app.version': 'tether {version}',
  'live.connecting': '连接中…',
  'live.live': '实时',
  'live.reconnecting': '重新连接中…',
  'live.unauthorized': '无权访问',
  'live.busy': '页面过多',
  'live.title': '来自服务器的实时更新',
  'theme.toDark': '切换到深色主题',
  'theme.toLight': '切换到浅色主题',
  'lang.button': 'EN',
  'lang.label': '将界面语言切换为英文',
  'nav.label': '版块',
  'nav.threads': '会话',
  'nav.chat': '对话',
  'side.label': '面板',
  'tab.trace': '轨迹',
  'tab.jobs': '作业',
  'tab.approvals': '审批',
  'tab.runs': '目标运行',
  'badge.approvals': '{n} 项等待审批',
  'badge.jobs': '{n} 个作业进行中',
  'common.close': '关闭',
  'common.cancel': '取消',
  'common.save': '保存',
  'common.ok': '确定',
  'common.dismiss': '关闭',
  'common.seconds': '{s} 秒',
  'common.minutes': '{m} 分 {s} 秒',
  'common.confirmTitle': '请确认',
  'error.network': '无法连接服务器：{message}',
  'error.http': '请求失败（HTTP {status}）。',
  'error.badJson': '服务器返回的内容不是 JSON。',
  'error.unauthorized': '此页面还无权访问服务器：请打开 `tether serve` 在终端里打印的链接（其中带有令牌），打开一次即可，本页随后会自动接入。',
  'error.streamsFull': '实时更新已暂停：服务器推送更新的页面数已达上限。请关闭另一个 tether 页面或标签页；本页会持续重试并自动接入。',
  'threads.heading': '会话',
  'threads.new': '新会话',
  'agents.label': '助手',
  'agents.answers': '由 {name} 回答',
  'threads.more': '加载更多',
  'threads.empty': '还没有会话。发送一条消息即可开始。',
  'threads.untitled': '未命名会话',
  'threads.turns': '{n} 轮',
  'threads.turn1': '1 轮',
  'threads.running': '运行中',
  'threads.unread': '有新动态',
  'threads.waiting': '等待你的确认',
  'threads.rename': '重命名',
  'threads.renameLabel': '会话的新标题',
  'threads.delete': '删除',
  'threads.deleteConfirm': '删除会话「{title}」？正在进行的回合会被取消，它启动的作业会被停止。',
  'threads.deleted': '会话已删除：取消了 {turns} 个回合，停止了 {jobs} 个作业。',
  'threads.notFound': '这个会话已不存在。',
  'chat.heading': '对话',
  'chat.noThread': '新对话',
  'chat.empty': '说点什么，例如「列出可用的任务」。',
  'chat.emptyHint': 'Enter 发送，Shift+Enter 换行。',
  'chat.you': '你',
  'chat.assistant': 'tether',
  'chat.working': '处理中…',
  'chat.workingProgress': '处理中… {progress}',
  'chat.thinking': '模型思考中… {seconds} 秒',
  'chat.thinkingTokens': '模型输出中… {seconds} 秒，已写 {tokens} 个词元',
  'chat.cancelTurn': '取消',
  'chat.cancelTurnHint': '取消本轮（同 Ctrl-C）：停止它正在等待的任务（后台任务继续运行）',
  'chat.turnCancelled': '本轮已取消，停止了 {jobs} 个任务。对话可以继续。',
  'composer.label': '消息',
  'composer.placeholder': '向 tether 提问……（Enter 发送，Shift+Enter 换行）',
  'composer.send': '发送',
  'formats.legend': '生成文件',
  'files.title': '文件',
  'files.download': '下载',
  'confirm.heading': '等待你的确认',
  'confirm.thread': '会话',
  'confirm.tool': '工具',
  'confirm.args': '参数',
  'confirm.danger': '风险',
  'confirm.approve': '批准',
  'confirm.deny': '拒绝',
  'confirm.open': '打开会话',
  'confirm.sent': '已提交答复。',
  'danger.safe': '安全',
  'danger.caution': '需谨慎',
  'danger.destructive': '破坏性',
  'danger.unknown': '未知',
  'approvals.heading': '待审批',
  'approvals.empty': '没有等待你审批的操作。',
  'trace.heading': '轨迹',
  'trace.noThread': '选择或新建一个会话，这里会显示它每一轮的每个步骤。',
  'trace.empty': '本会话每一轮的步骤会实时显示在这里。',
  'trace.turn': '第 {n} 轮',
  'trace.kind.plan': '计划',
  'trace.kind.action': '动作',
  'trace.kind.observation': '观察',
  'trace.kind.result': '结果',
  'trace.kind.confirmation': '确认',
  'trace.kind.budget': '预算',
  'trace.chose': '选择',
  'trace.noTool': '不调用工具：直接回答',
  'trace.asked': '请求人工确认',
  'trace.approved': '已由人工批准',
  'trace.declined': '已被人工拒绝',
  'trace.extend': '追加 {n} 步',
  'trace.noExtend': '不再追加',
  'trace.took': '耗时 {d}',
  'trace.after': '距上一步 {d}',
  'jobs.heading': '作业',
  'jobs.filter': '显示',
  'jobs.active': '进行中',
  'jobs.all': '全部',
  'jobs.empty': '还没有作业。',
  'jobs.emptyActive': '没有正在运行的作业。',
  'jobs.stop': '停止',
  'jobs.log': '日志',
  'jobs.hideLog': '收起日志',
  'jobs.logEmpty': '（日志为空）',
  'jobs.origin': '来自 {origin}',
  'jobs.elsewhere': '在 {host} 上运行（同一数据库上的另一个 tether）：请在那里停止',
  'jobs.stopped': '已请求停止 {task}。',
  'runs.heading': '目标运行',
  'runs.goalLabel': '目标',
  'runs.goalPlaceholder': '描述一个目标，例如「刷 3 次金币副本」',
  'runs.start': '开始',
  'runs.empty': '还没有目标运行。在上方描述一个目标即可开始。',
  'runs.progress': '已完成 {done}/{total}',
  'runs.pick': '选择一个运行以查看它的任务。',
  'runs.planning': '还没有任务：目标仍在规划中。',
  'runs.cancel': '取消运行',
  'runs.resume': '继续运行',
  'runs.cancelConfirm': '取消这次运行？正在运行的任务会被停止。',
  'runs.resumed': '继续运行：{done}',
  'runs.dag': '运行的任务图',
  'runs.noGoal': '（无目标）',
  'task.detail': '任务 {task}',
  'task.title': '作用',
  'task.status': '状态',
  'task.message': '消息',
  'task.needs': '依赖',
  'task.none': '无',
  'task.call': '调用',
  'task.description': '描述',
  'task.review': '审核',
  'task.attempts': '尝试',
  'task.attempt': '第 {n} 次',
  'task.noAttempts': '尚未运行。',
  'task.diagnostics': '诊断信息',
  'task.retries': '{n} 次尝试',
  'task.waiting': '等待人工',
  'task.reason': '理由（可选）',
  'task.approve': '批准',
  'task.reject': '拒绝',
  'task.edit': '修改',
  'task.editArgs': '新参数（JSON 对象）',
  'task.editDescription': '新描述',
  'task.editSubmit': '保存并运行',
  'task.badJson': '参数不是合法的 JSON：{error}',
  'task.notObject': '参数必须是 JSON 对象，例如 {"count": 3}。',
  'task.emptyDescription': '描述不能为空。',
  'review.before': '运行前等待你的许可。',
  'review.after': '已运行，等待你接受它的结果。',
  'review.failed': '运行失败；批准则重试，或拒绝它。',
  'review.loop_bound': '循环达到上限；批准则接受结果，或拒绝它。',
  'status.completed': '完成',
  'status.failed': '失败',
  'status.running': '运行中',
  'status.needs_confirmation': '等待确认',
  'status.waiting_for_human': '等待人工',
  'status.pending': '等待中',
  'status.skipped': '跳过',
  'status.cancelled': '已取消',
  'status.stopped': '已停止',
  'status.rejected': '已拒绝',
  'status.interrupted': '已中断',
  'status.budget_exhausted': '步数用尽',
  'status.timeout': '超时',
  'status.unknown': '未知',
  'status.not_started': '未开始',
  'status.not_found': '未找到',
  'status.starting': '启动中',
  'status.started': '已开始',
  'status.finished': '已结束',
};

const DICTIONARIES = { en, zh };
const listeners = new Set();
let current = initialLang();

function storedLang() {
  try {
    const value = localStorage.getItem(STORAGE_KEY);
    return LANGS.includes(value) ? value : null;
  } catch {
    return null; // storage may be disabled; the browser's language still applies
  }
}

function initialLang() {
  const stored = storedLang();
  if (stored) return stored;
  const browser = (navigator.languages && navigator.languages[0]) || navigator.language || 'en';
  return browser.toLowerCase().startsWith('zh') ? 'zh' : 'en';
}

/** The current language: 'en' or 'zh'. */
export function lang() {
  return current;
}

/** The string for `key`, with `{name}` placeholders filled from `vars`. */
export function t(key, vars) {
  const template = DICTIONARIES[current][key] ?? en[key] ?? key;
  if (!vars) return template;
  return template.replace(/\{(\w+)\}/g, (whole, name) => (name in vars ? String(vars[name]) : whole));
}

/** A status name in the current language (an unknown one is shown as the server spelled it). */
export function statusLabel(status) {
  const key = `status.${status || 'unknown'}`;
  return key in en ? t(key) : String(status);
}

/** Fill the static strings under `root`: data-i18n (text), -placeholder, -label (aria-label), -title. */
export function translateTree(root = document) {
  for (const el of root.querySelectorAll('[data-i18n]')) el.textContent = t(el.dataset.i18n);
  for (const el of root.querySelectorAll('[data-i18n-placeholder]')) {
    el.placeholder = t(el.dataset.i18nPlaceholder);
  }
  for (const el of root.querySelectorAll('[data-i18n-label]')) {
    el.setAttribute('aria-label', t(el.dataset.i18nLabel));
  }
  for (const el of root.querySelectorAll('[data-i18n-title]')) el.title = t(el.dataset.i18nTitle);
}

/** Switch to `next` (remembered), update <html lang> and the static strings, tell the listeners. */
export function setLang(next) {
  if (!LANGS.includes(next)) return;
  current = next;
  try {
    localStorage.setItem(STORAGE_KEY, next);
  } catch {
    // not remembered, but switched all the same
  }
  applyLang();
  for (const listener of listeners) listener(current);
}

export function toggleLang() {
  setLang(current === 'zh' ? 'en' : 'zh');
}

/** Call `listener(lang)` after every switch; returns the function that unsubscribes it. */
export function onLangChange(listener) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** Apply the current language to the document (<html lang> and every data-i18n string). */
export function applyLang() {
  document.documentElement.lang = current;
  translateTree(document);
}
