// A small deterministic generator (mulberry32) for property tests: the same seed replays the
// same sequence, so a failing step can be found again.
export function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The same generator as whole numbers: next(n) is one of 0 … n - 1. */
export function randomBelow(seed: number): (n: number) => number {
  const next = random(seed);
  return (n) => Math.floor(next() * n);
}
