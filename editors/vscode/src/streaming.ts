import * as vscode from 'vscode';

/** Params of the server's `specfill/streamCompletion` notification. */
export interface StreamCompletionParams {
  uri: string;
  version: number;
  position: { line: number; character: number };
  requestId: number | string;
  /** The whole completion so far, already post-processed by the server. */
  text: string;
  done: boolean;
}

type Items = vscode.InlineCompletionItem[];

/** The language client's own provider, as handed to its middleware: sends the LSP request. */
export type SendInlineCompletion = (
  document: vscode.TextDocument,
  position: vscode.Position,
  context: vscode.InlineCompletionContext,
  token: vscode.CancellationToken,
) => vscode.ProviderResult<Items | vscode.InlineCompletionList>;

/** Both sides spell URIs slightly differently (percent-encoding); compare parsed forms. */
export function normalizeUri(uri: string): string {
  return vscode.Uri.parse(uri).toString();
}

export function generationKey(uri: string, version: number, line: number, character: number): string {
  return `${normalizeUri(uri)}@${version}:${line}:${character}`;
}

/** One generation the server runs for one (uri, version, position). */
export class Generation {
  text = '';
  done = false;
  /** Set by the user dismissing the ghost text: stream updates stop re-showing it. */
  dismissed = false;
  private final: Items | undefined;
  private waiters: Array<() => void> = [];
  readonly cancellation = new vscode.CancellationTokenSource();

  constructor(
    readonly uri: string,
    readonly key: string,
    readonly position: vscode.Position,
    /** The text of the position's line before it, when the request was sent. */
    readonly before: string,
  ) {}

  grow(text: string): boolean {
    if (this.done || text === this.text) return false;
    this.text = text;
    this.wake();
    return true;
  }

  finish(final: Items | undefined): void {
    this.done = true;
    this.final = final;
    this.wake();
  }

  /** The final items once the request returned, else the streamed text so far. */
  items(): Items {
    if (this.final) return this.final;
    if (this.done || !this.text) return [];
    return [new vscode.InlineCompletionItem(this.text, new vscode.Range(this.position, this.position))];
  }

  /**
   * How many characters of this generation's text the user has typed at its position since
   * it was asked for, when `document` at `position` is its document plus exactly those and
   * some of the text is left; otherwise undefined.
   */
  typedThrough(document: vscode.TextDocument, position: vscode.Position): number | undefined {
    if (this.dismissed || position.isBefore(this.position) || this.position.line >= document.lineCount) return undefined;
    if (document.lineAt(this.position.line).text.slice(0, this.position.character) !== this.before) return undefined;
    const typed = document.getText(new vscode.Range(this.position, position));
    const shown = this.shownText();
    return typed.length > 0 && typed.length < shown.length && shown.startsWith(typed) ? typed.length : undefined;
  }

  /** The rest of what it shows once `typed` characters of it are in the document. */
  itemsAfter(typed: number, position: vscode.Position): Items {
    return [new vscode.InlineCompletionItem(this.shownText().slice(typed), new vscode.Range(position, position))];
  }

  /** What it shows at its position: the final answer once the request returned, else the stream. */
  private shownText(): string {
    const item = this.final?.[0];
    if (!item) return this.final ? '' : this.text;
    const insert = typeof item.insertText === 'string' ? item.insertText : item.insertText.value;
    return !item.range || item.range.start.isEqual(this.position) ? insert : this.text;
  }

  /** Resolves at the next change of text or state, or when `token` is cancelled. */
  changed(token: vscode.CancellationToken): Promise<void> {
    return new Promise((resolve) => {
      const sub = token.onCancellationRequested(() => resolve());
      this.waiters.push(() => {
        sub.dispose();
        resolve();
      });
    });
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    waiters.forEach((wake) => wake());
  }
}

/**
 * Turns one streamed LSP request into growing ghost text.
 *
 * VS Code calls the provider again whenever the inline suggestion is re-triggered. For a
 * (uri, version, position) already being generated, the provider answers from the streamed
 * text instead of sending a new request, so re-triggering after each stream notification
 * grows the ghost text without restarting the generation. Each request runs under our own
 * cancellation token: VS Code cancels its token on every re-trigger, which must not reach
 * the server. A request for a new position supersedes (and cancels) the older one, except
 * where the user typed what the ghost text shows: then the rest of the same generation is
 * the answer, with no new request (under greedy decoding the server would answer exactly
 * that; at any temperature it is what the user is reading), so the ghost text stays steady
 * while it is typed through.
 */
export class StreamingCompletions implements vscode.Disposable {
  private readonly byUri = new Map<string, Generation>();

  /** `onGrow` runs when a generation has new text to show (or has finished). */
  constructor(private readonly onGrow: (generation: Generation) => void) {}

  async provide(
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    token: vscode.CancellationToken,
    next: SendInlineCompletion,
  ): Promise<Items> {
    const uri = normalizeUri(document.uri.toString());
    const key = generationKey(uri, document.version, position.line, position.character);
    let generation = this.byUri.get(uri);
    if (generation?.key !== key) {
      const typed = generation?.typedThrough(document, position);
      if (generation && typed !== undefined) return token.isCancellationRequested ? [] : generation.itemsAfter(typed, position);
      this.forget(uri);
      generation = this.start(uri, key, document, position, context, next);
    }
    if (!generation.text && !generation.done) await generation.changed(token);
    return token.isCancellationRequested ? [] : generation.items();
  }

  onStream(params: StreamCompletionParams): void {
    const uri = normalizeUri(params.uri);
    const generation = this.byUri.get(uri);
    const key = generationKey(uri, params.version, params.position.line, params.position.character);
    if (generation?.key === key && generation.grow(params.text)) this.onGrow(generation);
  }

  /** The generation shown in `document` at `position` (asked for there, or typed through), if any. */
  current(document: vscode.TextDocument, position: vscode.Position): Generation | undefined {
    const uri = normalizeUri(document.uri.toString());
    const generation = this.byUri.get(uri);
    const key = generationKey(uri, document.version, position.line, position.character);
    if (generation?.key === key) return generation;
    return generation?.typedThrough(document, position) !== undefined ? generation : undefined;
  }

  forget(uri: string): void {
    const generation = this.byUri.get(normalizeUri(uri));
    if (!generation) return;
    this.byUri.delete(generation.uri);
    generation.cancellation.cancel();
    generation.cancellation.dispose();
  }

  dispose(): void {
    [...this.byUri.keys()].forEach((uri) => this.forget(uri));
  }

  private start(
    uri: string,
    key: string,
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    next: SendInlineCompletion,
  ): Generation {
    const generation = new Generation(uri, key, position, document.lineAt(position.line).text.slice(0, position.character));
    this.byUri.set(uri, generation);
    Promise.resolve(next(document, position, context, generation.cancellation.token)).then(
      (result) => {
        generation.finish(result ? (Array.isArray(result) ? result : result.items) : []);
        if (this.byUri.get(uri) === generation) this.onGrow(generation);
      },
      // Superseded or failed: the server answered with an error, so show nothing from it.
      () => generation.finish([]),
    );
    return generation;
  }
}
