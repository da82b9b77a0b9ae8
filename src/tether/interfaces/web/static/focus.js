// The keyboard's place on the page survives what the page redraws.
//
// A focused control that is removed (its card answered, its list redrawn, its job ended) or disabled
// while its action runs drops the focus to the top of the page: the next Tab starts over. Here, when the
// focus falls to <body> for either reason, it goes back to the control once it is enabled again, or to
// the same kind of control nearby (the next card's button), else to the region it was in, else to the
// message box. Focus the person moved themselves is never taken back: only a removed or disabled
// control's focus is restored.

const REGION = '[role="tabpanel"], .conversation, .working-slot, .thread-list, .chat-head, .pane';
const FOCUSABLE = 'button:not([disabled]), [href], input:not([disabled]), textarea:not([disabled]), select, [tabindex="0"]';

function lost() {
  const active = document.activeElement;
  return !active || active === document.body || active === document.documentElement;
}

function usable(el) {
  return el && el.isConnected && !el.disabled && !el.closest('[hidden]') && el.getClientRects().length > 0;
}

function nearby(region, testid) {
  if (!region || !region.isConnected) return null;
  if (testid) {
    const same = [...region.querySelectorAll(`[data-testid="${CSS.escape(testid)}"]`)].find(usable);
    if (same) return same;
  }
  if (region.matches('[tabindex]') && usable(region)) return region;
  return [...region.querySelectorAll(FOCUSABLE)].find(usable) || null;
}

/** Watch the page: call once, with the element to fall back to (the message box). */
export function keepFocusInPlace(fallback) {
  let last = null;
  let region = null;
  let testid = null;
  let waiting = null; // the control disabled while focused: it gets the focus back when enabled again
  document.addEventListener('focusin', (event) => {
    last = event.target;
    waiting = null;
    testid = last.dataset ? last.dataset.testid || null : null;
    region = last.closest ? last.closest(REGION) : null;
  });
  document.addEventListener('focusout', (event) => {
    // Left while still there and usable: the person moved on (a click elsewhere), nothing to restore.
    const left = event.target;
    queueMicrotask(() => {
      if (left === last && left.isConnected && !left.disabled && !left.closest('[hidden]')) last = null;
    });
  });
  const observer = new MutationObserver((records) => {
    // (Chrome may drop the focus of a disabled control only at its next rendering: note it first.)
    if (last && last.disabled && records.some((r) => r.target === last)) waiting = last;
    if (!last || !lost()) return;
    if (waiting && waiting.isConnected) {
      if (usable(waiting)) waiting.focus();
      return;
    }
    if (last.isConnected) return; // the person moved the focus away: theirs to place
    const target = nearby(region, testid) || (usable(fallback()) ? fallback() : null);
    last = null;
    if (target) target.focus({ preventScroll: false });
  });
  observer.observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ['disabled', 'hidden'] });
}
