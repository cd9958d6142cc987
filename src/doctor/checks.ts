// Every doctor check in the order they are printed, and the exit code they
// add up to: 1 when any check fails, 0 otherwise (warnings alone pass). In
// nftables mode the nft checks follow the common ones; then, in either mode,
// the one for what a run in the other mode left. A dual-stack or IPv6-only
// node gets the IPv6 checks after those, and an IPv6-only node then one for
// what an earlier IPv4 run left (the IPv4 checks say n/a there, or look at
// IPv6 instead).
import { checkIp6tablesChains, checkIpv6Forward, checkVxlan6Device } from './checks-ipv6.ts';
import { checkIptablesBackend, checkVxlanPort } from './checks-iptables.ts';
import { checkMtu } from './checks-mtu.ts';
import { checkMasqLeftovers, checkNftCommand, checkNftTables } from './checks-nft.ts';
import {
  checkBridgeSubnet,
  checkForeignOverlay,
  checkIpv4Leftovers,
  checkStaleRoutes,
  checkSubnetEnv,
} from './checks-state.ts';
import {
  checkBridgeNfCall,
  checkBrNetfilter,
  checkIpForward,
  checkRpFilter,
} from './checks-sysctl.ts';
import type { CheckResult, DoctorFacts } from './facts.ts';
import { families, masqMode } from './overlay.ts';

export const CHECKS: readonly ((f: DoctorFacts) => CheckResult)[] = [
  checkIpForward,
  checkBrNetfilter,
  checkBridgeNfCall,
  checkRpFilter,
  checkIptablesBackend,
  checkVxlanPort,
  checkMtu,
  checkSubnetEnv,
  checkBridgeSubnet,
  checkStaleRoutes,
  checkForeignOverlay,
];

/** The checks only a node in nftables mode ("EnableNFTables": true) runs. */
export const CHECKS_NFT: readonly ((f: DoctorFacts) => CheckResult)[] = [
  checkNftCommand,
  checkNftTables,
];

/** What a run in the other masquerade mode left: every node, whatever its mode. */
export const CHECKS_MODE: readonly ((f: DoctorFacts) => CheckResult)[] = [checkMasqLeftovers];

/** The checks only a node with IPv6 on (dual-stack or IPv6 only) runs. */
export const CHECKS6: readonly ((f: DoctorFacts) => CheckResult)[] = [
  checkIpv6Forward,
  checkVxlan6Device,
  checkIp6tablesChains,
];

/** The checks only an IPv6-only node runs. */
export const CHECKS_V6_ONLY: readonly ((f: DoctorFacts) => CheckResult)[] = [checkIpv4Leftovers];

export function runChecks(f: DoctorFacts): CheckResult[] {
  const fam = families(f);
  return [
    ...CHECKS,
    ...(masqMode(f) === 'nftables' ? CHECKS_NFT : []),
    ...CHECKS_MODE,
    ...(fam.ipv6 ? CHECKS6 : []),
    ...(fam.ipv4 ? [] : CHECKS_V6_ONLY),
  ].map((check) => check(f));
}

export function doctorExitCode(results: readonly CheckResult[]): number {
  return results.some((r) => r.verdict === 'fail') ? 1 : 0;
}
