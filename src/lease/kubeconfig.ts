// Where the Kubernetes API is and how twill proves who it is: a kubeconfig
// file (--kubeconfig-file) or the pod's in-cluster config (the service
// account's token and CA, KUBERNETES_SERVICE_HOST/PORT), with --kube-api-url
// overriding the server of either. Read once at start-up, synchronously, so
// that a bad file stops twill at once (CONFIG_INVALID naming the file and the
// field) instead of failing every call later.
//
// Of a kubeconfig only its current context is read: the cluster's server,
// certificate-authority(-data), insecure-skip-tls-verify and
// tls-server-name; the user's token or tokenFile, username/password (basic
// auth), client-certificate(-data) and client-key(-data). Relative paths
// resolve against the kubeconfig's directory, and a -data field wins over its
// file, as kubectl. What twill cannot honour is refused, never ignored: exec
// and auth-provider users (twill runs no credential plugins), impersonation
// (as, as-groups …) and proxy-url. A plain http:// server is taken only with
// insecure-skip-tls-verify: true (as kubectl-like clients do), since its
// credentials would cross the network in clear.
//
// A token file (a user's tokenFile, or the service account's token, which
// the kubelet rotates) is only read here to check it exists: kube-api.ts
// re-reads it while running.
import { readFileSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import { dirname, isAbsolute, join } from 'node:path';
import { load } from 'js-yaml';
import { TwillError, describeError } from '../errors.ts';

export interface KubeAccess {
  /** a kubeconfig file; absent: in-cluster config (service account token and CA) */
  readonly kubeconfigFile?: string | undefined;
  /** overrides the server URL of either */
  readonly apiUrl?: string | undefined;
  /** per-call timeout (default 10 s) */
  readonly callTimeoutMs?: number;
  /** Nodes per page of a list (default 500) */
  readonly listPageSize?: number;
}

/** How requests authenticate (client certificates aside, which are TLS's). */
export type KubeAuth =
  | { readonly kind: 'none' }
  | { readonly kind: 'token'; readonly token: string }
  /** a bearer token read from a file, re-read while running (bound tokens rotate) */
  | { readonly kind: 'tokenFile'; readonly path: string }
  | { readonly kind: 'basic'; readonly username: string; readonly password: string };

export interface KubeTarget {
  /** the server URL, without a trailing slash (a path after the host is kept: a proxy's prefix) */
  readonly server: string;
  /** PEM CA bundle to verify the server with; absent: the system's CAs */
  readonly ca?: Buffer | undefined;
  /** insecure-skip-tls-verify: the server's certificate is not verified */
  readonly insecure: boolean;
  /** the name the server's certificate is checked against, instead of the URL's host */
  readonly tlsServerName?: string | undefined;
  /** PEM client certificate and key */
  readonly cert?: Buffer | undefined;
  readonly key?: Buffer | undefined;
  readonly auth: KubeAuth;
  /** where this came from, to prefix errors: `--kubeconfig-file "…"` or `in-cluster config` */
  readonly source: string;
}

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

class Refusal extends Error {}

/** A string field, absent when empty; a field of another type is refused. */
function str(o: Obj, field: string, where: string): string | undefined {
  const v = o[field];
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string') throw new Refusal(`${where}.${field} must be a string`);
  return v;
}

/** The named entry of a kubeconfig list (clusters, contexts, users): its inner object. */
function entry(doc: Obj, list: string, inner: string, name: string): Obj {
  const items = doc[list];
  const found = (Array.isArray(items) ? items : []).find(
    (e): e is Obj => isObj(e) && e.name === name,
  );
  if (!found) throw new Refusal(`${list} has no entry named ${JSON.stringify(name)}`);
  const body = found[inner];
  if (!isObj(body))
    throw new Refusal(`${list}[${JSON.stringify(name)}] has no ${inner} (or it is not a map)`);
  return body;
}

/** A -data field (base64 PEM), else its file (relative to `dir`), else undefined. */
function pem(
  o: Obj,
  field: string,
  where: string,
  dir: string,
  read: (path: string) => Buffer,
): Buffer | undefined {
  const data = str(o, `${field}-data`, where);
  if (data !== undefined) {
    const text = data.replace(/\s+/g, '');
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0)
      throw new Refusal(`${where}.${field}-data is not base64`);
    return Buffer.from(text, 'base64');
  }
  const file = str(o, field, where);
  if (file === undefined) return undefined;
  const path = isAbsolute(file) ? file : join(dir, file);
  try {
    return read(path);
  } catch (err) {
    throw new Refusal(`${where}.${field} ${path}: ${describeError(err)}`);
  }
}

