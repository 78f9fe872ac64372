// The address a relay started as a child process prints once it accepts connections.

// Returns a promise of "http://127.0.0.1:PORT" from the first line `relay` prints ("listening on ..."),
// rejected when it exits first or prints nothing of it within 10 s.
export function relayAddress(relay) {
  return new Promise((resolve, reject) => {
    let out = '';
    relay.stdout.on('data', (piece) => {
      out += piece;
      const found = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+)\n/);
      if (found) resolve(found[1]);
    });
    relay.on('exit', () => reject(new Error(`the relay exited: ${out}`)));
    setTimeout(() => reject(new Error('the relay did not start within 10 s')), 10_000).unref();
  });
}
