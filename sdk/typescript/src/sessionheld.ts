/**
 * The table of a session's holdings and the two agent rules about
 * operations in flight (docs/contract.md §14):
 *
 * - A4, acks after the answer: an ack counts for a holding only if it
 *   arrived on the current socket after the holding's answer (its
 *   acquire's result, or the resumed that listed it). Until one has, the
 *   holding is led at most until min(the session's deadline as it stands,
 *   the acquire's send time + leaseTtlMs × (1 − driftMargin)); from then on
 *   until the send time of the last heartbeat whose ack so counted +
 *   windowMs × (1 − driftMargin), which is the session's deadline (A3) when
 *   acks come in order.
 * - A5, a loss before its answer: a lost or revoked push for (name, token)
 *   that arrives on the current socket while an acquire of name is in
 *   flight there is remembered, and a result with that (name, token) is
 *   not led, whether or not the session held it already; the memory goes
 *   when no acquire of name is in flight.
 * - A6, letting go: from the moment a release or transfer of a holding is
 *   sent, the holding is not led (its deadline is 0), whatever the answer;
 *   only a refusal of the request itself (400, 403, 429) gives it back.
 *
 * Times are on the session's clock. The split from sessioncore.ts is by
 * idea: the connection engine asks this table, and nothing else keeps a
 * holding's confirmation.
 */
import { deadlineOf } from "./deadline.js";
import type { LeaseError } from "./errors.js";
import type { Wire } from "./socket.js";

/** One holding of the session, as a resume lists it, with what vouches for it. */
export interface Held {
  holder: string;
  token: number;
  /**
   * The socket whose acks count for the holding (A4): the one its answer
   * came on (an acquire's result, or the resumed that listed it);
   * undefined when that was not the current socket (such a holding is
   * acquired again through the current one before it is led).
   */
  on: Wire | undefined;
  /** The send time of the latest heartbeat whose ack arrived on `on` after the answer; undefined before one. */
  ackedAt: number | undefined;
  /** The send time of the acquire answered: until an ack counts, the holding is led at most until sentAt + leaseTtlMs × (1 − driftMargin). */
  sentAt: number;
  /** A release or transfer of the holding was sent (and not refused as such): it is not led (A6). */
  leaving?: boolean;
}

/** The acquires of one name in flight, for A5. */
interface InFlight {
  /** Session.acquire calls of the name under way. */
  calls: number;
  /** The sockets their attempts went on and are unanswered there (one entry per attempt). */
  on: Wire[];
  /** The lost and revoked pushes heard meanwhile on such a socket: token → the loss. */
  lost: Map<number, LeaseError>;
}

/** HeldTable is the session's table of holdings (name → Held), with rules A4 and A5. */
export class HeldTable extends Map<string, Held> {
  readonly #inFlight = new Map<string, InFlight>();

  /**
   * An acquire's result for (name, token) arrived on from (current: whether
   * from is the current socket); the acquire was sent at sentAt. A result
   * on the current socket for a holding that socket already answered keeps
   * its acks.
   */
  answered(name: string, holder: string, token: number, from: Wire, current: boolean, sentAt: number): void {
    const h = this.get(name);
    if (current && h !== undefined && h.token === token && h.holder === holder && h.on === from) return;
    // A repeated acquire's answer does not undo a release or transfer sent (A6).
    const leaving = h !== undefined && h.token === token && h.holder === holder && h.leaving === true;
    this.set(name, { holder, token, on: current ? from : undefined, ackedAt: undefined, sentAt, ...(leaving ? { leaving } : {}) });
  }

  /** A release or transfer of (name, token) is sent (on: from now on it is not led, A6), or was refused as such (off). */
  letGoing(name: string, token: number, on: boolean): void {
    const h = this.get(name);
    if (h === undefined || h.token !== token) return;
    if (on) h.leaving = true;
    else delete h.leaving;
  }

  /**
   * A resumed was installed on wire for the resume that listed the
   * holdings listed: their answer is now that resumed, and the acks of
   * wire count for them (every one arrives after it). A holding not listed
   * (answered on the old socket after the listing) is vouched by no ack
   * until it is acquired again.
   */
  resumed(wire: Wire, listed: ReadonlyArray<{ name: string; fencingToken: number }>): void {
    const names = new Map(listed.map((l) => [l.name, l.fencingToken]));
    for (const [name, h] of this) h.on = names.get(name) === h.token ? wire : undefined;
  }

  /** An ack that counts arrived on wire for a heartbeat sent at sentAt: returns the names of the holdings whose confirmation moved. */
  acked(wire: Wire, sentAt: number): string[] {
    const moved: string[] = [];
    for (const [name, h] of this) {
      if (h.on !== wire || (h.ackedAt !== undefined && h.ackedAt >= sentAt)) continue;
      h.ackedAt = sentAt;
      moved.push(name);
    }
    return moved;
  }

  /**
   * The deadline of the holding (name, token), and the send time of the
   * confirmation it counts from: 0 and 0 when the session does not hold
   * it. sessionDeadline and lastAck are the session's (A3); windowMs,
   * leaseTtlMs and driftMargin its own: an acked heartbeat gives
   * deadlineOf(its send time, windowMs, driftMargin), the acquire before
   * one deadlineOf(its send time, leaseTtlMs, driftMargin).
   */
  deadline(name: string, token: number, sessionDeadline: number, lastAck: number, windowMs: number, leaseTtlMs: number, driftMargin: number): { deadline: number; confirmedAt: number } {
    const h = this.get(name);
    if (h === undefined || h.token !== token || h.leaving === true) return { deadline: 0, confirmedAt: 0 };
    if (h.ackedAt !== undefined) return { deadline: deadlineOf(h.ackedAt, windowMs, driftMargin), confirmedAt: h.ackedAt };
    const bound = deadlineOf(h.sentAt, leaseTtlMs, driftMargin);
    return bound < sessionDeadline ? { deadline: bound, confirmedAt: h.sentAt } : { deadline: sessionDeadline, confirmedAt: lastAck };
  }

  // --- A5 ---

  /** A Session.acquire of name begins; call the function returned when it is over (then, with no other under way, its memory goes). */
  begin(name: string): () => void {
    let f = this.#inFlight.get(name);
    if (f === undefined) this.#inFlight.set(name, (f = { calls: 0, on: [], lost: new Map() }));
    const flight = f;
    flight.calls++;
    let over = false;
    return () => {
      if (over) return;
      over = true;
      if (--flight.calls === 0 && this.#inFlight.get(name) === flight) this.#inFlight.delete(name);
    };
  }

  /** An attempt of an acquire of name goes out on wire; call the function returned once it is answered or given up. */
  sending(name: string, wire: Wire): () => void {
    const flight = this.#inFlight.get(name);
    if (flight === undefined) return () => undefined;
    flight.on.push(wire);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const i = flight.on.indexOf(wire);
      if (i >= 0) flight.on.splice(i, 1);
    };
  }

  /** A lost or revoked push for (name, token) arrived on wire, the current socket: remembered while an acquire of name is in flight there. */
  heard(name: string, token: number, wire: Wire, err: LeaseError): void {
    const flight = this.#inFlight.get(name);
    if (flight !== undefined && flight.on.includes(wire)) flight.lost.set(token, err);
  }

  /** The loss heard for (name, token) while an acquire of name was in flight; undefined when none. */
  lostBefore(name: string, token: number): LeaseError | undefined {
    return this.#inFlight.get(name)?.lost.get(token);
  }
}
