// The CNI spec versions twill speaks, and comparisons between them: CHECK
// needs 0.4.0 or later, STATUS and GC need 1.1.0.
import { CNI_CODES, fail } from './errors.ts';

export const SUPPORTED_VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;
export type CniVersion = (typeof SUPPORTED_VERSIONS)[number];
export const LATEST_VERSION: CniVersion = '1.1.0';

export function isSupportedVersion(v: unknown): v is CniVersion {
  return typeof v === 'string' && (SUPPORTED_VERSIONS as readonly string[]).includes(v);
}

/** Checks a config's `cniVersion`: code 7 when missing or not a string, 1 when unsupported. */
export function parseVersion(v: unknown): CniVersion {
  if (v === undefined || v === null)
    fail(CNI_CODES.invalidConfig, 'network config: "cniVersion" is missing');
  if (typeof v !== 'string')
    fail(
      CNI_CODES.invalidConfig,
      `network config: "cniVersion" must be a string, got ${JSON.stringify(v)}`,
    );
  if (!isSupportedVersion(v)) {
    fail(
      CNI_CODES.incompatibleVersion,
      `network config: "cniVersion" ${JSON.stringify(v)} is not supported; twill supports ${SUPPORTED_VERSIONS.join(', ')}`,
    );
  }
  return v;
}

export function atLeast(v: CniVersion, min: CniVersion): boolean {
  return SUPPORTED_VERSIONS.indexOf(v) >= SUPPORTED_VERSIONS.indexOf(min);
}

/** The VERSION answer. */
export function versionResult(): Record<string, unknown> {
  return { cniVersion: LATEST_VERSION, supportedVersions: [...SUPPORTED_VERSIONS] };
}
