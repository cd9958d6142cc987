// One complete listing of the lease records, for the one-shot readers
// (`twill status`, `twill doctor`): the store's watch, stopped at its first
// snapshot, so every store that implements LeaseStore can be listed.
import { TwillError } from '../errors.ts';
import { childController } from '../util/abort.ts';
import type { LeaseRecord, LeaseStore } from './types.ts';

export async function listLeases(
  store: LeaseStore,
  signal: AbortSignal,
): Promise<readonly LeaseRecord[]> {
  const ctl = childController(signal);
  let records: readonly LeaseRecord[] | undefined;
  let down = '';
  try {
    await store.watchLeases({
      signal: ctl.signal,
      onEvent: (ev) => {
        if (ev.type === 'snapshot' && !records) {
          records = ev.records;
          ctl.abort();
        } else if (ev.type === 'connectivity' && !ev.connected) down = ev.detail;
      },
    });
  } finally {
    ctl.abort();
  }
  if (!records)
    throw new TwillError(
      'STORE_UNAVAILABLE',
      `${store.description}: no lease listing${down ? `: ${down}` : ''}`,
    );
  return records;
}
