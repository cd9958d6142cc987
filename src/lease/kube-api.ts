// The few Kubernetes API calls the Kubernetes lease store makes, over
// node:https (node:http for an http:// server), with no client library:
// read, list and watch Nodes, patch nodes/status. Every call is bounded by a
// timeout and the caller's signal; failures a retry can cure (unreachable,
// 5xx, 429, 401/403 while RBAC is applied) become STORE_UNAVAILABLE naming
// the call, so the daemon waits instead of crash-looping. Where the API is
// and who twill is come from kubeconfig.ts.
//
// Memory is the reason this is not @kubernetes/client-node (over 40 MiB of
// RSS loaded): the Node list, from the apiserver's watch cache, is taken
// apart as it arrives and each Node turned into a NodeView at once
// (list-items.ts), so no raw Node outlives its own parse and the list is
// never whole; a watch reply is read line by line as it arrives
// (kube-watch-lines.ts); every reply is bounded.
// One keep-alive agent: a call reuses the connection the previous one left,
// and a watch holds a second one while it runs.
import { readFile } from 'node:fs/promises';
import {
  Agent as HttpAgent,
  request as httpRequest,
  type IncomingMessage,
  type OutgoingHttpHeaders,
} from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { createSecureContext } from 'node:tls';
import { TwillError, describeError } from '../errors.ts';
import { childController, withDeadline } from '../util/abort.ts';
import { nodeView, type NodeView } from './kube-node.ts';
import { LineReader } from './kube-watch-lines.ts';
import { ListItemSplitter } from './list-items.ts';
import { loadKubeConfig, type KubeAccess, type KubeAuth } from './kubeconfig.ts';

export { loadKubeConfig, type KubeAccess } from './kubeconfig.ts';

export interface NodeListing {
  readonly nodes: readonly NodeView[];
  readonly resourceVersion: string;
}

export type NodeWatchEvent =
  | { readonly type: 'put' | 'delete'; readonly node: NodeView }
  | { readonly type: 'bookmark'; readonly resourceVersion: string };

/**
 * Why a watch ended: 'gone' (410: re-list), 'closed' (the server ended it: resume), 'failed',
 * 'aborted'.
 */
export type NodeWatchEnd =
  | { readonly reason: 'aborted' | 'closed' }
  | { readonly reason: 'gone' | 'failed'; readonly detail: string };

export interface KubeApi {
  /** where the API is, for logs */
  readonly server: string;
  readNode(name: string, signal: AbortSignal): Promise<NodeView | undefined>;
  /**
   * Every Node; `notOlderThan`: a resourceVersion the listing must include (one we wrote), where
   * the apiserver's watch cache may still be behind it.
   */
  listNodes(signal: AbortSignal, o?: { readonly notOlderThan?: string }): Promise<NodeListing>;
  /**
   * A strategic-merge patch of nodes/status (annotations and conditions merge, nothing else is
   * replaced).
   */
  patchNodeStatus(name: string, patch: unknown, signal: AbortSignal): Promise<NodeView>;
  watchNodes(o: {
    resourceVersion: string;
    timeoutSeconds: number;
    signal: AbortSignal;
    onEvent: (ev: NodeWatchEvent) => void;
  }): Promise<NodeWatchEnd>;
}

/** A watch that sends nothing for this long (not even its headers) is given up: a dead peer. */
export const WATCH_SILENCE_MS = 30_000;
/** The largest reply to a single-Node call (etcd keeps objects under 1.5 MiB by default). */
const MAX_OBJECT_REPLY = 4 * 1024 * 1024;
/** What is read of a refusal's body, for its Status message. */
const MAX_ERROR_REPLY = 64 * 1024;
/** A token file is re-read at most this often (bound service account tokens rotate hourly). */
const TOKEN_REREAD_MS = 60_000;
/** How often a list whose continue token expired (410) starts again before the call fails. */
const LIST_RESTARTS = 3;

/** The apiserver answered with an error status. */
class HttpStatusError extends Error {
  readonly status: number;
  /** the apiserver's own explanation (a Status object's message), when it gave one */
  readonly said: string | undefined;

  constructor(status: number, said: string | undefined) {
    super(`HTTP ${status}${said ? ` ${said}` : ''}`);
    this.name = 'HttpStatusError';
    this.status = status;
    this.said = said;
  }
}

/** The abort reason of a call that ran out of time. */
class CallTimeout extends Error {
  constructor(ms: number) {
    super(`no reply within ${ms} ms`);
    this.name = 'CallTimeout';
  }
}

