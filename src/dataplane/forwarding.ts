// Forwarding kept on by observed passes (net.ipv4.ip_forward; on a
// dual-stack node net.ipv6.conf.all.forwarding too, on an IPv6-only node the
// latter alone). A failure (EROFS: a container's /proc/sys is read-only)
// must not cost the pass: routes, neighbours, FDB and chains are still
// programmed, and the failure stands in every pass's report (readiness,
// NetworkUnavailable, the failed-pass counter) until an observed pass finds
// it fixed. Logged once per distinct error.
import { describeError } from '../errors.ts';
import type { Logger } from '../log.ts';

export interface ForwardingOptions {
  readonly logger: Logger;
  /** sets the sysctls to 1 when they are not; true when it had to */
  readonly ensure: () => Promise<boolean>;
  /** the sysctls `ensure` keeps at 1, as the log names them (default ['net.ipv4.ip_forward']) */
  readonly sysctls?: readonly string[];
}

export class ForwardingGuard {
  private readonly o: ForwardingOptions;
  private standing: string | undefined;

  constructor(o: ForwardingOptions) {
    this.o = o;
  }

  /** The standing failure, as the pass reports show it; undefined while forwarding is on. */
  get failure(): string | undefined {
    return this.standing;
  }

  /** Sets forwarding on when it is off; never throws (a failure is kept in `failure`). */
  async check(): Promise<void> {
    const names = this.o.sysctls ?? ['net.ipv4.ip_forward'];
    const [one, all] = [names.join(' or '), names.join(' and ')];
    let failure: string | undefined;
    try {
      if (await this.o.ensure()) this.o.logger.warn(`${one} was 0; set it to 1`);
    } catch (err) {
      failure = `sysctl: ${describeError(err)}`;
    }
    if (failure !== undefined && failure !== this.standing)
      this.o.logger.warn(
        { err: failure },
        `cannot keep ${all} at 1; the rest of the dataplane is programmed, and every observed pass tries again`,
      );
    if (failure === undefined && this.standing !== undefined)
      this.o.logger.info(`${all} ${names.length > 1 ? 'are' : 'is'} 1 again`);
    this.standing = failure;
  }
}
