import * as vscode from 'vscode';

/** The parts of `specfill/stats` the status bar reads; the rest is shown verbatim. */
export interface CompletionStats {
  acceptance_rate?: number;
  tokens_per_s?: number;
  generated_tokens?: number;
  rounds?: number;
  prefilled_tokens?: number;
  known_source?: string;
  [field: string]: unknown;
}

export interface ServerStats {
  totals: CompletionStats;
  last: CompletionStats | null;
  by_context: Record<string, unknown>;
}

export function describe(stats: CompletionStats): string {
  const known = knownFrom(stats);
  if (known) return `ready · ${known}`;
  const rate = stats.acceptance_rate === undefined ? '–' : `${Math.round(stats.acceptance_rate * 100)}%`;
  const speed = stats.tokens_per_s === undefined ? '–' : stats.tokens_per_s.toFixed(1);
  return `${rate} accepted · ${speed} tok/s`;
}

/**
 * Where a suggestion that took no model call came from: the server's background work after
 * a shown suggestion ("precomputed"), or the generation of an earlier one that the user typed
 * through or accepted. '' when the models ran (its acceptance rate and speed then say more).
 */
export function knownFrom(stats: CompletionStats): string {
  if (!stats.known_source || stats.rounds || stats.prefilled_tokens) return '';
  return stats.known_source === 'background' ? 'precomputed' : 'from the last suggestion';
}

/** Status bar item: acceptance rate and speed of the last completion, or why there is none. */
export class StatusBar implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);

  constructor() {
    this.item.name = 'specfill';
    this.item.command = 'specfill.showStats';
    this.item.show();
  }

  starting(): void {
    this.set('$(sync~spin) specfill starting', 'specfill: starting the server');
  }

  ready(enabled: boolean): void {
    if (enabled) this.set('$(sparkle) specfill', 'specfill: ready, no completion yet');
    else this.set('$(circle-slash) specfill', 'specfill: inline completions are off');
  }

  failed(message: string): void {
    this.set('$(error) specfill', `specfill: ${message}`);
  }

  show(stats: ServerStats, enabled: boolean): void {
    if (!enabled || !stats.last) return this.ready(enabled);
    const tooltip = `specfill, last completion: ${describe(stats.last)}` +
      (stats.last.generated_tokens === undefined ? '' : `, ${stats.last.generated_tokens} tokens`) +
      `\nall completions: ${describe(stats.totals)}`;
    this.set(`$(sparkle) ${describe(stats.last)}`, tooltip);
  }

  dispose(): void {
    this.item.dispose();
  }

  private set(text: string, tooltip: string): void {
    this.item.text = text;
    this.item.tooltip = tooltip;
  }
}
