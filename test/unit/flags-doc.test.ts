// Unit tests of the README's configuration reference: it is what scripts/flags-doc.ts renders
// from RUN_FLAGS, the rendering shows each flag's variable and default, and rewriting the block
// leaves the rest of the README alone.
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { envName, RUN_FLAGS, type FlagSpec } from '../../src/cli/flags.ts';
import { flagsBlock, flagsTable, README, withFlagsBlock } from '../../scripts/flags-doc.ts';

describe("README.md's flags block", () => {
  it('is what RUN_FLAGS renders', async () => {
    const readme = await readFile(README, 'utf8');
    expect(
      flagsBlock(readme),
      'README.md differs from the flag table in src/cli/flags.ts: run `npm run docs:flags`',
    ).toBe(flagsTable());
  });
});

describe('flagsTable', () => {
  it('has a header and one row per flag, naming its variable', () => {
    const lines = flagsTable().split('\n');
    expect(lines[0]).toBe('| flag | environment variable | default | meaning | in effect |');
    expect(lines).toHaveLength(RUN_FLAGS.length + 2);
    RUN_FLAGS.forEach((f, i) => {
      const env = f.commandLineOnly ? 'none \\(command line only\\)' : `\`${envName(f.name)}\``;
      expect(lines[i + 2]).toMatch(new RegExp(`^\\| \`--${f.name}\` \\| ${env}`));
      if (f.default !== undefined) expect(lines[i + 2]).toContain(`\`${f.default}\``);
    });
  });

  it('renders defaults, default words, booleans, repeatable flags, the store and pipes', () => {
    const flags: FlagSpec[] = [
      { name: 'a-port', kind: 'int', help: 'port (0: off)', default: '0', defaultText: 'off' },
      { name: 'b-name', kind: 'string', help: 'name', defaultText: 'the host name', store: 'kube' },
      { name: 'c-on', kind: 'bool', help: 'switch', doc: 'a `switch`', store: 'etcd' },
      { name: 'd-if', kind: 'repeat', help: 'name|ip' },
      { name: 'e-go', kind: 'bool', help: 'once', commandLineOnly: true, runOnly: true },
      { name: 'f-go', kind: 'bool', help: 'once', runOnly: true, store: 'kube' },
    ];
    expect(flagsTable(flags).split('\n').slice(2)).toStrictEqual([
      '| `--a-port` | `TWILL_A_PORT` | `0` (off) | port (0: off) | always |',
      '| `--b-name` | `TWILL_B_NAME` | the host name | name | with `--kube-subnet-mgr` |',
      '| `--c-on` | `TWILL_C_ON` | off | a `switch` | without `--kube-subnet-mgr` |',
      '| `--d-if` | `TWILL_D_IF` (comma list) |  | name\\|ip | always |',
      '| `--e-go` | none (command line only) | off | once | `twill run` only |',
      '| `--f-go` | `TWILL_F_GO` | off | once | `twill run` only, with `--kube-subnet-mgr` |',
    ]);
  });
});

describe('withFlagsBlock', () => {
  const readme = [
    '# t',
    '',
    '<!-- flags:begin (generated: npm run docs:flags) -->',
    '| old |',
    '<!-- flags:end -->',
    '',
    'after',
    '',
  ].join('\n');

  it('replaces only the text between the marker lines, and is idempotent', () => {
    const once = withFlagsBlock(readme, '| new |\n| rows |');
    expect(once).toBe(readme.replace('| old |', '| new |\n| rows |'));
    expect(flagsBlock(once)).toBe('| new |\n| rows |');
    expect(withFlagsBlock(once, '| new |\n| rows |')).toBe(once);
  });

  it('refuses a README without the markers, or with two blocks', () => {
    expect(() => withFlagsBlock('# t\n', 'x')).toThrow(/flags:begin/);
    expect(() => withFlagsBlock(readme.replace('<!-- flags:end -->', ''), 'x')).toThrow(
      /flags:end/,
    );
    expect(() => withFlagsBlock(readme + readme, 'x')).toThrow(/exactly one/);
  });
});