/** Whether `text` is an http(s) URL with a host. */
function httpUrl(text: string): URL | undefined {
  try {
    const url = new URL(text);
    return (url.protocol === 'https:' || url.protocol === 'http:') && url.hostname !== ''
      ? url
      : undefined;
  } catch {
    return undefined;
  }
}

/** A server URL as requests are built from it: no trailing slash. */
function serverOf(text: string, where: string): string {
  if (!httpUrl(text))
    throw new Refusal(`${where}.server ${JSON.stringify(text)} is not an http(s) URL`);
  return text.replace(/\/+$/, '');
}

function userAuth(user: Obj, where: string, dir: string, read: (p: string) => Buffer): KubeAuth {
  if (user.exec !== undefined && user.exec !== null)
    throw new Refusal(
      `${where} gets its credentials from an exec plugin (${where}.exec), which twill does not run; give twill a user with a token, tokenFile or client certificate (e.g. a ServiceAccount's token: kubectl create token)`,
    );
  if (user['auth-provider'] !== undefined && user['auth-provider'] !== null)
    throw new Refusal(
      `${where} gets its credentials from an auth-provider plugin, which twill does not run; give twill a user with a token, tokenFile or client certificate (e.g. a ServiceAccount's token: kubectl create token)`,
    );
  for (const field of ['as', 'as-uid', 'as-groups', 'as-user-extra'])
    if (user[field] !== undefined && user[field] !== null)
      throw new Refusal(
        `${where}.${field}: impersonation is not supported; give twill the identity itself`,
      );
  const token = str(user, 'token', where);
  const tokenFile = str(user, 'tokenFile', where);
  const username = str(user, 'username', where);
  const password = str(user, 'password', where);
  if ((token !== undefined || tokenFile !== undefined) && username !== undefined)
    throw new Refusal(
      `${where} has both a token and a username/password; only one of them is allowed`,
    );
  if (token !== undefined) return { kind: 'token', token: token.trim() };
  if (tokenFile !== undefined) {
    const path = isAbsolute(tokenFile) ? tokenFile : join(dir, tokenFile);
    try {
      read(path);
    } catch (err) {
      throw new Refusal(`${where}.tokenFile ${path}: ${describeError(err)}`);
    }
    return { kind: 'tokenFile', path };
  }
  if (username !== undefined) return { kind: 'basic', username, password: password ?? '' };
  return { kind: 'none' };
}

/**
 * The target a kubeconfig's current context names. `dir` is the kubeconfig's directory (relative
 * paths resolve against it); `read` reads a referenced file. Throws CONFIG_INVALID prefixed with
 * `source`.
 */
export function parseKubeconfig(
  text: string,
  o: { dir: string; source: string; read?: (path: string) => Buffer },
): KubeTarget {
  const read = o.read ?? ((path: string) => readFileSync(path));
  try {
    let doc: unknown;
    try {
      doc = load(text);
    } catch (err) {
      throw new Refusal(`not YAML: ${describeError(err).split('\n')[0]}`);
    }
    if (!isObj(doc)) throw new Refusal('not a kubeconfig (no map at the top)');
    const contextName = str(doc, 'current-context', 'kubeconfig');
    if (contextName === undefined)
      throw new Refusal('no current-context (set one: kubectl config use-context NAME)');
    const context = entry(doc, 'contexts', 'context', contextName);
    const where = `contexts[${JSON.stringify(contextName)}]`;
    const clusterName = str(context, 'cluster', where);
    if (clusterName === undefined) throw new Refusal(`${where}.cluster is not set`);
    const cluster = entry(doc, 'clusters', 'cluster', clusterName);
    const cw = `clusters[${JSON.stringify(clusterName)}].cluster`;
    const serverText = str(cluster, 'server', cw);
    if (serverText === undefined) throw new Refusal(`${cw}.server is not set`);
    if (str(cluster, 'proxy-url', cw) !== undefined)
      throw new Refusal(`${cw}.proxy-url: a proxy is not supported; reach the server directly`);
    const insecure = cluster['insecure-skip-tls-verify'];
    if (insecure !== undefined && insecure !== null && typeof insecure !== 'boolean')
      throw new Refusal(`${cw}.insecure-skip-tls-verify must be true or false`);
    const userName = str(context, 'user', where);
    const user = userName === undefined ? {} : entry(doc, 'users', 'user', userName);
    const uw = `users[${JSON.stringify(userName ?? '')}].user`;
    const cert = pem(user, 'client-certificate', uw, o.dir, read);
    const key = pem(user, 'client-key', uw, o.dir, read);
    if ((cert === undefined) !== (key === undefined))
      throw new Refusal(
        `${uw} has a client-certificate without a client-key, or the other way round; give both`,
      );
    return {
      server: serverOf(serverText, cw),
      ca: pem(cluster, 'certificate-authority', cw, o.dir, read),
      insecure: insecure === true,
      tlsServerName: str(cluster, 'tls-server-name', cw),
      cert,
      key,
      auth: userAuth(user, uw, o.dir, read),
      source: o.source,
    };
  } catch (err) {
    if (err instanceof Refusal)
      throw new TwillError('CONFIG_INVALID', `${o.source}: ${err.message}`);
    throw err;
  }
}

