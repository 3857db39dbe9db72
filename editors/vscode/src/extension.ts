import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  LanguageClient,
  type LanguageClientOptions,
  type ServerOptions,
  State,
  TransportKind,
} from 'vscode-languageclient/node';
import { affectsServerOptions, affectsServerProcess, languages, serverCommand, serverOptions } from './settings';
import { describe, type ServerStats, StatusBar } from './status';
import { type Generation, type StreamCompletionParams, StreamingCompletions } from './streaming';

const STREAM_NOTIFICATION = 'specfill/streamCompletion';
const STATS_REQUEST = 'specfill/stats';
const WARM_NOTIFICATION = 'specfill/warm';
/** How long the cursor must rest before the server is asked to prefill its prompt. */
const WARM_AFTER_MS = 400;

/** The extension's state: one language client, its ghost-text streams and the status bar. */
class Specfill implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private readonly output = vscode.window.createOutputChannel('specfill', { log: true });
  private readonly status = new StatusBar();
  private readonly streams = new StreamingCompletions((generation) => this.onGrow(generation));
  private retriggering = false;
  private retriggerAgain = false;
  private warmTimer: ReturnType<typeof setTimeout> | undefined;

  async start(): Promise<void> {
    this.status.starting();
    const { command, args } = serverCommand();
    const server: ServerOptions = { command, args, transport: TransportKind.stdio };
    const options: LanguageClientOptions = {
      documentSelector: languages().map((language) => ({ language })),
      initializationOptions: serverOptions(),
      outputChannel: this.output,
      middleware: {
        provideInlineCompletionItems: (document, position, context, token, next) =>
          this.enabled() ? this.streams.provide(document, position, context, token, next) : [],
      },
    };
    const client = new LanguageClient('specfill', 'specfill', server, options);
    client.onNotification(STREAM_NOTIFICATION, (params: StreamCompletionParams) => this.streams.onStream(params));
    this.client = client;
    try {
      await client.start();
      this.status.ready(this.enabled());
    } catch (error) {
      const message = `could not start "${command} ${args.join(' ')}": ${String(error)}`;
      this.status.failed(message);
      void vscode.window.showErrorMessage(
        `specfill: ${message}. Set "specfill.server.command" to the specfill executable (for example .venv/bin/specfill).`,
      );
    }
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  async stop(): Promise<void> {
    this.streams.dispose();
    const client = this.client;
    this.client = undefined;
    if (client?.state === State.Running) await client.stop().catch((error) => this.log(`stop: ${error}`));
  }

  enabled(): boolean {
    return vscode.workspace.getConfiguration('specfill').get<boolean>('enable', true);
  }

  async toggle(): Promise<void> {
    await vscode.workspace.getConfiguration('specfill').update('enable', !this.enabled(), vscode.ConfigurationTarget.Global);
  }

  /** Esc: hide the ghost text and stop later stream updates from showing it again. */
  async dismiss(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const generation = editor && this.streams.current(editor.document, editor.selection.active);
    if (generation) generation.dismissed = true;
    await vscode.commands.executeCommand('editor.action.inlineSuggest.hide');
  }

  async showStats(): Promise<void> {
    const stats = await this.fetchStats();
    if (!stats) {
      void vscode.window.showWarningMessage('specfill: the server is not running.');
      return;
    }
    this.output.appendLine(JSON.stringify(stats, null, 2));
    this.output.show(true);
    const last = stats.last ? `last completion ${describe(stats.last)}; ` : '';
    void vscode.window.showInformationMessage(`specfill: ${last}all completions ${describe(stats.totals)}`);
  }

  async onConfigurationChanged(event: vscode.ConfigurationChangeEvent): Promise<void> {
    if (affectsServerProcess(event)) return this.restart();
    if (event.affectsConfiguration('specfill.enable')) {
      if (!this.enabled()) this.streams.dispose();
      this.status.ready(this.enabled());
    }
    if (affectsServerOptions(event) && this.client?.state === State.Running) {
      await this.client.sendNotification(DidChangeConfigurationNotification.type, {
        settings: { specfill: serverOptions() },
      });
    }
  }

  /**
   * The cursor rests (or an editor was just shown): let the server prefill the prompt for
   * it in the background, so the first completion there starts from a warm cache. The
   * server drops a warm the moment a real request arrives.
   */
  scheduleWarm(editor: vscode.TextEditor | undefined): void {
    if (this.warmTimer) clearTimeout(this.warmTimer);
    if (!editor || !this.enabled() || !languages().includes(editor.document.languageId)) return;
    this.warmTimer = setTimeout(() => {
      this.warmTimer = undefined;
      const client = this.client;
      if (client?.state !== State.Running || vscode.window.activeTextEditor !== editor) return;
      const converter = client.code2ProtocolConverter;
      void client
        .sendNotification(WARM_NOTIFICATION, {
          textDocument: { uri: converter.asUri(editor.document.uri) },
          position: converter.asPosition(editor.selection.active),
        })
        .catch((error) => this.log(`${WARM_NOTIFICATION} failed: ${error}`));
    }, WARM_AFTER_MS);
  }

  forget(document: vscode.TextDocument): void {
    this.streams.forget(document.uri.toString());
  }

  dispose(): void {
    if (this.warmTimer) clearTimeout(this.warmTimer);
    void this.stop();
    this.status.dispose();
    this.output.dispose();
  }

  /** A generation has new text: ask VS Code to query the provider again if it is on screen. */
  private onGrow(generation: Generation): void {
    if (generation.done) void this.refreshStatus();
    const editor = vscode.window.activeTextEditor;
    if (generation.dismissed || !editor || !editor.selection.isEmpty) return;
    if (this.streams.current(editor.document, editor.selection.active) !== generation) return;
    this.retrigger();
  }

  /**
   * Make VS Code ask the provider again. A plain explicit trigger is ignored while the shown
   * suggestion came from an explicit request at the same position and version, so hide the
   * suggestion first; `runCommands` does both in one step, and the provider answers at once
   * from the streamed text. At most one runs at a time; a burst of updates collapses into one.
   */
  private retrigger(): void {
    if (this.retriggering) {
      this.retriggerAgain = true;
      return;
    }
    this.retriggering = true;
    const done = () => {
      this.retriggering = false;
      if (this.retriggerAgain) {
        this.retriggerAgain = false;
        this.retrigger();
      }
    };
    vscode.commands
      .executeCommand('runCommands', {
        commands: ['editor.action.inlineSuggest.hide', 'editor.action.inlineSuggest.trigger'],
      })
      .then(done, done);
  }

  private async refreshStatus(): Promise<void> {
    const stats = await this.fetchStats();
    if (stats) this.status.show(stats, this.enabled());
  }

  private async fetchStats(): Promise<ServerStats | undefined> {
    if (this.client?.state !== State.Running) return undefined;
    try {
      // An empty object rather than no params: pygls rejects a custom request without them.
      return await this.client.sendRequest<ServerStats>(STATS_REQUEST, {});
    } catch (error) {
      this.log(`${STATS_REQUEST} failed: ${error}`);
      return undefined;
    }
  }

  private log(message: string): void {
    this.output.warn(message);
  }
}

let specfill: Specfill | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const instance = new Specfill();
  specfill = instance;
  context.subscriptions.push(
    instance,
    vscode.commands.registerCommand('specfill.toggle', () => instance.toggle()),
    vscode.commands.registerCommand('specfill.showStats', () => instance.showStats()),
    vscode.commands.registerCommand('specfill.restartServer', () => instance.restart()),
    vscode.commands.registerCommand('specfill.dismiss', () => instance.dismiss()),
    vscode.workspace.onDidChangeConfiguration((event) => instance.onConfigurationChanged(event)),
    vscode.workspace.onDidCloseTextDocument((document) => instance.forget(document)),
    vscode.window.onDidChangeTextEditorSelection((event) => instance.scheduleWarm(event.textEditor)),
    vscode.window.onDidChangeActiveTextEditor((editor) => instance.scheduleWarm(editor)),
  );
  await instance.start();
  instance.scheduleWarm(vscode.window.activeTextEditor);
}

export async function deactivate(): Promise<void> {
  await specfill?.stop();
  specfill = undefined;
}
