// A 3-node coordd cluster of real processes for the tests: every node on
// 127.0.0.1 port 0 (the first bootstraps a cluster of one, the others join
// through it); the ports each bound are read from its data dir's
// addresses.json (internal/addrfile). Every process is stopped by its PID.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, existsSync, openSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
/** The repository root (dist/test/ -> sdk/typescript -> repo). */
export const repoRoot = resolve(here, "../../../..");

export interface Node {
  id: string;
  dataDir: string;
  log: string;
  grpc: string;
  http: string;
  raft: string;
  proc?: ChildProcess;
}

/** bin/coordd (COORDD_BIN), built with `go build -o bin/ ./cmd/coordd` when missing. */
export function coorddBinary(): string {
  const bin = process.env.COORDD_BIN ? resolve(process.env.COORDD_BIN) : join(repoRoot, "bin", "coordd");
  if (!existsSync(bin)) execFileSync("go", ["build", "-o", "bin/", "./cmd/coordd"], { cwd: repoRoot, stdio: "inherit" });
  return bin;
}

const live = new Set<ChildProcess>();
process.on("exit", () => {
  for (const p of live) if (p.pid) try { process.kill(p.pid, "SIGKILL"); } catch { /* gone */ }
});

/** Spawns a process whose output goes to a log file; it is killed (by PID) if this process exits. */
export function spawnLogged(cmd: string, args: string[], log: string, env?: NodeJS.ProcessEnv): ChildProcess {
  const fd = openSync(log, "a");
  const p = spawn(cmd, args, { stdio: ["ignore", fd, fd], env: env ?? process.env });
  closeSync(fd);
  live.add(p);
  p.on("exit", () => live.delete(p));
  return p;
}

export async function poll<T>(what: string, timeoutMs: number, f: () => Promise<T | undefined> | T | undefined, everyMs = 25): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await f();
      if (v !== undefined && v !== false) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (last error: ${last})` : ""}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

async function getJSON(url: string, timeoutMs = 1000): Promise<any> {
  const r = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  if (!r.ok) throw new Error(`${url}: ${r.status}`);
  return r.json();
}

export class Cluster {
  readonly dir: string;
  readonly nodes: Node[] = [];
  private readonly bin: string;
  private readonly extraArgs: string[];

  private constructor(bin: string, extraArgs: string[]) {
    this.bin = bin;
    this.extraArgs = extraArgs;
    this.dir = mkdtempSync(join(tmpdir(), "coordd-tssdk-"));
  }

  /** Starts n nodes, each with extraArgs added to its flags. */
  static async start(n = 3, extraArgs: string[] = []): Promise<Cluster> {
    const c = new Cluster(coorddBinary(), extraArgs);
    try {
      for (let i = 1; i <= n; i++) {
        const nd: Node = { id: `node${i}`, dataDir: join(c.dir, `node${i}`), log: join(c.dir, `node${i}.log`),
          grpc: "127.0.0.1:0", http: "127.0.0.1:0", raft: "127.0.0.1:0" };
        c.nodes.push(nd);
        c.launch(nd, i === 1 ? undefined : c.nodes[0].grpc);
        await c.readAddresses(nd);
      }
      await poll("3 registered members", 60000, async () => {
        for (const nd of c.nodes) {
          const m = await getJSON(`http://${nd.http}/v1/cluster/members`);
          if ((m.members ?? []).filter((x: any) => x.grpc_address).length !== n) return undefined;
        }
        return true;
      }, 50);
      await c.leader();
    } catch (e) {
      c.stop();
      throw e;
    }
    return c;
  }

  private launch(nd: Node, join?: string): void {
    const args = ["--id", nd.id, "--data-dir", nd.dataDir, "--grpc-addr", nd.grpc, "--raft-addr", nd.raft, "--http-addr", nd.http,
      "--log-level", "warn", ...this.extraArgs];
    if (join) args.push("--join", join);
    nd.proc = spawnLogged(this.bin, args, nd.log);
  }

  private async readAddresses(nd: Node): Promise<void> {
    const a = await poll(`${nd.id}'s addresses.json`, 30000, () => {
      if (nd.proc?.exitCode !== null) throw new Error(`${nd.id} exited: ${readFileSync(nd.log, "utf8").slice(-2000)}`);
      const f = join(nd.dataDir, "addresses.json");
      return existsSync(f) ? JSON.parse(readFileSync(f, "utf8")) : undefined;
    }, 10);
    nd.grpc = a.grpc;
    nd.http = a.http;
    nd.raft = a.raft;
  }

  /** The HTTP endpoints of every node (running or not). */
  endpoints(): string[] {
    return this.nodes.map((n) => n.http);
  }

  /** The node that says it leads (waits for one). */
  async leader(timeoutMs = 20000): Promise<Node> {
    return poll("a leader", timeoutMs, async () => {
      for (const nd of this.nodes) {
        if (!nd.proc) continue;
        try {
          if ((await getJSON(`http://${nd.http}/v1/cluster/status`, 300)).state === "Leader") return nd;
        } catch { /* down or slow */ }
      }
      return undefined;
    }, 50);
  }

  /** Kills a node by its PID and waits until it is gone. */
  async kill(nd: Node): Promise<void> {
    const p = nd.proc;
    if (!p?.pid) return;
    nd.proc = undefined;
    if (p.exitCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    process.kill(p.pid, "SIGCONT");
    process.kill(p.pid, "SIGKILL");
    await exited;
  }

  /** Stops every node by its PID and removes the directory (kept when KEEP_CLUSTER is set). */
  stop(): void {
    for (const nd of this.nodes) {
      if (nd.proc?.pid && nd.proc.exitCode === null) {
        try { process.kill(nd.proc.pid, "SIGCONT"); process.kill(nd.proc.pid, "SIGKILL"); } catch { /* gone */ }
      }
      nd.proc = undefined;
    }
    if (!process.env.KEEP_CLUSTER) rmSync(this.dir, { recursive: true, force: true });
  }
}
