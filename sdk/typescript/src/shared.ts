import { type Session, SessionsUnsupportedError } from "./session.js";

/** The Client's shared session: one per Client, opened on first use, closed when its last Elector stops. */
interface Shared {
  session: Promise<Session> | undefined;
  users: number;
  unsupported: SessionsUnsupportedError | undefined;
}
const shared = new WeakMap<object, Shared>();

/**
 * useSharedSession returns the shared session of owner (a Client), opening
 * it with open when there is none (or the last one ended), and counts the
 * caller as one of its users until it calls the returned release. A
 * service without sessions is remembered: later calls throw its
 * SessionsUnsupportedError at once.
 */
export async function useSharedSession(owner: object, open: () => Promise<Session>): Promise<{ session: Session; release: () => void }> {
  let sh = shared.get(owner);
  if (sh === undefined) shared.set(owner, (sh = { session: undefined, users: 0, unsupported: undefined }));
  const state = sh;
  if (state.unsupported !== undefined) throw state.unsupported;
  for (;;) {
    const p = (state.session ??= open());
    let s: Session;
    try {
      s = await p;
    } catch (err) {
      if (state.session === p) state.session = undefined;
      if (err instanceof SessionsUnsupportedError) state.unsupported = err;
      throw err;
    }
    if (s.ended) {
      if (state.session === p) state.session = undefined;
      continue;
    }
    state.users++;
    let released = false;
    return {
      session: s,
      release: () => {
        if (released) return;
        released = true;
        state.users--;
        if (state.users === 0 && state.session === p) {
          state.session = undefined;
          void s.close().catch(() => undefined);
        }
      },
    };
  }
}