/**
 * The pod's in-cluster config: the apiserver at KUBERNETES_SERVICE_HOST:PORT (IPv6 in brackets),
 * verified with the service account's ca.crt, with its token. `needServer` false (an --kube-api-url
 * overrides the server) lets the variables be absent.
 */
export function inClusterTarget(
  env: NodeJS.ProcessEnv,
  o: { dir?: string; needServer: boolean; read?: (path: string) => Buffer },
): KubeTarget {
  const source = 'in-cluster config';
  const dir = o.dir ?? SERVICE_ACCOUNT_DIR;
  const read = o.read ?? ((path: string) => readFileSync(path));
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  let server = '';
  if (host && port) server = `https://${isIPv6(host) ? `[${host}]` : host}:${port}`;
  if (o.needServer && !httpUrl(server))
    throw new TwillError(
      'CONFIG_INVALID',
      `${source}: KUBERNETES_SERVICE_HOST/PORT are not set (not in a pod?); pass --kubeconfig-file or --kube-api-url`,
    );
  const file = (name: string): Buffer => {
    const path = join(dir, name);
    try {
      return read(path);
    } catch (err) {
      throw new TwillError(
        'CONFIG_INVALID',
        `${source}: the service account's ${path}: ${describeError(err)} (is automountServiceAccountToken false for the pod, or is this not a pod? pass --kubeconfig-file)`,
      );
    }
  };
  file('token');
  return {
    server,
    ca: file('ca.crt'),
    insecure: false,
    auth: { kind: 'tokenFile', path: join(dir, 'token') },
    source,
  };
}

/**
 * The target `o` names: the kubeconfig file or the in-cluster config, with `apiUrl` as the server
 * when given. Throws CONFIG_INVALID naming the file and the field.
 */
export function loadKubeConfig(o: KubeAccess, env: NodeJS.ProcessEnv = process.env): KubeTarget {
  let target: KubeTarget;
  if (o.kubeconfigFile === undefined) {
    target = inClusterTarget(env, { needServer: o.apiUrl === undefined });
  } else {
    const source = `--kubeconfig-file ${JSON.stringify(o.kubeconfigFile)}`;
    let text: string;
    try {
      text = readFileSync(o.kubeconfigFile, 'utf8');
    } catch (err) {
      throw new TwillError('CONFIG_INVALID', `${source}: ${describeError(err)}`, { cause: err });
    }
    target = parseKubeconfig(text, { dir: dirname(o.kubeconfigFile), source });
  }
  if (o.apiUrl !== undefined) {
    if (!httpUrl(o.apiUrl))
      throw new TwillError(
        'CONFIG_INVALID',
        `--kube-api-url ${JSON.stringify(o.apiUrl)} is not an http(s) URL`,
      );
    target = { ...target, server: o.apiUrl.replace(/\/+$/, '') };
  }
  if (target.server.startsWith('http:') && !target.insecure)
    throw new TwillError(
      'CONFIG_INVALID',
      `${target.source}: the server ${target.server} is plain http, where credentials cross the network in clear; use https, or set insecure-skip-tls-verify: true on the cluster to allow it`,
    );
  return target;
}
