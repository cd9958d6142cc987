// Unit tests of log redaction: credentials inside URLs and named secrets are
// replaced before a line is written, and etcd's TLS failures are named for an
// operator.
import { describe, expect, it } from 'vitest';
import { tlsProblem } from '../../src/lease/etcd-kv.ts';
import { redact, redactUrlCredentials } from '../../src/log.ts';

describe('redactUrlCredentials', () => {
  it.each([
    ['etcd http://root:hunter22@10.0.0.1:2379', 'etcd http://root:***@10.0.0.1:2379'],
    ['https://token@h:1/x and https://u:p@h2', 'https://***@h:1/x and https://u:***@h2'],
    [
      '{"store":"etcd https://a:b@h:1,https://a:b@h2:1"}',
      '{"store":"etcd https://a:***@h:1,https://a:***@h2:1"}',
    ],
    ['http://10.0.0.1:2379,http://10.0.0.2:2379', 'http://10.0.0.1:2379,http://10.0.0.2:2379'],
    ['mail root@example.com', 'mail root@example.com'],
  ])('%s', (text, expected) => {
    expect(redactUrlCredentials(text)).toBe(expected);
  });
});

describe('redact', () => {
  it('replaces each secret, raw and JSON-escaped, and skips very short ones', () => {
    expect(redact('{"msg":"pw s3\\"cret and s3\\"cret"}', ['s3"cret'])).toBe(
      '{"msg":"pw *** and ***"}',
    );
    expect(redact('abc abc', ['abc', undefined])).toBe('abc abc');
  });
});

describe('tlsProblem', () => {
  it('names a client certificate etcd refused', () => {
    const grpc =
      '14 UNAVAILABLE: No connection established. Last error: 40:error:0A000412:SSL routines:ssl3_read_bytes:ssl/tls alert bad certificate:../deps/openssl/ssl/record/rec_layer_s3.c:918:SSL alert number 42';
    expect(tlsProblem(grpc)).toMatch(
      /^TLS handshake failed: etcd refused our client certificate \(ssl\/tls alert bad certificate\).*check --etcd-certfile and --etcd-keyfile$/,
    );
    expect(tlsProblem('Last error: tlsv13 alert certificate required:x')).toContain(
      '(tlsv13 alert certificate required)',
    );
  });

  it('names a server certificate we do not trust', () => {
    expect(
      tlsProblem(
        'Last error: Error: unable to verify the first certificate; if the root CA is installed locally',
      ),
    ).toBe(
      "TLS handshake failed: etcd's server certificate is not trusted (unable to verify the first certificate); check --etcd-cafile (the CA that signed etcd's certificate) and that the certificate names the endpoint's host or IP",
    );
  });

  it('leaves other failures alone', () => {
    expect(
      tlsProblem('14 UNAVAILABLE: No connection established. Last error: Failed to connect'),
    ).toBeUndefined();
  });
});
