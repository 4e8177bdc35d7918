// A child process running one of test/children/*.js: it prints one JSON
// object a line on stdout (events) and reads one JSON command a line on
// stdin. Killed by its PID at the end.
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

export class Child {
  readonly proc: ChildProcess;
  readonly events: any[] = [];
  private waiters: { pred: (e: any) => boolean; resolve: (e: any) => void }[] = [];
  readonly exited: Promise<number | null>;
  stderr = "";

  constructor(script: string, args: Record<string, unknown>) {
    this.proc = spawn(process.execPath, [join(here, "children", script), JSON.stringify(args)], { stdio: ["pipe", "pipe", "pipe"] });
    this.exited = new Promise((r) => this.proc.once("exit", (code) => r(code)));
    this.proc.stderr!.on("data", (b) => { this.stderr += b; });
    createInterface({ input: this.proc.stdout! }).on("line", (line) => {
      let e: any;
      try { e = JSON.parse(line); } catch { return; }
      this.events.push(e);
      this.waiters = this.waiters.filter((w) => (w.pred(e) ? (w.resolve(e), false) : true));
    });
  }

  get pid(): number {
    return this.proc.pid!;
  }

  /** The first event (seen or to come) with that name. */
  next(event: string, timeoutMs = 20000): Promise<any> {
    const pred = (e: any) => e.event === event;
    const seen = this.events.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`child ${this.pid}: no "${event}" within ${timeoutMs} ms; events ${JSON.stringify(this.events)}; stderr ${this.stderr}`)), timeoutMs);
      this.waiters.push({ pred, resolve: (e) => { clearTimeout(t); resolve(e); } });
    });
  }

  send(cmd: unknown): void {
    this.proc.stdin!.write(JSON.stringify(cmd) + "\n");
  }

  signal(sig: NodeJS.Signals): void {
    process.kill(this.pid, sig);
  }

  async kill(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    try { process.kill(this.pid, "SIGCONT"); process.kill(this.pid, "SIGKILL"); } catch { /* gone */ }
    await this.exited;
  }
}

/** The first command line a child gets on stdin. */
export function commands(): AsyncIterableIterator<string> {
  return createInterface({ input: process.stdin })[Symbol.asyncIterator]();
}

export function emit(event: string, fields: Record<string, unknown> = {}): void {
  process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
}
