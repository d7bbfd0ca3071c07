/**
 * Reading what the service sends, within bounds: answers (readAnswer) and
 * Server-Sent Event streams (readEvents), each at most maxAnswerBytes, as
 * the Go and Python SDKs read them (docs/contract.md §16).
 */
import { errorText, InternalError } from "./errors.js";
import { type LeaseEvent, parseEvent } from "./event.js";

/**
 * maxAnswerBytes bounds what the client reads of one answer and of one
 * stream event: twice the largest list page the service may send (its
 * LEASESVC_MAX_PAGE_BYTES is at most 32 MiB), the same 64 MiB as the Go
 * (client.MaxAnswerBytes) and Python (MAX_ANSWER_BYTES) SDKs. A larger one
 * is an InternalError that says so, raised once that many bytes are read.
 */
export const maxAnswerBytes = 64 << 20;

/**
 * readAnswer reads the body of an answer as text, at most maxAnswerBytes.
 * A larger 200 answer throws InternalError; a larger error answer is cut
 * (what a problem says is at its start). Transport failures are thrown
 * as they come, for the caller to classify.
 */
export async function readAnswer(res: Response, op: string, name: string): Promise<string> {
  const tooLarge = (): InternalError =>
    new InternalError(`leasesvc ${op} "${name}": answer larger than ${maxAnswerBytes} bytes (maxAnswerBytes): ask for smaller pages`, { status: res.status });
  const announced = Number(res.headers.get("Content-Length") ?? "");
  if (res.status === 200 && announced > maxAnswerBytes) {
    await res.body?.cancel().catch(() => undefined);
    throw tooLarge();
  }
  if (res.body === null) return "";
  const reader = res.body.getReader();
  const parts: Uint8Array[] = [];
  let n = 0;
  try {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      if (n + chunk.value.length > maxAnswerBytes) {
        await reader.cancel().catch(() => undefined);
        if (res.status === 200) throw tooLarge();
        parts.push(chunk.value.subarray(0, maxAnswerBytes - n));
        n = maxAnswerBytes;
        break;
      }
      parts.push(chunk.value);
      n += chunk.value.length;
    }
  } finally {
    reader.releaseLock();
  }
  return new TextDecoder().decode(join(parts, n));
}

/** join concatenates parts of n bytes in all. */
function join(parts: Uint8Array[], n: number): Uint8Array {
  if (parts.length === 1 && parts[0] !== undefined) return parts[0];
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * readEvents parses a Server-Sent Events body into watch events. It ends
 * when the body ends or fails (the caller reconnects) and throws when an
 * event cannot be read, or is larger than maxAnswerBytes (its lines up to
 * the blank one that ends it: thrown once that many bytes are read, with
 * nothing past them kept); ac is aborted when the stream stays silent for
 * idleMs.
 */
export async function* readEvents(body: ReadableStream<Uint8Array>, ac: AbortController, idleMs: number): AsyncGenerator<LeaseEvent, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let idle = setTimeout(() => ac.abort(), idleMs);
  let parts: Uint8Array[] = []; // the current line's bytes so far
  let partBytes = 0;
  let size = 0; // bytes of the current event's lines already split
  let type = "";
  let data: string[] = [];
  let id = "";
  const tooLarge = (): InternalError => new InternalError(`leasesvc watch: event larger than ${maxAnswerBytes} bytes (maxAnswerBytes)`);
  try {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch {
        return; // dropped, idle or aborted: the caller decides
      }
      if (chunk.done) return;
      clearTimeout(idle);
      idle = setTimeout(() => ac.abort(), idleMs);
      let b = chunk.value;
      let nl: number;
      while ((nl = b.indexOf(10)) >= 0) {
        size += partBytes + nl + 1;
        if (size > maxAnswerBytes) throw tooLarge();
        parts.push(b.subarray(0, nl));
        const line = decoder.decode(join(parts, partBytes + nl)).replace(/\r$/, "");
        parts = [];
        partBytes = 0;
        b = b.subarray(nl + 1);
        if (line === "") {
          if (type !== "" && data.length > 0 && type !== "message") {
            let ev: LeaseEvent | undefined;
            try {
              ev = parseEvent(type, data.join("\n"), id);
            } catch (err) {
              if (!(err instanceof SyntaxError) && /unknown event/.test(errorText(err))) ev = undefined;
              else throw new InternalError(`leasesvc watch: unreadable ${type} event: ${errorText(err)}`, { cause: err });
            }
            if (ev !== undefined) yield ev;
          }
          type = "";
          data = [];
          id = "";
          size = 0;
          continue;
        }
        if (line.startsWith(":")) continue; // heartbeat
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") type = value;
        else if (field === "data") data.push(value);
        else if (field === "id") id = value;
      }
      if (b.length > 0) {
        parts.push(b);
        partBytes += b.length;
        if (size + partBytes > maxAnswerBytes) throw tooLarge();
      }
    }
  } finally {
    clearTimeout(idle);
    reader.releaseLock();
  }
}
