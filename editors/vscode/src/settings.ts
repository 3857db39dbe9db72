import * as vscode from 'vscode';

/** How to start the server, from `specfill.server.*`. */
export interface ServerCommand {
  command: string;
  args: string[];
}

export function serverCommand(config = vscode.workspace.getConfiguration('specfill')): ServerCommand {
  return {
    command: config.get<string>('server.command') || 'specfill',
    args: config.get<string[]>('server.args') ?? ['serve'],
  };
}

export function languages(config = vscode.workspace.getConfiguration('specfill')): string[] {
  return config.get<string[]>('languages') ?? [];
}

/** Settings that map one to one onto the server's initializationOptions (nested by dots). */
const SERVER_OPTIONS = [
  'model.target',
  'model.draft',
  'model.dtype',
  'model.device',
  'speculation.mode',
  'speculation.k',
  'speculation.kMax',
  'maxNewTokens',
  'temperature',
  'contextWindow.prefixTokens',
  'contextWindow.firstPrefixTokens',
  'contextWindow.firstWindowS',
  'contextWindow.suffixTokens',
  'model.threads',
  'model.quant',
  'model.draftQuant',
  'model.cacheDir',
  'speculation.promptLookup',
  'contextWindow.fimMode',
  'contextWindow.extraTokens',
  'contextWindow.extraSources',
  'contextWindow.workspaceFiles',
  'backend.kind',
  'backend.urls',
  'backend.model',
  'backend.apiKeyEnv',
  'backend.apiKeyFile',
  'backend.caFile',
  'backend.timeoutS',
  'backend.fallback',
  'backend.allowInsecureHttp',
  'topP',
  'readyTimeoutS',
  'maxDocumentMB',
  'warm',
  'precompute',
] as const;

type Options = { [key: string]: unknown };

/**
 * The server's initializationOptions. Unset settings (null or empty) are left out, so the
 * server's own defaults apply and stay the single source of truth.
 */
export function serverOptions(config = vscode.workspace.getConfiguration('specfill')): Options {
  const options: Options = {};
  for (const name of SERVER_OPTIONS) {
    const value = config.get<unknown>(name);
    if (value === null || value === undefined || value === '') continue;
    const path = name.split('.');
    let node = options;
    for (const part of path.slice(0, -1)) node = (node[part] ??= {}) as Options;
    node[path[path.length - 1]] = value;
  }
  return options;
}

/** Whether a configuration change needs a new server process (not just new options). */
export function affectsServerProcess(event: vscode.ConfigurationChangeEvent): boolean {
  return event.affectsConfiguration('specfill.server') || event.affectsConfiguration('specfill.languages');
}

export function affectsServerOptions(event: vscode.ConfigurationChangeEvent): boolean {
  return SERVER_OPTIONS.some((name) => event.affectsConfiguration(`specfill.${name}`));
}
