// How `twill doctor` prints its verdicts: a table for people (check,
// verdict, detail, fix; long text is wrapped inside its column) or JSON for
// machines.
import type { CheckResult } from './facts.ts';

/** Splits text into lines of at most `width` characters, at spaces where possible. */
export function wrap(text: string, width: number): string[] {
  const out: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line !== '' && line.length + 1 + word.length > width) {
      out.push(line);
      line = '';
    }
    line = line === '' ? word : `${line} ${word}`;
    while (line.length > width) {
      out.push(line.slice(0, width));
      line = line.slice(width);
    }
  }
  return line === '' && out.length > 0 ? out : [...out, line];
}

const HEAD: CheckResult = { check: 'CHECK', verdict: 'ok', detail: 'DETAIL', fix: 'FIX' };

/** The table: one row per check, detail and fix wrapped to their columns. */
export function renderTable(
  results: readonly CheckResult[],
  o: { detailWidth?: number; fixWidth?: number } = {},
): string {
  const dw = o.detailWidth ?? 70;
  const fw = o.fixWidth ?? 50;
  const cw = Math.max(...[HEAD, ...results].map((r) => r.check.length));
  const lines: string[] = [];
  for (const [i, r] of [HEAD, ...results].entries()) {
    const verdict = i === 0 ? 'VERDICT' : r.verdict.toUpperCase();
    const detail = wrap(r.detail, dw);
    const fix = r.fix === '' ? [''] : wrap(r.fix, fw);
    for (let k = 0; k < Math.max(detail.length, fix.length); k++) {
      const cells = [k === 0 ? r.check : '', k === 0 ? verdict : '', detail[k] ?? '', fix[k] ?? ''];
      lines.push(
        `${(cells[0] ?? '').padEnd(cw)}  ${(cells[1] ?? '').padEnd(7)}  ${(cells[2] ?? '').padEnd(dw)}  ${cells[3] ?? ''}`.trimEnd(),
      );
    }
  }
  const fails = results.filter((r) => r.verdict === 'fail').length;
  const warns = results.filter((r) => r.verdict === 'warn').length;
  lines.push(
    '',
    `${results.length} checks: ${results.length - fails - warns} ok, ${warns} warn, ${fails} fail`,
  );
  return `${lines.join('\n')}\n`;
}

export function renderJson(results: readonly CheckResult[]): string {
  return `${JSON.stringify({ ok: !results.some((r) => r.verdict === 'fail'), checks: results }, null, 2)}\n`;
}