/** The HTTP status of a failed call, when the apiserver answered. */
function statusOf(err: unknown): number | undefined {
  return err instanceof HttpStatusError ? err.status : undefined;
}

/** The apiserver's explanation in an error reply: its Status message, else the text's start. */
function serverMessage(body: string): string | undefined {
  try {
    const message = (JSON.parse(body) as { message?: unknown } | null)?.message;
    return typeof message === 'string' ? message : undefined;
  } catch {
    return body.slice(0, 200) || undefined;
  }
}

/** A network-level failure as one line, with what to check when TLS refused the server. */
function describeFailure(err: unknown): string {
  const reason = (err as { cause?: unknown }).cause;
  if (reason instanceof CallTimeout) return reason.message;
  if (err instanceof CallTimeout) return err.message;
  const code = (err as { code?: unknown }).code;
  const text = describeError(err).split('\n')[0] ?? '';
  const tls =
    typeof code === 'string' &&
    /CERT|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)|ALTNAME|^ERR_SSL|^ERR_TLS/.test(code);
  return tls
    ? `${text} (TLS: check the certificate-authority and tls-server-name of the kubeconfig, or the service account's ca.crt, and the client certificate)`
    : text;
}

/**
 * A failed call as a TwillError: a request the apiserver refuses as invalid
 * (400, 413, 422) will not succeed by retrying, so it is CONFIG_INVALID (exit
 * 2); everything else (unreachable, 5xx, 429, 401/403 while RBAC is applied,
 * 404 on a list) is STORE_UNAVAILABLE and waited out.
 */
function apiError(what: string, err: unknown, server: string): TwillError {
  const status = statusOf(err);
  const hint =
    status === 401 || status === 403
      ? '; twill needs nodes get/list/watch and nodes/status patch (deploy/clusterrole.yaml)'
      : '';
  const detail = status === undefined ? describeFailure(err) : (err as Error).message;
  const code =
    status === 400 || status === 413 || status === 422 ? 'CONFIG_INVALID' : 'STORE_UNAVAILABLE';
  return new TwillError(code, `Kubernetes API ${server}: ${what}: ${detail}${hint}`, {
    cause: err,
  });
}

class ReplyTooLarge extends Error {
  constructor(max: number) {
    super(`the reply is larger than ${max} bytes`);
    this.name = 'ReplyTooLarge';
  }
}

/**
 * A reply's body as text, at most `max` bytes: beyond, ReplyTooLarge, or with `truncate` the
 * first `max` bytes.
 */
async function readBody(res: IncomingMessage, max: number, truncate = false): Promise<string> {
  if (!truncate && Number(res.headers['content-length']) > max) {
    res.destroy();
    throw new ReplyTooLarge(max);
  }
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    if (size + chunk.length > max) {
      if (!truncate) throw new ReplyTooLarge(max);
      parts.push(chunk.subarray(0, max - size));
      size = max;
      break;
    }
    parts.push(chunk);
    size += chunk.length;
  }
  return Buffer.concat(parts, size).toString('utf8');
}

/** A bearer token kept in a file, re-read at most once a minute, or at once after a 401. */
class TokenFile {
  private token: string | undefined;
  private readAt = Number.NEGATIVE_INFINITY;
  private readonly path: string;

  constructor(path: string) {
    this.path = path;
  }

  /** The token; `fresh`: re-read it now (a 401 may mean it rotated). */
  async get(fresh = false): Promise<string> {
    if (fresh || this.token === undefined || Date.now() - this.readAt >= TOKEN_REREAD_MS) {
      try {
        this.token = (await readFile(this.path, 'utf8')).trim();
        this.readAt = Date.now();
      } catch (err) {
        // a file being replaced (the kubelet swaps a symlink) is read again on the next call
        if (this.token === undefined)
          throw new Error(`cannot read the token ${this.path}: ${describeError(err)}`, {
            cause: err,
          });
      }
    }
    return this.token;
  }
}

interface Exchange {
  readonly method: 'GET' | 'PATCH';
  /** the path and query after the server URL */
  readonly path: string;
  readonly body?: string;
  readonly contentType?: string;
  readonly signal: AbortSignal;
}

export class ClientKubeApi implements KubeApi {
  readonly server: string;
  private readonly agent: HttpAgent;
  private readonly request: typeof httpRequest;
  private readonly auth: KubeAuth;
  private readonly tokenFile: TokenFile | undefined;
  private readonly timeoutMs: number;
  private readonly pageSize: number;

