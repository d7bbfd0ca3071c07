// An independent RFC 6455 server (the `ws` package) for the Python SDK's
// WebSocket client tests (sdk/python/tests/test_websocket.py).
//
// It listens on 127.0.0.1 (TLS when TLS_CERT and TLS_KEY name PEM files),
// prints {"port": N} once listening, and then one JSON line per closed
// connection: {"event": "close", "id": ..., "code": ..., "reason": ...},
// where id is the connection's `id` query parameter.
//
// It chooses the subprotocol leasesvc.session.v1 when offered (none
// otherwise), refuses the handshake of a path beginning /refuse with 429
// and Retry-After: 3, and echoes every text message, except the commands,
// JSON objects with a "cmd":
//   {"cmd": "hello"}                      → {"protocol", "authorization", "url"}
//   {"cmd": "size", "n": N}               → a message of N bytes ("x" × N)
//   {"cmd": "fragments", "parts": [...], "ping": "p"?}
//                                         → one message sent as those fragments,
//                                           with a ping between each two when "ping"
//   {"cmd": "ping", "payload": "p"}       → a ping; its pong is reported as {"pong": "p"}
//   {"cmd": "close", "code": C, "reason": R} → the closing handshake with that code
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { WebSocketServer } from 'ws';

const PROTOCOL = 'leasesvc.session.v1';

const server = process.env.TLS_CERT
  ? https.createServer({ cert: fs.readFileSync(process.env.TLS_CERT), key: fs.readFileSync(process.env.TLS_KEY) })
  : http.createServer();

const wss = new WebSocketServer({
  server,
  maxPayload: 8 << 20,
  handleProtocols: (protocols) => (protocols.has(PROTOCOL) ? PROTOCOL : false),
  verifyClient: (info, cb) => {
    if (info.req.url.startsWith('/refuse')) {
      cb(false, 429, 'Too Many Requests', { 'Retry-After': '3' });
      return;
    }
    cb(true);
  },
});

wss.on('connection', (ws, req) => {
  const id = new URL(req.url, 'http://x').searchParams.get('id') ?? '';
  ws.on('message', (data, isBinary) => {
    const text = data.toString('utf8');
    let cmd = null;
    if (!isBinary && text.startsWith('{"cmd"')) {
      cmd = JSON.parse(text);
    }
    if (cmd === null) {
      ws.send(text);
      return;
    }
    switch (cmd.cmd) {
      case 'hello':
        ws.send(JSON.stringify({ protocol: ws.protocol, authorization: req.headers.authorization ?? null, url: req.url }));
        break;
      case 'size':
        ws.send('x'.repeat(cmd.n));
        break;
      case 'fragments':
        cmd.parts.forEach((part, i) => {
          if (i > 0 && cmd.ping !== undefined) {
            ws.ping(cmd.ping);
          }
          ws.send(part, { fin: i === cmd.parts.length - 1 });
        });
        break;
      case 'ping':
        ws.ping(cmd.payload);
        break;
      case 'close':
        ws.close(cmd.code, cmd.reason);
        break;
      default:
        ws.close(1008, 'unknown command');
    }
  });
  ws.on('pong', (data) => ws.send(JSON.stringify({ pong: data.toString('utf8') })));
  ws.on('close', (code, reason) => {
    console.log(JSON.stringify({ event: 'close', id, code, reason: reason.toString('utf8') }));
  });
});

server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
