// The CommandError a promise rejects with, for tests that expect a command to fail: the test fails
// when it resolves instead, or rejects with anything else.
import { expect } from 'vitest';
import { CommandError } from '../../src/exec/runner.ts';

export async function commandFailure(p: Promise<unknown>): Promise<CommandError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CommandError);
  return err as CommandError;
}
