// Drives VS Code (code-server in headless Chromium) for tests/editors/test_vscode.py:
// opens a file, types, records the ghost text as it grows, accepts it with Tab, saves.
//
//   node vscode_driver.cjs '<json options>'   (prints one JSON line with what it saw)
//
// Options: url, file (name to open with Quick Open), typed, typeThrough (how many of the
// suggestion's first characters to type before Tab), next (wait nextTimeoutMs after Tab for
// the next suggestion and read the status it brings), screenshots (directory), timeoutMs.
// Needs NODE_PATH to reach playwright-core.
'use strict';

const path = require('path');
const { chromium } = require('playwright-core');

// Flags that work in a container without a GPU, sandbox or network (see NOTES.md).
const CHROMIUM_FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

const options = JSON.parse(process.argv[2]);
const log = (message) => process.stderr.write(`[vscode-driver] ${message}\n`);

/**
 * The inline suggestion on screen: the part in the cursor line, then the lines VS Code draws
 * below it. Trailing empty lines of a suggestion are not drawn, so they cannot be read here.
 */
function readGhostText() {
  const text = (element) => element.textContent.replace(/\u00a0/g, ' ');
  const inline = [...document.querySelectorAll('.monaco-editor .ghost-text-decoration')].map(text).join('');
  const firstExtra = document.querySelector('.monaco-editor .view-line .ghost-text');
  if (!firstExtra) return inline;
  const lines = [...firstExtra.closest('.view-line').parentElement.querySelectorAll(':scope > .view-line')];
  lines.sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top));
  return [inline, ...lines.map(text)].join('\n');
}

/** The editor's own text (ghost text left out), and what has the keyboard focus. */
function readEditor() {
  const lines = document.querySelector('.editor-instance .monaco-editor .view-lines');
  let text = null;
  if (lines) {
    const copy = lines.cloneNode(true);
    copy.querySelectorAll('.ghost-text-decoration, .ghost-text, .ghost-text-hidden').forEach((node) => node.remove());
    text = copy.textContent.replace(/\u00a0/g, ' ');
  }
  const active = document.activeElement;
  const focus = active ? `${active.tagName.toLowerCase()}.${[...active.classList].join('.')}` : 'none';
  const editorFocused = Boolean(active && active.closest('.editor-instance .monaco-editor'));
  return { text, focus, editorFocused };
}

function readStatusBar() {
  const items = [...document.querySelectorAll('.statusbar-item')].map((item) => item.textContent.trim());
  return items.find((text) => /tok\/s|ready · /.test(text)) ?? null;
}

/** The extension shows plain "specfill" once its server answered `initialize`. */
function serverReady() {
  return [...document.querySelectorAll('.statusbar-item')].some((item) => item.textContent.trim() === 'specfill');
}

async function waitFor(page, what, predicate, timeoutMs, intervalMs = 100) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await page.waitForTimeout(intervalMs);
  }
}

/** The ghost text once it has stayed the same for a second, starting from `ghost`. */
async function settledGhost(page, ghost, what, deadline) {
  for (let stable = Date.now(); Date.now() - stable < 1000; ) {
    await page.waitForTimeout(100);
    const now = await page.evaluate(readGhostText);
    if (now !== ghost) [ghost, stable] = [now, Date.now()];
    if (Date.now() > deadline) throw new Error(`${what} never settled; last ${JSON.stringify(ghost)}`);
  }
  return ghost;
}

async function openFile(page, name) {
  await page.waitForSelector('.monaco-workbench', { timeout: 120000 });
  // The workbench takes keyboard input only once it has finished restoring.
  await page.waitForSelector('.statusbar-item', { timeout: 120000 });
  await page.keyboard.press('Control+P');
  await page.waitForSelector('.quick-input-widget input', { state: 'visible' });
  await page.keyboard.type(name);
  await page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${name}"]`, { timeout: 30000 });
  await page.keyboard.press('Enter');
  await page.waitForSelector(`.tab[data-resource-name="${name}"]`, { timeout: 30000 });
  await page.waitForSelector('.editor-instance .monaco-editor .view-lines', { timeout: 30000 });
}

