// What several verbs share: the request they get, the node's subnet from
// subnet.env (missing means "try again later"), the IP store of this
// network, and the check that CNI_NETNS exists. Files are read synchronously
// (as the IP store's are, ipam/files.ts): nothing else runs meanwhile.
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { readSubnetEnvSync, type SubnetEnv } from '../../src/subnetenv.ts';
import type { NetConf } from '../config.ts';
import type { CniEnv } from '../env.ts';
import { CNI_CODES, fail } from '../errors.ts';
import { IpStore } from '../ipam/store.ts';
import type { KernelDeps } from '../kernel.ts';
import type { CniLog } from '../log.ts';

export interface Request {
  readonly env: CniEnv;
  readonly conf: NetConf;
}

export interface PluginDeps extends KernelDeps {
  readonly log: CniLog;
}

/** The node's subnet.env; code 11 while it does not exist, 102 when it is malformed. */
export async function loadSubnet(file: string): Promise<SubnetEnv> {
  const env = readSubnetEnvSync(file);
  if (env === undefined)
    fail(
      CNI_CODES.tryAgain,
      `${file} does not exist yet (twill run writes it once it holds a subnet lease); try again later`,
    );
  return env;
}

/** The IP store of this network; its warnings (the round-robin hint) go to the log. */
export function storeFor(conf: NetConf, log?: CniLog): IpStore {
  return new IpStore(
    join(conf.dataDir, conf.name),
    log ? (msg, fields) => log.error(msg, fields) : undefined,
  );
}

/** Code 4 when the netns path does not exist. */
export async function assertNetns(netns: string): Promise<void> {
  try {
    statSync(netns);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      fail(CNI_CODES.invalidEnv, `CNI_NETNS ${JSON.stringify(netns)} does not exist`);
    throw err;
  }
}
