// The CNI_* environment variables a runtime sets, checked per verb: which
// are required, and that container id, interface name and netns path are
// well formed (the last two end up in `ip -batch` text).
// Pure: the entry point hands in the environment as a plain record.
import { CNI_CODES, fail } from './errors.ts';
import { ifnameProblem, isContainerId, netnsProblem } from './names.ts';

export const VERBS = ['ADD', 'DEL', 'CHECK', 'VERSION', 'STATUS', 'GC'] as const;
export type Verb = (typeof VERBS)[number];

export interface CniEnv {
  readonly command: Verb;
  /** empty for VERSION, STATUS and GC */
  readonly containerId: string;
  /** empty when not given (allowed for DEL) */
  readonly netns: string;
  readonly ifname: string;
  /** CNI_ARGS as given, e.g. "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web" */
  readonly args: string;
}

type Env = Readonly<Record<string, string | undefined>>;

const NEEDS: Record<Verb, readonly string[]> = {
  ADD: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME'],
  CHECK: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME'],
  DEL: ['CNI_CONTAINERID', 'CNI_IFNAME'],
  VERSION: [],
  STATUS: [],
  GC: [],
};

function badEnv(message: string): never {
  fail(CNI_CODES.invalidEnv, message);
}

/** The verb alone, so that VERSION can answer before anything else is read. */
export function parseVerb(env: Env): Verb {
  const command = env.CNI_COMMAND;
  if (command === undefined || command === '') badEnv('CNI_COMMAND is not set');
  if (!(VERBS as readonly string[]).includes(command)) {
    badEnv(`CNI_COMMAND ${JSON.stringify(command)} is not one of ${VERBS.join(', ')}`);
  }
  return command as Verb;
}

export function parseEnv(env: Env): CniEnv {
  const command = parseVerb(env);
  for (const name of NEEDS[command]) {
    if (!env[name]) badEnv(`${name} is not set; ${command} needs it`);
  }
  const containerId = env.CNI_CONTAINERID ?? '';
  if (containerId !== '' && !isContainerId(containerId)) {
    badEnv(
      `CNI_CONTAINERID ${JSON.stringify(containerId)} must start with a letter or digit and hold only letters, digits, "_", "." and "-"`,
    );
  }
  const ifname = env.CNI_IFNAME ?? '';
  const problem = ifname === '' ? undefined : ifnameProblem(ifname);
  if (problem) badEnv(`CNI_IFNAME ${JSON.stringify(ifname)} ${problem}`);
  // DEL never uses the netns (it finds the veth by name), so a DEL is not refused for it
  const netns = env.CNI_NETNS ?? '';
  const netnsBad = netns === '' || command === 'DEL' ? undefined : netnsProblem(netns);
  if (netnsBad) badEnv(`CNI_NETNS ${JSON.stringify(netns)} ${netnsBad}`);
  return { command, containerId, netns, ifname, args: env.CNI_ARGS ?? '' };
}
