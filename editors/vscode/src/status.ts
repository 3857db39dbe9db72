import * as vscode from 'vscode';

/** The parts of `specfill/stats` the status bar reads; the rest is shown verbatim. */
export interface CompletionStats {
  acceptance_rate?: number;
  tokens_per_s?: number;
  generated_tokens?: number;
  [field: string]: unknown;
}

export interface ServerStats {
  totals: CompletionStats;
  last: CompletionStats | null;
  by_context: Record<string, unknown>;
}

export function describe(stats: CompletionStats): string {
  const rate = stats.acceptance_rate === undefined ? '–' : `${Math.round(stats.acceptance_rate * 100)}%`;
  const speed = stats.tokens_per_s === undefined ? '–' : stats.tokens_per_s.toFixed(1);
  return `${rate} accepted · ${speed} tok/s`;
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