  constructor(o: KubeAccess) {
    const target = loadKubeConfig(o);
    this.server = target.server;
    this.auth = target.auth;
    this.tokenFile = target.auth.kind === 'tokenFile' ? new TokenFile(target.auth.path) : undefined;
    this.timeoutMs = o.callTimeoutMs ?? 10_000;
    this.pageSize = o.listPageSize ?? 500;
    // a call reuses the connection the last one left; the watch holds another while it runs
    const pool = { keepAlive: true, maxFreeSockets: 2 };
    if (target.server.startsWith('http:')) {
      this.agent = new HttpAgent(pool);
      this.request = httpRequest;
      return;
    }
    const tls = {
      ...(target.ca ? { ca: target.ca } : {}),
      ...(target.cert ? { cert: target.cert } : {}),
      ...(target.key ? { key: target.key } : {}),
    };
    try {
      // a CA or key that TLS cannot use stops twill here, not at each call
      createSecureContext(tls);
    } catch (err) {
      throw new TwillError(
        'CONFIG_INVALID',
        `${target.source}: the certificate authority or client certificate/key cannot be used: ${describeError(err)}`,
        { cause: err },
      );
    }
    this.agent = new HttpsAgent({
      ...pool,
      ...tls,
      rejectUnauthorized: !target.insecure,
      ...(target.tlsServerName ? { servername: target.tlsServerName } : {}),
    });
    this.request = httpsRequest;
  }

  /** Closes the idle kept-alive connections (which never hold the process: Node unrefs them). */
  close(): void {
    this.agent.destroy();
  }

  private async authorization(fresh: boolean): Promise<string | undefined> {
    const a = this.auth;
    if (a.kind === 'token') return `Bearer ${a.token}`;
    if (a.kind === 'basic')
      return `Basic ${Buffer.from(`${a.username}:${a.password}`).toString('base64')}`;
    if (this.tokenFile) return `Bearer ${await this.tokenFile.get(fresh)}`;
    return undefined;
  }

  /** One request; resolves with the reply once its headers are in. */
  private exchange(x: Exchange, authorization: string | undefined): Promise<IncomingMessage> {
    const headers: OutgoingHttpHeaders = { Accept: 'application/json', 'User-Agent': 'twill' };
    if (authorization !== undefined) headers.Authorization = authorization;
    if (x.body !== undefined) {
      headers['Content-Type'] = x.contentType ?? 'application/json';
      headers['Content-Length'] = Buffer.byteLength(x.body);
    }
    return new Promise((resolve, reject) => {
      const req = this.request(
        new URL(this.server + x.path),
        { method: x.method, headers, agent: this.agent, signal: x.signal },
        resolve,
      );
      req.on('error', (err: Error & { reusedSocket?: boolean }) => {
        err.reusedSocket = req.reusedSocket;
        reject(err);
      });
      req.end(x.body);
    });
  }

  /**
   * A request, sent again once when a kept-alive connection turned out closed by the server before
   * it answered (every call here is idempotent), or when a 401 came while the token file holds a
   * new token.
   */
  private async send(x: Exchange): Promise<IncomingMessage> {
    let fresh = false;
    for (let attempt = 0; ; attempt++) {
      const authorization = await this.authorization(fresh);
      let res: IncomingMessage;
      try {
        res = await this.exchange(x, authorization);
      } catch (err) {
        const e = err as { code?: unknown; reusedSocket?: boolean };
        if (attempt === 0 && e.reusedSocket && e.code === 'ECONNRESET' && !x.signal.aborted)
          continue;
        throw err;
      }
      if (res.statusCode === 401 && this.tokenFile && !fresh) {
        fresh = true;
        if ((await this.authorization(true)) !== authorization) {
          res.destroy();
          continue;
        }
      }
      return res;
    }
  }