async function main() {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: CHROMIUM_FLAGS,
  });
  const page = await browser.newPage({ viewport: { width: 1200, height: 720 } });
  const seen = [];
  const shots = [];
  const shoot = async (name) => {
    const file = path.join(options.screenshots, name);
    await page.screenshot({ path: file });
    shots.push(file);
  };
  try {
    await page.addInitScript(`window.__specfillReadGhost = ${readGhostText.toString()}`);
    await page.goto(options.url);
    await openFile(page, options.file);
    // Typing before the extension registered its provider would ask nobody for a completion.
    await waitFor(page, 'the specfill server to start', () => page.evaluate(serverReady), 120000, 250);
    await page.click('.editor-instance .monaco-editor .view-lines');
    await page.keyboard.press('Control+End');
    await page.keyboard.type(options.typed, { delay: 50 });
    log('typed; waiting for ghost text');

    // Record every distinct ghost text until the completion is final: the status bar shows
    // the stats of a completion only after the server answered its request.
    const deadline = Date.now() + options.timeoutMs;
    let status = null;
    for (;;) {
      const ghost = await page.evaluate(readGhostText);
      if (ghost && seen[seen.length - 1] !== ghost) {
        seen.push(ghost);
        log(`ghost text (${ghost.length} chars)`);
        if (seen.length === 1) await shoot('vscode-ghost-text-first.png');
      }
      status = await page.evaluate(readStatusBar);
      if (status && ghost) break;
      if (Date.now() > deadline) throw new Error(`no final ghost text after ${options.timeoutMs} ms; saw ${JSON.stringify(seen)}`);
      await page.waitForTimeout(50);
    }
    // The final answer re-triggers the suggestion once more: wait until the ghost text has
    // stayed the same for a second, so Tab meets the suggestion the screen shows.
    let accepted = await settledGhost(page, await page.evaluate(readGhostText), 'the ghost text', deadline);
    if (!accepted) throw new Error(`the ghost text disappeared before Tab; saw ${JSON.stringify(seen)}`);
    if (seen[seen.length - 1] !== accepted) seen.push(accepted);
    await shoot('vscode-ghost-text.png');

    // Type the suggestion's first characters one at a time, reading the ghost text back on
    // every animation frame for 300 ms after each key: it must never blank or go stale.
    const typedThrough = [];
    const through = [...accepted.split('\n')[0]].slice(0, options.typeThrough ?? 0);
    for (const [i, char] of through.entries()) {
      await page.keyboard.type(char);
      const frames = await page.evaluate(
        (ms) => new Promise((resolve) => {
          const out = [];
          const end = performance.now() + ms;
          const read = () => {
            out.push(window.__specfillReadGhost());
            if (performance.now() < end) requestAnimationFrame(read); else resolve(out);
          };
          requestAnimationFrame(read);
        }),
        300,
      );
      typedThrough.push({ typed: through.slice(0, i + 1).join(''), frames: [...new Set(frames)], count: frames.length });
    }
    if (through.length) accepted = accepted.slice(through.join('').length);

    const before = await page.evaluate(readEditor);
    log(`before Tab: focus ${before.focus}`);
    if (!before.editorFocused) throw new Error(`the editor lost the keyboard focus to ${before.focus} before Tab`);
    await page.keyboard.press('Tab');
    const firstLine = accepted.split('\n')[0];
    const inserted = () => page.evaluate(readEditor).then((now) => now.text !== before.text && now.text.includes(firstLine));
    await waitFor(page, 'Tab to insert the suggestion', inserted, 10000).catch(async () => {
      const now = await page.evaluate(readEditor);
      await shoot('vscode-tab-ignored.png');
      throw new Error(`Tab inserted nothing: focus ${now.focus}, ghost text now ${JSON.stringify(await page.evaluate(readGhostText))}`);
    });
    let next = null;
    if (options.next) {
      // The accept is an edit: VS Code asks for the suggestion at the new cursor by itself.
      // Once its ghost text has stayed the same for a second, the answer is final and the
      // status bar shows that completion's statistics.
      const shown = await waitFor(page, 'the next suggestion after Tab', () => page.evaluate(readGhostText), options.nextTimeoutMs);
      const ghost = await settledGhost(page, shown, 'the next suggestion', deadline);
      next = { ghost, status: await page.evaluate(readStatusBar) };
      log(`next suggestion (${ghost.length} chars), status ${next.status}`);
      await shoot('vscode-next-suggestion.png');
    }
    await page.keyboard.press('Control+S');
    await waitFor(page, 'the file to be saved', () => page.$('.tab.dirty').then((dirty) => !dirty), 10000);
    await shoot('vscode-accepted.png');
    process.stdout.write(JSON.stringify({ seen, accepted, typedThrough, status, next, screenshots: shots }) + '\n');
  } catch (error) {
    await shoot('vscode-failure.png').catch(() => {});
    process.stdout.write(JSON.stringify({ error: String(error), seen, screenshots: shots }) + '\n');
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
}

main();
