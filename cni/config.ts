// The network config a runtime writes on stdin: twill's keys with their
// defaults, the runtime's own keys (prevResult, cni.dev/valid-attachments),
// decoded once into a plain object. Keys match case-insensitively, as Go's
// encoding/json (and so the reference plugins) match them.
import { isAbsolute } from 'node:path';
import { CiObject } from '../src/config/json-object.ts';
import { DEFAULT_SUBNET_FILE } from '../src/subnetenv.ts';
import { CNI_CODES, fail } from './errors.ts';
import { ifnameProblem, isContainerId, isNetworkName } from './names.ts';
import { LATEST_VERSION, isSupportedVersion, parseVersion, type CniVersion } from './version.ts';

export interface ValidAttachment {
  readonly containerId: string;
  readonly ifname: string;
}

export interface NetConf {
  readonly cniVersion: CniVersion;
  readonly name: string;
  readonly subnetFile: string;
  readonly bridge: string;
  readonly isGateway: boolean;
  readonly isDefaultGateway: boolean;
  readonly hairpinMode: boolean;
  /** undefined: FLANNEL_MTU from subnet.env */
  readonly mtu: number | undefined;
  readonly dataDir: string;
  readonly logFile: string | undefined;
  /** when set, STATUS also asks this URL (the daemon's readiness endpoint) */
  readonly readyUrl: string | undefined;
  /** the previous plugin's result (CHECK, DEL, chained ADD), as given */
  readonly prevResult: unknown;
  /**
   * GC: the attachments the runtime still knows (`cni.dev/valid-attachments` or
   * `cni.dev/attachments`)
   */
  readonly validAttachments: readonly ValidAttachment[] | undefined;
}

/** The keys GC's attachment list may come under (see `attachments`). */
export const VALID_ATTACHMENT_KEYS = ['cni.dev/valid-attachments', 'cni.dev/attachments'] as const;

export const DEFAULTS = {
  subnetFile: DEFAULT_SUBNET_FILE,
  bridge: 'cni0',
  dataDir: '/var/lib/cni/networks',
} as const;

/** The JSON text as an object, or code 6. */
export function decodeJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    fail(CNI_CODES.decode, `${what}: not valid JSON: ${(err as Error).message}`);
  }
}

/** The cniVersion to answer errors in: the config's when it is a supported one. */
export function answerVersion(text: string): CniVersion {
  try {
    const v = (JSON.parse(text) as { cniVersion?: unknown } | null)?.cniVersion;
    return isSupportedVersion(v) ? v : LATEST_VERSION;
  } catch {
    return LATEST_VERSION;
  }
}

function path(o: CiObject, key: string, fallback: string): string {
  const v = o.string(key) ?? fallback;
  if (!isAbsolute(v)) o.fail(`"${key}" must be an absolute path, got ${JSON.stringify(v)}`);
  return v;
}

/** One attachment list key: undefined when absent. */
function attachmentList(o: CiObject, key: string): ValidAttachment[] | undefined {
  const raw = o.get(key);
  if (raw === undefined || raw === null) return undefined;
  if (!Array.isArray(raw)) o.fail(`"${key}" must be a list, got ${JSON.stringify(raw)}`);
  return raw.map((item: unknown, i) => {
    const a = CiObject.from(`network config: "${key}"[${i}]`, item, 'CONFIG_INVALID');
    const containerId = a.string('containerID') ?? '';
    if (!isContainerId(containerId))
      a.fail(`"containerID" ${JSON.stringify(containerId)} is not a container id`);
    return { containerId, ifname: a.string('ifname') ?? '' };
  });
}

/**
 * GC's list of attachments to keep. The 1.1.0 spec text named the key
 * `cni.dev/attachments`; libcni sends `cni.dev/valid-attachments` (and,
 * since containernetworking/cni#1103, both). Either is read; when both are
 * there, an attachment in either is kept.
 */
function attachments(o: CiObject): ValidAttachment[] | undefined {
  const lists = VALID_ATTACHMENT_KEYS.map((k) => attachmentList(o, k)).filter(
    (l) => l !== undefined,
  );
  return lists.length === 0 ? undefined : lists.flat();
}

function checkedName(o: CiObject): string {
  const name = o.string('name');
  if (name === undefined) o.fail('"name" is missing');
  if (!isNetworkName(name))
    o.fail(
      `"name" ${JSON.stringify(name)} must start with a letter or digit and hold only letters, digits, "_", "." and "-"`,
    );
  return name;
}

function checkedBridge(o: CiObject): string {
  const bridge = o.string('bridge') ?? DEFAULTS.bridge;
  const problem = ifnameProblem(bridge);
  if (problem) o.fail(`"bridge" ${JSON.stringify(bridge)} ${problem}`);
  return bridge;
}

/** Decodes and checks the network config (codes 6, 7 and 1). */
export function parseNetConf(text: string): NetConf {
  const o = CiObject.from('network config', decodeJson(text, 'network config'), 'CONFIG_INVALID');
  const cniVersion = parseVersion(o.get('cniVersion'));
  const isDefaultGateway = o.bool('isDefaultGateway') ?? true;
  const readyUrl = o.string('readyUrl');
  if (readyUrl !== undefined && !/^https?:\/\//.test(readyUrl))
    o.fail(`"readyUrl" must be an http(s) URL, got ${JSON.stringify(readyUrl)}`);
  return {
    cniVersion,
    name: checkedName(o),
    subnetFile: path(o, 'subnetFile', DEFAULTS.subnetFile),
    bridge: checkedBridge(o),
    // a default gateway needs the gateway address on the bridge
    isGateway: isDefaultGateway || (o.bool('isGateway') ?? true),
    isDefaultGateway,
    hairpinMode: o.bool('hairpinMode') ?? true,
    mtu: o.int('mtu', { min: 68, max: 65535 }),
    dataDir: path(o, 'dataDir', DEFAULTS.dataDir),
    logFile: o.has('logFile') ? path(o, 'logFile', '') : undefined,
    readyUrl,
    prevResult: o.get('prevResult') ?? undefined,
    validAttachments: attachments(o),
  };
}
