// Every doctor check in the order they are printed, and the exit code they
// add up to: 1 when any check fails, 0 otherwise (warnings alone pass). A
// dual-stack or IPv6-only node gets the IPv6 checks after the others, and an
// IPv6-only node then one for what an earlier IPv4 run left (the IPv4 checks
// say n/a there, or look at IPv6 instead).
import { checkIp6tablesChains, checkIpv6Forward, checkVxlan6Device } from './checks-ipv6.ts';
import { checkIptablesBackend, checkVxlanPort } from './checks-iptables.ts';
import { checkMtu } from './checks-mtu.ts';
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
import { families } from './overlay.ts';

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
  return [...CHECKS, ...(fam.ipv6 ? CHECKS6 : []), ...(fam.ipv4 ? [] : CHECKS_V6_ONLY)].map(
    (check) => check(f),
  );
}

export function doctorExitCode(results: readonly CheckResult[]): number {
  return results.some((r) => r.verdict === 'fail') ? 1 : 0;
}
