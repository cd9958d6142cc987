// What a real kube-apiserver needs, shared by the tests (test/helpers/kube.ts,
// on loopback) and the netns lab in Kubernetes mode (lab/netns-kube.ts, in
// the lab's etcd namespace): where the binary is, its argument list, the
// credential files in its directory (static tokens: an admin in
// system:masters and a user `twill` with no rights until someone binds it;
// a service-account key), kubeconfig text, kubectl's command line, and the
// readiness probe. Starting and stopping the process stays with the caller
// (a child process in tests, a detached one in the lab).
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { run } from '../src/exec/runner.ts';
import { pause } from '../src/util/abort.ts';

export const KUBERNETES_SCRIPT = resolve(import.meta.dirname, '../scripts/kubernetes.sh');

/** The Kubernetes v1.20.2 binaries scripts/kubernetes.sh builds and caches. */
export type KubeBinary =
  | 'kube-apiserver'
  | 'kubelet'
  | 'kube-proxy'
  | 'kube-controller-manager'
  | 'kube-scheduler'
  | 'kubectl';

/**
 * A binary: its $TWILL_<NAME> override or the cached build. `cachedOnly`
 * never builds (tests: `npm test` builds them first); otherwise missing
 * binaries are built, which takes 3 to 20 minutes once.
 */
export async function kubeBinary(name: KubeBinary, o: { cachedOnly: boolean }): Promise<string> {
  const args = o.cachedOnly ? ['--cached-only', name] : [name];
  const { stdout } = await run(KUBERNETES_SCRIPT, args, {
    timeoutMs: o.cachedOnly ? 10_000 : 3_600_000,
  });
  return stdout.trim();
}

export function kubeApiServerBinary(o: { cachedOnly: boolean }): Promise<string> {
  return kubeBinary('kube-apiserver', o);
}

let kubectlPath: string | undefined;

/** The cached kubectl (built with the apiserver, from the same source); found once per process. */
export function kubectlBinary(): string {
  kubectlPath ??= execFileSync(KUBERNETES_SCRIPT, ['--cached-only', 'kubectl'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  }).trim();
  return kubectlPath;
}

/** The files of one apiserver under `dir`. */
export function apiServerFiles(dir: string): {
  certDir: string;
  caFile: string;
  tokens: string;
  saKey: string;
} {
  const certDir = join(dir, 'certs');
  // the self-signed serving certificate it writes there carries its CA
  return {
    certDir,
    caFile: join(certDir, 'apiserver.crt'),
    tokens: join(dir, 'tokens.csv'),
    saKey: join(dir, 'sa.key'),
  };
}

export function apiServerArgs(o: {
  dir: string;
  host: string;
  port: number;
  etcd: string;
}): string[] {
  const f = apiServerFiles(o.dir);
  return [
    `--etcd-servers=${o.etcd}`,
    `--bind-address=${o.host}`,
    `--advertise-address=${o.host}`,
    `--secure-port=${o.port}`,
    '--insecure-port=0',
    `--cert-dir=${f.certDir}`,
    `--token-auth-file=${f.tokens}`,
    `--service-account-key-file=${f.saKey}`,
    `--service-account-signing-key-file=${f.saKey}`,
    '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
    '--api-audiences=https://kubernetes.default.svc.cluster.local',
    '--authorization-mode=Node,RBAC',
    '--service-cluster-ip-range=10.96.0.0/12',
    '--allow-privileged=true',
    // `kubectl exec` and `logs` reach a kubelet by its address (lab nodes' names resolve nowhere)
    '--kubelet-preferred-address-types=InternalIP',
    // on loopback the `kubernetes` Service's endpoint would be a loopback address: no endpoint
    // then;
    // elsewhere (the lab) pods reach the apiserver through that Service, as in-cluster clients do
    ...(o.host.startsWith('127.') ? ['--endpoint-reconciler-type=none'] : []),
    // v1.20 keeps a Node's second (IPv6) podCIDR only with dual-stack on: the dual-stack lab and
    // tests give Nodes both families, as a controller-manager with two --cluster-cidrs does
    '--feature-gates=IPv6DualStack=true',
    '--profiling=false',
    '--v=1',
  ];
}

export interface KubeCredentials {
  /** a static token of user `admin`, group system:masters */
  readonly adminToken: string;
  /** a static token of user `twill` (no groups: only what someone binds) */
  readonly twillToken: string;
}

/** Writes the token file and the service-account key into `dir`. */
export async function writeCredentials(dir: string): Promise<KubeCredentials> {
  const adminToken = randomBytes(24).toString('hex');
  const twillToken = randomBytes(24).toString('hex');
  const f = apiServerFiles(dir);
  await writeFile(
    f.tokens,
    `${adminToken},admin,admin,system:masters\n${twillToken},twill,twill\n`,
    { mode: 0o600 },
  );
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  await writeFile(f.saKey, privateKey.export({ type: 'pkcs1', format: 'pem' }), { mode: 0o600 });
  return { adminToken, twillToken };
}

export function kubeconfigText(o: { url: string; caFile: string; token: string }): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'twill', cluster: { server: o.url, 'certificate-authority': o.caFile } }],
    users: [{ name: 'twill', user: { token: o.token } }],
    contexts: [{ name: 'twill', context: { cluster: 'twill', user: 'twill' } }],
    'current-context': 'twill',
  });
}

/**
 * kubectl's argv for a kubeconfig; `cacheDir` keeps its discovery cache
 * there instead of ~/.kube/cache (the lab leaves no file behind).
 */
export function kubectlArgv(
  o: { kubeconfig: string; cacheDir: string },
  args: readonly string[],
): string[] {
  return [kubectlBinary(), '--kubeconfig', o.kubeconfig, '--cache-dir', o.cacheDir, ...args];
}

/**
 * Runs an argv where the apiserver is reachable (here, or inside a namespace); rejects on a
 * non-zero exit.
 */
export type KubeExec = (argv: readonly string[]) => Promise<unknown>;

/**
 * Waits until the serving certificate exists and `/readyz` answers 200 to
 * the admin kubeconfig; fails early when `exited()` says the process is gone.
 */
export async function untilApiServerReady(o: {
  dir: string;
  kubectl: { kubeconfig: string; cacheDir: string };
  exec: KubeExec;
  exited: () => boolean;
  timeoutMs: number;
}): Promise<number> {
  const start = Date.now();
  const argv = kubectlArgv(o.kubectl, ['get', '--raw', '/readyz', '--request-timeout', '2s']);
  for (;;) {
    if (o.exited()) throw new Error('kube-apiserver exited');
    if (
      existsSync(apiServerFiles(o.dir).caFile) &&
      (await o.exec(argv).then(
        () => true,
        () => false,
      ))
    )
      return Date.now() - start;
    if (Date.now() - start > o.timeoutMs)
      throw new Error(`kube-apiserver not ready after ${o.timeoutMs} ms`);
    await pause(50);
  }
}
