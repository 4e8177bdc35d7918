// A TCP proxy on 127.0.0.1 the tests control: bytes pass through, are
// swallowed (a partition: nothing reaches the node, nothing comes back),
// or a connection is cut right after the node answered (the answer is lost
// after the call was applied).
import * as net from "node:net";

export class Proxy {
  blackhole = false;
  cutDone = 0;
  private cuts = 0;
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();

  private constructor(private readonly target: string, server: net.Server) {
    this.server = server;
  }

  static async start(target: string): Promise<Proxy> {
    const server = net.createServer();
    const p = new Proxy(target, server);
    server.on("connection", (c) => p.pipe(c));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    return p;
  }

  get address(): string {
    const a = this.server.address() as net.AddressInfo;
    return `127.0.0.1:${a.port}`;
  }

  /** The next n answers from the node are dropped and their connections closed. */
  cutAnswers(n: number): void {
    this.cuts += n;
  }

  private pipe(c: net.Socket): void {
    const [host, port] = [this.target.slice(0, this.target.lastIndexOf(":")), Number(this.target.slice(this.target.lastIndexOf(":") + 1))];
    const s = net.connect(port, host);
    for (const x of [c, s]) {
      this.sockets.add(x);
      x.on("close", () => { this.sockets.delete(x); c.destroy(); s.destroy(); });
      x.on("error", () => {});
    }
    c.on("data", (d) => { if (!this.blackhole) s.write(d); });
    s.on("data", (d) => {
      if (this.blackhole) return;
      if (this.cuts > 0) {
        this.cuts--;
        this.cutDone++;
        c.destroy();
        s.destroy();
        return;
      }
      c.write(d);
    });
  }

  close(): void {
    this.server.close();
    for (const x of this.sockets) x.destroy();
  }
}
