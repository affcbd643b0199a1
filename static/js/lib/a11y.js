// a11y.js: announcements for screen readers and keyboard helpers.

/** Say text through the page's polite live region (created once per page). */
export function announce(text) {
  let region = document.getElementById('a11y-live');
  if (!region) {
    region = document.createElement('div');
    region.id = 'a11y-live';
    region.className = 'visually-hidden';
    region.setAttribute('aria-live', 'polite');
    document.body.appendChild(region);
  }
  region.textContent = text;
}

/** True when a key event comes from a control that uses arrow keys itself. */
export function isEditing(target) {
  if (!target || !target.tagName) return false;
  const tag = target.tagName.toLowerCase();
  return tag === 'input' || tag === 'textarea' || tag === 'select' || target.isContentEditable;
}
