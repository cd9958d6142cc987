// The daemon's logger: pino, JSON lines to stderr, written synchronously so
// the last words before an exit are not lost. Every line is scrubbed on its
// way out: credentials inside URLs (scheme://user:pass@host) and the secrets
// the caller names (the etcd password) never reach the log.
import { pino, type Logger } from 'pino';

export type { Logger };

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Secrets shorter than this are not scrubbed from log lines: they would mangle ordinary words. */
export const MIN_SCRUBBED_SECRET = 4;

/**
 * Replaces the credentials of every URL in `text` (scheme://user:pass@host
 * becomes scheme://user:***@host, scheme://token@host becomes
 * scheme://***@host). Works on plain text and on JSON text alike.
 */
export function redactUrlCredentials(text: string): string {
  return text.replace(
    /\b([a-z][a-z0-9+.-]*:\/\/)([^\s/?#@"'<>]+)@/gi,
    (_all, scheme: string, userinfo: string) => {
      const colon = userinfo.indexOf(':');
      return colon < 0 ? `${scheme}***@` : `${scheme}${userinfo.slice(0, colon)}:***@`;
    },
  );
}

/** `text` with URL credentials and each of `secrets` (raw or JSON-escaped) replaced by ***. */
export function redact(text: string, secrets: readonly (string | undefined)[] = []): string {
  let out = redactUrlCredentials(text);
  for (const s of secrets) {
    if (s === undefined || s.length < MIN_SCRUBBED_SECRET) continue;
    const forms = new Set([s, JSON.stringify(s).slice(1, -1)]);
    for (const f of forms) out = out.split(f).join('***');
  }
  return out;
}

export function createLogger(opts: {
  level: LogLevel;
  node: string;
  secrets?: readonly (string | undefined)[];
}): Logger {
  const dest = pino.destination({ dest: 2, sync: true });
  const secrets = opts.secrets ?? [];
  const scrubbed = { write: (line: string): void => void dest.write(redact(line, secrets)) };
  return pino({ level: opts.level, base: { node: opts.node } }, scrubbed);
}
