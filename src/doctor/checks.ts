// Every doctor check in the order they are printed, and the exit code they
// add up to: 1 when any check fails, 0 otherwise (warnings alone pass).
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

export function runChecks(f: DoctorFacts): CheckResult[] {
  return CHECKS.map((check) => check(f));
}

export function doctorExitCode(results: readonly CheckResult[]): number {
  return results.some((r) => r.verdict === 'fail') ? 1 : 0;
}
