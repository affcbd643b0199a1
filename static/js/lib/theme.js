// theme.js: light/dark/auto on <html data-theme>, the visitor's choice kept in localStorage when allowed.

const THEME_KEY = 'inside-llm-theme';
/** localStorage throws in third-party iframes when the browser blocks their storage: never fail for it. */
const store = {
  get: (k) => { try { return localStorage.getItem(k); } catch { return null; } },
  set: (k, v) => { try { localStorage.setItem(k, v); } catch { /* embed without storage: theme not saved */ } },
};

/** Apply the URL's theme option, else the saved choice, else the system's. */
export function applyTheme(option) {
  document.documentElement.dataset.theme = option || store.get(THEME_KEY) || 'auto';
}

/** The ◐ button flips light and dark and remembers it; onChange() runs after (redraw, rewrite the URL). */
export function bindThemeToggle(button, onChange) {
  button?.addEventListener('click', () => {
    const root = document.documentElement.dataset.theme;
    const dark = root === 'dark' || (root === 'auto' && matchMedia('(prefers-color-scheme: dark)').matches);
    store.set(THEME_KEY, dark ? 'light' : 'dark');
    applyTheme();
    onChange();
  });
}
