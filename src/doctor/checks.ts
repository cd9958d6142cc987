// Every doctor check in the order they are printed, and the exit code they
// add up to: 1 when any check fails, 0 otherwise (warnings alone pass). A
// dual-stack node gets the IPv6 checks after the others.
import { checkIp6tablesChains, checkIpv6Forward, checkVxlan6Device } from './checks-ipv6.ts';
import { checkIptablesBackend, checkVxlanPort } from './checks-iptables.ts';
import { checkMtu } from './checks-mtu.ts';
import {
  checkBridgeSubnet,
  checkForeignOverlay,
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
import { dualStack } from './overlay.ts';

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

/** The checks only a dual-stack node runs. */
export const CHECKS6: readonly ((f: DoctorFacts) => CheckResult)[] = [
  checkIpv6Forward,
  checkVxlan6Device,
  checkIp6tablesChains,
];

export function runChecks(f: DoctorFacts): CheckResult[] {
  return [...CHECKS, ...(dualStack(f) ? CHECKS6 : [])].map((check) => check(f));
}

export function doctorExitCode(results: readonly CheckResult[]): number {
  return results.some((r) => r.verdict === 'fail') ? 1 : 0;
}
