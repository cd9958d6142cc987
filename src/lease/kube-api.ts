// The few Kubernetes API calls the Kubernetes lease store makes, over
// @kubernetes/client-node: read, list and watch Nodes, patch nodes/status.
// Every call is bounded by a timeout and the caller's signal; failures a
// retry can cure (unreachable, 5xx, 429, 401/403 while RBAC is applied)
// become STORE_UNAVAILABLE naming the call, so the daemon waits instead of
// crash-looping. Loaded only in Kubernetes mode (client-node is large).
import {
  CoreV1Api,
  KubeConfig,
  Observable,
  PatchStrategy,
  Watch,
  type ConfigurationOptions,
  type ObservableMiddleware,
  type RequestContext,
} from '@kubernetes/client-node';
import { TwillError, describeError } from '../errors.ts';
import { childController } from '../util/abort.ts';
import { nodeView, type NodeView } from './kube-node.ts';

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
  listNodes(signal: AbortSignal): Promise<NodeListing>;
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

export interface KubeAccess {
  /** a kubeconfig file; absent: in-cluster config (service account token and CA) */
  readonly kubeconfigFile?: string | undefined;
  /** overrides the server URL of either */
  readonly apiUrl?: string | undefined;
  /** per-call timeout (default 10 s) */
  readonly callTimeoutMs?: number;
}

/** The HTTP status of a client-node error, when it carries one. */
function statusOf(err: unknown): number | undefined {
  const e = err as { code?: unknown; statusCode?: unknown };
  if (typeof e.code === 'number') return e.code;
  return typeof e.statusCode === 'number' ? e.statusCode : undefined;
}

/** The apiserver's own explanation (a Status object's message), when the error carries one. */
function serverMessage(err: unknown): string | undefined {
  const body = (err as { body?: unknown }).body;
  let obj: unknown = body;
  if (typeof body === 'string') {
    try {
      obj = JSON.parse(body);
    } catch {
      return body.slice(0, 200) || undefined;
    }
  }
  const message = (obj as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? message : undefined;
}

/**
 * A failed call as a TwillError: a request the apiserver refuses as invalid
 * (400, 413, 422) will not succeed by retrying, so it is CONFIG_INVALID (exit
 * 2); everything else (unreachable, 5xx, 429, 401/403 while RBAC is applied,
 * 404 on a list) is STORE_UNAVAILABLE and waited out.
 */
function apiError(what: string, err: unknown, server: string): TwillError {
  const status = statusOf(err);
  const said = serverMessage(err);
  const hint =
    status === 401 || status === 403
      ? '; twill needs nodes get/list/watch and nodes/status patch (deploy/clusterrole.yaml)'
      : '';
  const detail =
    status === undefined
      ? describeError(err).split('\n')[0]
      : `HTTP ${status}${said ? ` ${said}` : ''}`;
  const code =
    status === 400 || status === 413 || status === 422 ? 'CONFIG_INVALID' : 'STORE_UNAVAILABLE';
  return new TwillError(code, `Kubernetes API ${server}: ${what}: ${detail}${hint}`, {
    cause: err,
  });
}

/** Wires the caller's signal (and a Content-Type, for patches) into one request. */
function requestMiddleware(
  signal: AbortSignal,
  contentType: string | undefined,
): ObservableMiddleware {
  return {
    pre: (ctx: RequestContext) => {
      ctx.setSignal(signal);
      if (contentType !== undefined) ctx.setHeaderParam('Content-Type', contentType);
      return new Observable(Promise.resolve(ctx));
    },
    post: (rsp) => new Observable(Promise.resolve(rsp)),
  };
}

/**
 * An http(s) URL (in-cluster config without its variables gives "https://undefined:undefined",
 * which is none).
 */
function isHttpUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return (url.protocol === 'https:' || url.protocol === 'http:') && url.hostname !== '';
  } catch {
    return false;
  }
}

export function loadKubeConfig(o: KubeAccess): KubeConfig {
  const kc = new KubeConfig();
  try {
    if (o.kubeconfigFile !== undefined) kc.loadFromFile(o.kubeconfigFile);
    else kc.loadFromCluster();
  } catch (err) {
    throw new TwillError(
      'CONFIG_INVALID',
      `--kubeconfig-file ${JSON.stringify(o.kubeconfigFile)}: ${describeError(err)}`,
      { cause: err },
    );
  }
  const cluster = kc.getCurrentCluster();
  if (!cluster || (o.apiUrl === undefined && !isHttpUrl(cluster.server))) {
    const from =
      o.kubeconfigFile === undefined
        ? 'in-cluster config: KUBERNETES_SERVICE_HOST/PORT are not set (not in a pod?); pass --kubeconfig-file or --kube-api-url'
        : `--kubeconfig-file ${o.kubeconfigFile}: no current cluster with a server URL`;
    throw new TwillError('CONFIG_INVALID', from);
  }
  if (o.apiUrl !== undefined) {
    const user = kc.getCurrentUser() ?? { name: 'none' };
    kc.loadFromClusterAndUser({ ...cluster, server: o.apiUrl }, user);
  }
  return kc;
}