  /** The JSON a request answers with; an error status as HttpStatusError. */
  private async json(x: Exchange, max: number): Promise<unknown> {
    const res = await this.send(x);
    const status = res.statusCode ?? 0;
    if (status < 200 || status > 299) {
      const body = await readBody(res, MAX_ERROR_REPLY, true);
      throw new HttpStatusError(status, serverMessage(body));
    }
    const text = await readBody(res, max);
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new Error(`the reply is not JSON: ${JSON.stringify(text.slice(0, 100))}`);
    }
  }

  /** Runs one call with the caller's signal and the call timeout wired into its request. */
  private async call<T>(
    what: string,
    signal: AbortSignal,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const ms = this.timeoutMs;
    return withDeadline(signal, { ms, reason: () => new CallTimeout(ms) }, async (s) => {
      try {
        return await fn(s);
      } catch (err) {
        if (err instanceof TwillError) throw err;
        // out of time while the body was arriving fails with a bare "aborted": say why
        const reason: unknown = s.reason;
        throw apiError(what, reason instanceof CallTimeout ? reason : err, this.server);
      }
    });
  }

  async readNode(name: string, signal: AbortSignal): Promise<NodeView | undefined> {
    try {
      return await this.call(`get node ${name}`, signal, async (s) =>
        nodeView(
          await this.json(
            { method: 'GET', path: `/api/v1/nodes/${encodeURIComponent(name)}`, signal: s },
            MAX_OBJECT_REPLY,
          ),
        ),
      );
    } catch (err) {
      if (statusOf((err as Error).cause) === 404) return undefined;
      throw err;
    }
  }

  /**
   * Every Node, from the apiserver's watch cache (resourceVersion=0, as client-go's reflectors
   * list: a node agent on every node must not make each re-list a quorum read of etcd). Servers
   * before 1.33 ignore the limit there and answer with every Node in one reply, tens of MiB at a
   * few thousand Nodes: the reply is taken apart as it arrives (list-items.ts), each Node turned
   * into a NodeView at once, so neither the text nor a parsed tree of the whole list is ever held.
   * A server that does page (a continue token) is followed page by page; a continue token that
   * expired (410) starts the list again. `notOlderThan` asks for a listing at least that new
   * (resourceVersionMatch, Kubernetes 1.19 and later): the cache is fed by a watch of etcd and
   * can be a write behind, our own included.
   */
  async listNodes(
    signal: AbortSignal,
    o: { readonly notOlderThan?: string } = {},
  ): Promise<NodeListing> {
    const first =
      o.notOlderThan === undefined
        ? 'resourceVersion=0'
        : `resourceVersion=${encodeURIComponent(o.notOlderThan)}&resourceVersionMatch=NotOlderThan`;
    for (let restarts = 0; ; restarts++) {
      const nodes: NodeView[] = [];
      let resourceVersion: string;
      let next = '';
      try {
        do {
          // a continue token carries its own resourceVersion; the first page asks for the cache
          const query = next
            ? `limit=${this.pageSize}&continue=${encodeURIComponent(next)}`
            : `${first}&limit=${this.pageSize}`;
          const page = await this.call('list nodes', signal, (s) =>
            this.listPage(`/api/v1/nodes?${query}`, s, (v) => nodes.push(v)),
          );
          resourceVersion = page.resourceVersion;
          next = page.next;
        } while (next !== '');
        return { nodes, resourceVersion };
      } catch (err) {
        if (next !== '' && statusOf((err as Error).cause) === 410 && restarts < LIST_RESTARTS)
          continue;
        throw err;
      }
    }
  }

  /** One list reply, its Nodes handed to `onNode` as they arrive: its resourceVersion, continue. */
  private async listPage(
    path: string,
    signal: AbortSignal,
    onNode: (v: NodeView) => void,
  ): Promise<{ resourceVersion: string; next: string }> {
    const res = await this.send({ method: 'GET', path, signal });
    const status = res.statusCode ?? 0;
    if (status < 200 || status > 299) {
      const body = await readBody(res, MAX_ERROR_REPLY, true);
      throw new HttpStatusError(status, serverMessage(body));
    }
    const splitter = new ListItemSplitter(
      { item: MAX_OBJECT_REPLY, rest: MAX_ERROR_REPLY },
      (text) => {
        let node: unknown;
        try {
          node = JSON.parse(text);
        } catch {
          throw new Error(`a list item is not JSON: ${JSON.stringify(text.slice(0, 100))}`);
        }
        const view = nodeView(node);
        if (view) onNode(view);
      },
    );
    try {
      for await (const chunk of res as AsyncIterable<Buffer>) splitter.push(chunk);
    } catch (err) {
      res.destroy();
      throw err;
    }
    const list = splitter.end() as {
      items?: unknown;
      metadata?: { resourceVersion?: unknown; continue?: unknown };
    };
    if (!Array.isArray(list?.items)) throw new Error('the reply is not a list of Nodes (no items)');
    const meta = list.metadata ?? {};
    return {
      resourceVersion: typeof meta.resourceVersion === 'string' ? meta.resourceVersion : '',
      next: typeof meta.continue === 'string' ? meta.continue : '',
    };
  }

  async patchNodeStatus(name: string, patch: unknown, signal: AbortSignal): Promise<NodeView> {
    const what = `patch node ${name} status`;
    const node = await this.call(what, signal, async (s) =>
      nodeView(
        await this.json(
          {
            method: 'PATCH',
            path: `/api/v1/nodes/${encodeURIComponent(name)}/status`,
            body: JSON.stringify(patch),
            contentType: 'application/strategic-merge-patch+json',
            signal: s,
          },
          MAX_OBJECT_REPLY,
        ),
      ),
    );
    if (!node)
      throw new TwillError(
        'STORE_UNAVAILABLE',
        `Kubernetes API ${this.server}: ${what} returned no node`,
      );
    return node;
  }

  async watchNodes(o: {
    resourceVersion: string;
    timeoutSeconds: number;
    signal: AbortSignal;
    onEvent: (ev: NodeWatchEvent) => void;
  }): Promise<NodeWatchEnd> {
    if (o.signal.aborted) return { reason: 'aborted' };
    // a stop cuts the request at once, even while it is still connecting
    const ctl = childController(o.signal);
    let silent = false;
    let timer: NodeJS.Timeout | undefined;
    const heard = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => ((silent = true), ctl.abort()), WATCH_SILENCE_MS);
    };
    const query = new URLSearchParams({
      watch: 'true',
      resourceVersion: o.resourceVersion,
      allowWatchBookmarks: 'true',
      timeoutSeconds: String(o.timeoutSeconds),
    });
    let end: NodeWatchEnd | undefined;
    const finish = (e: NodeWatchEnd): void => void (end ??= e);
    const lines = new LineReader((line) => {
      if (end) return;
      let ev: { type?: unknown; object?: unknown };
      try {
        ev = JSON.parse(line) as typeof ev;
      } catch {
        finish({ reason: 'failed', detail: `a watch event is not JSON: ${line.slice(0, 100)}` });
        return;
      }
      try {
        this.dispatch(String(ev?.type), ev?.object, o.onEvent, finish);
      } catch (err) {
        // the store's handler failed: end the watch so the store re-lists
        finish({
          reason: 'failed',
          detail: `handling a ${String(ev?.type)} event failed: ${describeError(err)}`,
        });
      }
    });
    try {
      heard();
      const res = await this.send({
        method: 'GET',
        path: `/api/v1/nodes?${query.toString()}`,
        signal: ctl.signal,
      });
      if (res.statusCode !== 200) {
        const err = new HttpStatusError(
          res.statusCode ?? 0,
          serverMessage(await readBody(res, MAX_ERROR_REPLY, true)),
        );
        const detail = apiError('watch nodes', err, this.server).message;
        return err.status === 410 ? { reason: 'gone', detail } : { reason: 'failed', detail };
      }
      for await (const chunk of res as AsyncIterable<Buffer>) {
        heard();
        lines.push(chunk);
        if (end) return end;
      }
      lines.end();
      return end ?? { reason: 'closed' };
    } catch (err) {
      if (o.signal.aborted) return { reason: 'aborted' };
      if (end) return end;
      if (silent)
        return {
          reason: 'failed',
          detail: `Kubernetes API ${this.server}: watch nodes: nothing heard for ${WATCH_SILENCE_MS / 1000} s`,
        };
      return { reason: 'failed', detail: apiError('watch nodes', err, this.server).message };
    } finally {
      clearTimeout(timer);
      ctl.abort();
    }
  }

  /**
   * One watch event: ERROR ends the watch (410: gone), BOOKMARK moves the resourceVersion, the rest
   * are Nodes.
   */
  private dispatch(
    type: string,
    obj: unknown,
    onEvent: (ev: NodeWatchEvent) => void,
    end: (e: NodeWatchEnd) => void,
  ): void {
    if (type === 'ERROR') {
      const status = obj as { code?: number; message?: string } | null;
      end({
        reason: status?.code === 410 ? 'gone' : 'failed',
        detail: `watch error ${status?.code ?? '?'}: ${status?.message ?? ''}`,
      });
      return;
    }
    if (type === 'BOOKMARK') {
      const rv = (obj as { metadata?: { resourceVersion?: unknown } } | null)?.metadata
        ?.resourceVersion;
      onEvent({ type: 'bookmark', resourceVersion: typeof rv === 'string' ? rv : '' });
      return;
    }
    const node = nodeView(obj);
    if (node) onEvent({ type: type === 'DELETED' ? 'delete' : 'put', node });
  }
}