export class ClientKubeApi implements KubeApi {
  readonly server: string;
  private readonly api: CoreV1Api;
  private readonly watcher: Watch;
  private readonly timeoutMs: number;

  constructor(o: KubeAccess) {
    const kc = loadKubeConfig(o);
    this.server = kc.getCurrentCluster()?.server ?? '?';
    this.api = kc.makeApiClient(CoreV1Api);
    this.watcher = new Watch(kc);
    this.timeoutMs = o.callTimeoutMs ?? 10_000;
  }

  /** Runs one call with the caller's signal and the call timeout wired into the request. */
  private async call<T>(
    what: string,
    signal: AbortSignal,
    fn: (opts: ConfigurationOptions) => Promise<T>,
    contentType?: string,
  ): Promise<T> {
    const bounded = AbortSignal.any([signal, AbortSignal.timeout(this.timeoutMs)]);
    try {
      return await fn({
        middleware: [requestMiddleware(bounded, contentType)],
        middlewareMergeStrategy: 'append',
      });
    } catch (err) {
      throw err instanceof TwillError ? err : apiError(what, err, this.server);
    }
  }

  async readNode(name: string, signal: AbortSignal): Promise<NodeView | undefined> {
    try {
      return await this.call(`get node ${name}`, signal, async (opts) =>
        nodeView(await this.api.readNode({ name }, opts)),
      );
    } catch (err) {
      if (statusOf((err as Error).cause) === 404) return undefined;
      throw err;
    }
  }

  async listNodes(signal: AbortSignal): Promise<NodeListing> {
    return this.call('list nodes', signal, async (opts) => {
      // resourceVersion 0: served from the apiserver's watch cache, not a quorum read of etcd (as
      // informers list)
      const list = await this.api.listNode({ resourceVersion: '0' }, opts);
      const nodes = list.items.flatMap((n) => nodeView(n) ?? []);
      return { nodes, resourceVersion: list.metadata?.resourceVersion ?? '' };
    });
  }

  async patchNodeStatus(name: string, patch: unknown, signal: AbortSignal): Promise<NodeView> {
    const what = `patch node ${name} status`;
    const node = await this.call(
      what,
      signal,
      async (opts) => nodeView(await this.api.patchNodeStatus({ name, body: patch }, opts)),
      PatchStrategy.StrategicMergePatch,
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
    const ended = Promise.withResolvers<NodeWatchEnd>();
    const ctl = childController(o.signal);
    let request: AbortController | undefined;
    // a stop answers at once, even while the watch is still connecting (the request is cut when it
    // arrives)
    ctl.signal.addEventListener(
      'abort',
      () => (request?.abort(), o.signal.aborted && ended.resolve({ reason: 'aborted' })),
      { once: true },
    );
    const fail = (detail: string): void => (
      ended.resolve({ reason: 'failed', detail }),
      ctl.abort()
    );
    const onEvent = (type: string, obj: unknown): void => {
      if (ctl.signal.aborted) return;
      try {
        this.dispatch(type, obj, o.onEvent, (end) => (ended.resolve(end), ctl.abort()));
      } catch (err) {
        // client-node swallows a callback's exceptions: end the watch so the store re-lists
        fail(`handling a ${type} event failed: ${describeError(err)}`);
      }
    };
    const done = (err: unknown): void => {
      if (o.signal.aborted) ended.resolve({ reason: 'aborted' });
      else if (err === null || err === undefined) ended.resolve({ reason: 'closed' });
      else fail(apiError('watch nodes', err, this.server).message);
    };
    const query = {
      resourceVersion: o.resourceVersion,
      allowWatchBookmarks: true,
      timeoutSeconds: o.timeoutSeconds,
    };
    this.watcher.watch('/api/v1/nodes', query, onEvent, done).then(
      (c) => ((request = c), ctl.signal.aborted && c.abort()),
      (err: unknown) => done(err),
    );
    try {
      return await ended.promise;
    } finally {
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
      const status = obj as { code?: number; message?: string };
      end({
        reason: status.code === 410 ? 'gone' : 'failed',
        detail: `watch error ${status.code ?? '?'}: ${status.message ?? ''}`,
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
